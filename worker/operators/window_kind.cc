// Operator kind `window`: tumbling, hopping or session windows over
// `group_by` keys with aggregates, emitted as revisions (WindowOperator,
// window_operator.h); side output `too_late`. Keyed by `group_by`; an empty
// group_by is a global window (one task).
#include <map>

#include "absl/strings/str_cat.h"
#include "common/job_plan.h"
#include "common/operator_kind.h"
#include "common/spec_reader.h"
#include "worker/operators/window_operator.h"

namespace caravela {
namespace {

bool AnyDotted(const std::vector<std::string>& names) {
  for (const std::string& n : names) {
    if (n.find('.') != std::string::npos) return true;
  }
  return false;
}

class Window final : public OperatorKind {
 public:
  std::string_view name() const override { return "window"; }
  int legacy_id() const override { return 3; }
  std::vector<std::string> SideOutputs() const override {
    return WindowOperator::DeclaredSideOutputs();
  }

  std::any Parse(OperatorParseContext& ctx) const override {
    WindowSpec w;
    SpecReader& r = ctx.r;
    const YAML::Node& k = ctx.node;
    const std::string& kpath = ctx.path;
    if (!r.CheckMap(k, kpath,
                    {"from", "tumbling", "hopping", "session", "group_by", "aggregates",
                     "early_fire_every", "allowed_lateness", "reconcile"})) {
      return w;
    }
    ctx.has_event_time = ctx.Input(&w.from);
    if (!ctx.has_event_time) r.NoEventTime(kpath, w.from, "window");
    SpecReader::WindowShape shape;
    const std::string kind = r.Window(k, kpath, /*session=*/true, &shape);
    w.kind = kind == "hopping"   ? WindowSpec::Kind::kHopping
             : kind == "session" ? WindowSpec::Kind::kSession
                                 : WindowSpec::Kind::kTumbling;
    w.size = shape.size;
    w.slide = shape.slide;
    w.gap = shape.gap;
    w.group_paths = r.PathList(k, "group_by", kpath, &w.group_by);
    if (auto d = r.Duration(k, "early_fire_every", kpath, false, SpecReader::Bound::kPositive)) {
      w.early_fire_every = *d;
    }
    if (auto d = r.Duration(k, "allowed_lateness", kpath, false, SpecReader::Bound::kNonNegative)) {
      w.allowed_lateness = *d;
    }
    if (YAML::Node rec = SpecReader::Field(k, "reconcile"); rec.IsDefined()) {
      const std::string rpath = SpecReader::Join(kpath, "reconcile");
      if (r.CheckMap(rec, rpath, {"id"})) {
        if (auto id = r.String(rec, "id", rpath, true)) {
          w.reconcile_id = *id;
          w.reconcile_path = FieldPath::Parse(*id);
        }
      }
    }
    Aggregates(r, k, kpath, &w);
    return w;
  }
  std::vector<std::string> Inputs(const OperatorSpec& op) const override {
    return {op.Get<WindowSpec>().from};
  }
  void Plan(const OperatorSpec& op, OperatorPlanContext& plan) const override {
    const WindowSpec& w = op.Get<WindowSpec>();
    if (w.group_paths.empty()) {
      plan.Global();
      return;
    }
    plan.Keyed(w.group_paths);
    // The output holds the group_by fields under their names as written.
    if (AnyDotted(plan.OutputKey()) || AnyDotted(w.group_by)) plan.OutputUnpartitioned();
  }
  absl::StatusOr<std::unique_ptr<Operator>> Create(const OperatorSpec& op,
                                                   const OperatorBuildContext& ctx) const override {
    return std::unique_ptr<Operator>(new WindowOperator(op.Get<WindowSpec>()));
  }

 private:
  static void Aggregates(SpecReader& r, const YAML::Node& k, const std::string& kpath,
                         WindowSpec* w) {
    static constexpr std::string_view kFns[] = {"count",          "sum",     "min",    "max", "avg",
                                                "count_distinct", "arg_max", "arg_min"};
    static constexpr AggFn kFnValues[] = {AggFn::kCount,  AggFn::kSum,   AggFn::kMin,
                                          AggFn::kMax,    AggFn::kAvg,   AggFn::kCountDistinct,
                                          AggFn::kArgMax, AggFn::kArgMin};
    std::string path = SpecReader::Join(kpath, "aggregates");
    YAML::Node a = SpecReader::Field(k, "aggregates");
    if (r.Missing(a, path, true)) return;
    if (!a.IsSequence()) {
      r.Err(path, absl::StrCat("expected a list, got ", SpecReader::Describe(a)));
      return;
    }
    if (a.size() == 0) {
      r.Err(path, "at least one aggregate is required");
      return;
    }
    // Output names taken so far: reserved result fields and group-by fields.
    std::map<std::string, std::string> taken = {{"window_start", "a reserved result field"},
                                                {"window_end", "a reserved result field"},
                                                {"revision", "a reserved result field"},
                                                {"state", "a reserved result field"}};
    for (const std::string& g : w->group_by) taken.emplace(g, "a group_by field");
    for (size_t i = 0; i < a.size(); ++i) {
      std::string ipath = SpecReader::Index(path, i);
      YAML::Node item = a[i];
      if (!r.CheckMap(item, ipath,
                      {"as", "count", "sum", "min", "max", "avg", "count_distinct", "arg_max",
                       "arg_min", "keep"})) {
        continue;
      }
      AggregateSpec agg;
      if (auto as = r.String(item, "as", ipath, true)) {
        agg.as = *as;
        auto [it, inserted] = taken.emplace(*as, "aggregates[" + std::to_string(i) + "]");
        if (!inserted) {
          r.Err(SpecReader::Join(ipath, "as"),
                absl::StrCat("duplicate output name ", SpecReader::Quote(*as), " (also ",
                             it->second, ")"));
        }
      }
      std::string fn = r.ExactlyOne(
          item, ipath,
          {"count", "sum", "min", "max", "avg", "count_distinct", "arg_max", "arg_min"});
      if (!fn.empty()) {
        for (size_t f = 0; f < std::size(kFns); ++f) {
          if (kFns[f] == fn) agg.fn = kFnValues[f];
        }
        std::string fpath = SpecReader::Join(ipath, fn);
        YAML::Node v = SpecReader::Field(item, fn);
        if (v.IsScalar() && v.Scalar() == "*") {
          if (agg.fn == AggFn::kCount) {
            agg.field = "*";
          } else {
            r.Err(fpath, absl::StrCat("\"*\" is only valid for count; ", fn, " needs a field"));
          }
        } else if (auto p = r.Path(v, fpath)) {
          agg.field = v.Scalar();
          agg.path = *p;
        }
      }
      if (YAML::Node keep = SpecReader::Field(item, "keep"); keep.IsDefined()) {
        const std::string kpath2 = SpecReader::Join(ipath, "keep");
        if (agg.fn != AggFn::kArgMax && agg.fn != AggFn::kArgMin) {
          r.Err(kpath2, "keep is only valid with arg_max or arg_min (the fields of each kept row)");
        } else {
          agg.keep_paths = r.NonEmptyPathList(item, "keep", ipath, &agg.keep);
        }
      }
      w->aggregates.push_back(std::move(agg));
    }
  }
};

}  // namespace

const OperatorKind& WindowKind() {
  static const Window kind;
  return kind;
}

}  // namespace caravela
