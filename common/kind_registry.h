// Kinds by name: the registry the job parser looks kinds up in
// (ParseJobSpec), filled with the builtin kinds by worker/registry/.
#pragma once

#include <string_view>
#include <vector>

#include "common/operator_kind.h"
#include "common/sink_kind.h"
#include "common/source_kind.h"
#include "common/storage_scheme.h"

namespace caravela {

// Kinds by name. Each kind is registered once; lookups are by YAML key.
template <class Kind>
class KindList {
 public:
  // `kind` must outlive the list (kinds are static objects).
  void Add(const Kind* kind) { kinds_.push_back(kind); }
  const Kind* Find(std::string_view name) const {
    for (const Kind* k : kinds_) {
      if (k->name() == name) return k;
    }
    return nullptr;
  }
  std::vector<std::string_view> Names() const {
    std::vector<std::string_view> out;
    for (const Kind* k : kinds_) out.push_back(k->name());
    return out;
  }
  const std::vector<const Kind*>& all() const { return kinds_; }

 private:
  std::vector<const Kind*> kinds_;
};

// Every kind the engine knows (BuiltinKinds() in worker/registry/ gives the
// builtin ones; tests may make their own).
struct KindRegistry {
  KindList<SourceKind> sources;
  KindList<OperatorKind> operators;
  KindList<SinkKind> sinks;
  KindList<StorageScheme> storages;
};

}  // namespace caravela
