// Operator kind `interval_join` (SPEC §5): left and right records with equal
// keys and right.time - left.time within [lower, upper], inner or outer
// (IntervalJoinOperator, interval_join_operator.h); side output `too_late`.
// Keyed by `on` on both inputs; the output is unpartitioned.
#include "absl/strings/str_cat.h"
#include "common/expr.h"
#include "common/job_plan.h"
#include "common/operator_kind.h"
#include "common/spec_reader.h"
#include "worker/operators/interval_join_operator.h"
#include "worker/operators/join_kinds.h"

namespace caravela {
namespace {

class IntervalJoin final : public OperatorKind {
 public:
  std::string_view name() const override { return "interval_join"; }
  int legacy_id() const override { return 4; }
  std::vector<std::string> SideOutputs() const override {
    return IntervalJoinOperator::DeclaredSideOutputs();
  }
  bool InheritsInputKey() const override { return false; }

  std::any Parse(OperatorParseContext& ctx) const override {
    IntervalJoinSpec j;
    SpecReader& r = ctx.r;
    const YAML::Node& k = ctx.node;
    const std::string& kpath = ctx.path;
    if (!r.CheckMap(k, kpath,
                    {"left", "right", "on", "between", "type", "allowed_lateness", "where"})) {
      return j;
    }
    ctx.TimedInput(&j.left, "interval_join", "left");
    ctx.TimedInput(&j.right, "interval_join", "right");
    j.on = r.JoinKeys(k, kpath, "left", "right");
    std::string bpath = SpecReader::Join(kpath, "between");
    YAML::Node b = SpecReader::Field(k, "between");
    if (!r.Missing(b, bpath, true) && r.CheckMap(b, bpath, {"lower", "upper"})) {
      auto lower = r.Duration(b, "lower", bpath, true, SpecReader::Bound::kAny);
      auto upper = r.Duration(b, "upper", bpath, true, SpecReader::Bound::kAny);
      if (lower) j.lower = *lower;
      if (upper) j.upper = *upper;
      if (lower && upper && *lower > *upper) {
        r.Err(bpath,
              absl::StrCat("expected lower <= upper, got lower ",
                           SpecReader::Describe(SpecReader::Field(b, "lower")), " and upper ",
                           SpecReader::Describe(SpecReader::Field(b, "upper"))));
      }
    }
    j.type = r.JoinTypeField(k, kpath, true);
    if (auto d = r.Duration(k, "allowed_lateness", kpath, false, SpecReader::Bound::kNonNegative)) {
      j.allowed_lateness = *d;
    }
    std::string wpath = SpecReader::Join(kpath, "where");
    YAML::Node w = SpecReader::Field(k, "where");
    if (w.IsDefined()) {
      std::optional<std::string> text = r.ExprValue(w, wpath);
      if (!text) return j;
      // Fields are read from the combined record: left.<field> or right.<field>.
      std::vector<FieldPath> fields;
      (*Expr::Compile(*text))->CollectFields(&fields);
      bool ok = true;
      for (const FieldPath& f : fields) {
        if (f.parts.size() >= 2 && (f.parts[0] == "left" || f.parts[0] == "right")) continue;
        r.Err(wpath, absl::StrCat("field ", SpecReader::Quote(f.ToString()),
                                  " must be read as left.<field> or right.<field>"));
        ok = false;
      }
      if (ok) j.where = *text;
    }
    return j;
  }
  std::vector<std::string> Inputs(const OperatorSpec& op) const override {
    const IntervalJoinSpec& j = op.Get<IntervalJoinSpec>();
    return {j.left, j.right};
  }
  void Plan(const OperatorSpec& op, OperatorPlanContext& plan) const override {
    std::vector<FieldPath> paths[2];
    JoinKeyPaths(op.Get<IntervalJoinSpec>().on, paths);
    plan.Joined(paths);  // output: unpartitioned
  }
  absl::StatusOr<std::unique_ptr<Operator>> Create(const OperatorSpec& op,
                                                   const OperatorBuildContext& ctx) const override {
    ASSIGN_OR_RETURN(std::unique_ptr<IntervalJoinOperator> join,
                     IntervalJoinOperator::Create(op.Get<IntervalJoinSpec>()));
    return std::unique_ptr<Operator>(std::move(join));
  }
};

}  // namespace

const OperatorKind& IntervalJoinKind() {
  static const IntervalJoin kind;
  return kind;
}

}  // namespace caravela
