// Operator kind `filter: {from, where}`: the records of `from` for which the
// expression `where` is true (FilterOperator, basic_operators.h). Runs with
// its input and keeps its partitioning.
#include "common/job_plan.h"
#include "common/operator_kind.h"
#include "common/spec_reader.h"
#include "worker/operators/basic_operators.h"

namespace caravela {
namespace {

class Filter final : public OperatorKind {
 public:
  std::string_view name() const override { return "filter"; }
  int legacy_id() const override { return 0; }

  std::any Parse(OperatorParseContext& ctx) const override {
    FilterSpec spec;
    if (ctx.r.CheckMap(ctx.node, ctx.path, {"from", "where"})) {
      ctx.has_event_time = ctx.Input(&spec.from);
      if (auto w = ctx.r.ExprString(ctx.node, "where", ctx.path)) spec.where = *w;
    }
    return spec;
  }
  std::vector<std::string> Inputs(const OperatorSpec& op) const override {
    return {op.Get<FilterSpec>().from};
  }
  void Plan(const OperatorSpec& op, OperatorPlanContext& plan) const override { plan.Forward(); }
  absl::StatusOr<std::unique_ptr<Operator>> Create(const OperatorSpec& op,
                                                   const OperatorBuildContext& ctx) const override {
    ASSIGN_OR_RETURN(std::unique_ptr<Expr> where, Expr::Compile(op.Get<FilterSpec>().where));
    return std::unique_ptr<Operator>(new FilterOperator(std::move(where)));
  }
};

}  // namespace

const OperatorKind& FilterKind() {
  static const Filter kind;
  return kind;
}

}  // namespace caravela
