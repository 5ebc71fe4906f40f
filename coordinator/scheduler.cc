#include "coordinator/scheduler.h"

#include <algorithm>
#include <chrono>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/job_outputs.h"
#include "common/job_plan.h"
#include "common/job_spec.h"
#include "common/logging.h"
#include "coordinator/job_state.h"
#include "spdlog/spdlog.h"
#include "worker/registry/builtin_kinds.h"

namespace caravela {
namespace {

std::shared_ptr<spdlog::logger> Log() {
  static const std::shared_ptr<spdlog::logger> log = SubsystemLogger("scheduler");
  return log;
}

bool AtLeast(const v1::TaskReport& r, v1::TaskPhase p) {
  return r.phase() >= p && r.phase() != v1::TASK_FAILED;
}

}  // namespace

Scheduler::Scheduler(JobStore* store, WorkerRegistry* workers, const Clock* clock,
                     SchedulerOptions options)
    : store_(store), workers_(workers), clock_(clock), options_(std::move(options)) {
  if (options_.placement == nullptr) options_.placement = std::make_shared<SpreadPolicy>();
}

void Scheduler::Put(const v1::Job& job) {
  if (absl::Status st = store_->Put(job); !st.ok()) {
    Log()->error("job {}: cannot store: {}", job.id(), std::string(st.message()));
  }
}

std::vector<SpecError> Scheduler::CheckAdmissionLocked(const v1::Job& job) const {
  std::vector<SpecError> errors;
  absl::StatusOr<std::vector<v1::Job>> all = store_->List();
  if (!all.ok()) {
    errors.push_back({"spec", absl::StrCat("cannot list the jobs: ", all.status().message())});
    return errors;
  }
  std::vector<OutputWriter> running;
  for (const v1::Job& j : *all) {
    if (IsFinal(j.state()) || j.id() == job.id()) continue;
    if (j.name() == job.name()) {
      errors.push_back(
          {"metadata.name",
           absl::StrCat("a job named ", job.name(), " is ", JobStateName(j.state()), " as ", j.id(),
                        " (jobs of one name share exchange topics): cancel it "
                        "first, or rename this one")});
    }
    ParseResult theirs = ParseJobSpec(j.yaml());
    if (theirs.ok()) {
      running.push_back({j.id(), JobStateName(j.state()), JobOutputs(theirs.spec)});
    }
  }
  ParseResult mine = ParseJobSpec(job.yaml());
  if (mine.ok()) {
    for (SpecError& e : CheckOutputsFree(mine.spec, running)) errors.push_back(std::move(e));
  }
  return errors;
}

std::vector<SpecError> Scheduler::CheckAdmission(const v1::Job& job) const {
  std::lock_guard<std::mutex> lock(mu_);
  return CheckAdmissionLocked(job);
}

absl::Status Scheduler::Submit(const v1::Job& job) {
  std::lock_guard<std::mutex> lock(mu_);
  if (std::vector<SpecError> errors = CheckAdmissionLocked(job); !errors.empty()) {
    return absl::FailedPreconditionError(JoinSpecErrors(errors));
  }
  return store_->Put(job);
}

absl::StatusOr<v1::Job> Scheduler::Cancel(const std::string& job_id, const std::string& message) {
  std::lock_guard<std::mutex> lock(mu_);
  ASSIGN_OR_RETURN(v1::Job job, store_->Get(job_id));
  RETURN_IF_ERROR(Transition(job, v1::CANCELED, clock_->NowMs(), message));
  RETURN_IF_ERROR(store_->Put(job));
  runs_.erase(job_id);
  restarts_.erase(job_id);
  Log()->info("job {} canceled", job_id);
  return job;
}

absl::StatusOr<v1::Job> Scheduler::Restart(const std::string& job_id, int parallelism) {
  std::lock_guard<std::mutex> lock(mu_);
  ASSIGN_OR_RETURN(v1::Job job, store_->Get(job_id));
  ParseResult parsed = ParseJobSpec(job.yaml());
  if (!parsed.ok()) return absl::FailedPreconditionError("the job's YAML no longer parses");
  if (parallelism == 0) parallelism = job.parallelism();
  const int max_parallelism = parsed.spec.max_parallelism;
  if (parallelism < 1 || parallelism > max_parallelism) {
    return absl::InvalidArgumentError(absl::StrCat("parallelism must be 1..", max_parallelism,
                                                   " (the job's spec.max_parallelism), got ",
                                                   parallelism));
  }
  if (std::string why = WhyNotClusterParallelism(parsed.spec, parallelism); !why.empty()) {
    return absl::FailedPreconditionError(absl::StrCat("job ", job_id, ": ", why));
  }
  absl::StatusOr<JobPlan> plan = PlanClusterJob(parsed.spec, parallelism);
  if (!plan.ok()) return absl::FailedPreconditionError(std::string(plan.status().message()));
  const std::string from =
      job.last_checkpoint() > 0
          ? absl::StrCat(
                "from checkpoint ", job.last_checkpoint(),
                job.checkpoint_parallelism() > 0 && job.checkpoint_parallelism() != parallelism
                    ? absl::StrCat(" (taken with parallelism ", job.checkpoint_parallelism(), ")")
                    : "")
          : std::string("from the beginning (it has no complete checkpoint)");
  if (std::vector<SpecError> errors = CheckAdmissionLocked(job); !errors.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("job ", job_id, " cannot restart: ", JoinSpecErrors(errors)));
  }
  const JobState was = job.state();
  RETURN_IF_ERROR(Reopen(job, clock_->NowMs(), absl::StrCat("restarted ", from)));
  job.set_parallelism(parallelism);
  job.clear_rescale_to();
  job.clear_savepoint_to();
  RETURN_IF_ERROR(store_->Put(job));
  restarts_.erase(job_id);
  Log()->info("job {} ({}) restarted {} with parallelism {}", job_id, JobStateName(was), from,
              parallelism);
  return job;
}

absl::StatusOr<v1::Job> Scheduler::Rescale(const std::string& job_id, int parallelism) {
  std::lock_guard<std::mutex> lock(mu_);
  ASSIGN_OR_RETURN(v1::Job job, store_->Get(job_id));
  ParseResult parsed = ParseJobSpec(job.yaml());
  if (!parsed.ok()) return absl::FailedPreconditionError("the job's YAML no longer parses");
  const int max_parallelism = parsed.spec.max_parallelism;
  if (parallelism < 1 || parallelism > max_parallelism) {
    return absl::InvalidArgumentError(absl::StrCat("parallelism must be 1..", max_parallelism,
                                                   " (the job's spec.max_parallelism), got ",
                                                   parallelism));
  }
  if (job.state() != v1::RUNNING) {
    return absl::FailedPreconditionError(absl::StrCat("job ", job_id, " is ",
                                                      v1::JobState_Name(job.state()),
                                                      ": only a RUNNING job can be rescaled"));
  }
  if (std::string why = WhyNotClusterParallelism(parsed.spec, parallelism); !why.empty()) {
    return absl::FailedPreconditionError(absl::StrCat("job ", job_id, ": ", why));
  }
  if (parsed.spec.checkpoint.interval <= 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "job ", job_id, " has no spec.checkpoint: a rescale moves state through a checkpoint"));
  }
  absl::StatusOr<JobPlan> plan = PlanClusterJob(parsed.spec, parallelism);
  if (!plan.ok()) return absl::FailedPreconditionError(std::string(plan.status().message()));
  // Every task takes a slot: the job's own (freed by the rescale) and the
  // cluster's free ones as of the last round.
  const auto run = runs_.find(job_id);
  const int own = run == runs_.end() ? 0 : static_cast<int>(run->second.Placement().size());
  const int available = slots_.TotalFree() + own;
  if (parallelism != job.parallelism() && plan->total_tasks() > available) {
    return absl::FailedPreconditionError(absl::StrCat(
        "job ", job_id, " at parallelism ", parallelism, " needs ", plan->total_tasks(),
        " task slots, but the cluster has ", available, " (", slots_.TotalFree(),
        " free and the job's ", own, "): add workers or rescale to fewer tasks"));
  }
  if (!job.savepoint_to().empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("job ", job_id, " is stopping with a savepoint to ", job.savepoint_to(),
                     ": submit it again from the savepoint with --parallelism instead"));
  }
  if (parallelism == job.parallelism()) return job;  // nothing to do
  job.set_rescale_to(parallelism);
  RETURN_IF_ERROR(store_->Put(job));
  Log()->info("job {}: rescale from {} to {} tasks per stage requested", job_id, job.parallelism(),
              parallelism);
  return job;
}

absl::StatusOr<v1::Job> Scheduler::StopWithSavepoint(const std::string& job_id,
                                                     const std::string& dir) {
  std::lock_guard<std::mutex> lock(mu_);
  ASSIGN_OR_RETURN(v1::Job job, store_->Get(job_id));
  if (job.state() != v1::RUNNING) {
    return absl::FailedPreconditionError(
        absl::StrCat("job ", job_id, " is ", v1::JobState_Name(job.state()),
                     ": only a RUNNING job can stop with a savepoint"));
  }
  if (!job.savepoint_to().empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "job ", job_id, " is already stopping with a savepoint to ", job.savepoint_to()));
  }
  if (job.rescale_to() > 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "job ", job_id, " is being rescaled to ", job.rescale_to(), ": try again when it runs"));
  }
  ParseResult parsed = ParseJobSpec(job.yaml());
  if (!parsed.ok()) return absl::FailedPreconditionError("the job's YAML no longer parses");
  if (parsed.spec.checkpoint.interval <= 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "job ", job_id, " has no spec.checkpoint: a savepoint is a copy of a checkpoint"));
  }
  job.set_savepoint_to(dir);
  RETURN_IF_ERROR(store_->Put(job));
  Log()->info("job {}: stop with a savepoint to {} requested", job_id, dir);
  return job;
}

std::string Scheduler::CheckpointStorageFor(const JobSpec& spec) const {
  return spec.checkpoint.storage.empty() ? options_.checkpoint_storage : spec.checkpoint.storage;
}

void Scheduler::StartSavepoint(v1::Job& job, const JobRun& run) {
  ParseResult parsed = ParseJobSpec(job.yaml());
  JobCheckpointRef ref;
  ref.storage_url = JobInstanceStorage(CheckpointStorageFor(parsed.spec), job.id());
  ref.job_name = job.name();
  ref.job_id = job.id();
  ref.tasks = static_cast<int>(run.tasks.size());
  ref.parallelism = run.parallelism;
  ref.checkpoint_id = job.last_checkpoint();
  auto write = options_.write_savepoint;
  if (!write) write = WriteJobSavepoint;
  savepoints_[job.id()] = std::async(std::launch::async, write, ref, job.savepoint_to());
  FillTasks(run, &job);
  job.set_message(absl::StrCat("writing a savepoint of checkpoint ", ref.checkpoint_id, " to ",
                               job.savepoint_to()));
  Put(job);
  Log()->info("job {}: tasks stopped at checkpoint {}; {}", job.id(), ref.checkpoint_id,
              job.message());
  runs_.erase(job.id());
  restarts_.erase(job.id());
}

void Scheduler::EndSavepoint(v1::Job& job, const std::vector<v1::Job>& all,
                             const absl::StatusOr<JobSavepoint>& written) {
  const std::string dir = job.savepoint_to();
  job.clear_savepoint_to();
  if (written.ok()) {
    job.set_savepoint(dir);
    if (!MoveJob(job, v1::FINISHED,
                 absl::StrCat("stopped with a savepoint in ", dir, " (checkpoint ",
                              written->checkpoint_id(), ", ", written->files(), " files, ",
                              written->bytes(), " bytes)"))) {
      return;
    }
    Put(job);
    Log()->info("job {}: {}", job.id(), job.message());
    return;
  }
  // The checkpoint is still in storage: the job goes on from it.
  const std::string why =
      absl::StrCat("the savepoint to ", dir, " failed (", written.status().message(),
                   "); running on from checkpoint ", job.last_checkpoint());
  Log()->error("job {}: {}", job.id(), why);
  Replace(job, all, v1::SCHEDULING, why);
}

void Scheduler::Fail(v1::Job& job, const std::string& why) {
  Log()->error("job {} failed: {}", job.id(), why);
  if (absl::Status st = Transition(job, v1::FAILED, clock_->NowMs(), why); st.ok()) {
    Put(job);
  } else {
    Log()->error("job {}: {}", job.id(), std::string(st.message()));
  }
  runs_.erase(job.id());
  restarts_.erase(job.id());
}

bool Scheduler::MoveJob(v1::Job& job, v1::JobState to, const std::string& message) {
  absl::Status st = Transition(job, to, clock_->NowMs(), message);
  if (st.ok()) return true;
  Fail(job, absl::StrCat("internal error: ", st.message()));
  return false;
}

bool Scheduler::MoveRun(v1::Job& job, JobRun& run, RunPhase to) {
  absl::Status st = run.phase.Enter(to);
  if (st.ok()) return true;
  Fail(job, absl::StrCat("internal error: epoch ", run.epoch, ": ", st.message()));
  return false;
}

bool Scheduler::Place(v1::Job& job, const std::vector<v1::Job>& all, const std::string& why) {
  // A restart after failures in a row waits its backoff (RecoverFromFailure).
  if (auto r = restarts_.find(job.id());
      r != restarts_.end() && clock_->NowMs() < r->second.not_before_ms) {
    if (!why.empty()) job.set_message(why);
    return false;
  }
  ParseResult parsed = ParseJobSpec(job.yaml());
  if (!parsed.ok()) {
    Fail(job, absl::StrCat(parsed.errors[0].path, ": ", parsed.errors[0].message));
    return false;
  }
  absl::StatusOr<JobPlan> plan = PlanClusterJob(parsed.spec, job.parallelism());
  if (!plan.ok()) {
    Fail(job, std::string(plan.status().message()));
    return false;
  }
  if (options_.prepare_job) {
    if (absl::Status st = options_.prepare_job(parsed.spec, *plan); !st.ok()) {
      Fail(job, std::string(st.message()));
      return false;
    }
  }
  const int total = plan->total_tasks();
  const int free = slots_.TotalFree();
  if (free < total) {
    const std::string wait = absl::StrCat("waiting for workers: ", total, " tasks, ", free,
                                          " free slots on ", slots_.alive.size(), " live workers");
    if (job.state() == v1::SUBMITTED) {
      if (MoveJob(job, v1::SCHEDULING, wait)) Put(job);
    } else if (job.message() != wait) {
      job.set_message(wait);
      Put(job);
    }
    return false;
  }
  std::vector<std::string> previous;
  for (const v1::TaskStatus& t : job.tasks()) previous.push_back(t.worker());
  const PlacementPolicy& policy = *options_.placement;
  std::vector<std::string> placed = policy.Place(total, previous, slots_);
  if (absl::Status st = CheckPlacement(placed, total, slots_); !st.ok()) {
    Fail(job, absl::StrCat("the ", policy.name(), " placement policy failed: ", st.message()));
    return false;
  }
  if (job.state() == v1::SUBMITTED && !MoveJob(job, v1::SCHEDULING, "")) return false;
  slots_.Take(placed);
  // A new epoch, above every epoch of a job of this name and of every job
  // that wrote one of its outputs: file sinks' fences compare epochs across
  // the jobs that write an output in turn (FileSink).
  int64_t epoch = job.epoch();
  std::set<std::string> outputs;
  for (const JobOutput& o : JobOutputs(parsed.spec)) outputs.insert(o.output);
  for (const v1::Job& j : all) {
    if (j.epoch() <= epoch) continue;
    bool shares = j.name() == job.name();
    if (!shares && !outputs.empty()) {
      ParseResult theirs = ParseJobSpec(j.yaml());
      for (const JobOutput& o : theirs.ok() ? JobOutputs(theirs.spec) : std::vector<JobOutput>()) {
        shares = shares || outputs.count(o.output) > 0;
      }
    }
    if (shares) epoch = j.epoch();
  }
  ++epoch;
  JobRun run;
  run.epoch = epoch;
  run.name = job.name();
  run.yaml = job.yaml();
  run.parallelism = job.parallelism();
  run.restore = job.last_checkpoint();
  run.restore_parallelism =
      job.checkpoint_parallelism() > 0 ? job.checkpoint_parallelism() : job.parallelism();
  // The tasks restore `restore` themselves: none is complete in this run yet.
  run.checkpoint = NewCheckpointCoordinator(parsed.spec, total, /*completed=*/0);
  job.clear_tasks();
  int g = 0;
  for (const StagePlan& st : plan->stages) {
    for (int i = 0; i < st.tasks; ++i, ++g) {
      v1::TaskStatus* ts = job.add_tasks();
      ts->set_stage(st.id);
      ts->set_index(i);
      ts->set_worker(placed[g]);
      ts->set_state(v1::TASK_ASSIGNED);
      TaskSlot slot;
      slot.worker = placed[g];
      slot.stage = st.id;
      slot.index = i;
      run.tasks.push_back(std::move(slot));
    }
  }
  job.set_epoch(epoch);
  job.set_stages(static_cast<int32_t>(plan->stages.size()));
  job.set_exchanges(static_cast<int32_t>(plan->exchanges.size()));
  job.set_message(why);
  Put(job);
  runs_[job.id()] = std::move(run);
  Count("scheduler_epochs_total");
  Log()->info("job {} epoch {}: {} tasks on {}, restoring checkpoint {}{}", job.id(), epoch, total,
              DescribePlacement(placed), job.last_checkpoint(),
              why.empty() ? "" : absl::StrCat(" — ", why));
  return true;
}

void Scheduler::Count(const char* name) {
  if (options_.metrics != nullptr) options_.metrics->Get(name)->Add();
}

CheckpointCoordinator Scheduler::NewCheckpointCoordinator(const JobSpec& spec, int tasks,
                                                          int64_t completed) const {
  CheckpointCoordinatorOptions o;
  o.tasks = tasks;
  o.interval_ms = spec.checkpoint.interval;
  o.timeout_ms = options_.checkpoint_timeout_ms;
  return CheckpointCoordinator(o, completed);
}

void Scheduler::RecoverFromFailure(v1::Job& job, const std::vector<v1::Job>& all,
                                   const std::string& why) {
  Restarts& restarts = restarts_[job.id()];
  const int failures = ++restarts.failures;
  if (options_.max_restarts > 0 && failures > options_.max_restarts) {
    Fail(job, absl::StrCat(why, " (", options_.max_restarts,
                           " restarts without a completed checkpoint)"));
    return;
  }
  if (failures == 1) {
    Recover(job, all, why);
    return;
  }
  int64_t delay = std::max<int64_t>(options_.restart_backoff_ms, 0);
  for (int i = 2; i < failures && delay < options_.max_restart_backoff_ms; ++i) delay *= 2;
  delay = std::min(delay, std::max<int64_t>(options_.max_restart_backoff_ms, 0));
  restarts.not_before_ms = clock_->NowMs() + delay;
  Recover(job, all,
          absl::StrCat(why, " (failure ", failures,
                       " in a row without a completed checkpoint: restarting in ",
                       FormatDuration(delay), ")"));
}

void Scheduler::Recover(v1::Job& job, const std::vector<v1::Job>& all, const std::string& why) {
  Count("scheduler_recoveries_total");
  Log()->warn("job {} epoch {}: {}; restoring checkpoint {} with a new epoch", job.id(),
              job.epoch(), why, job.last_checkpoint());
  Replace(job, all, v1::RECOVERING, why);
}

void Scheduler::Replace(v1::Job& job, const std::vector<v1::Job>& all, v1::JobState from_running,
                        const std::string& why) {
  // The old run's slots are free again for this placement.
  auto it = runs_.find(job.id());
  if (it != runs_.end()) {
    slots_.Release(it->second.Placement());
    runs_.erase(it);
  }
  if (job.state() == v1::RUNNING && !MoveJob(job, from_running, why)) return;
  if (!Place(job, all, why)) Put(job);
}

bool Scheduler::Adopt(const v1::Job& job) {
  if (job.epoch() <= 0 || job.tasks_size() == 0) return false;
  ParseResult parsed = ParseJobSpec(job.yaml());
  if (!parsed.ok()) return false;
  JobRun run;
  run.epoch = job.epoch();
  run.name = job.name();
  run.yaml = job.yaml();
  run.parallelism = job.parallelism();
  run.restore = job.last_checkpoint();
  for (const v1::TaskStatus& t : job.tasks()) {
    if (t.worker().empty()) return false;
    TaskSlot slot;
    slot.worker = t.worker();
    slot.stage = t.stage();
    slot.index = t.index();
    run.tasks.push_back(std::move(slot));
  }
  // The tasks know the job's last checkpoint complete.
  run.checkpoint = NewCheckpointCoordinator(parsed.spec, static_cast<int>(run.tasks.size()),
                                            job.last_checkpoint());
  run.phase = RunPhaseMachine(RunPhase::kAdopting);
  run.adopt_until_ms = clock_->NowMs() + workers_->lease_ms();
  Log()->info("job {} epoch {}: adopting its {} tasks (waiting up to {} ms for their workers)",
              job.id(), run.epoch, run.tasks.size(), workers_->lease_ms());
  runs_[job.id()] = std::move(run);
  return true;
}

bool Scheduler::Resume(v1::Job& job, JobRun& run) {
  const bool all_running = std::all_of(run.tasks.begin(), run.tasks.end(), [](const TaskSlot& t) {
    return AtLeast(t.report, v1::TASK_RUNNING);
  });
  if (!all_running) {
    // Placed but not started: the usual start once every task is READY.
    if (!MoveRun(job, run, RunPhase::kStarting)) return false;
    Log()->info("job {} epoch {}: adopted, not started yet", job.id(), run.epoch);
    return true;
  }
  const int64_t now = clock_->NowMs();
  CheckpointCoordinator& cp = run.checkpoint;
  int64_t stored = 0, stop = 0;
  for (const TaskSlot& t : run.tasks) {
    stored = std::max(stored, t.report.stored_checkpoint());
    stop = std::max(stop, t.report.stop_checkpoint());
  }
  cp.Start(now, std::max(stored, cp.completed()) + 1);
  // A checkpoint some task stored but the old coordinator never completed:
  // trigger it again (tasks that stored it wait for its completion), as the
  // stopping one only if it was triggered so: a periodic checkpoint stored
  // before the input drained does not hold what came after.
  RunPhase phase = RunPhase::kRunning;
  if (stored > cp.completed()) {
    cp.ResumeInFlight(stored, /*stop=*/stop == stored, now);
    if (stop == stored) phase = RunPhase::kStopping;
  } else if (stop > 0 && stop == cp.completed()) {
    // The stopping checkpoint completed but the tasks never heard "finish".
    cp.ResumeFinished();
    phase = RunPhase::kFinishing;
  }
  if (!MoveRun(job, run, phase)) return false;
  if (job.state() != v1::RUNNING && !MoveJob(job, v1::RUNNING, "")) return false;
  job.clear_message();
  Put(job);
  Log()->info("job {} epoch {}: adopted running on its workers (last checkpoint {}{})", job.id(),
              run.epoch, cp.completed(),
              cp.in_flight() > 0 ? absl::StrCat(", completing checkpoint ", cp.in_flight()) : "");
  return true;
}

void Scheduler::Advance(v1::Job& job, JobRun& run, const std::vector<v1::Job>& all) {
  const int64_t now = clock_->NowMs();
  CheckpointCoordinator& cp = run.checkpoint;
  auto all_tasks = [&](auto pred) {
    return std::all_of(run.tasks.begin(), run.tasks.end(),
                       [&](const TaskSlot& t) { return t.reported && pred(t.report); });
  };
  if (run.phase.Is(RunPhase::kAdopting)) {
    if (!all_tasks([](const v1::TaskReport& r) { return AtLeast(r, v1::TASK_PREPARING); })) return;
    if (!Resume(job, run) || run.phase.started()) return;
  }
  if (!run.phase.started()) {
    if (!all_tasks([](const v1::TaskReport& r) { return AtLeast(r, v1::TASK_READY); })) return;
    int64_t next_id = run.restore + 1;
    for (const TaskSlot& t : run.tasks) next_id = std::max(next_id, t.report.next_checkpoint());
    // Never an id an earlier epoch triggered: a paused task of it may still
    // store that checkpoint when it resumes, and must not overwrite ours.
    next_id = std::max(next_id, next_ids_[job.id()]);
    cp.Start(now, next_id);
    if (!MoveRun(job, run, RunPhase::kRunning)) return;
    // An adopted job may be RUNNING already (its tasks were told to start
    // but none reported running yet).
    if (job.state() != v1::RUNNING && !MoveJob(job, v1::RUNNING, "")) return;
    job.clear_message();
    Put(job);
    Log()->info("job {} epoch {} running: every task is ready", job.id(), run.epoch);
    return;
  }
  for (size_t g = 0; g < run.tasks.size(); ++g) {
    const TaskSlot& t = run.tasks[g];
    cp.TaskStored(static_cast<int>(g), t.reported ? t.report.stored_checkpoint() : 0);
    cp.TaskDrained(static_cast<int>(g), t.reported && AtLeast(t.report, v1::TASK_DRAINED));
  }
  // Why this round asked for a stopping checkpoint (for its log line).
  enum class StopFor { kNone, kSavepoint, kHandoff } stop_for = StopFor::kNone;
  for (;;) {
    if (stop_for == StopFor::kNone && cp.in_flight() == 0 && !run.phase.stopping() &&
        cp.checkpoints()) {
      if (!job.savepoint_to().empty()) {
        // The job's last checkpoint, copied to the savepoint once complete.
        stop_for = StopFor::kSavepoint;
        cp.RequestStop();
      } else if (const std::string why = HandoffReason(job, run); !why.empty()) {
        // A rescale, a leaving worker or evening the load out, through a
        // stopping checkpoint.
        stop_for = StopFor::kHandoff;
        run.handoff = why;
        cp.RequestStop();
      }
    }
    const CheckpointAction a = cp.Poll(now);
    if (a.kind == CheckpointAction::kNone) break;
    switch (a.kind) {
      case CheckpointAction::kTrigger:
        // A stopping checkpoint: the job's last (input drained, a
        // savepoint) or a handoff's.
        if (a.stop && !MoveRun(job, run, RunPhase::kStopping)) return;
        next_ids_[job.id()] = cp.next_id();
        if (a.stop && stop_for == StopFor::kSavepoint) {
          Log()->info("job {} epoch {}: stopping at checkpoint {} for a savepoint to {}", job.id(),
                      run.epoch, a.id, job.savepoint_to());
        } else if (a.stop && stop_for == StopFor::kHandoff) {
          Log()->info("job {} epoch {}: {}: stopping at checkpoint {} to move tasks", job.id(),
                      run.epoch, run.handoff, a.id);
        }
        break;
      case CheckpointAction::kComplete: {
        // The commit point: recorded (synced) before any worker hears of it.
        job.set_last_checkpoint(a.id);
        job.set_checkpoint_parallelism(run.parallelism);
        Put(job);
        std::deque<CheckpointRecord>& history = history_[job.id()];
        history.push_back({a.id, now, a.duration_ms, run.epoch, a.stop});
        while (history.size() > kCheckpointHistory) history.pop_front();
        restarts_.erase(job.id());
        Count("scheduler_checkpoints_total");
        Log()->debug("job {} checkpoint {} complete", job.id(), a.id);
        break;
      }
      case CheckpointAction::kFinish:
        // The stopping checkpoint completed (or, without checkpoints, the
        // input drained): the tasks finish, or hand over.
        if (!MoveRun(job, run,
                     run.handoff.empty() ? RunPhase::kFinishing : RunPhase::kHandingOff)) {
          return;
        }
        break;
      case CheckpointAction::kFail:
        RecoverFromFailure(job, all, a.why);
        return;  // the run is gone
      case CheckpointAction::kNone:
        break;
    }
  }
  if (run.phase.Is(RunPhase::kFinishing) &&
      all_tasks([](const v1::TaskReport& r) { return r.phase() == v1::TASK_DONE; })) {
    if (!job.savepoint_to().empty() && job.last_checkpoint() > 0) {
      StartSavepoint(job, run);
      return;
    }
    if (!MoveJob(job, v1::FINISHED, "")) return;
    FillTasks(run, &job);  // the tasks' last reports stay with the job
    Put(job);
    Log()->info("job {} finished (last checkpoint {})", job.id(), job.last_checkpoint());
    runs_.erase(job.id());
    restarts_.erase(job.id());
  }
}

absl::Status Scheduler::AdoptStored() {
  std::lock_guard<std::mutex> lock(mu_);
  ASSIGN_OR_RETURN(std::vector<v1::Job> all, store_->List());
  for (const v1::Job& job : all) {
    if (IsFinal(job.state()) || job.state() == v1::SUBMITTED || Adopt(job)) continue;
    Log()->info("job {}: no placement to adopt; it is placed anew", job.id());
  }
  return absl::OkStatus();
}

void Scheduler::Tick() {
  std::lock_guard<std::mutex> lock(mu_);
  for (const std::string& id : workers_->ExpireSilent()) {
    Log()->warn("worker {} is dead: no heartbeat for {} ms", id, workers_->lease_ms());
  }
  slots_ = ClusterSlots();
  draining_.clear();
  for (const v1::WorkerInfo& w : workers_->List()) {
    if (w.state() != v1::ALIVE) continue;
    slots_.alive.insert(w.id());
    if (w.draining()) {
      draining_.insert(w.id());  // alive, but no placement goes there
      continue;
    }
    slots_.free[w.id()] = w.slots();
  }
  for (const auto& [id, run] : runs_) slots_.Take(run.Placement());
  absl::StatusOr<std::vector<v1::Job>> all = store_->List();
  if (!all.ok()) {
    Log()->error("cannot list jobs: {}", std::string(all.status().message()));
    return;
  }

  for (v1::Job& job : *all) {
    if (auto sp = savepoints_.find(job.id()); sp != savepoints_.end()) {
      if (sp->second.wait_for(std::chrono::seconds(0)) != std::future_status::ready) continue;
      const absl::StatusOr<JobSavepoint> written = sp->second.get();
      savepoints_.erase(sp);
      if (!IsFinal(job.state())) EndSavepoint(job, *all, written);
      continue;
    }
    if (IsFinal(job.state())) continue;
    auto it = runs_.find(job.id());
    if (it == runs_.end()) {
      // New, waiting for slots, or running before this coordinator started.
      Place(job, *all, "");
      continue;
    }
    JobRun& run = it->second;
    std::string lost;
    const bool adopting = run.phase.Is(RunPhase::kAdopting);
    const bool waiting = adopting && clock_->NowMs() < run.adopt_until_ms;
    for (const TaskSlot& t : run.tasks) {
      if (adopting && !waiting && !t.reported) {
        lost = absl::StrCat("task ", &t - run.tasks.data(), " on ", t.worker,
                            " not back after the coordinator restarted");
        break;
      }
      if (!waiting && slots_.alive.count(t.worker) == 0) {
        lost = absl::StrCat("worker ", t.worker, " lost");
        break;
      }
    }
    if (!lost.empty()) {
      Recover(job, *all, lost);
      continue;
    }
    if (!run.checkpoint.checkpoints() && !run.phase.stopping()) {
      // No checkpoint to hand over through: a leaving worker's job restarts.
      if (const std::string leaving = Leaving(run); !leaving.empty()) {
        Recover(job, *all, leaving);
        continue;
      }
    }
    std::string failed;
    bool permanent = false;
    for (size_t g = 0; g < run.tasks.size(); ++g) {
      const TaskSlot& t = run.tasks[g];
      if (!t.reported || t.report.phase() != v1::TASK_FAILED) continue;
      // The task that failed first, not those it stopped.
      if (failed.empty() || t.report.error().find("another task") == std::string::npos) {
        failed = absl::StrCat("task ", g, " on ", t.worker, " failed: ", t.report.error());
        permanent = t.report.permanent();
      }
    }
    if (!failed.empty() && permanent) {
      // It would fail the same way on every restart.
      Fail(job, absl::StrCat(failed,
                             " (a restart would fail the same way: fix it, then `caravela restart ",
                             job.id(), "`)"));
      continue;
    }
    if (!failed.empty()) {
      RecoverFromFailure(job, *all, failed);
      continue;
    }
    Advance(job, run, *all);
    auto again = runs_.find(job.id());
    if (again != runs_.end() && again->second.phase.Is(RunPhase::kHandingOff)) {
      const std::string why = again->second.handoff;
      if (job.rescale_to() > 0) {
        job.set_parallelism(job.rescale_to());
        job.set_rescale_to(0);
      }
      Replace(job, *all, v1::SCHEDULING, why);
    }
  }
}

std::string Scheduler::HandoffReason(const v1::Job& job, const JobRun& run) const {
  if (job.rescale_to() > 0) {
    return absl::StrCat("rescale from ", run.parallelism, " to ", job.rescale_to(),
                        " tasks per stage");
  }
  if (std::string leaving = Leaving(run); !leaving.empty()) return leaving;
  // Judged by the policy that placed the job, so a fresh placement stays.
  const PlacementPolicy& policy = *options_.placement;
  const ImbalanceScore off = policy.Imbalance(run.Placement(), slots_);
  if (off.balanced()) return "";
  return off.reason.empty() ? absl::StrCat("rebalancing (", policy.name(), " placement)")
                            : off.reason;
}

std::string Scheduler::Leaving(const JobRun& run) const {
  for (const TaskSlot& t : run.tasks) {
    if (draining_.count(t.worker) > 0) return absl::StrCat("worker ", t.worker, " is leaving");
  }
  return "";
}

void Scheduler::OnHeartbeat(const v1::HeartbeatRequest& request, v1::HeartbeatResponse* response) {
  std::lock_guard<std::mutex> lock(mu_);
  const std::string& worker = request.worker_id();
  for (const v1::TaskReport& r : request.tasks()) {
    auto it = runs_.find(r.job_id());
    if (it == runs_.end() || it->second.epoch != r.epoch()) continue;
    if (r.task() < 0 || r.task() >= static_cast<int>(it->second.tasks.size())) continue;
    TaskSlot& slot = it->second.tasks[r.task()];
    if (slot.worker != worker) continue;
    slot.report = r;
    slot.reported = true;
    slot.reported_at_ms = clock_->NowMs();
  }
  // The job's YAML only goes to a worker that does not run the epoch yet
  // (it reported none of its tasks): it is what most of an answer weighs.
  std::set<std::pair<std::string, int64_t>> running;
  for (const v1::TaskReport& r : request.tasks()) running.emplace(r.job_id(), r.epoch());
  std::map<std::string, std::string> addresses;  // worker id -> gRPC address, when needed
  for (const auto& [id, run] : runs_) {
    v1::Assignment* a = nullptr;
    for (size_t g = 0; g < run.tasks.size(); ++g) {
      if (run.tasks[g].worker != worker) continue;
      if (a == nullptr) {
        a = response->add_assignments();
        // Where every task of the epoch runs: the network exchange streams there.
        if (addresses.empty()) {
          for (const v1::WorkerInfo& w : workers_->List()) addresses[w.id()] = w.address();
        }
        for (const TaskSlot& t : run.tasks) {
          auto at = addresses.find(t.worker);
          a->add_task_addresses(at != addresses.end() ? at->second : std::string());
        }
        a->set_job_id(id);
        a->set_job_name(run.name);
        a->set_epoch(run.epoch);
        if (running.count({id, run.epoch}) == 0) a->set_yaml(run.yaml);
        a->set_parallelism(run.parallelism);
        a->set_restore_checkpoint(run.restore);
        if (run.restore > 0 && run.restore_parallelism != run.parallelism) {
          a->set_restore_parallelism(run.restore_parallelism);
        }
        a->set_checkpoint_storage(options_.checkpoint_storage);
        const CheckpointCoordinator& cp = run.checkpoint;
        a->set_start(run.phase.started());
        a->set_trigger_checkpoint(cp.in_flight() > 0 ? cp.in_flight() : cp.completed());
        a->set_stop_at_trigger(run.StopAtTrigger());
        a->set_completed_checkpoint(cp.completed());
        a->set_finish(run.phase.Is(RunPhase::kFinishing));
      }
      a->add_tasks(static_cast<int32_t>(g));
    }
  }
}

std::vector<Scheduler::CheckpointRecord> Scheduler::CheckpointHistory(
    const std::string& job_id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = history_.find(job_id);
  if (it == history_.end()) return {};
  return std::vector<CheckpointRecord>(it->second.rbegin(), it->second.rend());
}

void Scheduler::FillLive(v1::Job* job) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = runs_.find(job->id());
  if (it == runs_.end()) return;
  FillTasks(it->second, job);
  // How fresh each task's state is: a worker that stopped heartbeating
  // (killed, cut off) shows its tasks' last state with a growing age until
  // its lease ends and the job recovers.
  const int64_t now = clock_->NowMs();
  for (int g = 0; g < job->tasks_size() && g < static_cast<int>(it->second.tasks.size()); ++g) {
    const TaskSlot& t = it->second.tasks[g];
    if (t.reported)
      job->mutable_tasks(g)->set_report_age_ms(std::max<int64_t>(0, now - t.reported_at_ms));
  }
}

void Scheduler::FillTasks(const JobRun& run, v1::Job* job) {
  for (int g = 0; g < job->tasks_size() && g < static_cast<int>(run.tasks.size()); ++g) {
    const TaskSlot& t = run.tasks[g];
    v1::TaskStatus* ts = job->mutable_tasks(g);
    ts->set_worker(t.worker);
    if (!t.reported) continue;
    ts->set_state(t.report.phase());
    ts->set_watermark_ms(t.report.watermark_ms());
    ts->set_consumer_lag(t.report.consumer_lag());
    ts->set_last_checkpoint(t.report.stored_checkpoint());
    ts->set_records_in(t.report.records_in());
    ts->set_records_out(t.report.records_out());
    ts->set_error(t.report.error());
    ts->set_state_bytes(t.report.state_bytes());
    *ts->mutable_activity() = t.report.activity();
    ts->clear_partitions();
    ts->clear_sources();
    for (const v1::SourcePartitionStatus& p : t.report.partitions()) {
      ts->add_partitions(p.partition());
      *ts->add_sources() = p;
    }
  }
}

}  // namespace caravela
