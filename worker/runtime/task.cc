#include "worker/runtime/task.h"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "caravela/v1/job.pb.h"
#include "common/failpoint.h"
#include "common/logging.h"
#include "common/source_kind.h"
#include "spdlog/spdlog.h"
#include "worker/runtime/task_internal.h"

namespace caravela {

std::shared_ptr<spdlog::logger> RuntimeLogger() {
  static const std::shared_ptr<spdlog::logger> log = SubsystemLogger("runtime");
  return log;
}

std::string CheckpointStorageUrl(const JobSpec& spec, const std::string& data_dir) {
  if (!spec.checkpoint.storage.empty()) return spec.checkpoint.storage;
  return "file://" + std::filesystem::absolute(data_dir + "/checkpoints").string();
}

namespace {

std::shared_ptr<spdlog::logger> Log() { return RuntimeLogger(); }

using StepSpec = Task::Impl::StepSpec;
using StepResult = Task::Impl::StepResult;
using task_internal::SourceNode;

}  // namespace

Task::~Task() = default;

StateBackend& Task::state() { return *impl_->ctx.state; }
const std::string& Task::name() const { return impl_->ctx.name; }
std::string Task::log_label() const { return impl_->ctx.TaskLabel(); }
int64_t Task::records_in() const { return impl_->status.records_in(); }
int64_t Task::records_out() const { return impl_->status.records_out(); }
int64_t Task::watermark() const { return impl_->status.watermark(); }
int64_t Task::next_checkpoint_id() const { return impl_->checkpointer.next_id(); }
int64_t Task::state_bytes() const { return impl_->status.state_bytes(); }
std::vector<Task::PartitionStatus> Task::partitions() const { return impl_->status.partitions(); }
Task::Activity Task::activity() const { return impl_->status.activity(); }

int64_t Task::consumer_lag() const {
  // Live per partition (see partitions()) once published; before that, as of
  // the task's last watermark update.
  const std::vector<PartitionStatus> parts = partitions();
  if (parts.empty()) return impl_->status.lag();
  int64_t lag = 0;
  for (const PartitionStatus& p : parts) lag += p.lag;
  return lag;
}

void Task::PublishPartitionMetrics(const std::vector<PartitionStatus>& partitions, int64_t now_ms,
                                   MetricsRegistry* metrics) {
  for (const PartitionStatus& p : partitions) {
    const std::string labels =
        absl::StrCat("source=\"", p.source, "\",partition=\"", p.partition, "\"");
    metrics->Get("source_partition_offset", labels)->Set(p.offset);
    metrics->Get("source_partition_lag_records", labels)->Set(p.lag);
    metrics->Get("source_partition_idle", labels)->Set(p.idle ? 1 : 0);
    // Before its first record a partition has no watermark yet.
    if (p.watermark_ms <= kMinTime || p.watermark_ms >= kMaxTime) continue;
    metrics->Get("source_partition_watermark_ms", labels)->Set(p.watermark_ms);
    metrics->Get("source_partition_watermark_lag_ms", labels)
        ->Set(std::max<int64_t>(0, now_ms - p.watermark_ms));
  }
}

void Task::ActivityToProto(const Activity& a, v1::TaskActivity* out) {
  for (const auto& [side, n] : a.side_records) (*out->mutable_side_records())[side] = n;
  out->set_records_late(a.records_late);
  out->set_records_too_late(a.records_too_late);
  for (const ExchangeInputStatus& e : a.exchange_inputs) {
    v1::ExchangeInputStatus* p = out->add_exchange_inputs();
    p->set_exchange(e.exchange);
    p->set_partition(e.partition);
    p->set_producer_task(e.producer_task);
    p->set_watermark_ms(e.watermark_ms);
    p->set_idle(e.idle);
  }
  for (const std::string& w : a.waiting) out->add_waiting(w);
  out->set_exchange_records_in(a.exchange_records_in);
  out->set_alignment_ms(a.alignment_ms);
  out->set_last_alignment_ms(a.last_alignment_ms);
  out->set_last_alignment_skew_ms(a.last_alignment_skew_ms);
  out->set_backpressure_ms(a.backpressure_ms);
  out->set_checkpoint_sync_ms(a.checkpoint_sync_ms);
  out->set_last_checkpoint_sync_ms(a.last_checkpoint_sync_ms);
  out->set_last_state_flush_ms(a.last_state_flush_ms);
  out->set_last_sink_precommit_ms(a.last_sink_precommit_ms);
  out->set_last_snapshot_ms(a.last_snapshot_ms);
}

void Task::PartitionToProto(const PartitionStatus& p, v1::SourcePartitionStatus* out) {
  out->set_source(p.source);
  out->set_partition(p.partition);
  out->set_offset(p.offset);
  out->set_lag(p.lag);
  out->set_watermark_ms(p.watermark_ms);
  out->set_idle(p.idle);
}

absl::StatusOr<std::unique_ptr<Task>> Task::Create(const JobSpec& spec, RunOptions options,
                                                   TaskPlacement placement,
                                                   MetricsRegistry* metrics) {
  std::unique_ptr<Task> t(new Task());
  t->impl_ = std::make_unique<Impl>();
  Impl& im = *t->impl_;
  TaskContext& ctx = im.ctx;
  ctx.spec = spec;
  ctx.options = std::move(options);
  ctx.placement = std::move(placement);
  ctx.metrics = metrics;
  ctx.job = ctx.placement.checkpoints;
  ctx.name = spec.name;
  std::string dir = ctx.options.data_dir;
  if (ctx.parallel()) {
    ctx.stage = &ctx.placement.plan->stages[ctx.placement.stage];
    ctx.name =
        absl::StrCat(spec.name, "/stage-", ctx.placement.stage, "/task-", ctx.placement.index);
    dir = absl::StrCat(ctx.options.data_dir, "/task-", ctx.placement.global_id);
  }
  LogContext log_context(spec.name, ctx.TaskLabel());
  if (ctx.options.in_memory_state) {
    im.state_owner = NewMemoryBackend();
  } else {
    // Every run starts from empty local state: the state of a previous run is
    // ahead of its last checkpoint (or, without checkpoints, of the input's
    // start), so reusing it would count events twice. A checkpoint or
    // savepoint, if any, is restored into it below. For the same reason its
    // memtables are not flushed when the task ends.
    std::error_code ec;
    std::filesystem::remove_all(dir + "/state", ec);
    std::filesystem::create_directories(dir, ec);
    ASSIGN_OR_RETURN(im.state_owner, OpenRocksDbBackend(dir + "/state", ctx.options.state_budget,
                                                        /*flush_on_close=*/false));
  }
  ctx.state = im.state_owner.get();
  // Processing time: arrival-driven iff every source has an arrival_field.
  // A task of a parallel job sees only part of the input: processing time is
  // the clock's (arrival times still travel with the records), unless the
  // job replays in lockstep (JobRunner), which drives every task's clock.
  ctx.arrival_mode = ArrivalDriven(spec) && (!ctx.parallel() || ctx.placement.replay);
  ctx.clock = ctx.arrival_mode ? static_cast<const Clock*>(&ctx.manual_clock)
                               : (ctx.options.clock ? ctx.options.clock : &ctx.system_clock);
  RETURN_IF_ERROR(im.checkpointer.Open());
  GraphBuilder builder(ctx, im.graph, im.checkpointer.enabled());
  RETURN_IF_ERROR(builder.Build(im.dispatch));
  im.watermarks.Init();
  im.status.PublishPartitions(
      /*now=*/true);  // partitions and their lag exist before the first batch
  im.status.StartProgress();
  im.last_flush = im.last_state_flush = std::chrono::steady_clock::now();
  Log()->debug("{} sources, {} operators, {} sinks; processing time: {}", im.graph.sources.size(),
               im.graph.ops.size(), im.graph.sinks.size(),
               ctx.arrival_mode ? "arrival field" : "clock");
  im.checkpointer.AssignKeyGroups();
  RETURN_IF_ERROR(im.checkpointer.Restore());
  return t;
}

absl::Status Task::Impl::Step(const StepSpec& s, StepResult* r) {
  if (s.exchanges == StepSpec::Exchanges::kReplay) RETURN_IF_ERROR(dispatch.ConsumeReplayInput());
  switch (s.input) {
    case StepSpec::Input::kNone:
      break;
    case StepSpec::Input::kSources:
      RETURN_IF_ERROR(StepSources(s.source_timeout_ms, &r->got, &r->inputs_done));
      break;
    case StepSpec::Input::kArrival:
      if (s.source >= 0 && s.source < graph.S()) {
        RETURN_IF_ERROR(dispatch.ApplyArrivalStep(s.source, s.arrival));
      }
      break;
  }
  if (s.exchanges == StepSpec::Exchanges::kPoll) {
    bool any_source = false;
    for (const SourceNode& src : graph.sources) any_source = any_source || src.present;
    // Wait a little on the exchanges when there is nothing else to do.
    const bool busy = r->got || (any_source && !drained && !r->inputs_done);
    RETURN_IF_ERROR(dispatch.PollReaders(busy ? 0 : s.exchange_wait_ms, &r->got));
    for (const auto& rn : graph.readers) r->inputs_done = r->inputs_done && rn.reader->finished();
  }
  if (s.watermarks) RETURN_IF_ERROR(watermarks.Update());
  if (s.timers) RETURN_IF_ERROR(watermarks.FireTimers());
  if (s.watermarks) RETURN_IF_ERROR(watermarks.SendMarkers(s.force_markers));
  // What this step wrote waits no longer than the step in a writer's buffer.
  for (auto& wn : graph.writers) RETURN_IF_ERROR(wn.writer->SendBuffered());
  if (s.flush) RETURN_IF_ERROR(Commit(false));
  return absl::OkStatus();
}

absl::Status Task::Impl::StepSources(int timeout_ms, bool* got, bool* all_done) {
  for (int i = 0; i < graph.S(); ++i) {
    SourceNode& src = graph.sources[i];
    if (!src.present || src.finished) continue;
    RETURN_IF_ERROR(ingest.FillPending(src, timeout_ms));
    if (src.spec->kind->partitioned_log() &&
        static_cast<int>(src.pos.applied.size()) != src.raw->PartitionCount()) {
      // A topic that was waited for exists now (AwaitingTopicSource): its
      // partitions, before its first record.
      status.ForgetLiveSources();
      src.pos.applied = src.raw->Positions();
      src.pos.ResetLiveApplied();
      src.wm->EnsurePartitions(src.raw->PartitionCount());
      status.PublishPartitions(/*now=*/true);
    }
    if (src.has_pending()) {
      *got = true;
      *all_done = false;
      RETURN_IF_ERROR(dispatch.ApplySourceBatch(i, src.input.pending.size() - src.input.head));
    } else if (src.raw->Exhausted()) {
      // Ends only in a step without records, so the watermark of the last
      // batch is propagated (and fires) before the end-of-input +inf.
      Log()->debug("source {} ended", src.spec->name);
      src.finished = true;
      src.wm->Finish();
    } else {
      *all_done = false;
    }
  }
  return absl::OkStatus();
}

absl::Status Task::Impl::Commit(bool force, bool state) {
  auto now = std::chrono::steady_clock::now();
  // Operator state is written behind: operators keep their working set in
  // memory and persist it at Flush, which runs at checkpoints, at the end and
  // at least every state_flush_interval_ms (so the uncommitted write batch
  // stays small). Rows that live and die between two flushes never reach
  // the backend.
  if (state && (force || now - last_state_flush >=
                             std::chrono::milliseconds(ctx.options.state_flush_interval_ms))) {
    for (auto& on : graph.ops) {
      if (on.here) RETURN_IF_ERROR(on.op->Flush(*on.ctx));
    }
    RETURN_IF_ERROR(ctx.state->Commit());
    last_state_flush = now;
  }
  if (force || now - last_flush > std::chrono::milliseconds(200)) {
    for (auto& sn : graph.sinks) {
      RETURN_IF_ERROR(sn.sink->Flush());
      sn.CountRejected();
    }
    last_flush = now;
  }
  Progress(false);
  return absl::OkStatus();
}

void Task::Impl::Progress(bool force) {
  status.Progress(force, watermarks.Lowest(), checkpointer.last_id(), checkpointer.last_at());
}

// Reads lookup-table sources up to their current end before any other record
// is applied (SPEC §5: "loaded whole before the first stream record"); the
// main loop then keeps following them (files are simply finished).
absl::Status Task::Impl::Preload() {
  for (int i = 0; i < graph.S(); ++i) {
    SourceNode& src = graph.sources[i];
    if (!src.preload || !src.present) continue;
    for (;;) {
      RETURN_IF_ERROR(ingest.FillPending(src, 20));
      if (src.has_pending()) {
        RETURN_IF_ERROR(dispatch.ApplySourceBatch(i, src.input.pending.size() - src.input.head));
        continue;
      }
      if (src.raw->Exhausted()) break;
      bool caught_up = true;
      for (int p = 0; p < src.raw->PartitionCount(); ++p) {
        caught_up = caught_up && src.raw->Backlog(p) == 0;
      }
      if (caught_up) break;
    }
  }
  return Commit(false);
}

absl::Status Task::Impl::MaybeStopAtEndOfInput() {
  const RunOptions& options = ctx.options;
  if (options.end_of_input == nullptr || !options.end_of_input->load() || draining) {
    return absl::OkStatus();
  }
  draining = true;
  for (SourceNode& src : graph.sources) {
    if (src.present && !src.raw->Bounded()) RETURN_IF_ERROR(src.raw->StopAtCurrentEnd());
  }
  return absl::OkStatus();
}

absl::Status Task::Impl::MaybeCheckpoint() { return checkpointer.Drive(/*stop=*/false); }

// ---- The standalone drivers -----------------------------------------------------

absl::StatusOr<bool> Task::Impl::NextArrivalStep(StepSpec* step) {
  int best = -1;
  int64_t t_next = kMaxTime;
  for (int i = 0; i < graph.S(); ++i) {
    SourceNode& src = graph.sources[i];
    if (!src.present) continue;
    RETURN_IF_ERROR(ingest.FillPending(src, 0));
    if (!src.has_pending()) {
      if (!src.finished) {
        src.finished = true;
        src.wm->Finish();
      }
      continue;
    }
    int64_t a = src.input.pending[src.input.head].arrival;
    if (best < 0 || a < t_next) {
      best = i;
      t_next = a;
    }
  }
  if (best < 0) return false;
  const int64_t timer = watermarks.NextTimer();
  if (timer <= t_next) {
    ctx.manual_clock.Set(timer);
    step->input = StepSpec::Input::kNone;
  } else {
    ctx.manual_clock.Set(t_next);
    step->input = StepSpec::Input::kArrival;
    step->source = best;
    step->arrival = t_next;
  }
  return true;
}

// Arrival mode: records of all sources in arrival order (ties in source
// order), due timers and idleness transitions before the next record.
absl::Status Task::Impl::RunArrivalMode() {
  for (;;) {
    StepSpec step;
    ASSIGN_OR_RETURN(const bool more, NextArrivalStep(&step));
    // Input drained: the end-of-input watermark (+inf) fires everything.
    if (!more) break;
    StepResult result;
    RETURN_IF_ERROR(Step(step, &result));
    RETURN_IF_ERROR(MaybeCheckpoint());
  }
  return absl::OkStatus();
}

// Wall-clock mode: every source polled round-robin in batches.
absl::Status Task::Impl::RunWallMode() {
  bool any_unbounded = false;
  for (const SourceNode& src : graph.sources) any_unbounded = any_unbounded || !src.raw->Bounded();
  StepSpec step;
  step.source_timeout_ms = any_unbounded ? 20 : 0;
  for (;;) {
    if (ctx.options.stop != nullptr && ctx.options.stop->load()) break;
    RETURN_IF_ERROR(MaybeStopAtEndOfInput());
    StepResult result;
    RETURN_IF_ERROR(Step(step, &result));
    RETURN_IF_ERROR(MaybeCheckpoint());
    if (result.inputs_done) break;
    if (!result.got && !any_unbounded) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return absl::OkStatus();
}

absl::Status Task::Impl::Finish() {
  bool all_bounded_done = true;
  for (SourceNode& src : graph.sources) {
    if (src.finished) continue;
    if (src.raw->Exhausted() && !src.has_pending()) {
      src.finished = true;
      src.wm->Finish();
    } else {
      all_bounded_done = false;
    }
  }
  if (all_bounded_done) RETURN_IF_ERROR(watermarks.Update());
  // The operators' last changes reach the state only for a checkpoint or
  // savepoint taken below: nothing else reads a task's state after its run
  // (the next run starts empty; its memtables are not even flushed at close).
  RETURN_IF_ERROR(
      Commit(true, /*state=*/checkpointer.enabled() || !ctx.options.savepoint_on_stop.empty()));
  // A final checkpoint commits the last output (checkpointed sinks show only
  // committed output) and lets a stopped job resume where it stopped.
  RETURN_IF_ERROR(checkpointer.Drive(/*stop=*/true));
  if (!ctx.options.savepoint_on_stop.empty()) {
    RETURN_IF_ERROR(checkpointer.Take(ctx.options.savepoint_on_stop));
  }
  Progress(true);
  return dispatch.CloseSinks();
}

absl::Status Task::Run() {
  Impl& im = *impl_;
  LogContext log_context(im.ctx.spec.name, im.ctx.TaskLabel());
  RETURN_IF_ERROR(im.Preload());
  if (im.ctx.parallel()) return im.RunParallel();
  RETURN_IF_ERROR(im.ctx.arrival_mode ? im.RunArrivalMode() : im.RunWallMode());
  return im.Finish();
}

std::string Task::Summary() const {
  const Impl& im = *impl_;
  return JobSummary(*im.ctx.metrics, im.status.records_in(), im.status.records_out());
}

std::string JobSummary(const MetricsRegistry& metrics, int64_t records_in, int64_t records_out) {
  std::string s = absl::StrFormat("records in: %d, results out: %d", records_in, records_out);
  for (const auto& [name, v] : metrics.Snapshot()) {
    if (v == 0) continue;
    if (name.rfind("invalid_records_total", 0) == 0 || name.rfind("too_late_total", 0) == 0 ||
        name.rfind("dedup_", 0) == 0 || name.rfind("dead_letter", 0) == 0) {
      if (name.rfind("dedup_retention", 0) == 0 || name.rfind("dedup_passed", 0) == 0) continue;
      absl::StrAppend(&s, "\n  ", name, " = ", v);
    }
  }
  return s;
}

}  // namespace caravela
