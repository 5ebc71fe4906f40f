#include "common/metrics.h"

#include <algorithm>
#include <cstdio>
#include <iterator>
#include <set>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

namespace caravela {
namespace {
std::string FullName(const std::string& name, const std::string& labels) {
  return labels.empty() ? name : name + "{" + labels + "}";
}
// FullName's inverse: name{labels} -> (name, "{labels}" or "").
std::pair<std::string, std::string> SplitFullName(const std::string& k) {
  const size_t brace = k.find('{');
  return {k.substr(0, brace), brace == std::string::npos ? std::string() : k.substr(brace)};
}
}  // namespace

MetricsRegistry::~MetricsRegistry() {
  if (parent_ != nullptr) parent_->Release(held_);
}

template <class T, class... Args>
T* MetricsRegistry::Slot(std::map<std::string, std::unique_ptr<T>>& map, char kind,
                         const std::string& key, bool hold, Args&&... args) {
  std::unique_ptr<T>& slot = map[key];
  if (!slot) slot = std::make_unique<T>(std::forward<Args>(args)...);
  if (hold) ++holders_[kind + key];
  return slot.get();
}

template <class T, class... Args>
T* MetricsRegistry::ViewSlot(std::map<std::string, std::unique_ptr<T>> MetricsRegistry::*map,
                             char kind, const std::string& name, const std::string& labels,
                             Args&&... args) {
  const std::string key = FullName(name, Scoped(labels));
  // The view's lock, then the parent's: a series is held before another
  // view's Release could drop it.
  std::lock_guard<std::mutex> own(mu_);
  const bool first = held_.insert(kind + key).second;
  std::lock_guard<std::mutex> lock(parent_->mu_);
  return parent_->Slot(parent_->*map, kind, key, first, std::forward<Args>(args)...);
}

void MetricsRegistry::Release(const std::set<std::string>& held) {
  std::lock_guard<std::mutex> lock(mu_);
  for (const std::string& k : held) {
    auto it = holders_.find(k);
    if (it == holders_.end() || --it->second > 0) continue;
    holders_.erase(it);
    const std::string key = k.substr(1);
    if (k[0] == 'c') counters_.erase(key);
    if (k[0] == 'h') histograms_.erase(key);
    if (k[0] == 'd') doubles_.erase(key);
  }
}

Counter* MetricsRegistry::Get(const std::string& name, const std::string& labels) {
  if (parent_ != nullptr) return ViewSlot(&MetricsRegistry::counters_, 'c', name, labels);
  std::lock_guard<std::mutex> lock(mu_);
  return Slot(counters_, 'c', FullName(name, labels), false);
}

Histogram::Histogram(std::vector<int64_t> bounds)
    : bounds_(std::move(bounds)),
      buckets_(std::make_unique<std::atomic<int64_t>[]>(bounds_.size() + 1)) {
  std::sort(bounds_.begin(), bounds_.end());
  for (size_t i = 0; i <= bounds_.size(); ++i) buckets_[i].store(0, std::memory_order_relaxed);
}

size_t Histogram::BucketOf(int64_t v) const {
  return static_cast<size_t>(std::lower_bound(bounds_.begin(), bounds_.end(), v) - bounds_.begin());
}

std::vector<int64_t> Histogram::counts() const {
  std::vector<int64_t> out(bounds_.size() + 1);
  for (size_t i = 0; i < out.size(); ++i) out[i] = buckets_[i].load(std::memory_order_relaxed);
  return out;
}

int64_t Histogram::Quantile(double q) const {
  const std::vector<int64_t> c = counts();
  int64_t total = 0;
  for (int64_t n : c) total += n;
  if (total == 0 || bounds_.empty()) return 0;
  const double rank = q * static_cast<double>(total);
  int64_t below = 0;
  for (size_t i = 0; i < c.size(); ++i) {
    if (static_cast<double>(below + c[i]) >= rank && c[i] > 0) {
      if (i == bounds_.size()) return bounds_.back();
      const double lo = i == 0 ? std::min<double>(0, static_cast<double>(bounds_[0]))
                               : static_cast<double>(bounds_[i - 1]);
      const double hi = static_cast<double>(bounds_[i]);
      return static_cast<int64_t>(lo + (hi - lo) * (rank - static_cast<double>(below)) /
                                           static_cast<double>(c[i]));
    }
    below += c[i];
  }
  return bounds_.back();
}

void Histogram::Local::Flush() {
  if (n_ == 0) return;
  for (size_t i = 0; i < counts_.size(); ++i) {
    if (counts_[i] != 0) h_->buckets_[i].fetch_add(counts_[i], std::memory_order_relaxed);
    counts_[i] = 0;
  }
  h_->sum_.fetch_add(sum_, std::memory_order_relaxed);
  h_->count_.fetch_add(n_, std::memory_order_relaxed);
  sum_ = 0;
  n_ = 0;
}

const std::vector<int64_t>& DelayBucketsMs() {
  static const std::vector<int64_t> bounds = {
      10,     50,     100,    250,     500,     1'000,     2'500,      5'000,
      10'000, 30'000, 60'000, 300'000, 900'000, 3'600'000, 21'600'000, 86'400'000};
  return bounds;
}

Histogram* MetricsRegistry::GetHistogram(const std::string& name, const std::string& labels,
                                         const std::vector<int64_t>& bounds) {
  if (parent_ != nullptr) {
    return ViewSlot(&MetricsRegistry::histograms_, 'h', name, labels, bounds);
  }
  std::lock_guard<std::mutex> lock(mu_);
  return Slot(histograms_, 'h', FullName(name, labels), false, bounds);
}

DoubleCounter* MetricsRegistry::GetDouble(const std::string& name, const std::string& labels) {
  if (parent_ != nullptr) return ViewSlot(&MetricsRegistry::doubles_, 'd', name, labels);
  std::lock_guard<std::mutex> lock(mu_);
  return Slot(doubles_, 'd', FullName(name, labels), false);
}

double MetricsRegistry::DoubleValue(const std::string& name, const std::string& labels) const {
  if (parent_ != nullptr) return parent_->DoubleValue(name, Scoped(labels));
  std::lock_guard<std::mutex> lock(mu_);
  auto it = doubles_.find(FullName(name, labels));
  return it == doubles_.end() ? 0 : it->second->value();
}

const Histogram* MetricsRegistry::FindHistogram(const std::string& name,
                                                const std::string& labels) const {
  if (parent_ != nullptr) return parent_->FindHistogram(name, Scoped(labels));
  std::lock_guard<std::mutex> lock(mu_);
  auto it = histograms_.find(FullName(name, labels));
  return it == histograms_.end() ? nullptr : it->second.get();
}

int64_t MetricsRegistry::Value(const std::string& name, const std::string& labels) const {
  if (parent_ != nullptr) return parent_->Value(name, Scoped(labels));
  std::lock_guard<std::mutex> lock(mu_);
  auto it = counters_.find(FullName(name, labels));
  return it == counters_.end() ? 0 : it->second->value();
}

int64_t MetricsRegistry::Sum(const std::string& name, const std::string& labels_prefix) const {
  if (parent_ != nullptr) return parent_->Sum(name, Scoped(labels_prefix));
  std::lock_guard<std::mutex> lock(mu_);
  const std::string from = labels_prefix.empty() ? name : name + "{" + labels_prefix;
  int64_t sum = 0;
  for (auto it = counters_.lower_bound(from); it != counters_.end(); ++it) {
    if (it->first.compare(0, from.size(), from) != 0) break;
    const char next = it->first.size() > name.size() ? it->first[name.size()] : '\0';
    if (next == '\0' || next == '{') sum += it->second->value();  // not name_other
  }
  return sum;
}

void MetricsRegistry::SetAges(const std::string& time_name, const std::string& age_name,
                              int64_t now_ms) {
  if (parent_ != nullptr) return parent_->SetAges(time_name, age_name, now_ms);
  std::vector<std::pair<std::string, int64_t>> ages;
  {
    std::lock_guard<std::mutex> lock(mu_);
    std::set<std::string> times;  // the labels of every time series
    for (auto it = counters_.lower_bound(time_name); it != counters_.end(); ++it) {
      if (it->first.compare(0, time_name.size(), time_name) != 0) break;
      auto [name, labels] = SplitFullName(it->first);
      if (name != time_name) continue;  // another name with this prefix
      times.insert(labels);
      ages.emplace_back(std::move(labels), std::max<int64_t>(0, now_ms - it->second->value()));
    }
    // An age whose time series was dropped (its view ended) goes too.
    for (auto it = counters_.lower_bound(age_name); it != counters_.end();) {
      if (it->first.compare(0, age_name.size(), age_name) != 0) break;
      auto [name, labels] = SplitFullName(it->first);
      const bool stale = name == age_name && times.count(labels) == 0;
      it = stale ? counters_.erase(it) : std::next(it);
    }
  }
  for (const auto& [labels, age] : ages) {
    const std::string inner = labels.empty() ? "" : labels.substr(1, labels.size() - 2);
    Get(age_name, inner)->Set(age);
  }
}

namespace {

// What each metric means (the # HELP line); names as counted, in ms where
// they end in _ms (exported in seconds).
const std::map<std::string, std::string>& HelpTexts() {
  static const std::map<std::string, std::string> help = {
      {"records_in_total", "Records read from a source (valid or not)."},
      {"invalid_records_total", "Records quarantined to <source>.invalid, by reason."},
      {"too_late_total", "Records behind the allowed lateness, sent to a too_late side output."},
      {"dead_letter_records_total", "Side-output records written to the dead-letter file."},
      {"operator_records_in_total", "Records an operator received."},
      {"operator_records_out_total", "Records an operator emitted on its main output."},
      {"operator_side_records_total",
       "Records an operator emitted on a side output (too_late, conflicts, ...)."},
      {"sink_records_total", "Records written to a sink."},
      {"sink_revisions_written_total", "Result revisions handed to a sink."},
      {"sink_revisions_rejected_total",
       "Revisions a sink's store refused: it held the same or a newer revision of the key "
       "(PostgreSQL's upsert guard; replays after a restore)."},
      {"dedup_passed_total", "First copies of an id that passed dedup."},
      {"dedup_duplicates_total", "Identical copies of an id dropped by dedup."},
      {"dedup_conflicts_total", "Copies of an id with other content, sent to .conflicts."},
      {"dedup_missing_id_total", "Records without the dedup id field."},
      {"dedup_expired_ids_total", "Ids forgotten after the dedup retention."},
      {"dedup_retention", "The dedup operator's id retention."},
      {"window_emitted_total", "Window results emitted (every revision), by state."},
      {"window_records_total",
       "Records a window operator received, by arrival: on_time (before their window "
       "completed), late (changed a complete window: a LATE revision), too_late (dropped)."},
      {"window_amount_total",
       "Sum of the window's first sum aggregate's field over its records, by arrival."},
      {"join_matches_total", "Joined rows emitted."},
      {"join_unmatched_total", "Rows emitted without a match (outer joins)."},
      {"checkpoints_total", "Checkpoints stored by a task."},
      {"checkpoint_last_id", "Id of the task's last stored checkpoint."},
      {"checkpoint_last_duration", "Duration of the task's last checkpoint."},
      {"checkpoint_last_sync_duration",
       "Time the task's pipeline stood still for its last checkpoint (flush, sink pre-commit, "
       "barriers, state snapshot); the upload runs beside the task."},
      {"checkpoint_last_state_bytes", "State bytes referenced by the task's last checkpoint."},
      {"checkpoint_uploaded_bytes_total", "Bytes uploaded to checkpoint storage."},
      {"restores_total", "Restores from a checkpoint or savepoint."},
      {"job_checkpoints_total", "Job-wide checkpoints completed."},
      {"job_checkpoint_last_id", "Id of the last job-wide checkpoint completed."},
      {"job_checkpoint_last_duration", "Duration of the last job-wide checkpoint."},
      {"task_records_in_total", "Records a task read from its sources (not from exchanges)."},
      {"task_records_out_total", "Results a task wrote to its sinks."},
      {"task_watermark", "A task's lowest operator watermark (event time)."},
      {"task_alignment",
       "Time a task's exchange inputs were held back by checkpoint barrier alignment (first "
       "barrier to release after the snapshot), summed over its inputs."},
      {"task_alignment_last",
       "Alignment of the task's last checkpoint (its longest input): first barrier to release."},
      {"task_alignment_last_skew",
       "Of the last alignment, the part until every channel had the barrier (skew between the "
       "producers' barriers)."},
      {"task_backpressure",
       "Time a task waited to send into its exchanges (credit, flow control)."},
      {"task_checkpoint_sync",
       "Time a task's thread spent in checkpoints' synchronous part (state flush, sink "
       "pre-commit, barriers, snapshot)."},
      {"task_checkpoint_sync_last",
       "The synchronous part of the task's last checkpoint, by part: state_flush, "
       "sink_precommit, barriers, snapshot, total."},
      {"source_partition_offset", "Offset after the last record applied, per source partition."},
      {"source_partition_lag_records",
       "Records of a source partition not read yet (up to the last high watermark seen)."},
      {"source_partition_watermark", "A source partition's watermark (event time, Unix time)."},
      {"source_partition_watermark_lag", "Wall clock minus a source partition's watermark."},
      {"source_partition_idle",
       "1 while a source partition is idle (excluded from the watermark)."},
      {"state_keys", "Estimated keys of a state table, at the task's last checkpoint."},
      {"state_bytes",
       "Bytes of a state table (files and memtables), at the task's last checkpoint."},
      {"arrival_delay",
       "Processing time minus event time of records as they are read, per source."},
      {"operator_watermark", "An operator's input watermark (event time, Unix time)."},
      {"operator_watermark_lag", "Wall clock minus an operator's input watermark."},
      {"job_checkpoint_last_completed_timestamp",
       "When the job's last checkpoint completed (Unix time)."},
      {"job_checkpoint_age", "Time since the job's last checkpoint completed."},
      {"coordinator_jobs", "Jobs the coordinator holds, by state."},
      {"coordinator_workers", "Workers the coordinator knows, by state."},
      {"coordinator_worker_slots", "Task slots of the live workers."},
      {"coordinator_worker_tasks", "Tasks the live workers reported running."},
      {"coordinator_heartbeats_total", "Worker heartbeats received."},
      {"coordinator_registrations_total", "Worker registrations."},
      {"scheduler_epochs_total", "Job placements (each a new epoch)."},
      {"scheduler_recoveries_total",
       "Jobs restarted from a checkpoint after a lost worker or task."},
      {"scheduler_checkpoints_total", "Job-wide checkpoints the scheduler recorded complete."},
      {"grpc_server_handled_total", "gRPC calls this server completed, by method and status code."},
      {"grpc_server_handling", "Time from a gRPC call's arrival to its status, by method."},
      {"grpc_client_handled_total", "gRPC calls this process made, by method and status code."},
      {"grpc_client_handling", "Time from a gRPC call's start to its status, by method."},
  };
  return help;
}

// "1234" ms as "1.234" seconds.
std::string MsAsSeconds(int64_t ms) {
  std::string sign = ms < 0 ? "-" : "";
  const uint64_t a = ms < 0 ? 0 - static_cast<uint64_t>(ms) : static_cast<uint64_t>(ms);
  std::string frac = std::to_string(a % 1000);
  frac.insert(0, 3 - frac.size(), '0');
  return sign + std::to_string(a / 1000) + "." + frac;
}

}  // namespace

std::string MetricsRegistry::ToPrometheusText(const std::string& prefix) const {
  if (parent_ != nullptr) return parent_->ToPrometheusText(prefix);
  // Families: every series of a name together, after its # TYPE line.
  struct Family {
    std::vector<std::pair<std::string, int64_t>> series;         // counters, gauges
    std::vector<std::pair<std::string, const Histogram*>> hist;  // histograms
    std::vector<std::pair<std::string, double>> doubles;         // float counters
  };
  std::map<std::string, Family> families;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [k, c] : counters_) {
      auto [name, labels] = SplitFullName(k);
      families[name].series.emplace_back(labels, c->value());
    }
    for (const auto& [k, h] : histograms_) {
      auto [name, labels] = SplitFullName(k);
      families[name].hist.emplace_back(labels, h.get());
    }
    for (const auto& [k, d] : doubles_) {
      auto [name, labels] = SplitFullName(k);
      families[name].doubles.emplace_back(labels, d->value());
    }
  }
  std::string out;
  for (const auto& [name, family] : families) {
    const bool counter = name.size() > 6 && name.compare(name.size() - 6, 6, "_total") == 0;
    // Milliseconds are counted, seconds (the base unit) exported; a total of
    // ms (x_ms_total) as x_seconds_total.
    const bool ms_total =
        counter && name.size() > 9 && name.compare(name.size() - 9, 9, "_ms_total") == 0;
    const bool ms = ms_total || (name.size() > 3 && name.compare(name.size() - 3, 3, "_ms") == 0);
    const std::string base = ms ? name.substr(0, name.size() - (ms_total ? 9 : 3)) : name;
    const std::string exported = absl::StrCat(prefix, ms ? base : name,
                                              ms ? (ms_total ? "_seconds_total" : "_seconds") : "");
    auto value = [ms](int64_t v) { return ms ? MsAsSeconds(v) : std::to_string(v); };
    auto help = HelpTexts().find(base);
    absl::StrAppend(
        &out, "# HELP ", exported, " ",
        help != HelpTexts().end() ? help->second : absl::StrCat("Caravela metric ", name, "."),
        "\n");
    const char* type = !family.hist.empty() ? " histogram\n" : counter ? " counter\n" : " gauge\n";
    absl::StrAppend(&out, "# TYPE ", exported, type);
    for (const auto& [labels, v] : family.series) {
      absl::StrAppend(&out, exported, labels, " ", value(v), "\n");
    }
    for (const auto& [labels, v] : family.doubles) {
      char buf[32];
      std::snprintf(buf, sizeof buf, "%.17g", v);
      absl::StrAppend(&out, exported, labels, " ", buf, "\n");
    }
    for (const auto& [labels, h] : family.hist) {
      // {a="b"} -> {a="b",le="x"}; "" -> {le="x"}
      const std::string open = labels.empty() ? "{" : labels.substr(0, labels.size() - 1) + ",";
      const std::vector<int64_t> counts = h->counts();
      int64_t cumulative = 0;
      for (size_t i = 0; i < counts.size(); ++i) {
        cumulative += counts[i];
        const std::string le = i < h->bounds().size() ? value(h->bounds()[i]) : "+Inf";
        absl::StrAppend(&out, exported, "_bucket", open, "le=\"", le, "\"} ", cumulative, "\n");
      }
      absl::StrAppend(&out, exported, "_sum", labels, " ", value(h->sum()), "\n");
      absl::StrAppend(&out, exported, "_count", labels, " ", cumulative, "\n");
    }
  }
  return out;
}

std::map<std::string, int64_t> MetricsRegistry::Snapshot() const {
  if (parent_ != nullptr) {
    // The parent's series under this scope: name{scope,labels} -> name{labels}.
    const std::string scope = "{" + scope_;
    std::map<std::string, int64_t> own;
    for (const auto& [key, v] : parent_->Snapshot()) {
      const size_t at = key.find(scope);
      if (at == std::string::npos) continue;
      const size_t end = at + scope.size();
      if (end < key.size() && key[end] == ',') {
        own[key.substr(0, at) + "{" + key.substr(end + 1)] = v;
      } else if (end < key.size() && key[end] == '}') {
        own[key.substr(0, at) + key.substr(end + 1)] = v;
      }
    }
    return own;
  }
  std::lock_guard<std::mutex> lock(mu_);
  std::map<std::string, int64_t> out;
  for (const auto& [k, c] : counters_) out[k] = c->value();
  for (const auto& [k, h] : histograms_) {
    const auto [name, labels] = SplitFullName(k);
    out[absl::StrCat(name, "_count", labels)] = h->count();
    out[absl::StrCat(name, "_sum", labels)] = h->sum();
  }
  return out;
}

}  // namespace caravela
