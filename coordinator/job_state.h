// The job state machine (SPEC §8), in one place:
//
//   SUBMITTED --> SCHEDULING --> RUNNING <--> RECOVERING
//       |             |             |             |
//       +-------------+------+------+-------------+
//                            v
//                FINISHED | CANCELED | FAILED      (final)
//
// SUBMITTED: stored, waiting for workers. SCHEDULING: tasks being assigned.
// RUNNING: every task runs. RECOVERING: a task or worker was lost; the job
// restores its last complete checkpoint with a new epoch. FINISHED: bounded
// input drained; CANCELED: by a user; FAILED: an error the job cannot
// recover from (its message says which).
#pragma once

#include <string>

#include "caravela/v1/job.pb.h"
#include "common/status.h"

namespace caravela {

using JobState = ::caravela::v1::JobState;

bool IsFinal(JobState s);
// Whether `from` may go to `to` (the arrows above; a state never goes to
// itself).
bool CanTransition(JobState from, JobState to);
// "RUNNING", ...
std::string JobStateName(JobState s);
// Moves `job` to `to` (stamping updated_at_ms = now_ms), or
// FailedPrecondition naming both states (the job unchanged). Callers check
// the result: the Scheduler fails a job whose move is refused (a bug).
[[nodiscard]] absl::Status Transition(::caravela::v1::Job& job, JobState to, int64_t now_ms,
                                      const std::string& message = "");
// A FAILED or CANCELED job starts again (`caravela restart`): SUBMITTED,
// with `message`. FailedPrecondition for a job in any other state.
[[nodiscard]] absl::Status Reopen(::caravela::v1::Job& job, int64_t now_ms,
                                  const std::string& message);

}  // namespace caravela
