#include "worker/runtime/task_watermarks.h"

#include <chrono>

#include "absl/strings/str_cat.h"
#include "common/source_kind.h"

namespace caravela {

using task_internal::OperatorNode;
using task_internal::SourceNode;
using task_internal::WriterNode;

absl::Status WatermarkTracker::Update() {
  const int64_t now = ctx_.clock->NowMs();
  int64_t lag = 0;
  for (int i = 0; i < graph_.S(); ++i) {
    SourceNode& src = graph_.sources[i];
    if (!src.present) continue;
    if (src.spec->kind->partitioned_log() && !ctx_.arrival_mode) {
      // Consumer lag: records after the position, up to the last high watermark seen.
      for (int p = 0; p < src.raw->PartitionCount(); ++p) lag += src.raw->Backlog(p);
    }
    if (!src.spec->event_time.has_value()) {
      node_wm_[i] = kMaxTime;  // table sources do not hold back event time
      continue;
    }
    node_wm_[i] = src.wm->Update(now, [&](int p) { return ingest_.Backlog(src, p); });
    node_idle_[i] = src.wm->idle() ? 1 : 0;
  }
  status_.SetLag(lag);
  status_.PublishPartitions();
  for (size_t i = 0; i < graph_.ops.size(); ++i) {
    OperatorNode& on = graph_.ops[i];
    if (!on.here) continue;
    // Per input: the watermark of the local node feeding it, or of the
    // exchange reader (min over its producers' markers).
    auto input_wm = [&](size_t k) {
      const int r = on.input_reader[k];
      return r >= 0 ? graph_.readers[r].reader->watermark() : node_wm_[on.inputs[k]];
    };
    auto input_idle = [&](size_t k) {
      const int r = on.input_reader[k];
      return r >= 0 ? graph_.readers[r].reader->idle() : node_idle_[on.inputs[k]] != 0;
    };
    const InputsWatermark in = MinOverActiveInputs(on.inputs.size(), input_wm, input_idle);
    const int64_t w = in.watermark;
    int id = graph_.S() + static_cast<int>(i);
    node_idle_[id] = in.idle ? 1 : 0;
    if (w > on.ctx->watermark()) {
      on.ctx->set_watermark(w);
      if (w < kMaxTime) {
        if (on.watermark_ms == nullptr) {  // no series before the first watermark
          on.watermark_ms = ctx_.metrics->Get(
              "operator_watermark_ms",
              absl::StrCat("op=\"", on.spec->name, "\",task=\"", ctx_.name, "\""));
        }
        on.watermark_ms->Set(w);
      }
      RETURN_IF_ERROR(on.op->OnWatermark(*on.ctx, on.out));
      RETURN_IF_ERROR(dispatch_.Dispatch(id));
    }
    node_wm_[id] = on.op->OutputWatermark(on.ctx->watermark());
  }
  // For the job's coordinating thread (progress line, metrics).
  status_.SetWatermark(Lowest());
  return absl::OkStatus();
}

int64_t WatermarkTracker::Lowest() const {
  int64_t wm = kMaxTime;
  bool any_op = false;
  for (size_t i = 0; i < graph_.ops.size(); ++i) {
    if (!graph_.ops[i].here) continue;
    any_op = true;
    wm = std::min(wm, node_wm_[graph_.S() + i]);
  }
  if (!any_op) {
    for (int i = 0; i < graph_.S(); ++i) {
      if (graph_.sources[i].present) wm = std::min(wm, node_wm_[i]);
    }
  }
  return wm;
}

int64_t WatermarkTracker::NextTimer() const {
  int64_t t = kMaxTime;
  for (const OperatorNode& on : graph_.ops) {
    if (on.here) t = std::min(t, on.op->NextTimer());
  }
  int64_t now = ctx_.clock->NowMs();
  for (const SourceNode& src : graph_.sources) {
    if (src.present) t = std::min(t, src.wm->NextIdleTransition(now));
  }
  return t;
}

absl::Status WatermarkTracker::FireTimers() {
  const int64_t now = ctx_.clock->NowMs();
  for (size_t i = 0; i < graph_.ops.size(); ++i) {
    OperatorNode& on = graph_.ops[i];
    if (on.here && on.op->NextTimer() <= now) {
      RETURN_IF_ERROR(on.op->OnProcessingTime(*on.ctx, on.out));
      RETURN_IF_ERROR(dispatch_.Dispatch(graph_.S() + static_cast<int>(i)));
    }
  }
  return absl::OkStatus();
}

absl::Status WatermarkTracker::SendMarkers(bool force) {
  const auto now = std::chrono::steady_clock::now();
  for (WriterNode& wn : graph_.writers) {
    const InputsWatermark in = MinOverActiveInputs(
        wn.from.size(), [&](size_t k) { return node_wm_[wn.from[k]]; },
        [&](size_t k) { return node_idle_[wn.from[k]] != 0; });
    const int64_t w = in.watermark;
    const bool idle = in.idle;
    const bool moved = w > wn.sent_wm;
    const bool due = now - wn.sent_at >= std::chrono::milliseconds(200);
    // At least every 200 ms while it moves, at once when it ends and when
    // idleness changes (SPEC §8).
    if ((moved && (due || w == kMaxTime || force)) || idle != wn.sent_idle) {
      RETURN_IF_ERROR(wn.writer->WriteWatermark(std::max(w, wn.sent_wm), idle));
      wn.sent_wm = std::max(w, wn.sent_wm);
      wn.sent_idle = idle;
      wn.sent_at = now;
    }
  }
  return absl::OkStatus();
}

}  // namespace caravela
