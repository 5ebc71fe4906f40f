#include "worker/checkpoint/checkpoint_coordinator.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/time_util.h"

namespace caravela {

const char* CheckpointActionName(CheckpointAction::Kind kind) {
  switch (kind) {
    case CheckpointAction::kNone:
      return "none";
    case CheckpointAction::kTrigger:
      return "trigger";
    case CheckpointAction::kComplete:
      return "complete";
    case CheckpointAction::kFinish:
      return "finish";
    case CheckpointAction::kFail:
      return "fail";
  }
  return "?";
}

CheckpointCoordinator::CheckpointCoordinator(CheckpointCoordinatorOptions options,
                                             int64_t completed)
    : options_(options),
      stored_(static_cast<size_t>(std::max(options.tasks, 0)), 0),
      drained_(static_cast<size_t>(std::max(options.tasks, 0)), false),
      completed_(completed) {}

void CheckpointCoordinator::Start(int64_t now_ms, int64_t next_id) {
  started_ = true;
  next_id_ = std::max<int64_t>(next_id, 1);
  next_trigger_at_ms_ = SatAdd(now_ms, options_.interval_ms);
}

void CheckpointCoordinator::ResumeInFlight(int64_t id, bool stop, int64_t now_ms) {
  in_flight_ = id;
  in_flight_stop_ = stop;
  in_flight_since_ms_ = now_ms;
  stopping_ = stop;
  next_id_ = std::max(next_id_, id + 1);
}

void CheckpointCoordinator::ResumeFinished() {
  stopping_ = true;
  finished_ = true;
}

void CheckpointCoordinator::TaskStored(int task, int64_t id) {
  if (task >= 0 && task < static_cast<int>(stored_.size())) stored_[task] = id;
}

void CheckpointCoordinator::TaskDrained(int task, bool drained) {
  if (task >= 0 && task < static_cast<int>(drained_.size())) drained_[task] = drained;
}

void CheckpointCoordinator::RequestStop() { stop_requested_ = true; }

bool CheckpointCoordinator::AllStored(int64_t id) const {
  return std::all_of(stored_.begin(), stored_.end(), [id](int64_t s) { return s >= id; });
}

bool CheckpointCoordinator::AllDrained() const {
  return std::all_of(drained_.begin(), drained_.end(), [](bool d) { return d; });
}

CheckpointAction CheckpointCoordinator::Poll(int64_t now_ms) {
  CheckpointAction a;
  if (!started_ || finished_ || failed_) return a;
  if (in_flight_ > 0) {
    const int64_t took = now_ms - in_flight_since_ms_;
    if (AllStored(in_flight_)) {
      a.kind = CheckpointAction::kComplete;
      a.id = in_flight_;
      a.stop = in_flight_stop_;
      a.duration_ms = took;
      completed_ = in_flight_;
      in_flight_ = 0;
      in_flight_stop_ = false;
      return a;
    }
    if (options_.timeout_ms > 0 && took > options_.timeout_ms) {
      const int64_t stored =
          std::count_if(stored_.begin(), stored_.end(), [&](int64_t s) { return s >= in_flight_; });
      a.kind = CheckpointAction::kFail;
      a.id = in_flight_;
      a.stop = in_flight_stop_;
      a.duration_ms = took;
      a.why = absl::StrCat("checkpoint ", in_flight_, " did not complete in ", options_.timeout_ms,
                           " ms (", stored, " of ", stored_.size(), " tasks stored it)");
      failed_ = true;
      return a;
    }
    return a;
  }
  if (stopping_) {
    // The stopping checkpoint completed: the job's end.
    a.kind = CheckpointAction::kFinish;
    a.id = completed_;
    finished_ = true;
    return a;
  }
  const bool end = stop_requested_ || AllDrained();
  if (checkpoints()) {
    if (end || now_ms >= next_trigger_at_ms_) {
      a.kind = CheckpointAction::kTrigger;
      a.id = next_id_++;
      a.stop = end;
      in_flight_ = a.id;
      in_flight_stop_ = end;
      in_flight_since_ms_ = now_ms;
      stopping_ = end;
      next_trigger_at_ms_ = SatAdd(now_ms, options_.interval_ms);
    }
  } else if (end) {
    a.kind = CheckpointAction::kFinish;
    a.id = completed_;
    finished_ = true;
  }
  return a;
}

}  // namespace caravela
