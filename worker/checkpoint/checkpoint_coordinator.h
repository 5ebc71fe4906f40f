// CheckpointCoordinator: the job-wide checkpoint protocol (SPEC §8
// "Checkpoints are job-wide") as one pure state machine: no I/O, no
// threads, no clock (time comes in as `now_ms`, any monotonic millisecond
// clock of the caller's). It decides when checkpoint n is triggered, when it
// is complete, when the job finishes and when a checkpoint took too long;
// its driver does the rest (tells the tasks, writes the commit point, logs,
// counts). Three drivers, the same rules:
//   * TaskCheckpointer::Drive (worker/runtime/task_checkpointer.cc): a job
//     that runs as one task; the commit point is the task's manifest.
//   * JobRunner::Run (worker/runtime/job_runner.cc): the tasks of one
//     process, through JobCheckpoints; the commit point is the job's record
//     `<job>/job-checkpoint`.
//   * Scheduler (coordinator/scheduler.cc): one coordinator per run (epoch)
//     of a cluster job, fed from the tasks' heartbeat reports; the commit
//     point is the job store.
//
// The rules:
//   * Checkpoint ids grow; the first is Start's `next_id` (the caller puts it
//     above every id any task used, so an id is never reused), each trigger
//     takes the next one.
//   * At most one checkpoint is in flight: the next is triggered only once
//     the previous one completed.
//   * A checkpoint is triggered `interval_ms` after the previous trigger (or
//     after Start), at once when every task drained its input or a stop was
//     requested. Those two make it a *stopping* checkpoint: the job's last.
//   * Checkpoint n is complete when every task stored n (TaskStored >= n).
//   * After a stopping checkpoint completed the job finishes; a job without
//     checkpoints (interval_ms <= 0) finishes when every task drained or a
//     stop was requested. Nothing is triggered after that.
//   * A checkpoint in flight for more than `timeout_ms` fails the job (the
//     driver restarts or fails it); the coordinator does nothing after that.
//
// Threading: none; one owner calls it (the caller's lock or thread).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace caravela {

// How long a job-wide checkpoint may be in flight, in JobRunner and by
// default in the Scheduler: a task that never stores it (stuck, or waiting
// for a barrier that never comes) must not hold the job forever.
constexpr int64_t kCheckpointTimeoutMs = 10 * 60 * 1000;

struct CheckpointCoordinatorOptions {
  int tasks = 1;  // the job's tasks, numbered 0..tasks-1
  // spec.checkpoint.interval; <= 0: the job takes no checkpoints.
  int64_t interval_ms = 0;
  // How long a checkpoint may be in flight before kFail; <= 0: forever.
  int64_t timeout_ms = 0;
};

// What the driver does next (one per Poll).
struct CheckpointAction {
  enum Kind {
    kNone,      // nothing to do now
    kTrigger,   // tell the tasks to take checkpoint `id` (`stop`: the job's last)
    kComplete,  // every task stored `id`: write the commit point, tell the tasks
    kFinish,    // tell the tasks to finish (`id`: the last complete checkpoint, 0: none)
    kFail,      // checkpoint `id` timed out (`why`): restart or fail the job
  };
  Kind kind = kNone;
  int64_t id = 0;
  // kTrigger, kComplete: the checkpoint stops the tasks (the job's last).
  bool stop = false;
  // kComplete, kFail: how long `id` was in flight.
  int64_t duration_ms = 0;
  std::string why;  // kFail
};

// "trigger", "complete", ...
const char* CheckpointActionName(CheckpointAction::Kind kind);

class CheckpointCoordinator {
 public:
  // `completed`: the last checkpoint the tasks know complete when the driver
  // takes the job over (the scheduler adopting an earlier coordinator's
  // run); 0 for a new run, whose tasks restore their checkpoint themselves.
  explicit CheckpointCoordinator(CheckpointCoordinatorOptions options = {}, int64_t completed = 0);

  // ---- starting (once, before the first Poll that may act)
  // The tasks run: the first checkpoint is `next_id`, triggered `interval_ms`
  // after `now_ms` (or as soon as the rules above say).
  void Start(int64_t now_ms, int64_t next_id);
  // After Start: a driver that took over a running job whose checkpoint `id`
  // some task had stored but nobody completed: it is in flight again (since
  // `now_ms`; `stop`: as the stopping checkpoint), and the ids go on above it.
  void ResumeInFlight(int64_t id, bool stop, int64_t now_ms);
  // After Start: the job's stopping checkpoint (completed()) completed and
  // the tasks are told to finish: nothing more to trigger (Poll: kNone).
  void ResumeFinished();

  // ---- what the tasks say (any time; the latest report wins)
  // The last checkpoint task `task` stored.
  void TaskStored(int task, int64_t id);
  // Whether task `task` read all its input and propagated it.
  void TaskDrained(int task, bool drained = true);
  // Makes the next checkpoint a stopping one, triggered as soon as none is
  // in flight (a stop, a savepoint, a handoff); without checkpoints the job
  // finishes. Cannot be taken back.
  void RequestStop();

  // The next action at `now_ms`, the state already moved past it (a driver
  // that cannot carry it out fails the job). Call it until kNone to do
  // everything due now: a checkpoint completes before the next is triggered.
  CheckpointAction Poll(int64_t now_ms);

  // ---- state
  const CheckpointCoordinatorOptions& options() const { return options_; }
  bool checkpoints() const { return options_.interval_ms > 0; }
  bool started() const { return started_; }
  // The checkpoint triggered and not complete yet (0: none).
  int64_t in_flight() const { return in_flight_; }
  // Whether in_flight() stops the tasks.
  bool in_flight_stops() const { return in_flight_ > 0 && in_flight_stop_; }
  // The last complete checkpoint (0: none since the driver took over).
  int64_t completed() const { return completed_; }
  // The id the next trigger takes.
  int64_t next_id() const { return next_id_; }
  // No further checkpoint will be triggered: a stopping one was triggered,
  // or the job was told to finish.
  bool finishing() const { return stopping_ || finished_; }
  // kFinish was returned (or ResumeFinished called).
  bool finished() const { return finished_; }
  // kFail was returned.
  bool failed() const { return failed_; }

 private:
  bool AllStored(int64_t id) const;
  bool AllDrained() const;

  CheckpointCoordinatorOptions options_;
  std::vector<int64_t> stored_;  // by task
  std::vector<bool> drained_;    // by task
  bool started_ = false;
  int64_t next_id_ = 1;
  int64_t next_trigger_at_ms_ = 0;
  int64_t in_flight_ = 0;
  bool in_flight_stop_ = false;
  int64_t in_flight_since_ms_ = 0;
  int64_t completed_ = 0;
  bool stop_requested_ = false;
  bool stopping_ = false;  // the stopping checkpoint was triggered
  bool finished_ = false;
  bool failed_ = false;
};

}  // namespace caravela
