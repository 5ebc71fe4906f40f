// Operator kind `window_join`: left and right records with equal keys in the
// same tumbling or hopping window (WindowJoinOperator,
// window_join_operator.h); side output `too_late`. Keyed by `on` on both
// inputs; the output is unpartitioned.
#include "common/job_plan.h"
#include "common/operator_kind.h"
#include "common/spec_reader.h"
#include "worker/operators/join_kinds.h"
#include "worker/operators/window_join_operator.h"

namespace caravela {
namespace {

class WindowJoin final : public OperatorKind {
 public:
  std::string_view name() const override { return "window_join"; }
  int legacy_id() const override { return 5; }
  std::vector<std::string> SideOutputs() const override {
    return WindowJoinOperator::DeclaredSideOutputs();
  }
  bool InheritsInputKey() const override { return false; }

  std::any Parse(OperatorParseContext& ctx) const override {
    WindowJoinSpec j;
    SpecReader& r = ctx.r;
    const YAML::Node& k = ctx.node;
    const std::string& kpath = ctx.path;
    if (!r.CheckMap(
            k, kpath,
            {"left", "right", "on", "tumbling", "hopping", "type", "allowed_lateness", "keep"})) {
      return j;
    }
    ctx.TimedInput(&j.left, "window_join", "left");
    ctx.TimedInput(&j.right, "window_join", "right");
    if (YAML::Node keep = SpecReader::Field(k, "keep"); keep.IsDefined()) {
      const std::string kp = SpecReader::Join(kpath, "keep");
      if (r.CheckMap(keep, kp, {"left", "right"})) {
        for (int side = 0; side < 2; ++side) {
          j.keep_paths[side] =
              r.NonEmptyPathList(keep, side == 0 ? "left" : "right", kp, &j.keep[side]);
        }
      }
    }
    j.on = r.JoinKeys(k, kpath, "left", "right");
    SpecReader::WindowShape shape;
    const std::string kind = r.Window(k, kpath, /*session=*/false, &shape);
    j.kind = kind == "hopping" ? WindowJoinSpec::Kind::kHopping : WindowJoinSpec::Kind::kTumbling;
    j.size = shape.size;
    j.slide = shape.slide;
    j.type = r.JoinTypeField(k, kpath, true);
    if (auto d = r.Duration(k, "allowed_lateness", kpath, false, SpecReader::Bound::kNonNegative)) {
      j.allowed_lateness = *d;
    }
    return j;
  }
  std::vector<std::string> Inputs(const OperatorSpec& op) const override {
    const WindowJoinSpec& j = op.Get<WindowJoinSpec>();
    return {j.left, j.right};
  }
  void Plan(const OperatorSpec& op, OperatorPlanContext& plan) const override {
    std::vector<FieldPath> paths[2];
    JoinKeyPaths(op.Get<WindowJoinSpec>().on, paths);
    plan.Joined(paths);  // output: unpartitioned
  }
  absl::StatusOr<std::unique_ptr<Operator>> Create(const OperatorSpec& op,
                                                   const OperatorBuildContext& ctx) const override {
    return std::unique_ptr<Operator>(new WindowJoinOperator(op.Get<WindowJoinSpec>()));
  }
};

}  // namespace

const OperatorKind& WindowJoinKind() {
  static const WindowJoin kind;
  return kind;
}

}  // namespace caravela
