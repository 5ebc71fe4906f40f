// Pipeline: runs one job in-process (`caravela run`, demos, reconcile,
// tests): Pipeline::Create plans the job and builds its tasks through
// JobRunner (worker/runtime/job_runner.h: the plan's tasks as threads, or one
// task on the calling thread when every stage has one task). What a task
// does per step (decode, quarantine, the operator DAG, watermarks, timers,
// state commits), how processing time is driven, and where side outputs
// without a sink go: the header comment of worker/runtime/task.h.
#pragma once

#include <atomic>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "caravela/v1/job.pb.h"
#include "common/job_spec.h"
#include "common/metrics.h"
#include "common/status.h"
#include "common/time_util.h"
#include "worker/state/state_backend.h"

namespace caravela {

// The process-wide RocksDB budget of a parallel job (RunOptions::state_budget).
inline constexpr size_t kStateBlockCacheBytes = size_t{64} << 20;
inline constexpr size_t kStateWriteBufferBytes = size_t{128} << 20;

struct RunOptions {
  // Directory for RocksDB state and the default dead-letter file.
  std::string data_dir = "caravela-data";
  // Use the in-memory state backend instead of RocksDB (tests).
  bool in_memory_state = false;
  // Bootstrap of the embedded broker, used by Kafka sources/sinks that name none.
  std::string embedded_bootstrap;
  // Processing-time clock when not driven by arrival times; null = system clock.
  const Clock* clock = nullptr;
  // Set to true (e.g. from a signal handler) to stop an unbounded run. The
  // watermark does not advance: open windows stay open (no FINAL).
  const std::atomic<bool>* stop = nullptr;
  // Set to true when no more input will be produced: unbounded sources then
  // read up to their current end and finish, the watermark goes to +inf and
  // everything fires, as for bounded inputs (demos, tests, replays).
  const std::atomic<bool>* end_of_input = nullptr;
  // Start from this savepoint (a directory written by savepoint_on_stop)
  // instead of the latest checkpoint.
  std::string from_savepoint;
  // When the run ends (input drained or stop), write a savepoint here.
  std::string savepoint_on_stop;
  // Tasks per stage (SPEC §8); 0 = spec.parallelism.
  int parallelism = 0;
  // How the tasks of a parallel job exchange records (worker/exchange):
  // kMemory, bounded queues inside this process (every task of `caravela
  // run` is here), kKafka, topics `caravela.<job>.<operator>` on the
  // job's cluster (the embedded broker if it names none), or kNetwork, gRPC
  // streams on loopback, as tasks on different workers do.
  enum class Exchange { kMemory, kKafka, kNetwork };
  Exchange exchange = Exchange::kMemory;
  // RocksDB memory shared by the tasks of the process (one block cache and
  // memtable budget); null: a parallel job makes one (kStateBlockCacheBytes,
  // kStateWriteBufferBytes), a single task uses its instance's own.
  std::shared_ptr<StateMemoryBudget> state_budget;
  int batch_size = 1024;
  // Operators persist their in-memory working set into the state backend (and
  // the backend commits) at least this often, besides checkpoints and the end.
  // Rows that live shorter than this never reach RocksDB: with 1 s instead of
  // 10 s the interval-join bench runs 3x slower (bench/join_bench --flush-ms).
  int state_flush_interval_ms = 10000;
  // Progress line on stderr every `progress_interval_ms` (0 = none).
  int progress_interval_ms = 0;
  std::FILE* progress_out = stderr;
};

class JobRunner;

// The one-process way to run a job (`caravela run`): plans it and runs its
// tasks (JobRunner; one task, on the calling thread, when every stage has
// one task).
class Pipeline {
 public:
  ~Pipeline();
  // Plans the job, builds its tasks (operators, state, sources, exchanges,
  // sinks). Errors name the part.
  static absl::StatusOr<std::unique_ptr<Pipeline>> Create(const JobSpec& spec,
                                                          const RunOptions& options);
  // Runs until every source is bounded and drained (then the watermark goes
  // to +inf and everything fires) or options.stop is set. Closes sinks.
  absl::Status Run();

  // The job's series (a view under its job_id and job_name labels: lookups
  // take the other labels only; ToPrometheusText has them all).
  MetricsRegistry& metrics() { return *job_metrics_; }
  // Updates the gauges read at a scrape (per source partition: offset, lag,
  // watermark, idle; Task::PublishPartitionMetrics). Thread-safe.
  void RefreshMetrics();
  // The job as the coordinator's API shows one (proto/caravela/v1/job.proto):
  // RUNNING, its plan's stages, and per task its live status (worker
  // "local"). For `caravela run --http`'s dashboard. Thread-safe.
  v1::Job Status();
  // The state of the job's first task (the whole job's when it runs as one).
  StateBackend& state();
  // A one-line human summary of records in/out and side outputs.
  std::string Summary() const;
  int task_count() const;

 private:
  Pipeline() = default;
  MetricsRegistry metrics_;
  // metrics_ under job_id and job_name (both the job's name): every series
  // of the job, labelled as a cluster worker labels them.
  std::unique_ptr<MetricsRegistry> job_metrics_;
  std::string job_name_;
  std::unique_ptr<JobRunner> runner_;
};

}  // namespace caravela
