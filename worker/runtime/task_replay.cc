// Lockstep replays (SPEC §8): the steps the JobRunner drives when every
// source of a parallel job has an arrival field (JobRunner::RunReplay).
#include <algorithm>
#include <chrono>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "worker/exchange/exchange.h"
#include "worker/runtime/task.h"
#include "worker/runtime/task_internal.h"

namespace caravela {
namespace {

using task_internal::SourceNode;
using task_internal::WriterNode;

}  // namespace

// ---- Lockstep replay ------------------------------------------------------------

absl::StatusOr<int64_t> Task::ReplayNextArrival(int source) {
  Impl& im = *impl_;
  SourceNode& src = im.sources[source];
  if (!src.present || src.finished) return kMaxTime;
  RETURN_IF_ERROR(im.FillPending(src, 0));
  return src.has_pending() ? src.pending[src.head].arrival : kMaxTime;
}

int64_t Task::ReplayNextTimer() const { return impl_->NextTimer(); }

void Task::ReplayFinishSource(int source) {
  SourceNode& src = impl_->sources[source];
  if (!src.present || src.finished) return;
  src.finished = true;
  src.wm->Finish();
}

absl::Status Task::ReplaySweep(ReplayPhase phase, int64_t now, int source) {
  Impl& im = *impl_;
  im.manual_clock.Set(now);
  RETURN_IF_ERROR(im.ConsumeReplayInput());
  switch (phase) {
    case ReplayPhase::kApply: {
      if (source < 0 || source >= im.S()) break;
      RETURN_IF_ERROR(im.ApplyArrivalStep(source, now));
      break;
    }
    case ReplayPhase::kWatermarks:
      RETURN_IF_ERROR(im.UpdateWatermarks());
      RETURN_IF_ERROR(im.SendWatermarkMarkers(true));
      break;
    case ReplayPhase::kTimers:
      RETURN_IF_ERROR(im.FireTimers());
      RETURN_IF_ERROR(im.Commit(false));
      break;
  }
  for (WriterNode& wn : im.writers) RETURN_IF_ERROR(wn.writer->SendBuffered());
  return absl::OkStatus();
}

absl::Status Task::ReplayClose() {
  Impl& im = *impl_;
  RETURN_IF_ERROR(im.ConsumeReplayInput());
  RETURN_IF_ERROR(im.Commit(true));
  for (WriterNode& wn : im.writers) RETURN_IF_ERROR(wn.writer->Flush(30000));
  im.Progress(true);
  return im.CloseSinks();
}

absl::Status Task::Impl::ConsumeReplayInput() {
  for (ReaderNode& rn : readers) {
    for (;;) {
      for (RecordBatch& b : rn.by_input) b.clear();
      ASSIGN_OR_RETURN(int n, rn.reader->Poll(1 << 20, 0, &rn.by_input));
      if (n == 0) break;
      for (size_t in = 0; in < rn.by_input.size(); ++in) {
        RecordBatch& batch = rn.by_input[in];
        if (batch.empty()) continue;
        // One task would have seen them in source order: partition, offset
        // (ties keep their producer's order).
        std::vector<size_t> order(batch.size());
        for (size_t i = 0; i < order.size(); ++i) order[i] = i;
        std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
          return std::pair(batch[a].partition, batch[a].offset) <
                 std::pair(batch[b].partition, batch[b].offset);
        });
        sorted.clear();
        for (size_t i : order) sorted.AppendSwapped(batch[i]);
        RETURN_IF_ERROR(Feed(rn.op, static_cast<int>(in), sorted));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace caravela
