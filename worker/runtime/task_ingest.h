// SourceIngest: how a task reads its sources (SPEC §2, §5). Raw messages are
// decoded once into records (JSON -> Record, event time, partition, arrival
// time); a message that cannot be a record is kept as an invalid-record side
// record (quarantine to `<source>.invalid`, flagged per record), never an
// error. Decoded records wait in SourceNode::pending until the task applies
// them (Dispatcher::ApplySourceBatch). In arrival mode a Kafka source's
// partitions are merged by (arrival, partition, offset) first.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/json.h"
#include "worker/runtime/task_context.h"
#include "worker/runtime/task_graph.h"

namespace caravela {

class SourceIngest {
 public:
  explicit SourceIngest(const TaskContext& ctx) : ctx_(ctx) {}

  // Decodes the next batch of `src` into src.input.pending unless records are
  // still pending; waits at most `timeout_ms` for one.
  absl::Status FillPending(task_internal::SourceNode& src, int timeout_ms);
  // Records of partition `partition` of `src` not applied yet (> 0 is all
  // that matters to the watermark's idleness).
  int64_t Backlog(const task_internal::SourceNode& src, int partition) const;

 private:
  // Decodes `m` into `into`/`invalid`; `last_arrival` is the arrival clock
  // of the records it follows (arrival mode).
  void Decode(task_internal::SourceNode& src, const RawMessage& m, RecordBatch& into,
              std::vector<uint8_t>& invalid, int64_t& last_arrival);
  // FillPending of a Kafka source in arrival mode: reads until whole arrival
  // steps can be merged (or every partition is done).
  absl::Status FillMerged(task_internal::SourceNode& src);
  // Moves the complete arrival steps of src.input.staged into src.input.pending.
  void MergeStaged(task_internal::SourceNode& src);

  const TaskContext& ctx_;
  JsonDecoder decoder_;
  // Processing time of the records of the current poll (read once per poll,
  // at its first record: a clock read per record costs ~2% of the hot path).
  int64_t poll_now_ = kMinTime;
  std::string json_;  // scratch
};

}  // namespace caravela
