// Operator kinds `temporal_join` and `lookup_join`: a stream against a table
// source, `{stream, table, on, type}` (table_join_operators.h).
//  * temporal_join: each stream record joins the table version valid at its
//    event time; side output `too_late`. Keyed by `on` on both inputs; the
//    output keeps the stream's partitioning.
//  * lookup_join: each stream record joins the table's current row; the
//    table is read whole first by every task of the stream's stage
//    (broadcast). Runs with the stream.
#include "absl/strings/str_cat.h"
#include "common/job_plan.h"
#include "common/operator_kind.h"
#include "common/spec_reader.h"
#include "worker/operators/join_kinds.h"
#include "worker/operators/table_join_operators.h"

namespace caravela {
namespace {

// Reads {stream, table, on, type}; returns whether the output carries event
// time (the stream's).
bool ParseTableJoin(OperatorParseContext& ctx, bool temporal, TableJoinSpec* j) {
  SpecReader& r = ctx.r;
  const YAML::Node& k = ctx.node;
  const std::string& kpath = ctx.path;
  std::string_view what = temporal ? "temporal_join" : "lookup_join";
  if (!r.CheckMap(k, kpath, {"stream", "table", "on", "type"})) return true;
  bool has_time = ctx.Input(&j->stream, "stream");
  if (temporal && !has_time) {
    r.NoEventTime(kpath, j->stream, what, "stream");
    has_time = true;
  }
  if (auto t = r.String(k, "table", kpath, true)) {
    j->table = *t;
    std::string tpath = SpecReader::Join(kpath, "table");
    SpecReader::Node* node = r.FindNode(*t);
    if (node == nullptr || !node->is_source) {
      std::vector<std::string> known;
      for (const SpecReader::Node& ni : r.nodes()) {
        if (ni.is_source) known.push_back(ni.name);
      }
      r.Err(tpath,
            absl::StrCat("expected a source (", std::string(what),
                         " reads its table from a source), got ",
                         node == nullptr ? "unknown node " : "operator ", SpecReader::Quote(*t),
                         " (sources: ", SpecReader::KnownList(known), ")"));
    } else if (temporal && !node->has_event_time) {
      r.Err(tpath, absl::StrCat("source ", SpecReader::Quote(*t),
                                " declares no event_time, but temporal_join versions are valid "
                                "from their event time"));
    }
  }
  j->on = r.JoinKeys(k, kpath, "stream", "table");
  j->type = r.JoinTypeField(k, kpath, false);
  return has_time;
}

class TemporalJoin final : public OperatorKind {
 public:
  std::string_view name() const override { return "temporal_join"; }
  int legacy_id() const override { return 6; }
  std::vector<std::string> SideOutputs() const override {
    return TemporalJoinOperator::DeclaredSideOutputs();
  }
  bool InheritsInputKey() const override { return false; }

  std::any Parse(OperatorParseContext& ctx) const override {
    TableJoinSpec j;
    ctx.has_event_time = ParseTableJoin(ctx, /*temporal=*/true, &j);
    return j;
  }
  std::vector<std::string> Inputs(const OperatorSpec& op) const override {
    const TableJoinSpec& j = op.Get<TableJoinSpec>();
    return {j.stream, j.table};
  }
  void Plan(const OperatorSpec& op, OperatorPlanContext& plan) const override {
    std::vector<FieldPath> paths[2];
    JoinKeyPaths(op.Get<TableJoinSpec>().on, paths);
    // The output is the stream record (plus the table row under the
    // table's name): it keeps the stream's partitioning.
    if (plan.Joined(paths)) {
      plan.OutputLikeInput(0);
    } else {
      plan.OutputPartitionedBy(OperatorPlanContext::Names(paths[0]));
    }
  }
  absl::StatusOr<std::unique_ptr<Operator>> Create(const OperatorSpec& op,
                                                   const OperatorBuildContext& ctx) const override {
    const TableJoinSpec& j = op.Get<TableJoinSpec>();
    return std::unique_ptr<Operator>(new TemporalJoinOperator(j, j.table));
  }
};

class LookupJoin final : public OperatorKind {
 public:
  std::string_view name() const override { return "lookup_join"; }
  int legacy_id() const override { return 7; }
  std::vector<int> PreloadedInputs() const override { return {1}; }
  bool InheritsInputKey() const override { return false; }

  std::any Parse(OperatorParseContext& ctx) const override {
    TableJoinSpec j;
    ctx.has_event_time = ParseTableJoin(ctx, /*temporal=*/false, &j);
    return j;
  }
  std::vector<std::string> Inputs(const OperatorSpec& op) const override {
    const TableJoinSpec& j = op.Get<TableJoinSpec>();
    return {j.stream, j.table};
  }
  void Plan(const OperatorSpec& op, OperatorPlanContext& plan) const override {
    plan.Forward();
    plan.Broadcast(1);
  }
  absl::StatusOr<std::unique_ptr<Operator>> Create(const OperatorSpec& op,
                                                   const OperatorBuildContext& ctx) const override {
    const TableJoinSpec& j = op.Get<TableJoinSpec>();
    return std::unique_ptr<Operator>(new LookupJoinOperator(j, j.table));
  }
};

}  // namespace

const OperatorKind& TemporalJoinKind() {
  static const TemporalJoin kind;
  return kind;
}

const OperatorKind& LookupJoinKind() {
  static const LookupJoin kind;
  return kind;
}

}  // namespace caravela
