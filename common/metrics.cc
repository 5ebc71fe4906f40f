#include "common/metrics.h"

#include <utility>
#include <vector>

namespace caravela {
namespace {
std::string FullName(const std::string& name, const std::string& labels) {
  return labels.empty() ? name : name + "{" + labels + "}";
}
}  // namespace

Counter* MetricsRegistry::Get(const std::string& name, const std::string& labels) {
  std::lock_guard<std::mutex> lock(mu_);
  auto& slot = counters_[FullName(name, labels)];
  if (!slot) slot = std::make_unique<Counter>();
  return slot.get();
}

int64_t MetricsRegistry::Value(const std::string& name, const std::string& labels) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = counters_.find(FullName(name, labels));
  return it == counters_.end() ? 0 : it->second->value();
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
      {"dedup_passed_total", "First copies of an id that passed dedup."},
      {"dedup_duplicates_total", "Identical copies of an id dropped by dedup."},
      {"dedup_conflicts_total", "Copies of an id with other content, sent to .conflicts."},
      {"dedup_missing_id_total", "Records without the dedup id field."},
      {"dedup_expired_ids_total", "Ids forgotten after the dedup retention."},
      {"dedup_retention", "The dedup operator's id retention."},
      {"window_emitted_total", "Window results emitted (every revision)."},
      {"join_matches_total", "Joined rows emitted."},
      {"join_unmatched_total", "Rows emitted without a match (outer joins)."},
      {"checkpoints_total", "Checkpoints stored by a task."},
      {"checkpoint_last_id", "Id of the task's last stored checkpoint."},
      {"checkpoint_last_duration", "Duration of the task's last checkpoint."},
      {"checkpoint_last_state_bytes", "State bytes referenced by the task's last checkpoint."},
      {"checkpoint_uploaded_bytes_total", "Bytes uploaded to checkpoint storage."},
      {"restores_total", "Restores from a checkpoint or savepoint."},
      {"job_checkpoints_total", "Job-wide checkpoints completed."},
      {"job_checkpoint_last_id", "Id of the last job-wide checkpoint completed."},
      {"job_checkpoint_last_duration", "Duration of the last job-wide checkpoint."},
      {"task_records_in_total", "Records a task read from its sources (not from exchanges)."},
      {"task_records_out_total", "Results a task wrote to its sinks."},
      {"task_watermark", "A task's lowest operator watermark (event time)."},
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
  // Families: every series of a name together, after its # TYPE line.
  std::map<std::string, std::vector<std::pair<std::string, int64_t>>> families;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [k, c] : counters_) {
      const size_t brace = k.find('{');
      families[k.substr(0, brace)].emplace_back(
          brace == std::string::npos ? std::string() : k.substr(brace), c->value());
    }
  }
  std::string out;
  for (const auto& [name, series] : families) {
    const bool counter = name.size() > 6 && name.compare(name.size() - 6, 6, "_total") == 0;
    // Milliseconds are counted, seconds (the base unit) exported.
    const bool ms = name.size() > 3 && name.compare(name.size() - 3, 3, "_ms") == 0;
    const std::string base = ms ? name.substr(0, name.size() - 3) : name;
    const std::string exported = prefix + (ms ? base + "_seconds" : name);
    auto help = HelpTexts().find(base);
    out += "# HELP " + exported + ' ' +
           (help != HelpTexts().end() ? help->second : "Caravela metric " + name + ".") + '\n';
    out += "# TYPE " + exported + (counter ? " counter\n" : " gauge\n");
    for (const auto& [labels, value] : series) {
      out += exported + labels + ' ' + (ms ? MsAsSeconds(value) : std::to_string(value)) + '\n';
    }
  }
  return out;
}

std::map<std::string, int64_t> MetricsRegistry::Snapshot() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::map<std::string, int64_t> out;
  for (const auto& [k, c] : counters_) out[k] = c->value();
  return out;
}

}  // namespace caravela
