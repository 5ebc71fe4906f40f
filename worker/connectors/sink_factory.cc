#include "worker/connectors/sink_factory.h"

#include "common/sink_kind.h"

namespace caravela {

absl::StatusOr<std::unique_ptr<Sink>> MakeSink(const SinkSpec& spec, const SinkContext& ctx) {
  if (spec.kind == nullptr) return absl::InvalidArgumentError("a sink without a kind");
  return spec.kind->Create(spec, ctx);
}

}  // namespace caravela
