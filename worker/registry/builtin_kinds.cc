// The builtin kinds: one line each.
#include "worker/registry/builtin_kinds.h"

namespace caravela {

// Each kind's descriptor, defined in its own file (worker/operators/).
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

const KindRegistry& BuiltinKinds() {
  static const KindRegistry* const kinds = [] {
    auto* r = new KindRegistry;
#define CARAVELA_ADD_KIND(Name) r->operators.Add(&Name##Kind());
    CARAVELA_OPERATOR_KINDS(CARAVELA_ADD_KIND)
#undef CARAVELA_ADD_KIND
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

}  // namespace caravela
