// TaskStatus: what a task publishes about itself for other threads (the
// JobRunner's progress line, the worker's status reports, the metrics) and
// its own progress line. The task thread writes; readers get relaxed
// atomics or, for per-partition and activity reports, a copy under a mutex
// refreshed at most every 250 ms (PublishPartitions).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "worker/runtime/task.h"
#include "worker/runtime/task_context.h"
#include "worker/runtime/task_graph.h"

namespace caravela {

class TaskStatus {
 public:
  TaskStatus(const TaskContext& ctx, TaskGraph& graph);
  ~TaskStatus();

  // ---- written by the task thread
  void AddRecordsIn(int64_t n) { records_in_.fetch_add(n, std::memory_order_relaxed); }
  void AddExchangeRecordsIn(int64_t n) {
    exchange_records_in_.fetch_add(n, std::memory_order_relaxed);
  }
  void AddRecordOut() { records_out_.fetch_add(1, std::memory_order_relaxed); }
  void AddInvalid() { ++invalid_total_; }
  void SetWatermark(int64_t w) { watermark_.store(w, std::memory_order_relaxed); }
  void SetLag(int64_t lag) { lag_.store(lag, std::memory_order_relaxed); }
  void SetStateBytes(int64_t b) { state_bytes_.store(b, std::memory_order_relaxed); }
  // The synchronous part of checkpoint `id` on the task thread, in ns:
  // operator state into the backend, sink pre-commits (a Kafka sink's
  // flush), barriers into the exchanges, the state snapshot (RocksDB's
  // memtable flush and checkpoint; a standalone task: the whole write).
  struct CheckpointSync {
    int64_t state_flush_ns = 0;
    int64_t sink_precommit_ns = 0;
    int64_t barriers_ns = 0;
    int64_t snapshot_ns = 0;
    int64_t total_ns() const {
      return state_flush_ns + sink_precommit_ns + barriers_ns + snapshot_ns;
    }
  };
  void AddCheckpointSync(const CheckpointSync& s);
  // After a checkpoint released the exchange inputs: their alignment times
  // (ExchangeReader::alignment_times) summed, and the longest of the last.
  void SetAlignment(int64_t total_ns, int64_t last_ns, int64_t last_skew_ns);
  // Source partitions (offset, lag, watermark, idle; idleness changes are
  // logged), side-output totals and exchange inputs, for partitions() and
  // activity(); at most every 250 ms unless `now`.
  void PublishPartitions(bool now = false);
  // Sources are about to be replaced (a restore): partitions() must not
  // read them live.
  void ForgetLiveSources();
  // The progress line (options.progress_interval_ms), at most that often
  // unless `force`. `last_checkpoint` 0: none yet.
  void Progress(bool force, int64_t watermark, int64_t last_checkpoint,
                std::chrono::steady_clock::time_point last_checkpoint_at);
  void StartProgress() { last_progress_ = std::chrono::steady_clock::now(); }

  // ---- thread-safe readers
  int64_t records_in() const { return records_in_.load(std::memory_order_relaxed); }
  int64_t records_out() const { return records_out_.load(std::memory_order_relaxed); }
  int64_t watermark() const { return watermark_.load(std::memory_order_relaxed); }
  int64_t lag() const { return lag_.load(std::memory_order_relaxed); }
  int64_t state_bytes() const { return state_bytes_.load(std::memory_order_relaxed); }
  std::vector<Task::PartitionStatus> partitions() const;
  Task::Activity activity() const;

 private:
  // Per published partition of a Kafka source: where partitions() reads
  // its live position and log end (nulls otherwise).
  struct LiveLag {
    const RawSource* raw = nullptr;
    const std::atomic<int64_t>* applied = nullptr;
  };

  const TaskContext& ctx_;
  TaskGraph& graph_;
  std::atomic<int64_t> records_in_{0};
  std::atomic<int64_t> exchange_records_in_{0};
  std::atomic<int64_t> records_out_{0};
  std::atomic<int64_t> watermark_{kMinTime};
  std::atomic<int64_t> state_bytes_{0};  // as of the last checkpoint: sum over tables
  std::atomic<int64_t> lag_{0};          // records behind on the sources
  mutable std::mutex mu_;
  std::vector<Task::PartitionStatus> partitions_;  // guarded by mu_
  std::vector<LiveLag> live_;                      // guarded by mu_
  Task::Activity activity_;                        // guarded by mu_
  std::chrono::steady_clock::time_point published_at_{};
  int64_t invalid_total_ = 0;
  std::chrono::steady_clock::time_point last_progress_{};
  // Where a task's time goes (task_* metrics and Activity): written by the
  // task thread, published with the partitions.
  std::atomic<int64_t> sync_total_ns_{0};
  std::atomic<int64_t> sync_last_ns_[4] = {};  // CheckpointSync's parts, in order
  std::atomic<int64_t> alignment_total_ns_{0};
  std::atomic<int64_t> alignment_last_ns_{0};
  std::atomic<int64_t> alignment_last_skew_ns_{0};
  std::atomic<int64_t> backpressure_ns_{0};  // sum over the exchange writers
  struct TimingMetrics;
  std::unique_ptr<TimingMetrics> timing_metrics_;  // created at the first publish
  void PublishTiming();
  int64_t progress_records_in_ = 0;
};

}  // namespace caravela
