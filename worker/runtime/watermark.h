// Per-partition watermarks of one source (SPEC §2).
//
//   wm_p = max valid event time seen on p - max_out_of_orderness
//   source watermark = min over active partitions, never decreasing
//
// A partition becomes idle when it had no record for `idle_timeout` of
// processing time and has no backlog; it leaves the minimum and rejoins with
// its next record. A partition that has never had a record holds the minimum
// at -inf until it goes idle (as in Flink). When every partition is idle the
// source is idle: its watermark stays where it was, and multi-input operators
// ignore it.
//
// Threading: owned by one task thread.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "common/job_spec.h"
#include "common/time_util.h"

namespace caravela {

class SourceWatermark {
 public:
  // `start_time`: processing time at which the source started (idleness of
  // partitions that never had a record counts from it).
  SourceWatermark(WatermarkSpec spec, int64_t start_time);

  // Makes sure partitions [0, n) exist.
  void EnsurePartitions(int n);
  // Only the partitions p with p % tasks == index take part in the minimum
  // (a task of a parallel job owns those); the others are ignored as if they
  // did not exist. Default: every partition.
  void SetOwnership(int tasks, int index) {
    tasks_ = tasks;
    index_ = index;
  }
  bool owned(int p) const { return tasks_ <= 1 || p % tasks_ == index_; }
  int partition_count() const { return static_cast<int>(parts_.size()); }

  // A valid record with `event_time` arrived on `partition` at processing time `now`.
  void OnRecord(int partition, int64_t event_time, int64_t now) {
    if (partition >= static_cast<int>(parts_.size())) EnsurePartitions(partition + 1);
    Part& p = parts_[partition];
    if (event_time > p.max_event_time) p.max_event_time = event_time;
    p.last_activity = now;
    p.seen = true;
  }
  // Any record (valid or not) on `partition`: activity for idleness.
  void OnActivity(int partition, int64_t now);

  // Recomputes idleness at `now` given each partition's backlog and returns the
  // (monotonic) source watermark.
  int64_t Update(int64_t now, const std::function<int64_t(int)>& backlog);
  // The source has ended: watermark +inf.
  void Finish() {
    finished_ = true;
    current_ = kMaxTime;
  }

  int64_t current() const { return current_; }
  bool idle() const { return idle_; }
  bool partition_idle(int p) const { return parts_[p].idle; }
  int64_t partition_watermark(int p) const;
  // Earliest processing time after `after` at which an active partition
  // would turn idle (kMaxTime if none / idleness disabled).
  int64_t NextIdleTransition(int64_t after) const;
  // Restores monotonicity after a restore.
  void set_current(int64_t w) { current_ = w; }
  // The whole state as text (checkpoints) and back; Import returns false on
  // malformed text and then leaves the state unchanged.
  std::string Export() const;
  bool Import(std::string_view text);
  // Rescaling: the state of a task whose partitions come from old tasks
  // (`exports[j]` by old task j of N, which owned p % N == j): partition p
  // from exports[p % N], the watermark the minimum of theirs. nullopt if one
  // is malformed.
  static std::optional<std::string> MergeExports(const std::vector<std::string>& exports);

 private:
  struct Part {
    int64_t max_event_time = kMinTime;
    int64_t last_activity = 0;
    bool seen = false;
    bool idle = false;
  };
  WatermarkSpec spec_;
  int64_t start_time_;
  std::vector<Part> parts_;
  int64_t current_ = kMinTime;
  bool idle_ = false;
  bool finished_ = false;
  int tasks_ = 1;
  int index_ = 0;
};

}  // namespace caravela
