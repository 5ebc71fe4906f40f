// The phases of one run of a job (one epoch of its placement) as the
// Scheduler drives it, in one place. The job state machine (job_state.h) is
// what users see and the store keeps; a run's phase is the scheduler's own,
// kept in memory, and says what it waits for next:
//
//   kAdopting -> kStarting, kRunning,  resumed where the tasks' reports
//                kStopping, kFinishing  say the old coordinator was
//   kStarting -> kRunning               every task is READY
//   kRunning  -> kStopping              a stopping checkpoint is triggered
//   kRunning  -> kFinishing             input drained, no checkpoints
//   kStopping -> kFinishing             the job's last checkpoint completed
//   kStopping -> kHandingOff            a handoff's checkpoint completed
//
//  * kAdopting: placed by an earlier coordinator; waiting (up to one lease)
//    for every task to report itself in the run's epoch.
//  * kStarting: placed; waiting for every task to be READY (its exchange
//    readers open). Nothing of the epoch is written before it starts.
//  * kRunning: started; periodic checkpoints are triggered and complete.
//  * kStopping: the checkpoint in flight stops the tasks: the job's last
//    one (bounded input drained, or a savepoint), or a handoff's (a
//    rebalance, a leaving worker, a rescale). No further checkpoint is
//    triggered.
//  * kFinishing: the tasks were told to finish (the stopping checkpoint
//    completed, or the input drained in a job without checkpoints);
//    waiting for every task to return, then FINISHED (or a savepoint).
//  * kHandingOff: a handoff's stopping checkpoint completed; the job is
//    placed again from it (a new run).
//
// An adopted run resumes in the phase its tasks' reports show (kStarting
// if not all of them run yet). kFinishing and kHandingOff end the run: the
// scheduler drops it, so they have no way out.
#pragma once

#include "common/status.h"

namespace caravela {

enum class RunPhase {
  kAdopting,
  kStarting,
  kRunning,
  kStopping,
  kFinishing,
  kHandingOff,
};

// "running", "handing off", ...
const char* RunPhaseName(RunPhase phase);
// Whether a run may go from `from` to `to` (the arrows above; a phase never
// goes to itself).
bool CanEnter(RunPhase from, RunPhase to);

// A run's phase. It changes only through Enter, along the arrows above.
class RunPhaseMachine {
 public:
  RunPhaseMachine() = default;  // kStarting: a run placed by this coordinator
  explicit RunPhaseMachine(RunPhase initial) : phase_(initial) {}

  RunPhase current() const { return phase_; }
  bool Is(RunPhase phase) const { return phase_ == phase; }
  // The tasks were told to start (kRunning and every phase after it).
  bool started() const;
  // No further checkpoint is triggered: the run is stopping or ending
  // (kStopping, kFinishing, kHandingOff).
  bool stopping() const;

  // Moves to `to`, or FailedPrecondition naming both phases (the phase is
  // unchanged).
  [[nodiscard]] absl::Status Enter(RunPhase to);

 private:
  RunPhase phase_ = RunPhase::kStarting;
};

}  // namespace caravela
