// Internal to worker/runtime: the state of one task (Task::Impl) and its
// nodes, shared by the files that make up a task's loop:
//   task.cc          building a task, the standalone loops, decoding, the
//                    operator DAG, watermarks, timers, sinks, checkpoints;
//   task_parallel.cc a task of a parallel job: exchanges and its part of
//                    job-wide checkpoints (RunParallel);
//   task_replay.cc   lockstep replays driven by the JobRunner (Replay*);
//   task_rescale.cc  restoring a checkpoint taken with another parallelism
//                    (RestoreRescaled, RescaleKeys).
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "common/job_plan.h"
#include "common/job_spec.h"
#include "common/json.h"
#include "common/time_util.h"
#include "worker/checkpoint/checkpoint_manager.h"
#include "worker/connectors/sink.h"
#include "worker/connectors/source.h"
#include "worker/exchange/exchange.h"
#include "worker/operators/operator.h"
#include "worker/runtime/task.h"
#include "worker/runtime/watermark.h"

namespace caravela {

class JobCheckpoints;

namespace task_internal {
// A consumer of a node's output (main or one side output).
struct Edge {
  int op = -1;      // operator index, or -1
  int input = 0;    // input index of the operator (also for writers)
  int sink = -1;    // sink index, or -1
  int writer = -1;  // exchange writer index, or -1 (the operator runs in another stage)
};

struct NodeOutputs {
  std::vector<Edge> main;
  std::vector<std::vector<Edge>> sides;  // per side output
  std::vector<std::string> side_names;   // "<node>.<side>"
  std::vector<int64_t> side_totals;      // records sent per side output
  std::vector<FieldPath> key_fields;     // sink keys of main-output records
  std::vector<std::string> key_names;
};

// Why a record went to <source>.invalid: the `reason` label of
// invalid_records_total (a fixed set, so the label stays bounded).
enum InvalidReason : uint8_t {
  kValidRecord = 0,
  kMalformed,         // not a JSON object
  kTombstone,         // a null value where deletions mean nothing
  kMissingEventTime,  // no event-time field
  kBadEventTime,      // an event time that does not parse
  kFutureEventTime,   // beyond processing time + max_future_skew
  kInvalidReasons
};
inline constexpr const char* kInvalidReasonNames[kInvalidReasons] = {
    "", "malformed", "tombstone", "missing_event_time", "bad_event_time", "future_event_time"};

struct SourceNode {
  const SourceSpec* spec = nullptr;
  // False for a source another stage reads (parallel jobs): nothing is opened.
  bool present = true;
  // Kafka partitions this task reads (empty: all); p % tasks == index.
  std::vector<int32_t> owned;
  std::unique_ptr<RawSource> raw;
  std::unique_ptr<SourceWatermark> wm;
  FieldPath partition_path, arrival_path;
  absl::flat_hash_map<std::string, int> partition_ids;
  // Decoded records waiting to be applied, [head, size).
  RecordBatch pending;
  std::vector<uint8_t> pending_invalid;  // InvalidReason per pending record
  size_t head = 0;
  int64_t last_arrival = kMinTime;
  bool finished = false;
  bool preload = false;  // a lookup table: read whole before anything else
  // Per raw partition: offset after the last applied record, and the arrival
  // time of the last applied record (checkpoints: prefetched records are
  // read again after a restore, so neither may include them).
  std::vector<int64_t> applied;
  std::vector<uint8_t> idle_logged;  // per partition: idle when last logged
  // `applied`, stored after every batch for other threads (live lag).
  std::unique_ptr<std::atomic<int64_t>[]> live_applied;
  void ResetLiveApplied() {
    live_applied = std::make_unique<std::atomic<int64_t>[]>(applied.size());
    for (size_t p = 0; p < applied.size(); ++p) live_applied[p].store(applied[p]);
  }
  // `applied` as of the last checkpoint this task stored, and its id: what
  // CommitSourceOffsets publishes once that checkpoint is complete.
  std::vector<int64_t> checkpointed;
  int64_t checkpointed_id = 0;
  int64_t applied_arrival = kMinTime;
  Output out{1};
  Counter* in = nullptr;
  Counter* invalid[kInvalidReasons] = {};  // by InvalidReason (0 unused)
  // Processing time minus event time of the valid records (arrival delay),
  // observed per batch.
  std::optional<Histogram::Local> delay;
  // A Kafka source in arrival mode: decoded records per partition, merged
  // into `pending` in (arrival, partition, offset) order (FillMerged).
  struct Staged {
    RecordBatch records;
    std::vector<uint8_t> invalid;
    size_t head = 0;
    int64_t last_arrival = kMinTime;
    bool empty() const { return head >= records.size(); }
  };
  std::vector<Staged> staged;
  bool merged = false;
  bool has_pending() const { return head < pending.size(); }
};

struct OperatorNode {
  const OperatorSpec* spec = nullptr;
  std::unique_ptr<Operator> op;  // built for every operator (key fields, side outputs)
  bool here = true;              // false: it runs in another stage (never opened)
  // Per input: the exchange reader feeding it, or -1 (the input node is local).
  std::vector<int> input_reader;
  std::unique_ptr<OperatorContext> ctx;
  std::vector<int> inputs;  // node ids
  Output out;
  Counter* records_in = nullptr;    // operator_records_in_total{op}
  Counter* records_out = nullptr;   // operator_records_out_total{op}: main output
  Counter* watermark_ms = nullptr;  // operator_watermark_ms{op,task}, from the first one
  // Operators with a too_late side output: records that arrived behind the
  // watermark (operator_late_records_total{op}).
  Counter* late = nullptr;
  int64_t late_total = 0;
  // operator_side_records_total{op,output}: per side output (too_late, ...)
  std::vector<Counter*> side_records;
};

// An exchange topic this task consumes: records for one operator's inputs.
struct ReaderNode {
  std::unique_ptr<ExchangeReader> reader;
  std::string topic;
  std::vector<int32_t> producer_tasks;  // global task id per producer index
  int op = -1;                          // operator index
  std::vector<RecordBatch> by_input;
};

// An exchange topic this task produces into.
struct WriterNode {
  std::unique_ptr<ExchangeWriter> writer;
  std::vector<int> from;  // local node ids whose output goes through it
  int64_t sent_wm = kMinTime;
  bool sent_idle = false;
  std::chrono::steady_clock::time_point sent_at;
};

struct SinkNode {
  std::string name;
  int spec_index = -1;  // into spec.sinks; -1: the dead letter
  std::unique_ptr<Sink> sink;
  Counter* written = nullptr;
  Counter* revisions = nullptr;  // sink_revisions_written_total{from}
  Counter* rejected = nullptr;   // sink_revisions_rejected_total{from}
  int64_t rejected_seen = 0;     // sink->rejected_revisions() already counted
  void CountRejected() {
    if (rejected == nullptr) return;
    const int64_t now = sink->rejected_revisions();
    if (now > rejected_seen) rejected->Add(now - rejected_seen);
    rejected_seen = now;
  }
  bool dead_letter = false;
};

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

}  // namespace task_internal

struct Task::Impl {
  using Edge = task_internal::Edge;
  using NodeOutputs = task_internal::NodeOutputs;
  using SourceNode = task_internal::SourceNode;
  using OperatorNode = task_internal::OperatorNode;
  using ReaderNode = task_internal::ReaderNode;
  using WriterNode = task_internal::WriterNode;
  using SinkNode = task_internal::SinkNode;

  JobSpec spec;
  RunOptions options;
  TaskPlacement placement;
  std::string name;  // "job" or "job/stage-1/task-2" (log prefix)
  // The task in log lines (LogContext): "stage-1/task-2", "" for a one-task job.
  std::string TaskLabel() const {
    return name.size() > spec.name.size() ? name.substr(spec.name.size() + 1) : std::string();
  }
  MetricsRegistry* metrics = nullptr;
  std::unique_ptr<StateBackend> state_owner;
  StateBackend* state = nullptr;
  SystemClock system_clock;
  ManualClock manual_clock;
  const Clock* clock = nullptr;
  bool arrival_mode = false;

  std::vector<SourceNode> sources;  // node ids [0, S)
  std::vector<OperatorNode> ops;    // node ids [S, S+O)
  std::vector<SinkNode> sinks;
  std::vector<ReaderNode> readers;   // exchanges consumed (parallel jobs)
  std::vector<WriterNode> writers;   // exchanges produced (parallel jobs)
  std::vector<NodeOutputs> outputs;  // per node id
  std::vector<int64_t> node_wm;      // output watermark per node id
  std::vector<uint8_t> node_idle;
  int dead_letter_sink = -1;

  JsonDecoder decoder;
  // Processing time of the records of the current poll (read once per poll,
  // at its first record: a clock read per record costs ~2% of the hot path).
  int64_t poll_now = kMinTime;
  std::string json;
  std::string key;
  const FieldPath revision_path = FieldPath::Parse("revision");
  const FieldPath state_path = FieldPath::Parse("state");
  // Read by the job's coordinating thread (progress): relaxed atomics.
  std::atomic<int64_t> records_in{0};
  std::atomic<int64_t> published_watermark{kMinTime};  // UpdateWatermarks
  std::atomic<int64_t> published_state_bytes{0};       // TakeCheckpoint: sum over tables
  std::atomic<int64_t> published_lag{0};  // UpdateWatermarks: records behind on the sources
  // UpdateWatermarks, at most every kPartitionStatusMs: per source partition.
  mutable std::mutex partitions_mu;
  std::vector<Task::PartitionStatus> published_partitions;
  // Per published partition of a Kafka source: where Task::partitions()
  // reads its live position and log end (nulls otherwise).
  struct LiveLag {
    const RawSource* raw = nullptr;
    const std::atomic<int64_t>* applied = nullptr;
  };
  std::vector<LiveLag> published_live;
  Task::Activity published_activity;
  std::chrono::steady_clock::time_point partitions_at{};
  void PublishPartitions(bool now = false);
  std::atomic<int64_t> records_out{0};
  int64_t invalid_total = 0;
  std::chrono::steady_clock::time_point started, last_progress, last_flush, last_state_flush;
  int64_t progress_records_in = 0;

  // Checkpoints (SPEC §6); null when the job has none and no savepoint is used.
  std::unique_ptr<CheckpointManager> checkpoints;
  int64_t epoch = 0;
  int64_t checkpoint_interval_ms = 0;
  int64_t last_checkpoint_id = 0;  // for the progress line
  std::chrono::steady_clock::time_point last_checkpoint_at;
  int64_t next_checkpoint_at = kMinTime;  // processing time; kMinTime: not scheduled yet
  std::string spec_hash;
  std::optional<CheckpointManifest> savepoint;  // options.from_savepoint's manifest

  // Parallel jobs: the job's coordination (null: standalone), the last
  // checkpoint this task stored and committed, and whether it stopped reading
  // input after a stopping checkpoint.
  JobCheckpoints* job = nullptr;
  const StagePlan* stage = nullptr;
  int64_t stored_id = 0;
  int64_t committed_id = 0;
  bool stopped = false;
  bool drained = false;

  bool parallel() const { return placement.plan != nullptr; }
  bool OperatorHere(const OperatorSpec& os) const {
    if (!parallel()) return true;
    auto it = placement.plan->stage_of.find(os.name);
    return it != placement.plan->stage_of.end() && it->second == placement.stage;
  }

  int S() const { return static_cast<int>(sources.size()); }
  int NodeId(std::string_view name) const {
    for (int i = 0; i < S(); ++i) {
      if (sources[i].spec->name == name) return i;
    }
    for (size_t i = 0; i < ops.size(); ++i) {
      if (ops[i].spec->name == name) return S() + static_cast<int>(i);
    }
    return -1;
  }
  // True if node `id` (source or operator) runs in this task.
  bool NodeHere(int id) const {
    if (id < 0) return false;
    return id < S() ? sources[id].present : ops[id - S()].here;
  }
  Output& OutputOf(int node) { return node < S() ? sources[node].out : ops[node - S()].out; }

  absl::Status Build();
  // Makes and opens sink `sink_index` as task `index` (global id
  // `global_id`) of this task's stage writes it (its part file).
  absl::StatusOr<std::unique_ptr<Sink>> OpenTaskSink(size_t sink_index, int index, int global_id);
  // The dead letter of task `index` of this task's stage, opened.
  absl::StatusOr<std::unique_ptr<Sink>> OpenDeadLetter(int index);
  absl::StatusOr<std::unique_ptr<RawSource>> OpenRawSource(
      const SourceSpec& ss, const std::vector<int32_t>& owned,
      const std::map<int32_t, int64_t>& start_offsets);
  // Parallel jobs: exchange readers and writers of the task's stage.
  absl::Status OpenExchanges();
  absl::Status PollReaders(int timeout_ms, bool* got);
  // Lockstep replay: applies everything the exchange readers hold, each
  // batch sorted by origin (partition, offset).
  absl::Status ConsumeReplayInput();
  RecordBatch sorted;  // ConsumeReplayInput's scratch
  absl::Status SendWatermarkMarkers(bool force);
  // Parallel jobs: serves the coordinator (commit completed checkpoints,
  // store triggered ones once aligned). Sets `stopped` after a stopping one.
  absl::Status ServeCheckpoints();
  absl::Status RunParallel();
  // Once options.end_of_input is set: unbounded sources stop at their
  // current end (then drain and finish). `*draining` records that it ran.
  absl::Status MaybeStopAtEndOfInput(bool* draining);
  // One step over the task's sources: applies a polled batch of each, marks
  // exhausted ones finished. `*got`: some records were applied; `*all_done`
  // is cleared while any source still has or may get records.
  absl::Status StepSources(int timeout_ms, bool* got, bool* all_done);
  // Closes every sink; the first error.
  absl::Status CloseSinks();
  // Checkpoints: manager and epoch (before Build), restore (after Build),
  // periodic and final checkpoints, savepoints.
  absl::Status OpenCheckpoints();
  absl::Status Restore();
  absl::Status ApplyManifest(const CheckpointManifest& m);
  // FailedPrecondition if `m` was taken by another job graph (spec_hash).
  absl::Status CheckSameGraph(const CheckpointManifest& m) const;
  // Parallel jobs restored with another parallelism than the checkpoint's
  // (task_rescale.cc): gathers this task's share of the old tasks' state.
  bool Rescaled() const {
    return parallel() && placement.restore_parallelism > 0 &&
           placement.restore_parallelism != placement.plan->parallelism;
  }
  absl::Status RestoreRescaled();
  // Per input of operator `on`: the key paths that route its records.
  absl::StatusOr<std::vector<std::vector<FieldPath>>> RescaleKeys(const OperatorNode& on) const;
  // `id` 0: the manager's next id (standalone); parallel jobs pass the job's.
  absl::Status TakeCheckpoint(const std::string& savepoint_dir, int64_t id = 0);
  // Publishes the source offsets of checkpoint `id`, now complete, to the
  // job's consumer group `caravela-<job>` (lag tools read them there).
  void CommitSourceOffsets(int64_t id);
  absl::Status MaybeCheckpoint();
  // Decodes `m` into `into`/`invalid`; `last_arrival` is the arrival clock
  // of the records it follows (arrival mode).
  void Decode(SourceNode& src, const RawMessage& m, RecordBatch& into,
              std::vector<uint8_t>& invalid, int64_t& last_arrival);
  absl::Status FillPending(SourceNode& src, int timeout_ms);
  // FillPending of a Kafka source in arrival mode: reads until whole arrival
  // steps can be merged (or every partition is done).
  absl::Status FillMerged(SourceNode& src);
  // Moves the complete arrival steps of src.staged into src.pending.
  void MergeStaged(SourceNode& src);
  absl::Status ApplySourceBatch(int src_id, size_t count);
  // Applies the pending records of source `src_id` that arrived at `t` (at
  // most batch_size; none is a no-op): one step in arrival mode.
  absl::Status ApplyArrivalStep(int src_id, int64_t t);
  absl::Status Dispatch(int node);
  // Applies `batch` to input `input` of operator `op` and dispatches its output.
  // `movable`: `batch` itself when nothing reads it after this operator
  // (records are then moved on, not copied), else nullptr.
  absl::Status Feed(int op, int input, const RecordBatch& batch, RecordBatch* movable = nullptr);
  // The lowest output watermark of the task's operators, else of its sources.
  int64_t LowestWatermark() const;
  absl::Status WriteSink(int sink, int node, const Record& r, std::string_view side_name);
  absl::Status UpdateWatermarks();
  absl::Status FireTimers();
  // Flushes operator state into the backend and commits it when `force` or
  // state_flush_interval_ms passed; flushes sinks when `force` or 200 ms
  // passed.
  absl::Status Commit(bool force);
  int64_t NextTimer() const;
  int64_t Backlog(const SourceNode& src, int partition) const;
  absl::Status Preload();
  absl::Status RunArrivalMode();
  absl::Status RunWallMode();
  absl::Status Finish();
  void Progress(bool force);
};

}  // namespace caravela
