// Task: one task's loop (SPEC §8). A task runs the part of a job that one
// thread owns: a stage's sources (its share of their partitions), operators
// and sinks, reading other stages' output from exchange topics and writing
// its own into them. A job with every stage at one task runs as one task that
// holds the whole graph and uses no exchange (`caravela run` of a job without
// parallelism, tests, benches).
//
// Data path per step: sources -> decode once (JSON -> Record, event time,
// partition, arrival) -> quarantine invalid records to `<source>.invalid` ->
// batch through the operator DAG (depth first) -> sinks or exchange writers;
// exchange readers feed their operator inputs the same way. Then watermarks
// are recomputed (sources: per partition; exchange inputs: per producer
// marker) and propagated in topological order (OnWatermark), watermark
// markers go out to exchanges, due processing-time timers fire, and at least
// every state_flush_interval_ms operators flush their state and the state
// backend commits (Task::Impl::Commit).
//
// Processing time: if every source has an `arrival_field` (file or Kafka;
// bounded lookup tables excepted, ArrivalDriven in common/job_spec.h) and
// the task holds the whole job, a ManualClock is driven by arrival times
// (records of all sources are applied in arrival order, ties in source
// order, a Kafka source's partitions merged by arrival, partition, offset;
// records of one arrival time form one batch; due timers and idleness
// transitions fire before the next record), so runs are byte-for-byte
// repeatable. The tasks of a parallel job with such sources are driven the
// same way, in lockstep, by the JobRunner (Replay* below). Otherwise the
// injected clock (default: the system clock) is used and inputs are polled
// round-robin in batches.
//
// Checkpoints: a standalone task (no JobCheckpoints) checkpoints on its own
// every spec.checkpoint.interval. A task of a parallel job takes checkpoint n
// when the job's coordinator triggered n and every exchange input delivered
// barrier n (aligned), writes barrier n into its exchange outputs, stores its
// state, and commits its sinks once the coordinator says n is complete on
// every task (worker/runtime/job_checkpoints.h). Once a checkpoint is
// complete, the task commits its Kafka sources' checkpointed offsets to the
// consumer group `caravela-<job>` (for lag tools only; restores never read
// them).
//
// Side outputs without a sink go to the dead-letter JSONL file with a
// "side_output" field. Nothing is dropped silently: every record is counted
// in the metrics registry (records_in_total, invalid_records_total, ...).
//
// Threading: every call comes from the task's thread, except the shared
// metrics registry and JobCheckpoints, which are thread-safe.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "common/job_plan.h"
#include "common/job_spec.h"
#include "common/metrics.h"
#include "common/status.h"
#include "worker/runtime/pipeline.h"
#include "worker/state/state_backend.h"

namespace spdlog {
class logger;
}  // namespace spdlog

namespace caravela {
namespace v1 {
class SourcePartitionStatus;
class TaskActivity;
}  // namespace v1

class JobCheckpoints;
class ExchangeFlowControl;
class MemoryExchange;
class NetworkExchange;

// Where a task sits in a parallel job.
struct TaskPlacement {
  const JobPlan* plan = nullptr;  // null: the task runs the whole job
  int stage = 0;
  int index = 0;      // index among the stage's tasks (owns partitions p % tasks == index)
  int global_id = 0;  // unique in the job: state dir, checkpoint prefix task-<id>
  int64_t epoch = 0;  // the job's restore epoch (parallel jobs)
  // Per exchange id: the in-process exchange carrying it, or null when
  // exchanges go through Kafka at `exchange_bootstrap` (with the process's
  // flow control per exchange id, which may be null).
  std::vector<MemoryExchange*> memory;
  std::string exchange_bootstrap;
  std::vector<ExchangeFlowControl*> flow;
  // The network exchange (worker/exchange/network_exchange.h) when set and
  // an exchange has no in-process queue: streams to the workers at
  // `task_addresses` (gRPC HOST:PORT per global task id of the epoch),
  // naming `job_id`.
  NetworkExchange* network = nullptr;
  std::vector<std::string> task_addresses;
  // The job's id in the cluster (the network exchange's streams, file
  // sinks' output fences); its name in `caravela run`.
  std::string job_id;
  JobCheckpoints* checkpoints = nullptr;  // null: standalone
  // Partition counts of the Kafka sources the task's stage reads.
  SourcePartitions source_partitions;
  // The job checkpoint to restore (0: none, a fresh start), and the
  // parallelism it was taken with (0: this plan's). Another parallelism is a
  // rescale: each task gathers its partitions and keys from the old tasks.
  int64_t restore_checkpoint = 0;
  int restore_parallelism = 0;
  // Every source has an arrival field: the JobRunner drives the tasks in
  // lockstep (Task::Replay*), each on a ManualClock it sets.
  bool replay = false;
  // Epochs come from a coordinator (JobPart): sinks fence older epochs.
  bool fence_sinks = false;
  // Kafka exchanges whose readers are in other processes: flow control by
  // the readers' positions committed to a consumer group named after the
  // topic (ExchangeWriterOptions::flow_group); `cancel` ends a writer's wait.
  bool group_flow = false;
  const std::atomic<bool>* cancel = nullptr;
};

class Task {
 public:
  ~Task();
  // Builds operators, opens state, sources, exchanges and sinks, restores a
  // checkpoint if any. `metrics` is shared by the job's tasks. Errors name
  // the part.
  static absl::StatusOr<std::unique_ptr<Task>> Create(const JobSpec& spec, RunOptions options,
                                                      TaskPlacement placement,
                                                      MetricsRegistry* metrics);
  // Runs until every input is drained (bounded sources, ended exchanges) and,
  // in a parallel job, the coordinator finished the job; or until
  // options.stop (standalone) / the coordinator's stop. Closes sinks.
  absl::Status Run();

  StateBackend& state();
  // A one-line human summary of records in/out and side outputs.
  std::string Summary() const;
  // Records read from sources and results written to sinks by this task.
  int64_t records_in() const;
  int64_t records_out() const;
  // The lowest output watermark of the task's operators (of its sources if
  // it has none), as its progress line shows it; kMinTime before the first.
  // Thread-safe.
  int64_t watermark() const;
  // Records of its Kafka source partitions not read yet (high watermark last
  // seen minus position), as of its last step. Thread-safe.
  int64_t consumer_lag() const;
  // Bytes of its state (every table) as of its last checkpoint. Thread-safe.
  int64_t state_bytes() const;
  // Its source partitions as of about 250 ms ago (offset applied, lag,
  // watermark, idle). Thread-safe.
  struct PartitionStatus {
    std::string source;
    int32_t partition = 0;
    int64_t offset = 0;
    int64_t lag = 0;
    int64_t watermark_ms = 0;
    bool idle = false;
  };
  std::vector<PartitionStatus> partitions() const;
  // What the task sent aside and how late its input was, and the exchange
  // channels feeding it (refreshed with partitions()). Thread-safe.
  struct ExchangeInputStatus {
    std::string exchange;  // topic
    int32_t partition = 0;
    int32_t producer_task = 0;  // global task id
    int64_t watermark_ms = 0;
    bool idle = false;
  };
  struct Activity {
    std::vector<std::pair<std::string, int64_t>> side_records;  // "<node>.<output>"
    int64_t records_late = 0;      // arrived behind their operator's watermark
    int64_t records_too_late = 0;  // sent to a too_late side output
    std::vector<ExchangeInputStatus> exchange_inputs;
    // What sources wait for before they can read: "purchases: waiting for
    // topic purchases on host:9092" (RawSource::Waiting).
    std::vector<std::string> waiting;
    int64_t exchange_records_in = 0;  // records received from exchanges
    // Where the task's time went, in ms since its epoch began (TaskActivity).
    int64_t alignment_ms = 0;             // inputs held back by barrier alignment
    int64_t last_alignment_ms = 0;        // of the last checkpoint (longest input)
    int64_t last_alignment_skew_ms = 0;   // of it, until every channel was aligned
    int64_t backpressure_ms = 0;          // waiting for exchange credit
    int64_t checkpoint_sync_ms = 0;       // checkpoints' synchronous part
    int64_t last_checkpoint_sync_ms = 0;  // the last one's, and its parts:
    int64_t last_state_flush_ms = 0;
    int64_t last_sink_precommit_ms = 0;
    int64_t last_snapshot_ms = 0;
  };
  Activity activity() const;
  static void ActivityToProto(const Activity& a, v1::TaskActivity* out);
  static void PartitionToProto(const PartitionStatus& p, v1::SourcePartitionStatus* out);
  // Sets the per-partition gauges of `partitions` (labels source and
  // partition) in `metrics`, a view under the job's labels:
  // source_partition_offset, source_partition_lag_records,
  // source_partition_watermark_ms and source_partition_watermark_lag_ms
  // (exported in seconds), source_partition_idle (0/1). `now_ms`: wall clock.
  static void PublishPartitionMetrics(const std::vector<PartitionStatus>& partitions,
                                      int64_t now_ms, MetricsRegistry* metrics);
  // The lowest checkpoint id this task's storage has not used (a crashed run
  // may have stored ids the job never completed); 1 without checkpoints.
  int64_t next_checkpoint_id() const;
  const std::string& name() const;
  // The task in log lines (LogContext): "stage-1/task-2"; "" for a one-task job.
  std::string log_label() const;

  // ---- Lockstep replay (placement.replay): the JobRunner drives every task
  // of a job whose sources all have arrival fields on one thread, step by
  // step in arrival order, as one task would run the whole job (SPEC §8).
  enum class ReplayPhase { kApply, kWatermarks, kTimers };
  // The next arrival time of source `source` in this task (reads ahead;
  // kMaxTime when it has nothing left or is not here).
  absl::StatusOr<int64_t> ReplayNextArrival(int source);
  // The earliest processing-time timer or idleness transition.
  int64_t ReplayNextTimer() const;
  // Source `source` ended: every task of it has nothing left.
  void ReplayFinishSource(int source);
  // Sets the clock to `now`, applies what the exchanges brought (sorted by
  // origin partition and offset), then: kApply: the batch of `source` that
  // arrived at `now`, if here; kWatermarks: recomputes and propagates
  // watermarks (markers to the exchanges); kTimers: fires due timers.
  absl::Status ReplaySweep(ReplayPhase phase, int64_t now, int source);
  // Commits state and closes the sinks.
  absl::Status ReplayClose();

  struct Impl;

 private:
  Task() = default;
  std::unique_ptr<Impl> impl_;
};

// The "runtime" subsystem logger (created on first use; thread-safe).
std::shared_ptr<spdlog::logger> RuntimeLogger();

// Where a job's checkpoints go: spec.checkpoint.storage, else
// file://<data dir>/checkpoints (absolute).
std::string CheckpointStorageUrl(const JobSpec& spec, const std::string& data_dir);

// "records in: N, results out: M" and the side-output counters of `metrics`.
std::string JobSummary(const MetricsRegistry& metrics, int64_t records_in, int64_t records_out);

}  // namespace caravela
