#include "common/job_plan.h"

#include <algorithm>
#include <functional>
#include <queue>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "common/key_encoding.h"
#include "common/operator_kind.h"
#include "common/source_kind.h"
#include "xxhash.h"

namespace caravela {

std::vector<std::string> OperatorPlanContext::Names(const std::vector<FieldPath>& paths) {
  std::vector<std::string> out;
  out.reserve(paths.size());
  for (const FieldPath& p : paths) out.push_back(p.ToString());
  return out;
}

namespace {

std::vector<std::string> Names(const std::vector<FieldPath>& paths) {
  return OperatorPlanContext::Names(paths);
}

bool Contains(const std::vector<std::string>& v, const std::string& x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

// How the records of a node are spread over the tasks of its stage.
struct Partitioning {
  // kSource: by a keyed Kafka source's partitioner; kExchange: by
  // ExchangeKeyHash of an exchange.
  enum class Kind { kNone, kSource, kExchange } kind = Kind::kNone;
  std::vector<std::string> key;  // field names (non-empty unless kNone)

  bool none() const { return kind == Kind::kNone || key.empty(); }
  static Partitioning Exchange(std::vector<std::string> key) {
    Partitioning p;
    p.kind = key.empty() ? Kind::kNone : Kind::kExchange;
    p.key = std::move(key);
    return p;
  }
};

// P satisfies R: P non-empty and every field of P is in R, so records with
// equal R-keys have equal P-keys and are in the same task.
bool Satisfies(const Partitioning& p, const std::vector<std::string>& r) {
  if (p.none()) return false;
  for (const std::string& f : p.key) {
    if (!Contains(r, f)) return false;
  }
  return true;
}

class Planner {
 public:
  class OperatorContext;

  Planner(const JobSpec& spec, int parallelism, const SourcePartitions& partitions)
      : spec_(spec), parallelism_(parallelism), partitions_(partitions) {}

  absl::StatusOr<JobPlan> Plan();

 private:
  // A stage under construction (union-find over groups).
  struct Group {
    int parent = 0;
    int first_node = 0;           // lowest member node index (order of stages)
    std::string one_task_source;  // "<kind> source <name>": a member one task reads whole
    std::string global_window;    // a global window member: 1 task
    int source_partitions = -1;   // keyed Kafka members' partition count, -1 unknown
    bool one_task() const { return !one_task_source.empty() || !global_window.empty(); }
  };
  struct Exchange {
    int op = 0;  // operator index
    int group = 0;
    std::vector<ExchangePlan::Input> inputs;
    std::vector<int> producer_groups;  // per input, at creation (resolve with Find)
  };

  int NodeIndex(const std::string& name) const {
    auto it = index_.find(name);
    CARAVELA_CHECK(it != index_.end());
    return it->second;
  }
  int NewGroup(int first_node) {
    Group g;
    g.parent = static_cast<int>(groups_.size());
    g.first_node = first_node;
    groups_.push_back(g);
    return g.parent;
  }
  int Find(int g) {
    while (groups_[g].parent != g) {
      groups_[g].parent = groups_[groups_[g].parent].parent;
      g = groups_[g].parent;
    }
    return g;
  }
  int Merge(int a, int b) {
    a = Find(a);
    b = Find(b);
    if (a == b) return a;
    if (groups_[b].first_node < groups_[a].first_node) std::swap(a, b);
    groups_[b].parent = a;
    Group& ga = groups_[a];
    const Group& gb = groups_[b];
    if (ga.one_task_source.empty()) ga.one_task_source = gb.one_task_source;
    if (ga.global_window.empty()) ga.global_window = gb.global_window;
    if (ga.source_partitions < 0) ga.source_partitions = gb.source_partitions;
    return a;
  }
  // True if an exchange path leads from group `from` to group `to`.
  bool Reaches(int from, int to) {
    from = Find(from);
    to = Find(to);
    std::set<int> seen;
    std::vector<int> stack = {from};
    while (!stack.empty()) {
      int g = stack.back();
      stack.pop_back();
      for (const Exchange& x : exchanges_) {
        int consumer = Find(x.group);
        bool produced_here = false;
        for (int p : x.producer_groups) produced_here |= Find(p) == g;
        if (!produced_here) continue;
        if (consumer == to) return true;
        if (seen.insert(consumer).second) stack.push_back(consumer);
      }
    }
    return false;
  }

  bool CoPartitioned(int u0, int u1, const std::vector<std::string>& r0,
                     const std::vector<std::string>& r1);
  // A new stage fed by one exchange carrying `inputs` (input index, node,
  // key paths) of operator `op`; returns its group.
  int Exchanged(int op, const std::vector<std::pair<int, std::vector<FieldPath>>>& inputs);
  void PlanOperator(int op);

  const JobSpec& spec_;
  const int parallelism_;
  const SourcePartitions& partitions_;
  int num_sources_ = 0;
  std::map<std::string, int> index_;  // node name -> index (sources, then operators)
  std::vector<int> group_of_;         // per node; -1: broadcast-only source
  std::vector<Partitioning> part_;    // per node: its output's partitioning
  std::vector<Group> groups_;
  std::vector<Exchange> exchanges_;
  std::vector<std::pair<int, int>> broadcast_;  // (group, source index)
};

bool Planner::CoPartitioned(int u0, int u1, const std::vector<std::string>& r0,
                            const std::vector<std::string>& r1) {
  const Partitioning& p0 = part_[u0];
  const Partitioning& p1 = part_[u1];
  if (p0.none() || p1.none() || p0.kind != p1.kind || p0.key.size() != p1.key.size()) {
    return false;
  }
  // Equal join keys must give equal partitioning keys: field i of both sides
  // is one `on` pair.
  for (size_t i = 0; i < p0.key.size(); ++i) {
    bool paired = false;
    for (size_t j = 0; j < r0.size() && j < r1.size(); ++j) {
      paired |= r0[j] == p0.key[i] && r1[j] == p1.key[i];
    }
    if (!paired) return false;
  }
  const Group& g0 = groups_[Find(group_of_[u0])];
  const Group& g1 = groups_[Find(group_of_[u1])];
  if (g0.one_task() != g1.one_task()) return false;
  if (p0.kind == Partitioning::Kind::kSource && g0.source_partitions >= 0 &&
      g1.source_partitions >= 0 && g0.source_partitions != g1.source_partitions) {
    return false;
  }
  return true;
}

int Planner::Exchanged(int op, const std::vector<std::pair<int, std::vector<FieldPath>>>& inputs) {
  int g = NewGroup(num_sources_ + op);
  Exchange x;
  x.op = op;
  x.group = g;
  for (const auto& [input, paths] : inputs) {
    const std::vector<std::string> ins = spec_.operators[op].Inputs();
    int u = NodeIndex(ins[input]);
    ExchangePlan::Input in;
    in.input = input;
    in.from = ins[input];
    in.key = paths;
    in.key_names = Names(paths);
    x.inputs.push_back(std::move(in));
    x.producer_groups.push_back(group_of_[u]);
  }
  exchanges_.push_back(std::move(x));
  return g;
}

// Planner's side of OperatorPlanContext, for operator `op`.
class Planner::OperatorContext : public OperatorPlanContext {
 public:
  OperatorContext(Planner& p, int op) : p_(p), op_(op), node_(p.num_sources_ + op) {
    for (const std::string& in : p.spec_.operators[op].Inputs()) u_.push_back(p.NodeIndex(in));
  }

  void Forward(const std::function<bool(const std::string& field)>& keeps) override {
    p_.group_of_[node_] = p_.group_of_[u_[0]];
    const Partitioning& in = p_.part_[u_[0]];
    bool kept = keeps == nullptr || !in.none();
    if (keeps != nullptr) {
      for (const std::string& f : in.key) kept = kept && keeps(f);
    }
    if (kept) p_.part_[node_] = in;
  }
  bool Keyed(const std::vector<FieldPath>& paths) override {
    std::vector<std::string> names = Names(paths);
    if (Satisfies(p_.part_[u_[0]], names)) {
      p_.group_of_[node_] = p_.group_of_[u_[0]];
      p_.part_[node_] = p_.part_[u_[0]];
      return true;
    }
    p_.group_of_[node_] = p_.Exchanged(op_, {{0, paths}});
    p_.part_[node_] = Partitioning::Exchange(names);
    return false;
  }
  void Global() override {
    // One task, always behind a (1-partition) exchange.
    int g = p_.Exchanged(op_, {{0, {}}});
    p_.groups_[g].global_window = p_.spec_.operators[op_].name;
    p_.group_of_[node_] = g;
  }
  bool Joined(const std::vector<FieldPath> paths[2]) override {
    std::vector<std::string> r0 = Names(paths[0]), r1 = Names(paths[1]);
    if (Satisfies(p_.part_[u_[0]], r0) && Satisfies(p_.part_[u_[1]], r1) &&
        p_.CoPartitioned(u_[0], u_[1], r0, r1)) {
      int g0 = p_.Find(p_.group_of_[u_[0]]), g1 = p_.Find(p_.group_of_[u_[1]]);
      if (g0 == g1 || (!p_.Reaches(g0, g1) && !p_.Reaches(g1, g0))) {
        p_.group_of_[node_] = p_.Merge(g0, g1);
        return true;
      }
    }
    p_.group_of_[node_] = p_.Exchanged(op_, {{0, paths[0]}, {1, paths[1]}});
    return false;
  }
  void Broadcast(int input) override {
    p_.broadcast_.emplace_back(p_.group_of_[node_], u_[static_cast<size_t>(input)]);
  }
  void OutputLikeInput(int input) override {
    p_.part_[node_] = p_.part_[u_[static_cast<size_t>(input)]];
  }
  void OutputPartitionedBy(std::vector<std::string> fields) override {
    p_.part_[node_] = Partitioning::Exchange(std::move(fields));
  }
  void OutputUnpartitioned() override { p_.part_[node_] = {}; }
  std::vector<std::string> OutputKey() const override {
    return p_.part_[node_].none() ? std::vector<std::string>() : p_.part_[node_].key;
  }

 private:
  Planner& p_;
  const int op_;
  const int node_;
  std::vector<int> u_;  // input node indexes
};

void Planner::PlanOperator(int op) {
  const OperatorSpec& o = spec_.operators[op];
  CARAVELA_CHECK(o.kind != nullptr);
  OperatorContext ctx(*this, op);
  o.kind->Plan(o, ctx);
}

absl::StatusOr<JobPlan> Planner::Plan() {
  if (parallelism_ < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("spec.parallelism: expected an integer >= 1, got ", parallelism_));
  }
  if (parallelism_ > spec_.max_parallelism) {
    return absl::InvalidArgumentError(
        absl::StrCat("parallelism ", parallelism_, " is above the job's max_parallelism (",
                     spec_.max_parallelism,
                     "): a keyed stage has at most that many tasks (key groups); "
                     "use at most ",
                     spec_.max_parallelism,
                     " or start the job without state with a higher spec.max_parallelism"));
  }
  num_sources_ = static_cast<int>(spec_.sources.size());
  const int num_nodes = num_sources_ + static_cast<int>(spec_.operators.size());
  for (int i = 0; i < num_sources_; ++i) index_[spec_.sources[i].name] = i;
  for (size_t i = 0; i < spec_.operators.size(); ++i) {
    index_[spec_.operators[i].name] = num_sources_ + static_cast<int>(i);
  }
  for (const OperatorSpec& o : spec_.operators) {
    for (const std::string& in : o.Inputs()) {
      auto it = index_.find(in);
      if (it == index_.end() || it->second >= index_[o.name]) {
        return absl::InvalidArgumentError(absl::StrCat("operator \"", o.name, "\" reads \"", in,
                                                       "\", which is not defined before it"));
      }
    }
  }
  group_of_.assign(num_nodes, -1);
  part_.assign(num_nodes, {});

  // Broadcast-only sources: read only as lookup tables.
  std::vector<bool> lookup_table(num_sources_, false), other_use(num_sources_, false);
  for (const OperatorSpec& o : spec_.operators) {
    std::vector<std::string> ins = o.Inputs();
    const std::vector<int> whole = o.kind->PreloadedInputs();
    for (size_t i = 0; i < ins.size(); ++i) {
      int u = index_[ins[i]];
      if (u >= num_sources_) continue;
      if (std::find(whole.begin(), whole.end(), static_cast<int>(i)) != whole.end()) {
        lookup_table[u] = true;
      } else {
        other_use[u] = true;
      }
    }
  }
  for (const SinkSpec& s : spec_.sinks) {
    auto it = index_.find(s.from);
    if (it != index_.end() && it->second < num_sources_) other_use[it->second] = true;
  }

  for (int i = 0; i < num_sources_; ++i) {
    const SourceSpec& src = spec_.sources[i];
    if (lookup_table[i] && !other_use[i]) continue;
    int g = NewGroup(i);
    group_of_[i] = g;
    if (!src.kind->partitioned_log()) {
      groups_[g].one_task_source = std::string(src.kind_name()) + " source " + src.name;
    } else {
      auto it = partitions_.find(src.name);
      if (it != partitions_.end()) groups_[g].source_partitions = it->second;
      if (!src.key.empty()) {
        part_[i].kind = Partitioning::Kind::kSource;
        part_[i].key = Names(src.key);
      }
    }
  }
  for (size_t op = 0; op < spec_.operators.size(); ++op) PlanOperator(static_cast<int>(op));

  // Stages: the group roots, in topological order of the exchange edges
  // (ties: the stage whose first member comes first in the spec).
  std::map<int, std::set<int>> succ;  // root -> consumer roots
  std::map<int, int> indegree;
  for (int n = 0; n < num_nodes; ++n) {
    if (group_of_[n] >= 0) indegree.emplace(Find(group_of_[n]), 0);
  }
  for (const Exchange& x : exchanges_) {
    int c = Find(x.group);
    for (int p : x.producer_groups) {
      if (succ[Find(p)].insert(c).second) ++indegree[c];
    }
  }
  using Item = std::pair<int, int>;  // (first node, root)
  std::priority_queue<Item, std::vector<Item>, std::greater<Item>> ready;
  for (const auto& [root, deg] : indegree) {
    if (deg == 0) ready.emplace(groups_[root].first_node, root);
  }
  std::map<int, int> stage_id;  // root -> stage id
  while (!ready.empty()) {
    int root = ready.top().second;
    ready.pop();
    int id = static_cast<int>(stage_id.size());
    stage_id[root] = id;
    for (int c : succ[root]) {
      if (--indegree[c] == 0) ready.emplace(groups_[c].first_node, c);
    }
  }
  CARAVELA_CHECK(stage_id.size() == indegree.size());  // the merge rule keeps it acyclic

  JobPlan plan;
  plan.job_name = spec_.name;
  plan.parallelism = parallelism_;
  plan.max_parallelism = spec_.max_parallelism;
  plan.stages.resize(stage_id.size());
  for (const auto& [root, id] : stage_id) {
    StagePlan& st = plan.stages[id];
    st.id = id;
    const Group& g = groups_[root];
    if (!g.one_task_source.empty()) {
      st.tasks = 1;
      st.tasks_reason = g.one_task_source;
    } else if (!g.global_window.empty()) {
      st.tasks = 1;
      st.tasks_reason = "global window " + g.global_window;
    } else {
      st.tasks = parallelism_;
      st.tasks_reason = "parallelism";
    }
  }
  auto stage_of_node = [&](int n) { return stage_id.at(Find(group_of_[n])); };
  for (int n = 0; n < num_nodes; ++n) {
    const bool is_source = n < num_sources_;
    const std::string& name =
        is_source ? spec_.sources[n].name : spec_.operators[n - num_sources_].name;
    plan.kind_of[name] =
        is_source ? "source" : std::string(spec_.operators[n - num_sources_].kind_name());
    if (group_of_[n] < 0) continue;
    int s = stage_of_node(n);
    plan.stage_of[name] = s;
    if (is_source) {
      plan.stages[s].sources.push_back(name);
      if (plan.stages[s].key.empty()) plan.stages[s].key = part_[n].key;
    } else {
      plan.stages[s].operators.push_back(name);
    }
  }
  std::sort(broadcast_.begin(), broadcast_.end(), [&](const auto& a, const auto& b) {
    return std::make_pair(stage_id.at(Find(a.first)), a.second) <
           std::make_pair(stage_id.at(Find(b.first)), b.second);
  });
  for (const auto& [group, source] : broadcast_) {
    int s = stage_id.at(Find(group));
    const std::string& name = spec_.sources[source].name;
    if (!Contains(plan.stages[s].broadcast, name)) plan.stages[s].broadcast.push_back(name);
    plan.stage_of.emplace(name, s);  // broadcast-only: the lowest stage reading it
  }
  for (size_t i = 0; i < exchanges_.size(); ++i) {
    const Exchange& x = exchanges_[i];
    ExchangePlan e;
    e.id = static_cast<int>(i);
    e.operator_name = spec_.operators[x.op].name;
    e.topic = absl::StrCat("caravela.", spec_.name, ".", e.operator_name);
    e.consumer_stage = stage_id.at(Find(x.group));
    e.partitions = plan.stages[e.consumer_stage].tasks;
    e.inputs = x.inputs;
    for (size_t k = 0; k < e.inputs.size(); ++k) {
      e.inputs[k].producer_stage = stage_id.at(Find(x.producer_groups[k]));
      e.producer_stages.push_back(e.inputs[k].producer_stage);
    }
    std::sort(e.producer_stages.begin(), e.producer_stages.end());
    e.producer_stages.erase(std::unique(e.producer_stages.begin(), e.producer_stages.end()),
                            e.producer_stages.end());
    StagePlan& consumer = plan.stages[e.consumer_stage];
    consumer.input_exchanges.push_back(e.id);
    if (consumer.sources.empty() && consumer.input_exchanges.size() == 1) {
      consumer.key = e.inputs[0].key_names;
    }
    for (int p : e.producer_stages) plan.stages[p].output_exchanges.push_back(e.id);
    plan.exchanges.push_back(std::move(e));
  }
  for (const StagePlan& st : plan.stages) {
    CARAVELA_CHECK(!st.sources.empty() || !st.input_exchanges.empty());
  }

  // Every task of a stage needs at least one partition of each Kafka source.
  std::vector<std::string> errors;
  for (const StagePlan& st : plan.stages) {
    for (const std::string& name : st.sources) {
      const SourceSpec* src = spec_.FindSource(name);
      if (!src->kind->partitioned_log()) continue;
      auto it = partitions_.find(name);
      if (it == partitions_.end() || it->second >= st.tasks) continue;
      errors.push_back(absl::StrCat("spec.parallelism: ", st.tasks, " tasks but source \"", name,
                                    "\" (", src->kind->Label(*src), ") has ", it->second,
                                    " partition", it->second == 1 ? "" : "s", "; use at most ",
                                    it->second, " or add partitions to the topic"));
    }
  }
  if (!errors.empty()) return absl::InvalidArgumentError(absl::StrJoin(errors, "\n"));
  return plan;
}

void AppendJsonStrings(const std::vector<std::string>& v, std::string* out) {
  out->push_back('[');
  for (size_t i = 0; i < v.size(); ++i) {
    if (i > 0) out->push_back(',');
    AppendJsonString(v[i], out);
  }
  out->push_back(']');
}

void AppendJsonInts(const std::vector<int>& v, std::string* out) {
  out->push_back('[');
  for (size_t i = 0; i < v.size(); ++i) {
    if (i > 0) out->push_back(',');
    absl::StrAppend(out, v[i]);
  }
  out->push_back(']');
}

std::string Plural(int n, const char* word) {
  return absl::StrCat(n, " ", word, n == 1 ? "" : "s");
}

}  // namespace

int JobPlan::FirstTask(int stage) const {
  int first = 0;
  for (int s = 0; s < stage && s < static_cast<int>(stages.size()); ++s) first += stages[s].tasks;
  return first;
}

int JobPlan::total_tasks() const {
  int n = 0;
  for (const StagePlan& s : stages) n += s.tasks;
  return n;
}

const ExchangePlan* JobPlan::ExchangeFor(std::string_view op, int input) const {
  for (const ExchangePlan& e : exchanges) {
    if (e.operator_name != op) continue;
    for (const ExchangePlan::Input& in : e.inputs) {
      if (in.input == input) return &e;
    }
  }
  return nullptr;
}

std::string JobPlan::ToText() const {
  std::string out = absl::StrCat("job ", job_name, ": parallelism ", parallelism, ", ",
                                 Plural(static_cast<int>(stages.size()), "stage"), ", ",
                                 Plural(total_tasks(), "task"), ", ",
                                 Plural(static_cast<int>(exchanges.size()), "exchange"), "\n");
  auto kind = [&](const std::string& name) {
    auto it = kind_of.find(name);
    return it == kind_of.end() ? std::string("node") : it->second;
  };
  for (const StagePlan& st : stages) {
    absl::StrAppend(&out, "stage ", st.id, " (", Plural(st.tasks, "task"));
    if (st.tasks_reason != "parallelism") absl::StrAppend(&out, ": ", st.tasks_reason);
    out += "): ";
    std::vector<std::string> inputs, ops;
    for (int x : st.input_exchanges) inputs.push_back("exchange " + exchanges[x].topic);
    for (const std::string& s : st.sources) inputs.push_back("source " + s);
    for (const std::string& s : st.broadcast) inputs.push_back("table " + s + " (broadcast)");
    for (const std::string& o : st.operators) ops.push_back(kind(o) + " " + o);
    out += absl::StrJoin(inputs, ", ");
    if (!ops.empty()) absl::StrAppend(&out, " -> ", absl::StrJoin(ops, ", "));
    if (st.key.empty()) {
      out += "   [unpartitioned]\n";
    } else {
      absl::StrAppend(&out, "   [partitioned by ", absl::StrJoin(st.key, ", "), "]\n");
    }
    for (int id : st.output_exchanges) {
      const ExchangePlan& e = exchanges[id];
      for (const ExchangePlan::Input& in : e.inputs) {
        if (in.producer_stage != st.id) continue;
        absl::StrAppend(&out, "  exchange ", e.topic, " (", Plural(e.partitions, "partition"), ")");
        if (e.inputs.size() > 1) absl::StrAppend(&out, " input ", in.input, " from ", in.from);
        if (in.key_names.empty()) {
          out += " unkeyed";
        } else {
          absl::StrAppend(&out, " by ", absl::StrJoin(in.key_names, ", "));
        }
        absl::StrAppend(&out, " -> stage ", e.consumer_stage, "\n");
      }
    }
  }
  return out;
}

std::string JobPlan::ToJson() const {
  std::string out = "{\"job\":";
  AppendJsonString(job_name, &out);
  absl::StrAppend(&out, ",\"parallelism\":", parallelism, ",\"total_tasks\":", total_tasks(),
                  ",\"stages\":[");
  for (size_t i = 0; i < stages.size(); ++i) {
    const StagePlan& st = stages[i];
    if (i > 0) out.push_back(',');
    absl::StrAppend(&out, "{\"id\":", st.id, ",\"tasks\":", st.tasks, ",\"tasks_reason\":");
    AppendJsonString(st.tasks_reason, &out);
    out += ",\"key\":";
    AppendJsonStrings(st.key, &out);
    out += ",\"sources\":";
    AppendJsonStrings(st.sources, &out);
    out += ",\"broadcast\":";
    AppendJsonStrings(st.broadcast, &out);
    out += ",\"operators\":";
    AppendJsonStrings(st.operators, &out);
    out += ",\"input_exchanges\":";
    AppendJsonInts(st.input_exchanges, &out);
    out += ",\"output_exchanges\":";
    AppendJsonInts(st.output_exchanges, &out);
    out.push_back('}');
  }
  out += "],\"exchanges\":[";
  for (size_t i = 0; i < exchanges.size(); ++i) {
    const ExchangePlan& e = exchanges[i];
    if (i > 0) out.push_back(',');
    absl::StrAppend(&out, "{\"id\":", e.id, ",\"topic\":");
    AppendJsonString(e.topic, &out);
    out += ",\"operator\":";
    AppendJsonString(e.operator_name, &out);
    absl::StrAppend(&out, ",\"consumer_stage\":", e.consumer_stage,
                    ",\"partitions\":", e.partitions, ",\"producer_stages\":");
    AppendJsonInts(e.producer_stages, &out);
    out += ",\"inputs\":[";
    for (size_t k = 0; k < e.inputs.size(); ++k) {
      const ExchangePlan::Input& in = e.inputs[k];
      if (k > 0) out.push_back(',');
      absl::StrAppend(&out, "{\"input\":", in.input, ",\"from\":");
      AppendJsonString(in.from, &out);
      absl::StrAppend(&out, ",\"producer_stage\":", in.producer_stage, ",\"key\":");
      AppendJsonStrings(in.key_names, &out);
      out.push_back('}');
    }
    out += "]}";
  }
  out += "]}";
  return out;
}

int ExchangePlan::CreatePartitions(const JobPlan& plan) const {
  const StagePlan& consumer = plan.stages[static_cast<size_t>(consumer_stage)];
  return consumer.tasks_reason == "parallelism" ? std::max(partitions, plan.max_parallelism)
                                                : partitions;
}

absl::StatusOr<JobPlan> PlanJob(const JobSpec& spec, int parallelism,
                                const SourcePartitions& partitions) {
  return Planner(spec, parallelism, partitions).Plan();
}

absl::StatusOr<JobPlan> PlanClusterJob(const JobSpec& spec, int parallelism,
                                       const SourcePartitions& partitions) {
  ASSIGN_OR_RETURN(JobPlan plan, PlanJob(spec, parallelism, partitions));
  if (parallelism != 1 || !ArrivalDriven(spec)) return plan;
  StagePlan one;
  one.tasks = 1;
  one.tasks_reason = "a replay in arrival order";
  for (const SourceSpec& s : spec.sources) one.sources.push_back(s.name);
  for (const OperatorSpec& o : spec.operators) one.operators.push_back(o.name);
  plan.stages = {std::move(one)};
  plan.exchanges.clear();
  for (auto& [node, stage] : plan.stage_of) stage = 0;
  return plan;
}

uint64_t ExchangeKeyHash(const Record& r, const std::vector<FieldPath>& key, std::string* scratch) {
  scratch->clear();
  for (const FieldPath& p : key) AppendKeyField(r.GetPath(p), scratch);
  return XXH3_64bits(scratch->data(), scratch->size());
}

}  // namespace caravela
