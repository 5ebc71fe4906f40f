#include "worker/runtime/task_checkpointer.h"

#include <algorithm>
#include <map>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "common/failpoint.h"
#include "common/logging.h"
#include "spdlog/spdlog.h"
#include "worker/checkpoint/manifest_fields.h"
#include "worker/runtime/job_checkpoints.h"

namespace caravela {
namespace {

std::shared_ptr<spdlog::logger> Log() { return RuntimeLogger(); }

// Milliseconds since `t0`.
int64_t MsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() -
                                                               t0)
      .count();
}

constexpr int kTaskId = 0;  // one task per job in-process (the cluster assigns more)

}  // namespace

using task_internal::OperatorNode;
using task_internal::ReaderNode;
using task_internal::SinkNode;
using task_internal::SourceNode;
using task_internal::WriterNode;

absl::Status TaskCheckpointer::CheckKeyGroups(const CheckpointManifest& m) const {
  if (!m.has_max_parallelism() || m.max_parallelism() == ctx_.spec.max_parallelism) {
    return absl::OkStatus();
  }
  return absl::FailedPreconditionError(absl::StrCat(
      "checkpoint ", m.checkpoint_id(), " of job ", ctx_.spec.name, " divides its state into ",
      m.max_parallelism(), " key groups, but spec.max_parallelism is ", ctx_.spec.max_parallelism,
      ": a job with state keeps its max_parallelism; set it back to ", m.max_parallelism(),
      ", or start the job without its checkpoints"));
}

bool TaskCheckpointer::Rescaled() const {
  return ctx_.parallel() && ctx_.placement.restore_parallelism > 0 &&
         ctx_.placement.restore_parallelism != ctx_.placement.plan->parallelism;
}

void TaskCheckpointer::CommitSourceOffsets(int64_t id) {
  for (SourceNode& src : graph_.sources) {
    if (!src.present || src.pos.checkpointed_id != id) continue;
    // Monitoring only: a failure is logged, never fatal.
    if (absl::Status st = src.raw->CommitOffsets(src.pos.checkpointed); !st.ok()) {
      Log()->warn("source {}: {}", src.spec->name, std::string(st.message()));
    }
  }
}

absl::Status TaskCheckpointer::Open() {
  const bool periodic = ctx_.spec.checkpoint.interval > 0;
  if (ctx_.parallel()) {
    // The job (JobRunner) owns the epoch and the commit records; a task only
    // stores its own state under <job>/task-<id>/.
    ctx_.epoch = ctx_.placement.epoch;
    if (!periodic) return absl::OkStatus();
    const std::string url = CheckpointStorageUrl(ctx_.spec, ctx_.options.data_dir);
    const std::string dir = absl::StrCat(ctx_.options.data_dir, "/task-", ctx_.placement.global_id);
    // One more than `retain`: the newest task checkpoint may not be complete
    // job-wide yet, and the job's last complete one must survive its GC.
    ASSIGN_OR_RETURN(manager_,
                     CheckpointManager::Open(url, ctx_.spec.name, ctx_.placement.global_id,
                                             dir + "/checkpoint-scratch",
                                             std::max(1, ctx_.spec.checkpoint.retain) + 1));
    // The job's last complete checkpoint outlives any number of newer ones
    // this task stored in runs that died before the job completed them.
    manager_->Pin(ctx_.placement.restore_checkpoint);
    spec_hash_ = JobGraphHash(ctx_.spec);
    return LoadSinkParts();
  }
  if (!periodic && ctx_.options.from_savepoint.empty() && ctx_.options.savepoint_on_stop.empty()) {
    return absl::OkStatus();
  }
  const std::string url = CheckpointStorageUrl(ctx_.spec, ctx_.options.data_dir);
  ASSIGN_OR_RETURN(manager_, CheckpointManager::Open(url, ctx_.spec.name, kTaskId,
                                                     ctx_.options.data_dir + "/checkpoint-scratch",
                                                     std::max(1, ctx_.spec.checkpoint.retain)));
  spec_hash_ = JobGraphHash(ctx_.spec);
  // The epoch is counted durably at every start, before anything is written,
  // so that revisions published after a restart exceed everything published
  // before it, even output that came after the last checkpoint.
  const std::string key = manager_->prefix() + "epoch";
  ASSIGN_OR_RETURN(std::optional<int64_t> previous, ReadEpoch(manager_->storage(), key));
  if (previous.has_value()) ctx_.epoch = *previous + 1;
  if (!ctx_.options.from_savepoint.empty()) {
    // A savepoint may come from another data dir with a later epoch: the
    // revisions it published must stay below ours too.
    ASSIGN_OR_RETURN(savepoint_, CheckpointManager::LoadSavepoint(ctx_.options.from_savepoint));
    ctx_.epoch = std::max(ctx_.epoch, savepoint_->epoch() + 1);
  }
  RETURN_IF_ERROR(manager_->storage().Write(key, std::to_string(ctx_.epoch)));
  interval_ms_ = ctx_.spec.checkpoint.interval;
  return absl::OkStatus();
}

absl::Status TaskCheckpointer::Restore() {
  if (manager_ == nullptr) return absl::OkStatus();
  std::optional<CheckpointManifest> m;
  if (ctx_.parallel()) {
    if (ctx_.placement.restore_checkpoint > 0) {
      stored_id_ = committed_id_ = ctx_.placement.restore_checkpoint;
      if (Rescaled()) return RestoreRescaled();
      ASSIGN_OR_RETURN(m, manager_->LatestUpTo(ctx_.placement.restore_checkpoint));
      if (!m.has_value() || m->checkpoint_id() != ctx_.placement.restore_checkpoint) {
        return absl::DataLossError(
            absl::StrCat("task ", ctx_.placement.global_id, " of job ", ctx_.spec.name,
                         ": checkpoint ", ctx_.placement.restore_checkpoint,
                         " is complete job-wide but this task's part of it is missing from ",
                         manager_->storage().url()));
      }
      if (!m->has_max_parallelism() && ctx_.stage->tasks > 1) {
        // Keys were owned by hash % tasks then: gather them by key group.
        Log()->info("checkpoint {} predates key groups: gathering keys by key group",
                    m->checkpoint_id());
        return RestoreRescaled(/*regroup=*/true);
      }
    }
  } else if (savepoint_.has_value()) {
    m = savepoint_;
  } else if (ctx_.spec.checkpoint.interval > 0) {
    ASSIGN_OR_RETURN(m, manager_->LatestUpTo(kMaxTime));
    // A sink whose commit cannot be redone after a crash (Kafka
    // transactions) may hold the output of an older checkpoint only: restore
    // that one and replay from it.
    int64_t committed = kMaxTime;
    for (SinkNode& sn : graph_.sinks) {
      ASSIGN_OR_RETURN(int64_t c, sn.sink->LastCommittedCheckpoint());
      if (c >= 0) committed = std::min(committed, c);
    }
    if (m.has_value() && committed < m->checkpoint_id()) {
      Log()->warn(
          "checkpoint {} is complete but a sink committed only up to {}: "
          "restoring that one",
          m->checkpoint_id(), committed);
      ASSIGN_OR_RETURN(m, manager_->LatestUpTo(committed));
    }
  }
  if (!m.has_value()) {
    // A fresh start: checkpointed sinks drop whatever a crashed run left.
    for (SinkNode& sn : graph_.sinks) RETURN_IF_ERROR(sn.sink->Recover(0, ""));
    return absl::OkStatus();
  }
  RETURN_IF_ERROR(CheckSameGraph(*m));
  RETURN_IF_ERROR(CheckKeyGroups(*m));
  const auto t0 = std::chrono::steady_clock::now();
  if (!ctx_.options.from_savepoint.empty()) {
    ASSIGN_OR_RETURN(CheckpointManifest sp,
                     manager_->RestoreSavepoint(ctx_.options.from_savepoint, *ctx_.state));
    (void)sp;
  } else {
    ASSIGN_OR_RETURN(RestoreStats rs, manager_->RestoreState(*m, *ctx_.state));
    (void)rs;
  }
  RETURN_IF_ERROR(ApplyManifest(*m));
  const int64_t ms = MsSince(t0);
  ctx_.metrics->Get("restores_total")->Add();
  Log()->info("restored {} {} (epoch {}) in {} ms; this run is epoch {}",
              ctx_.options.from_savepoint.empty() ? "checkpoint" : "savepoint", m->checkpoint_id(),
              m->epoch(), ms, ctx_.epoch);
  return absl::OkStatus();
}

absl::Status TaskCheckpointer::CheckSameGraph(const CheckpointManifest& m) const {
  if (m.spec_hash().empty() || JobGraphHashMatches(ctx_.spec, m.spec_hash()))
    return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      "checkpoint ", m.checkpoint_id(), " of job ", ctx_.spec.name,
      " was taken by a different job graph (sources, operators or sinks changed): its state "
      "cannot be restored into this one. Start from scratch with another --data-dir (or "
      "checkpoint storage), or run the job version that wrote it."));
}

absl::Status TaskCheckpointer::ApplyManifest(const CheckpointManifest& m) {
  if (const std::optional<int64_t> now = ManifestClock(m); now.has_value() && ctx_.arrival_mode) {
    ctx_.manual_clock.Set(*now);
  }
  for (const auto& sc : m.sources()) {
    int id = graph_.NodeId(sc.name());
    if (id < 0 || id >= graph_.S()) {
      return absl::DataLossError(
          absl::StrCat("checkpoint ", m.checkpoint_id(), " names unknown source ", sc.name()));
    }
    SourceNode& src = graph_.sources[id];
    std::map<int32_t, int64_t> start;
    for (const auto& pc : sc.partitions()) {
      if (pc.next_offset() >= 0) start[pc.partition()] = pc.next_offset();
    }
    {
      // Task::partitions() must not read the source being replaced.
      status_.ForgetLiveSources();
    }
    ASSIGN_OR_RETURN(src.raw, Builder().OpenRawSource(src, start));
    src.pos.applied = src.raw->Positions();
    src.pos.ResetLiveApplied();
    if (const std::optional<std::string> wm = SourceWatermarkState(m, sc)) {
      if (!src.wm->Import(*wm)) {
        return absl::DataLossError(absl::StrCat("checkpoint ", m.checkpoint_id(),
                                                ": bad watermark state of source ", sc.name()));
      }
    }
    int n = 0;
    for (std::string& v : SourcePartitionIds(m, sc)) src.partition_ids.emplace(std::move(v), n++);
    if (const std::optional<int64_t> la = SourceLastArrival(m, sc)) {
      src.input.last_arrival = *la;
      src.pos.applied_arrival = src.input.last_arrival;
    }
  }
  for (const auto& oc : m.operators()) {
    int id = graph_.NodeId(oc.name());
    const std::optional<int64_t> w = OperatorWatermark(oc);
    if (id < graph_.S() || !w.has_value()) {
      return absl::DataLossError(
          absl::StrCat("checkpoint ", m.checkpoint_id(), ": bad state of operator ", oc.name()));
    }
    graph_.ops[id - graph_.S()].ctx->set_watermark(*w);
  }
  // Table pointers died with the old state: operators reopen theirs, with
  // the clock and watermarks of the checkpoint (timers are armed from them).
  for (OperatorNode& on : graph_.ops) {
    if (on.here) RETURN_IF_ERROR(on.op->Open(*on.ctx));
  }
  for (const auto& sc : m.sinks()) {
    if (sc.index() < 0 || sc.index() >= static_cast<int>(graph_.sinks.size())) {
      return absl::DataLossError(
          absl::StrCat("checkpoint ", m.checkpoint_id(), " names unknown sink ", sc.index()));
    }
    absl::Status st = graph_.sinks[sc.index()].sink->Recover(m.checkpoint_id(), sc.state());
    if (!st.ok()) {
      return absl::Status(st.code(), absl::StrCat("sink for ", graph_.sinks[sc.index()].name,
                                                  ": recovering checkpoint ", m.checkpoint_id(),
                                                  ": ", st.message()));
    }
  }
  return absl::OkStatus();
}

absl::Status TaskCheckpointer::Drive(bool stop) {
  if (!periodic()) return absl::OkStatus();
  const int64_t now = ctx_.clock->NowMs();
  if (!coordinator_.started()) {
    CheckpointCoordinatorOptions options;
    options.tasks = 1;
    options.interval_ms = interval_ms_;  // no timeout: Take is synchronous
    coordinator_ = CheckpointCoordinator(options);
    coordinator_.Start(now, next_id());
  }
  if (stop) coordinator_.RequestStop();
  for (;;) {
    const CheckpointAction a = coordinator_.Poll(now);
    switch (a.kind) {
      case CheckpointAction::kNone:
        return absl::OkStatus();
      case CheckpointAction::kTrigger:
        RETURN_IF_ERROR(Take("", a.id));
        coordinator_.TaskStored(0, a.id);
        break;
      case CheckpointAction::kComplete:  // Take committed the sinks: the task is the job
      case CheckpointAction::kFinish:
        break;
      case CheckpointAction::kFail:
        return absl::InternalError(absl::StrCat("checkpoint ", a.id, ": ", a.why));
    }
  }
}

absl::StatusOr<CheckpointManifest> TaskCheckpointer::Begin(int64_t job_id) {
  sync_ = TaskStatus::CheckpointSync();
  auto t = std::chrono::steady_clock::now();
  auto lap = [&t]() {
    const auto now = std::chrono::steady_clock::now();
    const int64_t ns = std::chrono::duration_cast<std::chrono::nanoseconds>(now - t).count();
    t = now;
    return ns;
  };
  RETURN_IF_ERROR(flush_());  // operator state into the backend, committed
  sync_.state_flush_ns = lap();
  const int64_t id = job_id > 0 ? job_id : manager_->next_checkpoint_id();
  CheckpointManifest m;
  m.set_checkpoint_id(id);
  m.set_job_name(ctx_.spec.name);
  m.set_spec_hash(spec_hash_);
  m.set_epoch(ctx_.epoch);
  m.set_max_parallelism(ctx_.spec.max_parallelism);
  for (SourceNode& src : graph_.sources) {
    if (!src.present) continue;
    src.pos.checkpointed = src.pos.applied;
    src.pos.checkpointed_id = id;
    auto* sc = m.add_sources();
    sc->set_name(src.spec->name);
    for (size_t p = 0; p < src.pos.applied.size(); ++p) {
      auto* pc = sc->add_partitions();
      pc->set_partition(static_cast<int32_t>(p));
      pc->set_next_offset(src.pos.applied[p]);
      if (static_cast<int>(p) < src.wm->partition_count()) {
        pc->set_watermark(src.wm->partition_watermark(static_cast<int>(p)));
        pc->set_idle(src.wm->partition_idle(static_cast<int>(p)));
      }
    }
    SetSourceWatermarkState(&m, sc, src.wm->Export());
    if (!src.partition_ids.empty()) {
      std::vector<std::string> by_id(src.partition_ids.size());
      for (const auto& [value, pid] : src.partition_ids) by_id[pid] = value;
      SetSourcePartitionIds(&m, sc, by_id);
    }
    if (ctx_.arrival_mode) SetSourceLastArrival(&m, sc, src.pos.applied_arrival);
  }
  if (ctx_.arrival_mode) SetManifestClock(&m, ctx_.clock->NowMs());
  for (OperatorNode& on : graph_.ops) {
    if (!on.here) continue;
    auto* oc = m.add_operators();
    oc->set_name(on.spec->name);
    SetOperatorWatermark(oc, on.ctx->watermark());
  }
  for (size_t i = 0; i < graph_.sinks.size(); ++i) {
    ASSIGN_OR_RETURN(std::string st, graph_.sinks[i].sink->PreCommit(id));
    graph_.sinks[i].CountRejected();
    auto* sc = m.add_sinks();
    sc->set_index(static_cast<int32_t>(i));
    sc->set_state(st);
    sc->set_part(graph_.sinks[i].part);
  }
  sync_.sink_precommit_ns = lap();
  // Barrier `id` after every record this task wrote into its exchanges: the
  // consumers' checkpoint `id` holds exactly the records before it (SPEC §8).
  const bool stop = ctx_.job != nullptr && ctx_.job->stops_at(id);
  for (WriterNode& wn : graph_.writers) RETURN_IF_ERROR(wn.writer->WriteBarrier(id, stop));
  sync_.barriers_ns = lap();
  return m;
}

void TaskCheckpointer::RecordStateSize() {
  // State per table (RocksDB properties), read while it is committed.
  int64_t state_total = 0;
  for (const StateBackend::TableStats& t : ctx_.state->Stats()) {
    const std::string labels = absl::StrCat("task=\"", ctx_.name, "\",table=\"", t.table, "\"");
    ctx_.metrics->Get("state_keys", labels)->Set(static_cast<int64_t>(t.keys));
    ctx_.metrics->Get("state_bytes", labels)->Set(static_cast<int64_t>(t.bytes));
    state_total += static_cast<int64_t>(t.bytes);
  }
  status_.SetStateBytes(state_total);
}

void TaskCheckpointer::Finished(const std::string& savepoint_dir, const CheckpointStats& stats,
                                std::chrono::steady_clock::time_point t0) {
  const int64_t id = stats.checkpoint_id;
  const int64_t ms = MsSince(t0);
  ctx_.metrics->Get(savepoint_dir.empty() ? "checkpoints_total" : "savepoints_total")->Add();
  ctx_.metrics->Get("checkpoint_uploaded_bytes_total")
      ->Add(static_cast<int64_t>(stats.bytes_uploaded));
  ctx_.metrics->Get("checkpoint_last_duration_ms")->Set(ms);
  ctx_.metrics->Get("checkpoint_last_state_bytes")->Set(static_cast<int64_t>(stats.bytes_total));
  ctx_.metrics->Get("checkpoint_last_id")->Set(id);
  last_id_ = id;
  last_at_ = std::chrono::steady_clock::now();
  Log()->debug("{} {}: {} ms (snapshot {} ms), {} of {} bytes uploaded",
               savepoint_dir.empty() ? "checkpoint" : "savepoint", id, ms, stats.snapshot_ms,
               stats.bytes_uploaded, stats.bytes_total);
  if (!savepoint_dir.empty()) {
    Log()->info("savepoint {} written to {}", id, savepoint_dir);
  }
}

absl::Status TaskCheckpointer::Take(const std::string& savepoint_dir, int64_t job_id) {
  const auto t0 = std::chrono::steady_clock::now();
  ASSIGN_OR_RETURN(CheckpointManifest m, Begin(job_id));
  const int64_t id = m.checkpoint_id();
  CheckpointStats stats;
  const auto write_start = std::chrono::steady_clock::now();
  if (savepoint_dir.empty()) {
    ASSIGN_OR_RETURN(stats, manager_->Write(*ctx_.state, std::move(m)));
  } else {
    ASSIGN_OR_RETURN(stats, manager_->WriteSavepoint(*ctx_.state, std::move(m), savepoint_dir));
  }
  // A standalone task writes its checkpoint on its thread: all of it is sync.
  sync_.snapshot_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                          std::chrono::steady_clock::now() - write_start)
                          .count();
  status_.AddCheckpointSync(sync_);
  // The manifest is the commit point: now the sinks publish. In a parallel
  // job the commit point is the job's record once every task stored `id`
  // (ServeCheckpoints commits then).
  if (!ctx_.parallel()) {
    for (SinkNode& sn : graph_.sinks) RETURN_IF_ERROR(sn.sink->Commit(id));
    Failpoint("checkpoint.after_sink_commit");
    if (savepoint_dir.empty()) CommitSourceOffsets(id);
    // The job's checkpoint is this task's (age: job_checkpoint_age).
    ctx_.metrics->Get("job_checkpoint_last_completed_timestamp_ms")->Set(SystemClock().NowMs());
  }
  RecordStateSize();
  Finished(savepoint_dir, stats, t0);
  return absl::OkStatus();
}

absl::Status TaskCheckpointer::StartUpload(int64_t n) {
  const auto t0 = std::chrono::steady_clock::now();
  ASSIGN_OR_RETURN(CheckpointManifest m, Begin(n));
  const auto snapshot_start = std::chrono::steady_clock::now();
  ASSIGN_OR_RETURN(CheckpointSnapshot snap, manager_->Snapshot(*ctx_.state, std::move(m)));
  sync_.snapshot_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                          std::chrono::steady_clock::now() - snapshot_start)
                          .count();
  status_.AddCheckpointSync(sync_);
  RecordStateSize();
  ctx_.metrics->Get("checkpoint_last_sync_duration_ms")->Set(MsSince(t0));
  uploading_id_ = n;
  upload_started_ = t0;
  upload_ =
      std::async(std::launch::async, [manager = manager_.get(), s = std::move(snap)]() mutable {
        return manager->Upload(std::move(s));
      });
  return absl::OkStatus();
}

absl::Status TaskCheckpointer::ServeJob() {
  // The checkpoint stored last uploads beside the task; once its manifest is
  // written, the job hears that this task stored it.
  if (upload_.valid()) {
    if (upload_.wait_for(std::chrono::seconds(0)) != std::future_status::ready) {
      return absl::OkStatus();
    }
    absl::StatusOr<CheckpointStats> stats = upload_.get();
    RETURN_IF_ERROR(stats.status());
    Finished("", *stats, upload_started_);
    stored_id_ = uploading_id_;
    ctx_.job->Stored(ctx_.placement.global_id, stored_id_);
    Failpoint("checkpoint.after_task_stored");
  }
  // Commit the sinks' output of a checkpoint complete job-wide.
  const int64_t done = ctx_.job->completed();
  if (done > committed_id_ && stored_id_ >= done) {
    if (manager_ != nullptr) manager_->Pin(done);
    for (SinkNode& sn : graph_.sinks) RETURN_IF_ERROR(sn.sink->Commit(done));
    committed_id_ = done;
    Failpoint("checkpoint.after_sink_commit");
    CommitSourceOffsets(done);
  }
  // Store a triggered checkpoint once every exchange input is aligned on it.
  const int64_t n = ctx_.job->triggered();
  if (n <= stored_id_ || stopped_ || manager_ == nullptr) return absl::OkStatus();
  if (committed_id_ < stored_id_) return absl::OkStatus();  // n-1 not committed yet
  for (const ReaderNode& rn : graph_.readers) {
    if (rn.reader->AlignedBarrier() != n) return absl::OkStatus();
  }
  // The state is snapshotted: the inputs go on while it uploads.
  RETURN_IF_ERROR(StartUpload(n));
  int64_t total_ns = 0, last_ns = 0, last_skew_ns = 0;
  for (ReaderNode& rn : graph_.readers) {
    rn.reader->ReleaseBarrier();
    const ExchangeReader::AlignmentTimes a = rn.reader->alignment_times();
    total_ns += a.total_ns;
    if (a.last_id == n) {
      last_ns = std::max(last_ns, a.last_ns);
      last_skew_ns = std::max(last_skew_ns, a.last_skew_ns);
    }
  }
  if (!graph_.readers.empty()) status_.SetAlignment(total_ns, last_ns, last_skew_ns);
  SubsystemLogger("checkpoint")
      ->debug(
          "checkpoint {} snapshotted: sync {} ms (state flush {}, sink pre-commit {}, barriers {}, "
          "snapshot {}), inputs aligned {} ms (skew {} ms)",
          n, sync_.total_ns() / 1000000, sync_.state_flush_ns / 1000000,
          sync_.sink_precommit_ns / 1000000, sync_.barriers_ns / 1000000,
          sync_.snapshot_ns / 1000000, last_ns / 1000000, last_skew_ns / 1000000);
  if (ctx_.job->stops_at(n)) stopped_ = true;
  return absl::OkStatus();
}

}  // namespace caravela
