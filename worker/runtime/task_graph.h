// TaskGraph: the nodes of one task and how they are wired (SPEC §8): its
// sources (its share of their partitions), operators, sinks, and the
// exchange readers and writers that connect it to the job's other tasks.
// Node ids number sources [0, S) then operators [S, S+O), in spec order.
//
// GraphBuilder builds it from the job spec and the task's placement
// (operators through their OperatorKind, sinks through their SinkKind,
// exchanges from the plan) and opens what the task reads and writes; the
// checkpointer reopens sources and sinks through it on restore.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "common/job_spec.h"
#include "common/json.h"
#include "common/metrics.h"
#include "common/status.h"
#include "common/time_util.h"
#include "worker/connectors/sink.h"
#include "worker/connectors/source.h"
#include "worker/exchange/exchange.h"
#include "worker/operators/operator.h"
#include "worker/runtime/task_context.h"
#include "worker/runtime/watermark.h"

namespace caravela {

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

// Where a source's task stands in its input: what was applied, what the
// last stored checkpoint holds, and what other threads read.
struct SourcePositions {
  // Per raw partition: offset after the last applied record, and the arrival
  // time of the last applied record (checkpoints: prefetched records are
  // read again after a restore, so neither may include them).
  std::vector<int64_t> applied;
  int64_t applied_arrival = kMinTime;
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
};

// A source's metrics, looked up once at build time.
struct SourceCounters {
  Counter* in = nullptr;
  Counter* invalid[kInvalidReasons] = {};  // by InvalidReason (0 unused)
  // Processing time minus event time of the valid records (arrival delay),
  // observed per batch.
  std::optional<Histogram::Local> delay;
};

// A source's decoded records waiting to be applied.
struct SourceInput {
  // [head, size) of pending are not applied yet.
  RecordBatch pending;
  std::vector<uint8_t> pending_invalid;  // InvalidReason per pending record
  size_t head = 0;
  int64_t last_arrival = kMinTime;
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
};

struct SourceNode {
  const SourceSpec* spec = nullptr;
  // False for a source another stage reads (parallel jobs): nothing is opened.
  bool present = true;
  // Kafka partitions this task reads (empty: all); p % tasks == index.
  std::vector<int32_t> owned;
  // With the partition count unknown at build (a topic not created yet):
  // the task's share once it appears, p % share_tasks == share_index.
  int share_tasks = 1;
  int share_index = 0;
  std::unique_ptr<RawSource> raw;
  std::unique_ptr<SourceWatermark> wm;
  FieldPath partition_path, arrival_path;
  absl::flat_hash_map<std::string, int> partition_ids;
  bool finished = false;
  bool preload = false;              // a lookup table: read whole before anything else
  std::vector<uint8_t> idle_logged;  // per partition: idle when last logged
  SourcePositions pos;
  Output out{1};
  SourceCounters counters;
  using Staged = SourceInput::Staged;
  SourceInput input;
  bool has_pending() const { return input.head < input.pending.size(); }
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
  // The part name its files carry (TaskContext::sink_parts; "" none),
  // recorded in each checkpoint (SinkCheckpoint.part).
  std::string part;
};

}  // namespace task_internal

struct TaskGraph {
  using SourceNode = task_internal::SourceNode;
  using OperatorNode = task_internal::OperatorNode;
  using SinkNode = task_internal::SinkNode;
  using ReaderNode = task_internal::ReaderNode;
  using WriterNode = task_internal::WriterNode;
  using NodeOutputs = task_internal::NodeOutputs;
  using Edge = task_internal::Edge;

  std::vector<SourceNode> sources;  // node ids [0, S)
  std::vector<OperatorNode> ops;    // node ids [S, S+O)
  std::vector<SinkNode> sinks;
  std::vector<ReaderNode> readers;   // exchanges consumed (parallel jobs)
  std::vector<WriterNode> writers;   // exchanges produced (parallel jobs)
  std::vector<NodeOutputs> outputs;  // per node id
  int dead_letter_sink = -1;

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
};

class Dispatcher;

class GraphBuilder {
 public:
  // `checkpointed`: the task has checkpoints (sinks then commit per checkpoint).
  GraphBuilder(const TaskContext& ctx, TaskGraph& graph, bool checkpointed)
      : ctx_(ctx), graph_(graph), checkpointed_(checkpointed) {}

  // Builds every node, opens sources, operators (those that run here),
  // exchanges and sinks; operator outputs drain into `dispatch`.
  absl::Status Build(Dispatcher& dispatch);
  // Opens the raw source of `src` at `start_offsets` (per partition; empty:
  // from its configured start), reading its partitions (src.owned, or its
  // share once the count is known).
  absl::StatusOr<std::unique_ptr<RawSource>> OpenRawSource(
      const task_internal::SourceNode& src, const std::map<int32_t, int64_t>& start_offsets) const;
  // Makes and opens sink `sink_index` as the task of global id `global_id`
  // whose files carry part name `part` ("" none) writes it.
  absl::StatusOr<std::unique_ptr<Sink>> OpenTaskSink(size_t sink_index, const std::string& part,
                                                     int global_id) const;
  // The dead letter whose file carries part name `part`, opened.
  absl::StatusOr<std::unique_ptr<Sink>> OpenDeadLetter(const std::string& part) const;
  // The part name of this task's sink node `node` (ctx.sink_parts).
  std::string SinkPart(int node, bool dead_letter) const;

 private:
  absl::Status BuildSources();
  absl::Status BuildOperators(Dispatcher& dispatch);
  void BuildOutputs();
  // Parallel jobs: exchange readers and writers of the task's stage.
  absl::Status OpenExchanges();
  absl::Status OpenSinks();

  const TaskContext& ctx_;
  TaskGraph& graph_;
  bool checkpointed_;
};

}  // namespace caravela
