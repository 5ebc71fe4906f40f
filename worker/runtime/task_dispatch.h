// Dispatcher: moves a task's records through its graph (SPEC §2, §8).
// Applies decoded source records as one batch (offsets, arrival, watermark
// activity, quarantine of invalid ones and of event times beyond
// max_future_skew), feeds operator inputs batch by batch, and hands every
// node's main and side outputs on, depth first, to the operators, sinks and
// exchange writers that read them; records from exchange readers enter the
// same way. Side outputs nobody reads go to the dead letter with a
// "side_output" field.
#pragma once

#include <string>
#include <string_view>

#include "common/json.h"
#include "worker/runtime/task_context.h"
#include "worker/runtime/task_graph.h"
#include "worker/runtime/task_status.h"

namespace caravela {

class Dispatcher {
 public:
  Dispatcher(const TaskContext& ctx, TaskGraph& graph, TaskStatus& status)
      : ctx_(ctx), graph_(graph), status_(status) {}

  // Applies pending[head, head+count) of source `src_id` as one batch.
  absl::Status ApplySourceBatch(int src_id, size_t count);
  // Applies the pending records of source `src_id` that arrived at `t` (at
  // most batch_size; none is a no-op): one step in arrival mode.
  absl::Status ApplyArrivalStep(int src_id, int64_t t);
  // Hands node `node`'s outputs on and clears them.
  absl::Status Dispatch(int node);
  // Applies `batch` to input `input` of operator `op` and dispatches its output.
  // `movable`: `batch` itself when nothing reads it after this operator
  // (records are then moved on, not copied), else nullptr.
  absl::Status Feed(int op, int input, const RecordBatch& batch, RecordBatch* movable = nullptr);
  // Parallel jobs: feeds what the exchange readers hold (waits at most
  // `timeout_ms`); `*got` is set if any record came.
  absl::Status PollReaders(int timeout_ms, bool* got);
  // Lockstep replay: applies everything the exchange readers hold, each
  // batch sorted by origin (partition, offset).
  absl::Status ConsumeReplayInput();
  // Closes every sink; the first error.
  absl::Status CloseSinks();

 private:
  // Counts the records of `rn`'s last poll as the task's exchange input.
  void CountExchangeRecords(const task_internal::ReaderNode& rn);
  absl::Status WriteSink(int sink, int node, const Record& r, std::string_view side_name);

  const TaskContext& ctx_;
  TaskGraph& graph_;
  TaskStatus& status_;
  std::string json_, key_;  // scratch
  RecordBatch sorted_;      // ConsumeReplayInput's scratch
  const FieldPath revision_path_ = FieldPath::Parse("revision");
  const FieldPath state_path_ = FieldPath::Parse("state");
};

}  // namespace caravela
