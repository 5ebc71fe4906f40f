// Operator kind `project: {from, fields: {out: expr, ...}}`: one record per
// input record with the fields computed from it, in YAML order
// (ProjectOperator, basic_operators.h). Runs with its input; keeps a key
// field `a` (or `a.b`) of the input's partitioning when it has `a: a`.
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/job_plan.h"
#include "common/operator_kind.h"
#include "common/spec_reader.h"
#include "worker/operators/basic_operators.h"

namespace caravela {
namespace {

// Whether `project` keeps key field `f`: some entry `a: a` with a == f or a
// a prefix path of f.
bool Keeps(const ProjectSpec& project, const std::string& f) {
  for (const auto& [out, expr] : project.fields) {
    if (out.find('.') != std::string::npos) continue;
    if (absl::StripAsciiWhitespace(expr) != out) continue;
    if (f == out ||
        (f.size() > out.size() && f.compare(0, out.size(), out) == 0 && f[out.size()] == '.')) {
      return true;
    }
  }
  return false;
}

class Project final : public OperatorKind {
 public:
  std::string_view name() const override { return "project"; }
  int legacy_id() const override { return 1; }
  // Its output is new records: they have no key unless projected.
  bool InheritsInputKey() const override { return false; }

  std::any Parse(OperatorParseContext& ctx) const override {
    ProjectSpec spec;
    if (ctx.r.CheckMap(ctx.node, ctx.path, {"from", "fields"})) {
      ctx.has_event_time = ctx.Input(&spec.from);
      Fields(ctx, &spec);
    }
    return spec;
  }
  std::vector<std::string> Inputs(const OperatorSpec& op) const override {
    return {op.Get<ProjectSpec>().from};
  }
  void Plan(const OperatorSpec& op, OperatorPlanContext& plan) const override {
    const ProjectSpec& spec = op.Get<ProjectSpec>();
    plan.Forward([&spec](const std::string& f) { return Keeps(spec, f); });
  }
  absl::StatusOr<std::unique_ptr<Operator>> Create(const OperatorSpec& op,
                                                   const OperatorBuildContext& ctx) const override {
    std::vector<std::pair<std::string, std::unique_ptr<Expr>>> fields;
    for (const auto& [name, text] : op.Get<ProjectSpec>().fields) {
      ASSIGN_OR_RETURN(auto e, Expr::Compile(text));
      fields.emplace_back(name, std::move(e));
    }
    return std::unique_ptr<Operator>(new ProjectOperator(std::move(fields)));
  }

 private:
  static void Fields(OperatorParseContext& ctx, ProjectSpec* out) {
    SpecReader& r = ctx.r;
    std::string path = SpecReader::Join(ctx.path, "fields");
    YAML::Node f = SpecReader::Field(ctx.node, "fields");
    if (r.Missing(f, path, true)) return;
    if (!f.IsMap()) {
      r.Err(path, absl::StrCat("expected a mapping of output name to expression, got ",
                               SpecReader::Describe(f)));
      return;
    }
    if (f.size() == 0) {
      r.Err(path, "at least one field is required");
      return;
    }
    std::vector<std::string> seen;
    for (auto it = f.begin(); it != f.end(); ++it) {
      if (!it->first.IsScalar() || it->first.Scalar().empty()) {
        r.Err(path,
              absl::StrCat("expected output field names, got ", SpecReader::Describe(it->first)));
        continue;
      }
      const std::string& name = it->first.Scalar();
      std::string fpath = SpecReader::Join(path, name);
      if (std::find(seen.begin(), seen.end(), name) != seen.end()) {
        r.Err(fpath, absl::StrCat("duplicate field ", SpecReader::Quote(name)));
        continue;
      }
      seen.push_back(name);
      if (auto e = r.ExprValue(it->second, fpath)) out->fields.emplace_back(name, *e);
    }
  }
};

}  // namespace

const OperatorKind& ProjectKind() {
  static const Project kind;
  return kind;
}

}  // namespace caravela
