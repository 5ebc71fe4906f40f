// The driver of a task of a parallel job (SPEC §8): steps over its sources
// and exchange readers, follows the job's checkpoints (TaskCheckpointer::
// ServeJob), reports when it drained its input, and ends when the job's
// coordinator finished the job. Exchanges are opened by GraphBuilder; the
// rest of the task is in the files task_internal.h lists.
#include <chrono>
#include <thread>

#include "spdlog/spdlog.h"
#include "worker/runtime/job_checkpoints.h"
#include "worker/runtime/task_internal.h"

namespace caravela {

absl::Status Task::Impl::RunParallel() {
  JobCheckpoints& job = *ctx.job;
  StepSpec step;
  step.exchanges = StepSpec::Exchanges::kPoll;
  step.exchange_wait_ms = 5;
  bool idle = false;  // the last step got no records
  for (;;) {
    if (job.failed()) return absl::CancelledError("another task of the job failed");
    // Without checkpoints a stop ends the task at once (nothing to commit).
    if (!checkpointer.enabled() && ctx.options.stop != nullptr && ctx.options.stop->load()) break;
    RETURN_IF_ERROR(checkpointer.ServeJob());
    const bool stopped = checkpointer.stopped();
    if (job.finished() && (drained || stopped) && checkpointer.committed_id() >= job.completed()) {
      break;
    }
    if (stopped) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      continue;
    }
    RETURN_IF_ERROR(MaybeStopAtEndOfInput());
    // A task without exchange inputs waits on its sources after a step that
    // got nothing (no spinning on an empty topic).
    step.source_timeout_ms = graph.readers.empty() && idle ? 5 : 0;
    StepResult result;
    if (ctx.arrival_mode) {
      // A replay in one task (JobPart): the records in arrival order; once
      // drained, a last step with the end-of-input watermark.
      StepSpec arrival = step;
      ASSIGN_OR_RETURN(const bool more, NextArrivalStep(&arrival));
      if (!more) arrival.input = StepSpec::Input::kNone;
      RETURN_IF_ERROR(Step(arrival, &result));
      result.got = more;
      result.inputs_done = !more;
    } else {
      RETURN_IF_ERROR(Step(step, &result));
    }
    if (result.inputs_done && !drained) {
      // Everything read and propagated (the +inf watermark fired everything).
      RETURN_IF_ERROR(Commit(true));
      RETURN_IF_ERROR(watermarks.SendMarkers(true));
      for (auto& wn : graph.writers) RETURN_IF_ERROR(wn.writer->Flush(30000));
      drained = true;
      job.SetDrained(ctx.placement.global_id);
      RuntimeLogger()->debug("task {} drained", ctx.name);
    }
    idle = !result.got;
    if (idle && graph.readers.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  RETURN_IF_ERROR(Commit(true));
  for (auto& wn : graph.writers) RETURN_IF_ERROR(wn.writer->Flush(30000));
  status.PublishPartitions(true);  // the last report holds the final positions
  return dispatch.CloseSinks();
}

}  // namespace caravela
