// TaskCheckpointer: a task's part of checkpoints (SPEC §6, §8), Flink's
// SubtaskCheckpointCoordinator. It opens the task's checkpoint manager and
// epoch, restores the latest checkpoint (or savepoint, or a checkpoint taken
// with another parallelism: task_rescale.cc) into the task's state,
// sources, operators and sinks, and takes checkpoints: the manifest (source
// offsets and watermark state, operator watermarks, sink pre-commits),
// barriers into the exchanges, the state upload, then the sinks' commit.
//
// A standalone task is a one-task job: its own CheckpointCoordinator
// (worker/checkpoint/checkpoint_coordinator.h) on the task's processing
// time says when to take a checkpoint (Drive). A task of a parallel
// job follows the job's coordinator (ServeJob): once n is triggered and
// every exchange input is aligned on barrier n, it snapshots its state and
// releases the barriers; the snapshot uploads on a thread of its own while
// the task goes on (Flink's asynchronous phase), and when its manifest is
// written the job hears that the task stored n. It commits its sinks when n
// is complete job-wide.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "worker/checkpoint/checkpoint_coordinator.h"
#include "worker/checkpoint/checkpoint_manager.h"
#include "worker/runtime/task_context.h"
#include "worker/runtime/task_graph.h"
#include "worker/runtime/task_status.h"

namespace caravela {

class TaskCheckpointer {
 public:
  // `flush` writes operator state into the backend and flushes sinks: what
  // a snapshot must hold (Task::Impl::Commit(true)).
  TaskCheckpointer(TaskContext& ctx, TaskGraph& graph, TaskStatus& status,
                   std::function<absl::Status()> flush)
      : ctx_(ctx), graph_(graph), status_(status), flush_(std::move(flush)) {}

  // Before the graph is built: the manager, the epoch (counted durably at
  // every start of a standalone job), a savepoint's manifest.
  absl::Status Open();
  // After the graph is built: restores what Open found, if anything (sinks
  // of a fresh start drop what a crashed run left).
  absl::Status Restore();
  // Gives each operator here fed only through keyed exchanges its key
  // groups (OperatorContext::set_key_groups). Before Restore.
  void AssignKeyGroups();
  // Standalone: does what the task's coordinator says is due now (a
  // checkpoint spec.checkpoint.interval after the previous one); with
  // `stop`, the job's last checkpoint. No-op without periodic checkpoints.
  absl::Status Drive(bool stop);
  // Takes checkpoint `id` (0: the manager's next id) or, with a
  // `savepoint_dir`, a savepoint; standalone tasks commit their sinks at once.
  absl::Status Take(const std::string& savepoint_dir, int64_t id = 0);
  // Parallel jobs: commits a checkpoint complete job-wide, stores a
  // triggered one once aligned; after a stopping one, stopped() is true.
  absl::Status ServeJob();

  bool enabled() const { return manager_ != nullptr; }
  bool periodic() const { return manager_ != nullptr && interval_ms_ > 0; }
  int64_t next_id() const { return manager_ == nullptr ? 1 : manager_->next_checkpoint_id(); }
  int64_t last_id() const { return last_id_; }
  std::chrono::steady_clock::time_point last_at() const { return last_at_; }
  int64_t committed_id() const { return committed_id_; }
  bool stopped() const { return stopped_; }

 private:
  // Flushes, fills the manifest (sources, operators, sink pre-commits) and
  // writes barrier `job_id` (0: the manager's next id) into the exchanges.
  absl::StatusOr<CheckpointManifest> Begin(int64_t job_id);
  // State size metrics and the task status' state bytes.
  void RecordStateSize();
  // Metrics and logs of a checkpoint or savepoint stored, begun at `t0`.
  void Finished(const std::string& savepoint_dir, const CheckpointStats& stats,
                std::chrono::steady_clock::time_point t0);
  // Parallel jobs: Begin(n), the state snapshot, then the upload on a thread
  // of its own (upload_), which ServeJob polls.
  absl::Status StartUpload(int64_t n);
  GraphBuilder Builder() const { return GraphBuilder(ctx_, graph_, manager_ != nullptr); }
  absl::Status ApplyManifest(const CheckpointManifest& m);
  // FailedPrecondition if `m` was taken by another job graph (spec_hash).
  absl::Status CheckSameGraph(const CheckpointManifest& m) const;
  // Parallel jobs restored with another parallelism than the checkpoint's
  // (task_rescale.cc): gathers this task's share of the old tasks' state.
  bool Rescaled() const;
  // Refuses a checkpoint whose state is divided into other key groups than
  // spec.max_parallelism.
  absl::Status CheckKeyGroups(const CheckpointManifest& m) const;
  // `regroup`: gather keys from every old task even where the task count is
  // the same (a checkpoint from before key groups).
  absl::Status RestoreRescaled(bool regroup = false);
  // Parallel jobs restoring a checkpoint: the part names of the sinks this
  // task continues (ctx.sink_parts), before the graph opens them.
  absl::Status LoadSinkParts();
  // The parallelism the restored checkpoint was taken with.
  int OldParallelism() const;
  // Per input of operator `on`: the key paths that route its records.
  absl::StatusOr<std::vector<std::vector<FieldPath>>> RescaleKeys(
      const task_internal::OperatorNode& on) const;
  // Publishes the source offsets of checkpoint `id`, now complete, to the
  // job's consumer group `caravela-<job>` (lag tools read them there).
  void CommitSourceOffsets(int64_t id);

  TaskContext& ctx_;
  TaskGraph& graph_;
  TaskStatus& status_;
  std::function<absl::Status()> flush_;
  // Null when the job has no checkpoints and no savepoint is used.
  std::unique_ptr<CheckpointManager> manager_;
  int64_t interval_ms_ = 0;  // spec.checkpoint.interval
  // Standalone: the one-task job's coordinator, started at the first Drive.
  CheckpointCoordinator coordinator_;
  int64_t last_id_ = 0;  // for the progress line
  std::chrono::steady_clock::time_point last_at_;
  std::string spec_hash_;
  std::optional<CheckpointManifest> savepoint_;  // options.from_savepoint's manifest
  // Parallel jobs: the last checkpoint this task stored and committed, and
  // whether it stopped reading input after a stopping checkpoint.
  int64_t stored_id_ = 0;
  int64_t committed_id_ = 0;
  bool stopped_ = false;
  // The checkpoint uploading, when upload_ is valid. Declared after
  // manager_: destroyed first, so a task that ends meanwhile waits for it.
  int64_t uploading_id_ = 0;
  std::chrono::steady_clock::time_point upload_started_;
  std::future<absl::StatusOr<CheckpointStats>> upload_;
  TaskStatus::CheckpointSync sync_;  // of the checkpoint being taken (Begin on)
};

}  // namespace caravela
