#include "worker/runtime/watermark.h"

#include <algorithm>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

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
  bool any_owned = false;
  for (int i = 0; i < static_cast<int>(parts_.size()); ++i) {
    if (!owned(i)) continue;
    any_owned = true;
    Part& p = parts_[i];
    p.idle = spec_.idle_timeout > 0 && now - p.last_activity >= spec_.idle_timeout &&
             (!backlog || backlog(i) == 0);
    if (p.idle) continue;
    any_active = true;
    min_wm = std::min(min_wm, partition_watermark(i));
  }
  idle_ = any_owned && !any_active;
  if (any_active && min_wm > current_) current_ = min_wm;
  return current_;
}

int64_t SourceWatermark::NextIdleTransition(int64_t after) const {
  if (spec_.idle_timeout <= 0 || finished_) return kMaxTime;
  int64_t next = kMaxTime;
  for (int i = 0; i < static_cast<int>(parts_.size()); ++i) {
    const Part& p = parts_[i];
    if (!owned(i)) continue;
    int64_t t = SatAdd(p.last_activity, spec_.idle_timeout);
    if (!p.idle && t > after) next = std::min(next, t);
  }
  return next;
}

// "current idle; max_event_time seen idle last_activity; ..." (one group per
// partition).
std::string SourceWatermark::Export() const {
  std::string out = absl::StrCat(current_, " ", idle_ ? 1 : 0);
  for (const Part& p : parts_) {
    absl::StrAppend(&out, ";", p.max_event_time, " ", p.seen ? 1 : 0, " ", p.idle ? 1 : 0, " ",
                    p.last_activity);
  }
  return out;
}

bool SourceWatermark::Import(std::string_view text) {
  std::vector<std::string> groups =
      absl::StrSplit(absl::string_view(text.data(), text.size()), ';');
  if (groups.empty()) return false;
  auto ints = [](const std::string& g, std::vector<int64_t>* v) {
    v->clear();
    for (absl::string_view f : absl::StrSplit(g, ' ')) {
      int64_t x;
      if (!absl::SimpleAtoi(f, &x)) return false;
      v->push_back(x);
    }
    return true;
  };
  std::vector<int64_t> v;
  if (!ints(groups[0], &v) || v.size() != 2) return false;
  const int64_t current = v[0];
  const bool idle = v[1] != 0;
  std::vector<Part> parts;
  for (size_t i = 1; i < groups.size(); ++i) {
    if (!ints(groups[i], &v) || v.size() != 4) return false;
    Part p;
    p.max_event_time = v[0];
    p.seen = v[1] != 0;
    p.idle = v[2] != 0;
    p.last_activity = v[3];
    parts.push_back(p);
  }
  current_ = current;
  idle_ = idle;
  if (parts.size() > parts_.size()) {
    parts_ = std::move(parts);
  } else {
    std::copy(parts.begin(), parts.end(), parts_.begin());
  }
  return true;
}

std::optional<std::string> SourceWatermark::MergeExports(const std::vector<std::string>& exports) {
  if (exports.empty()) return std::nullopt;
  const size_t n = exports.size();
  std::vector<std::vector<std::string>> groups;
  int64_t current = kMaxTime;
  size_t parts = 0;
  for (const std::string& e : exports) {
    groups.push_back(absl::StrSplit(e, ';'));
    std::vector<std::string> head = absl::StrSplit(groups.back()[0], ' ');
    int64_t c = 0;
    if (head.size() != 2 || !absl::SimpleAtoi(head[0], &c)) return std::nullopt;
    current = std::min(current, c);
    parts = std::max(parts, groups.back().size() - 1);
  }
  std::string out = absl::StrCat(current, " 0");
  for (size_t p = 0; p < parts; ++p) {
    const std::vector<std::string>& g = groups[p % n];
    // A partition its old owner never saw: nothing seen yet.
    absl::StrAppend(&out, ";", p + 1 < g.size() ? g[p + 1] : absl::StrCat(kMinTime, " 0 0 0"));
  }
  return out;
}

}  // namespace caravela
