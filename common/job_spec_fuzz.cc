// libFuzzer target: ParseJobSpec must never throw or crash on any text, and
// must either accept the document or name at least one error with a path.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "common/job_spec.h"
#include "common/status.h"
#include "worker/registry/builtin_kinds.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view in(reinterpret_cast<const char*>(data), size);
  caravela::ParseResult r = caravela::ParseJobSpec(in);
  for (const caravela::SpecError& e : r.errors) {
    CARAVELA_CHECK(!e.path.empty());
    CARAVELA_CHECK(!e.message.empty());
  }
  if (r.ok()) {
    CARAVELA_CHECK(!r.spec.sources.empty());
    for (const caravela::OperatorSpec& op : r.spec.operators) (void)op.Inputs();
    r.spec.ResolvePaths("/base");
    (void)r.spec.NeedsEmbeddedBroker();
  }
  return 0;
}
