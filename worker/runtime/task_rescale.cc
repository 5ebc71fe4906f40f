// Rescaling (SPEC §8 "Tasks and keys"): a parallel job restored from a
// checkpoint taken with another parallelism. The plan's shape does not
// depend on the parallelism (common/job_plan.h), so stage s of the old plan
// is stage s of the new one; only task counts differ. Task i of N' tasks
// gathers its share from the old tasks 0..N-1 of its stage:
//
//  * source partitions p with p % N' == i, each with the offset and the
//    watermark state of its old owner (p % N);
//  * operator state: the checkpoint of every old task whose key-group range
//    meets task i's is restored into a scratch backend and each operator
//    copies the keys now routed to task i (Operator::AdoptState with a
//    KeyOwner over the exchange key that feeds it); operator watermarks
//    start at the minimum over all old tasks;
//  * sinks: task i continues old task i's sink (its part file, under the
//    part name old task i recorded, and its commit state); a task with no
//    old counterpart starts its sinks fresh under new part names
//    ("<index>-c<checkpoint>"), so no task ever reopens another's file or
//    fence, at any sequence of parallelisms (LoadSinkParts).
//
// Exchange records are not state: a new epoch's readers start at the log end
// and its producers re-send from the restored source offsets (SPEC §8).
// A stage whose keys follow a Kafka source's own partitioner (a keyed source
// forwarded into a stateful operator) cannot move keys between task counts:
// only the producer knows which key went to which partition.
#include <filesystem>
#include <functional>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/job_plan.h"
#include "common/key_groups.h"
#include "spdlog/spdlog.h"
#include "worker/checkpoint/checkpoint_manager.h"
#include "worker/checkpoint/manifest_fields.h"
#include "worker/runtime/task_checkpointer.h"
#include "worker/runtime/watermark.h"
#include "worker/state/state_backend.h"

namespace caravela {

using task_internal::OperatorNode;
using task_internal::SinkNode;
using task_internal::SourceNode;

absl::StatusOr<std::vector<std::vector<FieldPath>>> TaskCheckpointer::RescaleKeys(
    const task_internal::OperatorNode& on) const {
  // True if the records operator `op` emits are partitioned by an exchange
  // of this stage (directly or through forwarded operators).
  std::function<bool(int)> fed_by_exchange = [&](int op) {
    const OperatorNode& n = graph_.ops[static_cast<size_t>(op)];
    for (size_t i = 0; i < n.inputs.size(); ++i) {
      if (n.input_reader[i] >= 0) return true;
      if (n.inputs[i] >= graph_.S() && fed_by_exchange(n.inputs[i] - graph_.S())) return true;
    }
    return false;
  };
  std::vector<std::vector<FieldPath>> keys(on.inputs.size());
  for (size_t i = 0; i < on.inputs.size(); ++i) {
    if (const ExchangePlan* ex =
            ctx_.placement.plan->ExchangeFor(on.spec->name, static_cast<int>(i))) {
      for (const ExchangePlan::Input& in : ex->inputs) {
        if (in.input == static_cast<int>(i)) keys[i] = in.key;
      }
      continue;
    }
    const int from = on.inputs[i];
    const bool forwarded_exchange = from >= graph_.S() && fed_by_exchange(from - graph_.S());
    if (!forwarded_exchange || ctx_.stage->key.empty()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "operator ", on.spec->name, " keeps state partitioned by ",
          from < graph_.S()
              ? absl::StrCat("Kafka source ", graph_.sources[from].spec->name, "'s own partitioner")
              : std::string("no exchange key"),
          ": its keys cannot move to another task count. Run the job with its previous "
          "parallelism, or start it from scratch"));
    }
    for (const std::string& name : ctx_.stage->key) keys[i].push_back(FieldPath::Parse(name));
  }
  return keys;
}

void TaskCheckpointer::AssignKeyGroups() {
  // A job that runs as one task has no exchanges: nothing routes by key.
  if (!ctx_.parallel() || ctx_.stage == nullptr) return;
  for (OperatorNode& on : graph_.ops) {
    if (!on.here) continue;
    absl::StatusOr<std::vector<std::vector<FieldPath>>> keys = RescaleKeys(on);
    if (!keys.ok()) continue;  // partitioned by a source: no key groups
    auto owner = std::make_shared<KeyOwner>();
    owner->keys = *std::move(keys);
    owner->tasks = ctx_.stage->tasks;
    owner->index = ctx_.placement.index;
    owner->max_parallelism = ctx_.spec.max_parallelism;
    on.ctx->set_key_groups(std::move(owner));
  }
}

int TaskCheckpointer::OldParallelism() const {
  return ctx_.placement.restore_parallelism > 0 ? ctx_.placement.restore_parallelism
                                                : ctx_.placement.plan->parallelism;
}

absl::Status TaskCheckpointer::LoadSinkParts() {
  const int64_t id = ctx_.placement.restore_checkpoint;
  if (id <= 0) return absl::OkStatus();
  const JobPlan& plan = *ctx_.placement.plan;
  const int old_parallelism = OldParallelism();
  ASSIGN_OR_RETURN(JobPlan old_plan,
                   PlanJob(ctx_.spec, old_parallelism, ctx_.placement.source_partitions));
  // A plan of another shape: RestoreRescaled says so.
  if (old_plan.stages.size() != plan.stages.size()) return absl::OkStatus();
  const int s = ctx_.placement.stage;
  const int i = ctx_.placement.index;
  SinkParts& parts = ctx_.sink_parts;
  if (i >= old_plan.stages[s].tasks) {
    parts.suffix = absl::StrCat("-c", id);  // no old task wrote this task's files
    return absl::OkStatus();
  }
  std::unique_ptr<CheckpointManager> other;
  CheckpointManager* manager = manager_.get();
  const int old_global = old_plan.FirstTask(s) + i;
  if (old_global != ctx_.placement.global_id) {
    ASSIGN_OR_RETURN(other,
                     CheckpointManager::Open(manager_->storage().url(), ctx_.spec.name, old_global,
                                             absl::StrCat(ctx_.options.data_dir, "/task-",
                                                          ctx_.placement.global_id, "/sink-parts"),
                                             1));
    manager = other.get();
  }
  ASSIGN_OR_RETURN(std::optional<CheckpointManifest> m, manager->LatestUpTo(id));
  // A missing part: Restore reports it.
  if (!m.has_value() || m->checkpoint_id() != id) return absl::OkStatus();
  for (const auto& sc : m->sinks()) {
    if (sc.has_part()) parts.by_node[sc.index()] = sc.part();
  }
  // Older checkpoints name no parts: the default names of the old plan.
  parts.stage_tasks = old_plan.stages[s].tasks;
  parts.total_tasks = old_plan.total_tasks();
  return absl::OkStatus();
}

absl::Status TaskCheckpointer::RestoreRescaled(bool regroup) {
  const int64_t id = ctx_.placement.restore_checkpoint;
  const JobPlan& plan = *ctx_.placement.plan;
  const int old_parallelism = OldParallelism();
  ASSIGN_OR_RETURN(JobPlan old_plan,
                   PlanJob(ctx_.spec, old_parallelism, ctx_.placement.source_partitions));
  if (old_plan.stages.size() != plan.stages.size()) {
    return absl::FailedPreconditionError(absl::StrCat("checkpoint ", id, " of job ", ctx_.spec.name,
                                                      ": the plan at parallelism ", old_parallelism,
                                                      " has ", old_plan.stages.size(),
                                                      " stages, this one ", plan.stages.size()));
  }
  const int s = ctx_.placement.stage;
  const int n_old = old_plan.stages[s].tasks;
  const int n_new = ctx_.stage->tasks;
  const int first_old = old_plan.FirstTask(s);

  // The old tasks' parts of checkpoint `id`: all of them when the task count
  // changed, else only the one this task continues.
  const std::string& url = manager_->storage().url();
  const std::string scratch =
      absl::StrCat(ctx_.options.data_dir, "/task-", ctx_.placement.global_id, "/rescale");
  std::vector<int> olds;
  const bool same_keys = n_old == n_new && !regroup;
  if (same_keys) {
    olds.push_back(ctx_.placement.index);
  } else {
    for (int j = 0; j < n_old; ++j) olds.push_back(j);
  }
  std::vector<std::unique_ptr<CheckpointManager>> managers(static_cast<size_t>(n_old));
  std::vector<CheckpointManifest> manifests(static_cast<size_t>(n_old));
  for (int j : olds) {
    ASSIGN_OR_RETURN(managers[j], CheckpointManager::Open(url, ctx_.spec.name, first_old + j,
                                                          absl::StrCat(scratch, "/old-", j), 1));
    ASSIGN_OR_RETURN(std::optional<CheckpointManifest> m, managers[j]->LatestUpTo(id));
    if (!m.has_value() || m->checkpoint_id() != id) {
      return absl::DataLossError(absl::StrCat("job ", ctx_.spec.name, ": checkpoint ", id,
                                              " is complete job-wide but the part of task ",
                                              first_old + j, " (stage ", s, " task ", j, " of ",
                                              n_old, ") is missing from ", url));
    }
    RETURN_IF_ERROR(CheckSameGraph(*m));
    RETURN_IF_ERROR(CheckKeyGroups(*m));
    manifests[j] = std::move(*m);
  }

  if (same_keys) {
    // Same task count (a one-task stage): the old task's state as it is.
    const CheckpointManifest& m = manifests[ctx_.placement.index];
    RETURN_IF_ERROR(managers[ctx_.placement.index]->RestoreState(m, *ctx_.state).status());
    RETURN_IF_ERROR(ApplyManifest(m));
    RuntimeLogger()->info(
        "stage {} task {}: restored checkpoint {} of task {} (parallelism {} -> {})", s,
        ctx_.placement.index, id, first_old + ctx_.placement.index, old_parallelism,
        plan.parallelism);
    return absl::OkStatus();
  }

  // The manifest this task restores: its partitions' offsets and watermarks
  // from their old owners, the minimum operator watermarks, and the sinks of
  // the old task it continues.
  CheckpointManifest merged;
  merged.set_checkpoint_id(id);
  merged.set_job_name(ctx_.spec.name);
  merged.set_epoch(manifests[0].epoch());
  for (const SourceNode& src : graph_.sources) {
    if (!src.present) continue;
    auto* sc = merged.add_sources();
    sc->set_name(src.spec->name);
    std::vector<std::string> exports(static_cast<size_t>(n_old));
    for (int j = 0; j < n_old; ++j) {
      for (const auto& old : manifests[j].sources()) {
        if (old.name() != src.spec->name) continue;
        for (const auto& pc : old.partitions()) {
          if (pc.partition() % n_old == j && pc.partition() % n_new == ctx_.placement.index) {
            *sc->add_partitions() = pc;
          }
        }
      }
      for (const auto& old : manifests[j].sources()) {
        if (old.name() != src.spec->name) continue;
        if (std::optional<std::string> wm = SourceWatermarkState(manifests[j], old)) {
          exports[j] = std::move(*wm);
        }
      }
    }
    if (std::optional<std::string> wm = SourceWatermark::MergeExports(exports)) {
      SetSourceWatermarkState(&merged, sc, *wm);
    }
  }
  for (const OperatorNode& on : graph_.ops) {
    if (!on.here) continue;
    int64_t w = kMaxTime;
    for (int j = 0; j < n_old; ++j) {
      for (const auto& oc : manifests[j].operators()) {
        if (oc.name() != on.spec->name) continue;
        if (const std::optional<int64_t> v = OperatorWatermark(oc)) w = std::min(w, *v);
      }
    }
    auto* oc = merged.add_operators();
    oc->set_name(on.spec->name);
    SetOperatorWatermark(oc, w == kMaxTime ? kMinTime : w);
  }
  if (ctx_.placement.index < n_old) {
    for (const auto& sc : manifests[ctx_.placement.index].sinks()) *merged.add_sinks() = sc;
  } else {
    // No old task wrote this task's part files: a fresh start for its sinks.
    for (SinkNode& sn : graph_.sinks) RETURN_IF_ERROR(sn.sink->Recover(0, ""));
  }
  // Old tasks without a successor (fewer tasks now): their sinks still owe
  // the output of checkpoint `id` if it was complete but not yet published
  // everywhere. Task j % N' finishes their commit (Sink::Recover redoes it).
  for (int j = n_new; j < n_old; ++j) {
    if (j % n_new != ctx_.placement.index) continue;
    for (const auto& sc : manifests[j].sinks()) {
      if (sc.index() < 0 || sc.index() >= static_cast<int>(graph_.sinks.size())) continue;
      const SinkNode& sn = graph_.sinks[sc.index()];
      const std::string part =
          sc.has_part() ? sc.part()
                        : DefaultSinkPart(s, n_old, old_plan.total_tasks(), sn.dead_letter, j);
      absl::StatusOr<std::unique_ptr<Sink>> opened =
          sn.dead_letter
              ? Builder().OpenDeadLetter(part)
              : Builder().OpenTaskSink(static_cast<size_t>(sn.spec_index), part, first_old + j);
      RETURN_IF_ERROR(opened.status());
      std::unique_ptr<Sink> old_sink = std::move(*opened);
      absl::Status st = old_sink->Recover(id, sc.state());
      if (st.ok()) st = old_sink->Close();
      if (!st.ok()) {
        return absl::Status(st.code(),
                            absl::StrCat("sink for ", sn.name, " of old task ", j,
                                         ": recovering checkpoint ", id, ": ", st.message()));
      }
    }
  }

  // Operator state: every old task's checkpoint in a scratch backend, each
  // operator keeping the keys now routed here.
  std::vector<std::pair<OperatorNode*, KeyOwner>> owners;
  for (OperatorNode& on : graph_.ops) {
    if (!on.here) continue;
    KeyOwner owner;
    owner.tasks = n_new;
    owner.index = ctx_.placement.index;
    owner.max_parallelism = ctx_.spec.max_parallelism;
    ASSIGN_OR_RETURN(owner.keys, RescaleKeys(on));
    owners.emplace_back(&on, std::move(owner));
  }
  // A task owns a contiguous range of key groups, so only the old tasks
  // whose range meets this task's hold keys it now owns (2 -> 3: one or two
  // of them; 3 -> 2: two). Checkpoints from before key groups (regroup)
  // spread keys by hash % tasks: every old task then.
  const int max_parallelism = ctx_.spec.max_parallelism;
  const KeyGroupRange mine = KeyGroupRangeOfTask(max_parallelism, n_new, ctx_.placement.index);
  std::vector<int> holders;
  for (int j = 0; j < n_old; ++j) {
    const KeyGroupRange theirs = KeyGroupRangeOfTask(max_parallelism, n_old, j);
    const bool by_key_group = !regroup && manifests[j].has_max_parallelism();
    if (!by_key_group || (theirs.first <= mine.last && mine.first <= theirs.last)) {
      holders.push_back(j);
    }
  }
  const auto t0 = std::chrono::steady_clock::now();
  // An old task whose whole range this task owns now (3 -> 2: one of the
  // two; N -> 1: every one) needs no sorting out: the largest such part is
  // restored as it is, like a plain restore, and the others are adopted
  // onto it, if every operator here can adopt onto restored state.
  int base = -1;
  bool onto = !regroup;
  for (const auto& [on, owner] : owners) onto = onto && on->op->AdoptsOntoRestoredState();
  for (int j : holders) {
    const KeyGroupRange theirs = KeyGroupRangeOfTask(max_parallelism, n_old, j);
    if (onto && manifests[j].has_max_parallelism() && mine.first <= theirs.first &&
        theirs.last <= mine.last &&
        (base < 0 || theirs.size() > KeyGroupRangeOfTask(max_parallelism, n_old, base).size())) {
      base = j;
    }
  }
  if (base >= 0) {
    RETURN_IF_ERROR(managers[base]->RestoreState(manifests[base], *ctx_.state).status());
  }
  for (int j : holders) {
    if (j == base) continue;
    const std::string dir = absl::StrCat(scratch, "/state-", j);
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
    ASSIGN_OR_RETURN(std::unique_ptr<StateBackend> old_state,
                     OpenRocksDbBackend(dir, ctx_.options.state_budget, /*flush_on_close=*/false));
    RETURN_IF_ERROR(managers[j]->RestoreState(manifests[j], *old_state).status());
    for (auto& [on, owner] : owners) {
      OperatorContext from(on->spec->name, old_state.get(), ctx_.metrics, ctx_.clock);
      absl::Status st = on->op->AdoptState(from, *on->ctx, owner);
      if (!st.ok()) {
        return absl::Status(st.code(), absl::StrCat("rescaling checkpoint ", id, " from ", n_old,
                                                    " to ", n_new, " tasks: ", st.message()));
      }
    }
    RETURN_IF_ERROR(ctx_.state->Commit());
    old_state.reset();
    std::filesystem::remove_all(dir, ec);
  }
  std::error_code ec;
  std::filesystem::remove_all(scratch, ec);
  RETURN_IF_ERROR(ApplyManifest(merged));
  const auto ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0)
          .count();
  ctx_.metrics->Get("rescale_restores_total")->Add();
  RuntimeLogger()->info(
      "stage {} task {}: gathered its keys (key groups {}) of checkpoint {} from {} of {} old "
      "tasks in {} ms (parallelism {} -> {}{})",
      s, ctx_.placement.index, mine.ToString(), id, holders.size(), n_old, ms, old_parallelism,
      plan.parallelism,
      base >= 0 ? absl::StrCat("; old task ", base, "'s part restored as it is") : "");
  return absl::OkStatus();
}

}  // namespace caravela
