#include "worker/runtime/task_status.h"

#include <algorithm>
#include <cstdio>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/logging.h"
#include "common/source_kind.h"
#include "spdlog/spdlog.h"

namespace caravela {
namespace {

std::shared_ptr<spdlog::logger> Log() { return RuntimeLogger(); }

int64_t NsToMs(int64_t ns) { return ns / 1000000; }

}  // namespace

// The task's timing series (labels task), in ms (exported in seconds).
struct TaskStatus::TimingMetrics {
  Counter* alignment_total = nullptr;
  Counter* alignment_last = nullptr;
  Counter* alignment_last_skew = nullptr;
  Counter* backpressure_total = nullptr;
  Counter* sync_total = nullptr;
  Counter* sync_last[5] = {};  // state_flush, sink_precommit, barriers, snapshot, total
};

TaskStatus::TaskStatus(const TaskContext& ctx, TaskGraph& graph) : ctx_(ctx), graph_(graph) {}
TaskStatus::~TaskStatus() = default;

void TaskStatus::AddCheckpointSync(const CheckpointSync& s) {
  sync_total_ns_.fetch_add(s.total_ns(), std::memory_order_relaxed);
  const int64_t parts[4] = {s.state_flush_ns, s.sink_precommit_ns, s.barriers_ns, s.snapshot_ns};
  for (int i = 0; i < 4; ++i) sync_last_ns_[i].store(parts[i], std::memory_order_relaxed);
}

void TaskStatus::SetAlignment(int64_t total_ns, int64_t last_ns, int64_t last_skew_ns) {
  alignment_total_ns_.store(total_ns, std::memory_order_relaxed);
  alignment_last_ns_.store(last_ns, std::memory_order_relaxed);
  alignment_last_skew_ns_.store(last_skew_ns, std::memory_order_relaxed);
}

void TaskStatus::PublishTiming() {
  int64_t send_ns = 0;
  for (const task_internal::WriterNode& wn : graph_.writers) send_ns += wn.writer->send_wait_ns();
  backpressure_ns_.store(send_ns, std::memory_order_relaxed);
  if (ctx_.metrics == nullptr) return;
  if (timing_metrics_ == nullptr) {
    timing_metrics_ = std::make_unique<TimingMetrics>();
    TimingMetrics& m = *timing_metrics_;
    const std::string task = absl::StrCat("task=\"", ctx_.name, "\"");
    m.alignment_total = ctx_.metrics->Get("task_alignment_ms_total", task);
    m.alignment_last = ctx_.metrics->Get("task_alignment_last_ms", task);
    m.alignment_last_skew = ctx_.metrics->Get("task_alignment_last_skew_ms", task);
    m.backpressure_total = ctx_.metrics->Get("task_backpressure_ms_total", task);
    m.sync_total = ctx_.metrics->Get("task_checkpoint_sync_ms_total", task);
    const char* parts[5] = {"state_flush", "sink_precommit", "barriers", "snapshot", "total"};
    for (int i = 0; i < 5; ++i) {
      m.sync_last[i] = ctx_.metrics->Get("task_checkpoint_sync_last_ms",
                                         absl::StrCat(task, ",part=\"", parts[i], "\""));
    }
  }
  TimingMetrics& m = *timing_metrics_;
  m.alignment_total->Set(NsToMs(alignment_total_ns_.load(std::memory_order_relaxed)));
  m.alignment_last->Set(NsToMs(alignment_last_ns_.load(std::memory_order_relaxed)));
  m.alignment_last_skew->Set(NsToMs(alignment_last_skew_ns_.load(std::memory_order_relaxed)));
  m.backpressure_total->Set(NsToMs(send_ns));
  m.sync_total->Set(NsToMs(sync_total_ns_.load(std::memory_order_relaxed)));
  int64_t last_total = 0;
  for (int i = 0; i < 4; ++i) {
    const int64_t ns = sync_last_ns_[i].load(std::memory_order_relaxed);
    last_total += ns;
    m.sync_last[i]->Set(NsToMs(ns));
  }
  m.sync_last[4]->Set(NsToMs(last_total));
}

void TaskStatus::PublishPartitions(bool now_anyway) {
  // For status reports only: a few hundred ms old is fresh enough, and the
  // hot path pays one clock read.
  constexpr auto kEvery = std::chrono::milliseconds(250);
  const auto now = std::chrono::steady_clock::now();
  if (!now_anyway && now - published_at_ < kEvery) return;
  published_at_ = now;
  std::vector<Task::PartitionStatus> out;
  std::vector<LiveLag> live;
  for (task_internal::SourceNode& src : graph_.sources) {
    if (!src.present || src.raw == nullptr) continue;
    const bool kafka = src.spec->kind->partitioned_log() && !ctx_.arrival_mode;
    src.idle_logged.resize(static_cast<size_t>(src.raw->PartitionCount()), 0);
    for (int p = 0; p < src.raw->PartitionCount(); ++p) {
      if (src.wm != nullptr && !src.wm->owned(p)) continue;
      Task::PartitionStatus ps;
      ps.source = src.spec->name;
      ps.partition = p;
      ps.offset = p < static_cast<int>(src.pos.applied.size()) ? src.pos.applied[p] : 0;
      ps.lag = kafka ? src.raw->Backlog(p) : 0;
      if (src.wm != nullptr && p < src.wm->partition_count()) {
        ps.watermark_ms = src.wm->partition_watermark(p);
        ps.idle = src.wm->partition_idle(p);
        if (ps.idle != (src.idle_logged[p] != 0)) {
          // Operators want to know when a partition stops holding the
          // watermark back, and when it does again.
          src.idle_logged[p] = ps.idle ? 1 : 0;
          LogContext partition_context(ctx_.spec.name, ctx_.TaskLabel(), p);
          if (ps.idle) {
            Log()->info("source {}: idle (no record for {}): the watermark goes on without it",
                        src.spec->name, FormatDuration(src.spec->watermark.idle_timeout));
          } else {
            Log()->info("source {}: active again: it holds the watermark back again",
                        src.spec->name);
          }
        }
      } else {
        ps.watermark_ms = kMaxTime;  // a table source holds no event time back
      }
      out.push_back(std::move(ps));
      const bool has_live =
          kafka && src.pos.live_applied != nullptr && p < static_cast<int>(src.pos.applied.size());
      live.push_back(has_live ? LiveLag{src.raw.get(), &src.pos.live_applied[p]} : LiveLag{});
    }
  }
  Task::Activity activity;
  for (size_t n = 0; n < graph_.outputs.size(); ++n) {
    if (!graph_.NodeHere(static_cast<int>(n))) continue;
    const task_internal::NodeOutputs& no = graph_.outputs[n];
    for (size_t k = 0; k < no.side_names.size() && k < no.side_totals.size(); ++k) {
      activity.side_records.emplace_back(no.side_names[k], no.side_totals[k]);
      if (absl::EndsWith(no.side_names[k], ".too_late")) {
        activity.records_too_late += no.side_totals[k];
      }
    }
  }
  for (const task_internal::OperatorNode& on : graph_.ops) activity.records_late += on.late_total;
  for (const task_internal::SourceNode& src : graph_.sources) {
    if (!src.present || src.raw == nullptr) continue;
    if (std::string w = src.raw->Waiting(); !w.empty()) {
      activity.waiting.push_back(absl::StrCat(src.spec->name, ": ", w));
    }
  }
  for (const task_internal::ReaderNode& rn : graph_.readers) {
    for (const ExchangeChannelStatus& ch : rn.reader->Channels()) {
      Task::ExchangeInputStatus e;
      e.exchange = rn.topic;
      e.partition = ch.partition;
      e.producer_task = ch.producer >= 0 && ch.producer < static_cast<int>(rn.producer_tasks.size())
                            ? rn.producer_tasks[ch.producer]
                            : -1;
      e.watermark_ms = ch.watermark;
      e.idle = ch.idle;
      activity.exchange_inputs.push_back(std::move(e));
    }
  }
  PublishTiming();
  std::lock_guard<std::mutex> lock(mu_);
  partitions_ = std::move(out);
  live_ = std::move(live);
  activity_ = std::move(activity);
}

std::vector<Task::PartitionStatus> TaskStatus::partitions() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<Task::PartitionStatus> out = partitions_;
  // Offsets and lag of Kafka partitions are read live, so that they stay
  // true while the task thread is busy or blocked (a slow sink): position
  // after the last applied batch, log end as the client last saw it.
  for (size_t i = 0; i < out.size() && i < live_.size(); ++i) {
    const LiveLag& live = live_[i];
    if (live.raw == nullptr) continue;
    out[i].offset = live.applied->load(std::memory_order_relaxed);
    const int64_t high = live.raw->HighWatermark(out[i].partition);
    if (high >= out[i].offset) out[i].lag = high - out[i].offset;
  }
  return out;
}

Task::Activity TaskStatus::activity() const {
  std::lock_guard<std::mutex> lock(mu_);
  Task::Activity a = activity_;
  a.exchange_records_in = exchange_records_in_.load(std::memory_order_relaxed);
  a.alignment_ms = NsToMs(alignment_total_ns_.load(std::memory_order_relaxed));
  a.last_alignment_ms = NsToMs(alignment_last_ns_.load(std::memory_order_relaxed));
  a.last_alignment_skew_ms = NsToMs(alignment_last_skew_ns_.load(std::memory_order_relaxed));
  a.backpressure_ms = NsToMs(backpressure_ns_.load(std::memory_order_relaxed));
  a.checkpoint_sync_ms = NsToMs(sync_total_ns_.load(std::memory_order_relaxed));
  int64_t last[4];
  for (int i = 0; i < 4; ++i) last[i] = sync_last_ns_[i].load(std::memory_order_relaxed);
  a.last_state_flush_ms = NsToMs(last[0]);
  a.last_sink_precommit_ms = NsToMs(last[1]);
  a.last_snapshot_ms = NsToMs(last[3]);
  a.last_checkpoint_sync_ms = NsToMs(last[0] + last[1] + last[2] + last[3]);
  return a;
}

void TaskStatus::ForgetLiveSources() {
  std::lock_guard<std::mutex> lock(mu_);
  live_.clear();
}

void TaskStatus::Progress(bool force, int64_t watermark, int64_t last_checkpoint,
                          std::chrono::steady_clock::time_point last_checkpoint_at) {
  if (ctx_.options.progress_interval_ms <= 0 || ctx_.options.progress_out == nullptr) return;
  auto now = std::chrono::steady_clock::now();
  auto since = std::chrono::duration_cast<std::chrono::milliseconds>(now - last_progress_).count();
  if (!force && since < ctx_.options.progress_interval_ms) return;
  double secs = std::max<double>(since, 1) / 1000.0;
  const int64_t in = records_in();
  const int64_t out = records_out();
  double rate = static_cast<double>(in - progress_records_in_) / secs;
  const std::string wm_text = FormatWatermark(watermark);
  std::string checkpoint_text;
  if (last_checkpoint > 0) {
    checkpoint_text =
        absl::StrFormat(" checkpoint=%d (%.0fs ago)", last_checkpoint,
                        std::chrono::duration<double>(now - last_checkpoint_at).count());
  }
  std::fprintf(ctx_.options.progress_out,
               "[caravela] in=%lld out=%lld rate=%.0f ev/s watermark=%s invalid=%lld%s\n",
               static_cast<long long>(in), static_cast<long long>(out), rate, wm_text.c_str(),
               static_cast<long long>(invalid_total_), checkpoint_text.c_str());
  std::fflush(ctx_.options.progress_out);
  last_progress_ = now;
  progress_records_in_ = in;
}

}  // namespace caravela
