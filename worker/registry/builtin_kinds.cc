// The builtin kinds: one line each.
#include "worker/registry/builtin_kinds.h"

#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "worker/checkpoint/checkpoint_storage.h"

namespace caravela {

// Each source kind's descriptor, defined in its own file (worker/connectors/).
#define CARAVELA_SOURCE_KINDS(X) \
  X(File)                        \
  X(Kafka)

#define CARAVELA_DECLARE_SOURCE_KIND(Name) const SourceKind& Name##SourceKind();
CARAVELA_SOURCE_KINDS(CARAVELA_DECLARE_SOURCE_KIND)
#undef CARAVELA_DECLARE_SOURCE_KIND

// Each operator kind's descriptor, defined in its own file (worker/operators/).
#define CARAVELA_OPERATOR_KINDS(X) \
  X(Filter)                        \
  X(Project)                       \
  X(Dedup)                         \
  X(Window)                        \
  X(IntervalJoin)                  \
  X(WindowJoin)                    \
  X(TemporalJoin)                  \
  X(LookupJoin)                    \
  X(TopN)

#define CARAVELA_DECLARE_KIND(Name) const OperatorKind& Name##Kind();
CARAVELA_OPERATOR_KINDS(CARAVELA_DECLARE_KIND)
#undef CARAVELA_DECLARE_KIND

// Each sink kind's descriptor, defined in its own file (worker/connectors/).
#define CARAVELA_SINK_KINDS(X) \
  X(File)                      \
  X(Kafka)                     \
  X(Postgres)                  \
  X(ClickHouse)                \
  X(Stdout)                    \
  X(Discard)

#define CARAVELA_DECLARE_SINK_KIND(Name) const SinkKind& Name##SinkKind();
CARAVELA_SINK_KINDS(CARAVELA_DECLARE_SINK_KIND)
#undef CARAVELA_DECLARE_SINK_KIND

// Each checkpoint-storage scheme, defined with its storage (worker/checkpoint/).
#define CARAVELA_STORAGE_SCHEMES(X) \
  X(File)                           \
  X(S3)

#define CARAVELA_DECLARE_SCHEME(Name) const StorageScheme& Name##StorageScheme();
CARAVELA_STORAGE_SCHEMES(CARAVELA_DECLARE_SCHEME)
#undef CARAVELA_DECLARE_SCHEME

const KindRegistry& BuiltinKinds() {
  static const KindRegistry* const kinds = [] {
    auto* r = new KindRegistry;
#define CARAVELA_ADD_SOURCE_KIND(Name) r->sources.Add(&Name##SourceKind());
    CARAVELA_SOURCE_KINDS(CARAVELA_ADD_SOURCE_KIND)
#undef CARAVELA_ADD_SOURCE_KIND
#define CARAVELA_ADD_KIND(Name) r->operators.Add(&Name##Kind());
    CARAVELA_OPERATOR_KINDS(CARAVELA_ADD_KIND)
#undef CARAVELA_ADD_KIND
#define CARAVELA_ADD_SINK_KIND(Name) r->sinks.Add(&Name##SinkKind());
    CARAVELA_SINK_KINDS(CARAVELA_ADD_SINK_KIND)
#undef CARAVELA_ADD_SINK_KIND
#define CARAVELA_ADD_SCHEME(Name) r->storages.Add(&Name##StorageScheme());
    CARAVELA_STORAGE_SCHEMES(CARAVELA_ADD_SCHEME)
#undef CARAVELA_ADD_SCHEME
    return r;
  }();
  return *kinds;
}

ParseResult ParseJobSpec(std::string_view yaml_text) {
  return ParseJobSpec(yaml_text, BuiltinKinds());
}

ParseResult LoadJobSpec(const std::string& file_path) {
  return LoadJobSpec(file_path, BuiltinKinds());
}

// Declared in worker/checkpoint/checkpoint_storage.h: opened through the
// URL's scheme.
absl::StatusOr<std::unique_ptr<CheckpointStorage>> OpenCheckpointStorage(const std::string& url) {
  std::vector<std::string> forms;
  for (const StorageScheme* scheme : BuiltinKinds().storages.all()) {
    if (absl::StartsWith(url, absl::StrCat(std::string(scheme->name()), "://"))) {
      return scheme->Open(url);
    }
    forms.emplace_back(scheme->example());
  }
  return absl::InvalidArgumentError(absl::StrCat("unsupported checkpoint storage URL '", url,
                                                 "'; expected ", absl::StrJoin(forms, " or ")));
}

}  // namespace caravela
