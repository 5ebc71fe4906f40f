// WatermarkTracker: event time and processing time in a task (SPEC §2, §8).
// After each step it recomputes the sources' watermarks (per partition,
// with idleness), propagates them through the operators in topological
// order (an operator's input watermark is the minimum over its inputs that
// are not idle, local nodes or exchange readers; OnWatermark fires what it
// closes), sends watermark markers into the task's exchanges, and fires
// due processing-time timers.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "worker/runtime/task_context.h"
#include "worker/runtime/task_dispatch.h"
#include "worker/runtime/task_graph.h"
#include "worker/runtime/task_ingest.h"
#include "worker/runtime/task_status.h"

namespace caravela {

// The watermark of `n` inputs (SPEC §2): the min over the inputs that are not
// idle, or over all of them when every one is idle (then `idle` is true).
struct InputsWatermark {
  int64_t watermark = kMaxTime;
  bool idle = true;
};
template <typename WatermarkOf, typename IdleOf>
InputsWatermark MinOverActiveInputs(size_t n, WatermarkOf watermark_of, IdleOf idle_of) {
  InputsWatermark r;
  for (size_t k = 0; k < n; ++k) r.idle = r.idle && idle_of(k);
  for (size_t k = 0; k < n; ++k) {
    if (!r.idle && idle_of(k)) continue;  // idle inputs leave the minimum
    r.watermark = std::min(r.watermark, watermark_of(k));
  }
  return r;
}

class WatermarkTracker {
 public:
  WatermarkTracker(const TaskContext& ctx, TaskGraph& graph, const SourceIngest& ingest,
                   Dispatcher& dispatch, TaskStatus& status)
      : ctx_(ctx), graph_(graph), ingest_(ingest), dispatch_(dispatch), status_(status) {}

  // Once the graph is built: one watermark per node.
  void Init() {
    node_wm_.assign(graph_.outputs.size(), kMinTime);
    node_idle_.assign(graph_.outputs.size(), 0);
  }
  // Recomputes source watermarks and propagates them through the operators
  // (publishes lag, partitions and the task's watermark).
  absl::Status Update();
  // Watermark markers into the exchanges: at least every 200 ms while the
  // watermark moves (at once with `force`), at once when it ends and when
  // idleness changes.
  absl::Status SendMarkers(bool force);
  // The earliest processing-time timer of an operator or idleness
  // transition of a source.
  int64_t NextTimer() const;
  // Fires the operators' due processing-time timers.
  absl::Status FireTimers();
  // The lowest output watermark of the task's operators, else of its sources.
  int64_t Lowest() const;

 private:
  const TaskContext& ctx_;
  TaskGraph& graph_;
  const SourceIngest& ingest_;
  Dispatcher& dispatch_;
  TaskStatus& status_;
  std::vector<int64_t> node_wm_;    // output watermark per node id
  std::vector<uint8_t> node_idle_;  // per node id
};

}  // namespace caravela
