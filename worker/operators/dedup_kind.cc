// Operator kind `dedup: {from, id, retention, fingerprint?}`: the first
// record of each id within the retention (DedupOperator, dedup_operator.h);
// side outputs `conflicts` and `too_late`. Keyed by `id`.
#include "common/job_plan.h"
#include "common/operator_kind.h"
#include "common/spec_reader.h"
#include "worker/operators/dedup_operator.h"

namespace caravela {
namespace {

class Dedup final : public OperatorKind {
 public:
  std::string_view name() const override { return "dedup"; }
  int legacy_id() const override { return 2; }
  std::vector<std::string> SideOutputs() const override {
    return DedupOperator::DeclaredSideOutputs();
  }

  std::any Parse(OperatorParseContext& ctx) const override {
    DedupSpec spec;
    SpecReader& r = ctx.r;
    if (r.CheckMap(ctx.node, ctx.path, {"from", "id", "retention", "fingerprint"})) {
      ctx.has_event_time = ctx.Input(&spec.from);
      if (!ctx.has_event_time) r.NoEventTime(ctx.path, spec.from, "dedup");
      if (auto p = r.PathField(ctx.node, "id", ctx.path, true)) spec.id = *p;
      if (auto d =
              r.Duration(ctx.node, "retention", ctx.path, true, SpecReader::Bound::kPositive)) {
        spec.retention = *d;
      }
      spec.fingerprint = r.PathList(ctx.node, "fingerprint", ctx.path);
    }
    return spec;
  }
  std::vector<std::string> Inputs(const OperatorSpec& op) const override {
    return {op.Get<DedupSpec>().from};
  }
  void Plan(const OperatorSpec& op, OperatorPlanContext& plan) const override {
    plan.Keyed({op.Get<DedupSpec>().id});
  }
  absl::StatusOr<std::unique_ptr<Operator>> Create(const OperatorSpec& op,
                                                   const OperatorBuildContext& ctx) const override {
    const DedupSpec& spec = op.Get<DedupSpec>();
    // The fingerprint ignores the arrival field of the source feeding it.
    auto dedup = std::make_unique<DedupOperator>(spec.id, spec.retention, spec.fingerprint,
                                                 ctx.upstream_arrival_field);
    dedup->set_batch(spec.batch);
    if (spec.batch && spec.expected_ids > 0) dedup->ReserveIds(spec.expected_ids);
    return std::unique_ptr<Operator>(std::move(dedup));
  }
};

}  // namespace

const OperatorKind& DedupKind() {
  static const Dedup kind;
  return kind;
}

}  // namespace caravela
