// Lockstep replay (SPEC §8): the JobRunner drives every task of a job whose
// sources all have arrival fields, on one thread, step by step in arrival
// order, as one task would run the whole job. Each sweep is one Step of the
// task with what the phase does.
#include "worker/runtime/task_internal.h"

namespace caravela {
namespace {

using task_internal::SourceNode;
using StepSpec = Task::Impl::StepSpec;

}  // namespace

absl::StatusOr<int64_t> Task::ReplayNextArrival(int source) {
  Impl& im = *impl_;
  SourceNode& src = im.graph.sources[source];
  if (!src.present || src.finished) return kMaxTime;
  RETURN_IF_ERROR(im.ingest.FillPending(src, 0));
  return src.has_pending() ? src.input.pending[src.input.head].arrival : kMaxTime;
}

int64_t Task::ReplayNextTimer() const { return impl_->watermarks.NextTimer(); }

void Task::ReplayFinishSource(int source) {
  SourceNode& src = impl_->graph.sources[source];
  if (!src.present || src.finished) return;
  src.finished = true;
  src.wm->Finish();
}

absl::Status Task::ReplaySweep(ReplayPhase phase, int64_t now, int source) {
  Impl& im = *impl_;
  im.ctx.manual_clock.Set(now);
  StepSpec step;
  step.exchanges = StepSpec::Exchanges::kReplay;
  step.input = StepSpec::Input::kNone;
  step.watermarks = false;
  step.timers = false;
  step.flush = false;
  switch (phase) {
    case ReplayPhase::kApply:
      step.input = StepSpec::Input::kArrival;
      step.source = source;
      step.arrival = now;
      break;
    case ReplayPhase::kWatermarks:
      step.watermarks = true;
      step.force_markers = true;
      break;
    case ReplayPhase::kTimers:
      step.timers = true;
      step.flush = true;
      break;
  }
  Impl::StepResult result;
  return im.Step(step, &result);
}

absl::Status Task::ReplayClose() {
  Impl& im = *impl_;
  RETURN_IF_ERROR(im.dispatch.ConsumeReplayInput());
  RETURN_IF_ERROR(im.Commit(true));
  for (auto& wn : im.graph.writers) RETURN_IF_ERROR(wn.writer->Flush(30000));
  im.Progress(true);
  return im.dispatch.CloseSinks();
}

}  // namespace caravela
