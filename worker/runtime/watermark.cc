#include "worker/runtime/watermark.h"

#include <algorithm>

namespace caravela {

SourceWatermark::SourceWatermark(WatermarkSpec spec, int64_t start_time)
    : spec_(spec), start_time_(start_time) {}

void SourceWatermark::EnsurePartitions(int n) {
  while (static_cast<int>(parts_.size()) < n) {
    Part p;
    p.last_activity = start_time_;
    parts_.push_back(p);
  }
}

void SourceWatermark::OnActivity(int partition, int64_t now) {
  if (partition >= static_cast<int>(parts_.size())) EnsurePartitions(partition + 1);
  parts_[partition].last_activity = now;
}

int64_t SourceWatermark::partition_watermark(int p) const {
  const Part& part = parts_[p];
  if (!part.seen) return kMinTime;
  return SatAdd(part.max_event_time, -spec_.max_out_of_orderness);
}

int64_t SourceWatermark::Update(int64_t now, const std::function<int64_t(int)>& backlog) {
  if (finished_) return current_;
  int64_t min_wm = kMaxTime;
  bool any_active = false;
  for (int i = 0; i < static_cast<int>(parts_.size()); ++i) {
    Part& p = parts_[i];
    p.idle = spec_.idle_timeout > 0 && now - p.last_activity >= spec_.idle_timeout &&
             (!backlog || backlog(i) == 0);
    if (p.idle) continue;
    any_active = true;
    min_wm = std::min(min_wm, partition_watermark(i));
  }
  idle_ = !parts_.empty() && !any_active;
  if (any_active && min_wm > current_) current_ = min_wm;
  return current_;
}

int64_t SourceWatermark::NextIdleTransition(int64_t after) const {
  if (spec_.idle_timeout <= 0 || finished_) return kMaxTime;
  int64_t next = kMaxTime;
  for (const Part& p : parts_) {
    int64_t t = SatAdd(p.last_activity, spec_.idle_timeout);
    if (!p.idle && t > after) next = std::min(next, t);
  }
  return next;
}

}  // namespace caravela
