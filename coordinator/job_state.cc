#include "coordinator/job_state.h"

#include "absl/strings/str_cat.h"

namespace caravela {

bool IsFinal(JobState s) { return s == v1::FINISHED || s == v1::CANCELED || s == v1::FAILED; }

bool CanTransition(JobState from, JobState to) {
  if (from == to || IsFinal(from) || from == v1::JOB_STATE_UNSPECIFIED) return false;
  if (IsFinal(to)) return true;
  switch (from) {
    case v1::SUBMITTED:
      return to == v1::SCHEDULING;
    case v1::SCHEDULING:
      return to == v1::RUNNING;
    case v1::RUNNING:
      return to == v1::RECOVERING || to == v1::SCHEDULING;  // rebalance
    case v1::RECOVERING:
      return to == v1::RUNNING || to == v1::SCHEDULING;
    default:
      return false;
  }
}

std::string JobStateName(JobState s) { return v1::JobState_Name(s); }

absl::Status Reopen(v1::Job& job, int64_t now_ms, const std::string& message) {
  if (job.state() != v1::FAILED && job.state() != v1::CANCELED) {
    return absl::FailedPreconditionError(absl::StrCat(
        "job ", job.id(), " is ", JobStateName(job.state()),
        ": only a FAILED or CANCELED job can be restarted",
        job.state() == v1::FINISHED ? " (a FINISHED one read all its input: submit it again)"
                                    : " (cancel it first)"));
  }
  job.set_state(v1::SUBMITTED);
  job.set_updated_at_ms(now_ms);
  job.set_message(message);
  return absl::OkStatus();
}

absl::Status Transition(v1::Job& job, JobState to, int64_t now_ms, const std::string& message) {
  if (!CanTransition(job.state(), to)) {
    return absl::FailedPreconditionError(absl::StrCat("job ", job.id(), " is ",
                                                      JobStateName(job.state()),
                                                      ": it cannot go to ", JobStateName(to)));
  }
  job.set_state(to);
  job.set_updated_at_ms(now_ms);
  if (!message.empty()) job.set_message(message);
  return absl::OkStatus();
}

}  // namespace caravela
