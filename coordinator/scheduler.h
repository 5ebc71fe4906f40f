// Scheduler: the coordinator's side of running jobs (SPEC §8 "Services"), in
// one place: it moves jobs through the state machine (job_state.h) after
// SUBMITTED, places their tasks on workers and coordinates each job's
// checkpoints, as JobRunner does for the tasks of one process.
//
//  * Placement: every task of a job's plan gets a slot on an ALIVE worker,
//    where the placement policy says (placement_policy.h; the default
//    SpreadPolicy is balanced and sticky: a task stays on its worker across
//    epochs while that worker lives and has room). A job waits in
//    SCHEDULING while the workers lack slots. The same policy scores a
//    running job's placement; a score above 0 moves the job (a rebalance,
//    through a stopping checkpoint).
//  * Epochs: each placement is a new epoch of the job (above every epoch any
//    job of the same name had: they share exchange topics), restoring the
//    job's last complete checkpoint. Workers run exactly what the latest
//    heartbeat answer assigns them (worker.proto Assignment).
//  * Start: once every task of the epoch reports READY (its exchange readers
//    are open), the epoch starts (RUNNING).
//  * Checkpoints: every spec.checkpoint.interval the scheduler triggers
//    checkpoint n; when every task reported n stored, n is recorded in the
//    job store (synced: the commit point) and announced complete, and sinks
//    publish it. When every task drained its bounded input, the last
//    checkpoint stops the job; FINISHED once every task returned. The rules
//    are the CheckpointCoordinator's (worker/checkpoint/
//    checkpoint_coordinator.h, one per run, fed with the task reports), as
//    in JobRunner; a checkpoint in flight longer than
//    `checkpoint_timeout_ms` is a failure of the run, as a failed task is.
//  * Recovery: a dead worker holding tasks of the job, or a failed task,
//    starts a new epoch from the last complete checkpoint (RECOVERING, then
//    RUNNING). The first failure after a completed checkpoint restarts at
//    once; each further one in a row waits twice as long as the one before
//    (`restart_backoff_ms`, up to `max_restart_backoff_ms`), so a sink or
//    broker down for a while costs a few restarts, not the job. With
//    `max_restarts` > 0 the job is FAILED after that many in a row. A
//    failure a restart would repeat (TaskReport.permanent) fails it at once.
//  * Draining: a worker that is leaving (SIGTERM) gets no new tasks, and
//    each job with tasks on it hands them over through a stopping
//    checkpoint, as for a rebalance (without checkpoints: a restart).
//  * Savepoints: StopWithSavepoint makes the next checkpoint the job's
//    last (sinks publish it, tasks return); it is then copied to the
//    savepoint directory on a thread of its own, and the job is FINISHED
//    once the copy is written (or placed again if it cannot be).
//  * Coordinator restart: workers register again under their previous ids
//    (worker_registry.h) and keep running; the scheduler adopts each job's
//    stored placement and epoch, waiting up to one lease for every task to
//    report itself in that epoch, then goes on where the old run was
//    (re-triggering a checkpoint some tasks had already stored). A job whose
//    tasks do not all come back in time restarts with a new epoch.
//
// Each placement is a run of the job, whose phase (run_phase.h: adopting,
// starting, running, stopping, finishing, handing off) says what the
// scheduler waits for next; its moves are declared in one table.
//
// Threading: thread-safe; Tick() runs on the coordinator's thread, the
// other calls on gRPC threads.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "caravela/v1/job.pb.h"
#include "caravela/v1/worker.pb.h"
#include "common/job_plan.h"
#include "common/job_spec.h"
#include "common/metrics.h"
#include "common/status.h"
#include "common/time_util.h"
#include "coordinator/job_store.h"
#include "coordinator/placement_policy.h"
#include "coordinator/run_phase.h"
#include "coordinator/worker_registry.h"
#include "worker/checkpoint/checkpoint_coordinator.h"
#include "worker/checkpoint/job_savepoint.h"

namespace caravela {

struct SchedulerOptions {
  // Checkpoint storage URL (shared by every worker) for jobs naming none.
  std::string checkpoint_storage;
  // Restarts in a row, without a checkpoint completing between them, before
  // a job is FAILED; 0: no limit (the delays below keep a failing job cheap).
  int max_restarts = 0;
  // The delay before the second restart in a row; it doubles with each one
  // after, up to `max_restart_backoff_ms` (the first restart is at once).
  int64_t restart_backoff_ms = 1000;
  int64_t max_restart_backoff_ms = 60000;
  // Called at each placement before workers hear of it, e.g. to create the
  // job's exchange topics where workers cannot (`caravela local`: its
  // embedded broker serves no CreateTopics to other processes). An error
  // fails the job. Null: the workers create the topics.
  std::function<absl::Status(const JobSpec&, const JobPlan&)> prepare_job;
  // Writes a savepoint of a job's complete checkpoint to a directory, on a
  // thread of the scheduler's own. Null: WriteJobSavepoint.
  std::function<absl::StatusOr<JobSavepoint>(const JobCheckpointRef&, const std::string& dir)>
      write_savepoint;
  // Counters (scheduler_epochs_total, scheduler_recoveries_total,
  // scheduler_checkpoints_total); may be null.
  MetricsRegistry* metrics = nullptr;
  // Where tasks go and when a running job moves (placement_policy.h).
  // Null: SpreadPolicy.
  std::shared_ptr<const PlacementPolicy> placement;
  // How long a checkpoint may be in flight before the run restarts (a
  // failure: it counts toward max_restarts); <= 0: forever.
  int64_t checkpoint_timeout_ms = kCheckpointTimeoutMs;
};

class Scheduler {
 public:
  Scheduler(JobStore* store, WorkerRegistry* workers, const Clock* clock, SchedulerOptions options);

  // Stores a new job (SUBMITTED); FailedPrecondition, with the errors of
  // CheckAdmission, if it may not run.
  absl::Status Submit(const v1::Job& job);
  // Why `job` may not run beside the jobs that have not ended, one error per
  // reason with its YAML path: a job of the same name (they would share
  // exchange topics, at metadata.name), or one writing an output of it
  // (common/job_outputs.h, at the sink). Empty: it may.
  std::vector<SpecError> CheckAdmission(const v1::Job& job) const;
  // CANCELED (FailedPrecondition for a job that ended); its workers stop its
  // tasks at their next heartbeat.
  absl::StatusOr<v1::Job> Cancel(const std::string& job_id, const std::string& message);
  // Moves a RUNNING job to `parallelism` tasks per stage: it stops at a
  // checkpoint and is placed again, each new task gathering its keys from
  // the old tasks' state (worker/runtime/task_rescale.cc).
  // FailedPrecondition for a job that is not running, has no checkpoints or
  // cannot be planned with that parallelism.
  absl::StatusOr<v1::Job> Rescale(const std::string& job_id, int parallelism);
  // Starts a FAILED or CANCELED job again from its last complete checkpoint
  // (or from the beginning without one) with `parallelism` tasks per stage
  // (0: the job's); placed at the next round with a new epoch.
  absl::StatusOr<v1::Job> Restart(const std::string& job_id, int parallelism);
  // Stops a RUNNING job with a savepoint in `dir` (absolute; the caller
  // checked it is allowed): Job.savepoint_to is set at once; see the class
  // comment. FailedPrecondition for a job that is not running, has no
  // checkpoints, or is being rescaled or saved already.
  absl::StatusOr<v1::Job> StopWithSavepoint(const std::string& job_id, const std::string& dir);
  // The checkpoint storage URL of a job with this spec (its own, else the
  // scheduler's default).
  std::string CheckpointStorageFor(const JobSpec& spec) const;
  // Adopts the jobs an earlier coordinator placed (call once, before serving
  // heartbeats: an answer without them would stop their tasks).
  absl::Status AdoptStored();
  // One round of the rules above; the coordinator calls it every ~50 ms.
  void Tick();
  // Takes the worker's task reports and answers its assignments.
  void OnHeartbeat(const v1::HeartbeatRequest& request, v1::HeartbeatResponse* response);
  // Fills the live part of `job` (per task: worker, phase, watermark, ...).
  void FillLive(v1::Job* job) const;
  // The job's last completed checkpoints (newest first; at most
  // kCheckpointHistory, kept in memory since this coordinator started):
  // id, when it completed, how long from trigger to completion, the epoch,
  // and whether it stopped the tasks (the job's last, a handoff).
  struct CheckpointRecord {
    int64_t id = 0;
    int64_t completed_at_ms = 0;
    int64_t duration_ms = 0;
    int64_t epoch = 0;
    bool stopping = false;
  };
  static constexpr size_t kCheckpointHistory = 50;
  std::vector<CheckpointRecord> CheckpointHistory(const std::string& job_id) const;

 private:
  struct TaskSlot {
    std::string worker;
    int stage = 0;
    int index = 0;
    bool reported = false;
    v1::TaskReport report;
    int64_t reported_at_ms = 0;  // when `report` came (the clock's time)
  };
  // One epoch of a job's placement; what it waits for is its phase
  // (run_phase.h), which changes only through MoveRun.
  struct JobRun {
    RunPhaseMachine phase;
    int64_t epoch = 0;
    std::string name;  // the job's metadata.name
    std::string yaml;
    int parallelism = 1;
    int64_t restore = 0;
    int restore_parallelism = 0;  // the parallelism `restore` was taken with
    std::vector<TaskSlot> tasks;
    // The run's checkpoints (job-wide ids, 0: none): created with the run,
    // started when it starts (or resumes), fed the task reports by Advance.
    CheckpointCoordinator checkpoint;
    // Why the stopping checkpoint stops the tasks so that the job is placed
    // again from it (a handoff: a rebalance, a leaving worker, a rescale);
    // "" when it stops them to end the job.
    std::string handoff;
    // kAdopting: until when its tasks may report back in this epoch.
    int64_t adopt_until_ms = 0;

    // The worker of each task.
    std::vector<std::string> Placement() const {
      std::vector<std::string> placement;
      for (const TaskSlot& t : tasks) placement.push_back(t.worker);
      return placement;
    }
    // Whether the checkpoint the tasks are told about (in flight, else the
    // last complete one) stops them: once the run stops, its last trigger
    // is the stopping checkpoint. A run without checkpoints never triggers
    // one, even when it finishes.
    bool StopAtTrigger() const { return phase.stopping() && checkpoint.checkpoints(); }
  };

  std::vector<SpecError> CheckAdmissionLocked(const v1::Job& job) const;
  // Places the job's tasks for a new epoch with the placement policy
  // (false: not enough slots, or the job failed).
  bool Place(v1::Job& job, const std::vector<v1::Job>& all, const std::string& why);
  void Recover(v1::Job& job, const std::vector<v1::Job>& all, const std::string& why);
  // A failure of the run (a failed task, a checkpoint timed out): Recover
  // (after the backoff delay), or FAILED after max_restarts in a row
  // without a completed checkpoint.
  void RecoverFromFailure(v1::Job& job, const std::vector<v1::Job>& all, const std::string& why);
  // Ends the job's run (its slots free again) and places it anew: a RUNNING
  // job goes to `from_running` first (RECOVERING after a loss, SCHEDULING
  // for a rebalance).
  void Replace(v1::Job& job, const std::vector<v1::Job>& all, v1::JobState from_running,
               const std::string& why);
  // Rebuilds the run of a job placed by an earlier coordinator (false if it
  // has no placement to adopt).
  bool Adopt(const v1::Job& job);
  // Why the job's tasks should move through a stopping checkpoint ("" if
  // not): a rescale, a leaving worker, or the placement policy scoring the
  // run's placement above 0.
  std::string HandoffReason(const v1::Job& job, const JobRun& run) const;
  // "worker X is leaving" if the run has a task on a draining worker.
  std::string Leaving(const JobRun& run) const;
  // An adopted run whose tasks all reported: resume its checkpoints. False
  // if the job failed (its run is gone).
  bool Resume(v1::Job& job, JobRun& run);
  // Starts the run once its tasks are ready, drives its checkpoints and
  // ends it when its tasks returned. The run may be gone afterwards (ended,
  // failed, or restarted after a checkpoint timed out).
  void Advance(v1::Job& job, JobRun& run, const std::vector<v1::Job>& all);
  // The checkpoint coordinator of a run of `tasks` tasks of a job with this
  // spec; `completed`: the last checkpoint its tasks know complete.
  CheckpointCoordinator NewCheckpointCoordinator(const JobSpec& spec, int tasks,
                                                 int64_t completed) const;
  // Moves the job through its state machine (job_state.h), or the run to
  // its next phase (run_phase.h). Every caller checked the state first, so
  // a refusal is a bug in the scheduler: it is logged and the job FAILED
  // with it (its run dropped: the caller returns at once). True if moved.
  bool MoveJob(v1::Job& job, v1::JobState to, const std::string& message);
  bool MoveRun(v1::Job& job, JobRun& run, RunPhase to);
  void Fail(v1::Job& job, const std::string& why);
  // The run ended at its last checkpoint for a savepoint: copies it on a
  // thread; Tick() ends the job when the copy is written.
  void StartSavepoint(v1::Job& job, const JobRun& run);
  void EndSavepoint(v1::Job& job, const std::vector<v1::Job>& all,
                    const absl::StatusOr<JobSavepoint>& written);
  // The run's task reports into job->tasks (worker, phase, watermark, ...).
  static void FillTasks(const JobRun& run, v1::Job* job);
  void Put(const v1::Job& job);
  void Count(const char* name);

  JobStore* store_;
  WorkerRegistry* workers_;
  const Clock* clock_;
  SchedulerOptions options_;
  mutable std::mutex mu_;
  std::map<std::string, JobRun> runs_;  // by job id
  // Failures in a row since the last completed checkpoint, and when the
  // restart after the last one may be placed (RecoverFromFailure).
  struct Restarts {
    int failures = 0;
    int64_t not_before_ms = 0;
  };
  std::map<std::string, Restarts> restarts_;  // by job id
  std::map<std::string, int64_t> next_ids_;   // by job id: above every checkpoint id triggered
  std::map<std::string, std::deque<CheckpointRecord>> history_;  // by job id, oldest first
  // Savepoints being written, by job id (their jobs have no run meanwhile).
  std::map<std::string, std::future<absl::StatusOr<JobSavepoint>>> savepoints_;
  ClusterSlots slots_;              // this round's ALIVE workers and free slots
  std::set<std::string> draining_;  // ALIVE workers leaving: no new tasks
};

}  // namespace caravela
