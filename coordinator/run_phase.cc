#include "coordinator/run_phase.h"

#include <string>

#include "absl/strings/str_cat.h"

namespace caravela {

const char* RunPhaseName(RunPhase phase) {
  switch (phase) {
    case RunPhase::kAdopting:
      return "adopting";
    case RunPhase::kStarting:
      return "starting";
    case RunPhase::kRunning:
      return "running";
    case RunPhase::kStopping:
      return "stopping";
    case RunPhase::kFinishing:
      return "finishing";
    case RunPhase::kHandingOff:
      return "handing off";
  }
  return "unknown";
}

bool CanEnter(RunPhase from, RunPhase to) {
  switch (from) {
    case RunPhase::kAdopting:
      // Resumed where the tasks' reports say the old coordinator was.
      return to == RunPhase::kStarting || to == RunPhase::kRunning || to == RunPhase::kStopping ||
             to == RunPhase::kFinishing;
    case RunPhase::kStarting:
      return to == RunPhase::kRunning;
    case RunPhase::kRunning:
      // A stopping checkpoint; or, without checkpoints, drained input.
      return to == RunPhase::kStopping || to == RunPhase::kFinishing;
    case RunPhase::kStopping:
      return to == RunPhase::kFinishing || to == RunPhase::kHandingOff;
    case RunPhase::kFinishing:
    case RunPhase::kHandingOff:
      return false;  // the run ends
  }
  return false;
}

bool RunPhaseMachine::started() const {
  return phase_ != RunPhase::kAdopting && phase_ != RunPhase::kStarting;
}

bool RunPhaseMachine::stopping() const {
  return phase_ == RunPhase::kStopping || phase_ == RunPhase::kFinishing ||
         phase_ == RunPhase::kHandingOff;
}

absl::Status RunPhaseMachine::Enter(RunPhase to) {
  if (!CanEnter(phase_, to)) {
    return absl::FailedPreconditionError(
        absl::StrCat("a run that is ", RunPhaseName(phase_), " cannot go to ", RunPhaseName(to)));
  }
  phase_ = to;
  return absl::OkStatus();
}

}  // namespace caravela
