#include "coordinator/job_series.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/time_util.h"
#include "nlohmann/json.hpp"

namespace caravela {
namespace {

// A partition without a record yet reports kMinTime (a table source kMaxTime).
bool HasWatermark(int64_t wm) { return wm > kMinTime && wm < kMaxTime; }

// A watermark in the JSON: its ms, or null without one.
nlohmann::json WatermarkJson(int64_t wm) {
  return HasWatermark(wm) ? nlohmann::json(wm) : nlohmann::json(nullptr);
}

}  // namespace

void JobSeries::Sample(const v1::Job& job, int64_t now_ms) {
  std::lock_guard<std::mutex> lock(mu_);
  Series& s = series_[job.id()];
  Point p;
  p.t_ms = now_ms;
  int64_t records_in = 0;
  int64_t low_wm = kMaxTime;
  int64_t late = 0, too_late = 0;
  s.side_records.clear();
  for (int g = 0; g < job.tasks_size(); ++g) {
    const v1::TaskStatus& t = job.tasks(g);
    p.consumer_lag += t.consumer_lag();
    p.state_bytes += t.state_bytes();
    late += t.activity().records_late();
    too_late += t.activity().records_too_late();
    for (const auto& [side, n] : t.activity().side_records()) s.side_records[side] += n;
    for (const v1::ExchangeInputStatus& e : t.activity().exchange_inputs()) {
      auto [it, inserted] = s.channels.try_emplace(
          std::make_tuple(g, e.exchange(), e.partition(), e.producer_task()));
      Channel& ch = it->second;
      if (inserted || ch.status.watermark_ms() != e.watermark_ms()) ch.since_ms = now_ms;
      ch.task = g;
      ch.worker = t.worker();
      ch.status = e;
    }
    for (const v1::SourcePartitionStatus& sp : t.sources()) {
      records_in += sp.offset();
      auto [it, inserted] = s.partitions.try_emplace(std::make_tuple(sp.source(), sp.partition()));
      Partition& part = it->second;
      // Since when its watermark is what it is now.
      if (inserted || part.status.watermark_ms() != sp.watermark_ms()) part.since_ms = now_ms;
      part.task = g;
      part.worker = t.worker();
      part.status = sp;
      if (!sp.idle() && HasWatermark(sp.watermark_ms()))
        low_wm = std::min(low_wm, sp.watermark_ms());
    }
  }
  if (s.last_records_in >= 0 && now_ms > s.last_t_ms) {
    p.records_per_s = static_cast<double>(std::max<int64_t>(0, records_in - s.last_records_in)) *
                      1000.0 / static_cast<double>(now_ms - s.last_t_ms);
  }
  if (s.last_late >= 0 && now_ms > s.last_t_ms) {
    const double secs = static_cast<double>(now_ms - s.last_t_ms) / 1000.0;
    p.late_per_s = static_cast<double>(std::max<int64_t>(0, late - s.last_late)) / secs;
    p.too_late_per_s = static_cast<double>(std::max<int64_t>(0, too_late - s.last_too_late)) / secs;
  }
  s.last_late = late;
  s.last_too_late = too_late;
  s.last_records_in = records_in;
  s.last_t_ms = now_ms;
  if (low_wm != kMaxTime) {
    p.watermark_lag_s = static_cast<double>(now_ms - low_wm) / 1000.0;
  }
  p.last_checkpoint = job.last_checkpoint();
  s.points.push_back(p);
  while (s.points.size() > capacity_) s.points.pop_front();
}

void JobSeries::Retain(const std::vector<std::string>& keep) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = series_.begin(); it != series_.end();) {
    if (std::find(keep.begin(), keep.end(), it->first) == keep.end()) {
      it = series_.erase(it);
    } else {
      ++it;
    }
  }
}

HttpRoute JobSeries::Route() const {
  return {"/api/v1/jobs/([^/]+)/series", false, [this](const std::vector<std::string>& c) {
            HttpResponse r;
            r.body = Json(c[0]);
            if (r.body.empty()) return HttpError(404, "no samples of job " + c[0]);
            return r;
          }};
}

std::string JobSeries::Json(const std::string& job_id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = series_.find(job_id);
  if (it == series_.end()) return "";
  const Series& s = it->second;
  nlohmann::json out;
  nlohmann::json t = nlohmann::json::array(), rate = nlohmann::json::array(),
                 lag = nlohmann::json::array(), wm_lag = nlohmann::json::array(),
                 ckpt = nlohmann::json::array(), state = nlohmann::json::array(),
                 late = nlohmann::json::array(), too_late = nlohmann::json::array();
  for (const Point& p : s.points) {
    t.push_back(p.t_ms);
    rate.push_back(p.records_per_s);
    lag.push_back(p.consumer_lag);
    if (p.watermark_lag_s.has_value()) {
      wm_lag.push_back(*p.watermark_lag_s);
    } else {
      wm_lag.push_back(nullptr);
    }
    ckpt.push_back(p.last_checkpoint);
    state.push_back(p.state_bytes);
    late.push_back(p.late_per_s);
    too_late.push_back(p.too_late_per_s);
  }
  out["t_ms"] = std::move(t);
  out["records_per_s"] = std::move(rate);
  out["consumer_lag"] = std::move(lag);
  out["watermark_lag_s"] = std::move(wm_lag);
  out["last_checkpoint"] = std::move(ckpt);
  out["state_bytes"] = std::move(state);
  out["late_per_s"] = std::move(late);
  out["too_late_per_s"] = std::move(too_late);
  out["side_records"] = s.side_records;
  nlohmann::json parts = nlohmann::json::array();
  const Partition* hold = nullptr;
  for (const auto& [key, part] : s.partitions) {
    const v1::SourcePartitionStatus& st = part.status;
    nlohmann::json j = {{"task", part.task},     {"worker", part.worker},
                        {"source", st.source()}, {"partition", st.partition()},
                        {"offset", st.offset()}, {"lag", st.lag()},
                        {"idle", st.idle()},     {"since_ms", part.since_ms}};
    j["watermark_ms"] = WatermarkJson(st.watermark_ms());
    parts.push_back(std::move(j));
    // What holds the job back: a non-idle partition, one without a record
    // first, else the lowest watermark (the longest-stuck on ties).
    if (st.idle()) continue;
    auto rank = [](const Partition& p) {
      return std::make_tuple(HasWatermark(p.status.watermark_ms()) ? 1 : 0, p.status.watermark_ms(),
                             p.since_ms);
    };
    if (hold == nullptr || rank(part) < rank(*hold)) hold = &part;
  }
  out["partitions"] = std::move(parts);
  // An exchange channel below every source partition: its producer is
  // behind its own input (or sends no markers).
  const Channel* channel = nullptr;
  for (const auto& [key, ch] : s.channels) {
    if (ch.status.idle()) continue;
    if (channel == nullptr ||
        std::make_pair(ch.status.watermark_ms(), ch.since_ms) <
            std::make_pair(channel->status.watermark_ms(), channel->since_ms)) {
      channel = &ch;
    }
  }
  const int64_t source_low =
      hold == nullptr
          ? kMaxTime
          : (HasWatermark(hold->status.watermark_ms()) ? hold->status.watermark_ms() : kMinTime);
  if (channel != nullptr && channel->status.watermark_ms() < source_low) {
    const v1::ExchangeInputStatus& e = channel->status;
    const bool seen = HasWatermark(e.watermark_ms());
    out["holdback"] = {
        {"kind", "exchange"},
        {"exchange", e.exchange()},
        {"partition", e.partition()},
        {"producer_task", e.producer_task()},
        {"task", channel->task},
        {"worker", channel->worker},
        {"watermark_ms", WatermarkJson(e.watermark_ms())},
        {"since_ms", channel->since_ms},
        {"reason", absl::StrCat("producer task ", e.producer_task(), " of exchange ", e.exchange(),
                                seen ? " sent a watermark below every source partition's"
                                     : " has sent no watermark yet",
                                ": it is behind its own input (stalled, failing or slow); "
                                "see that task's state and lag")}};
  } else if (hold == nullptr) {
    out["holdback"] = nullptr;
  } else {
    const v1::SourcePartitionStatus& st = hold->status;
    const bool seen = HasWatermark(st.watermark_ms());
    out["holdback"] = {
        {"kind", "source"},
        {"source", st.source()},
        {"partition", st.partition()},
        {"task", hold->task},
        {"worker", hold->worker},
        {"watermark_ms", WatermarkJson(st.watermark_ms())},
        {"since_ms", hold->since_ms},
        {"reason",
         seen ? absl::StrCat("source ", st.source(), " partition ", st.partition(),
                             " has the lowest watermark of the job's non-idle partitions; "
                             "set watermark.idle_timeout if it may stay silent")
              : absl::StrCat("source ", st.source(), " partition ", st.partition(),
                             " has had no record yet, so the job's watermark cannot pass it; "
                             "set watermark.idle_timeout if it may stay silent")}};
  }
  return out.dump();
}

}  // namespace caravela
