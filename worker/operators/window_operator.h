// Window aggregation with the revision contract of SPEC §4.
//
// Windows are tumbling, hopping or session (merging, Flink-style: sessions
// that touch or overlap merge), half-open [start, end), aligned to the epoch.
// Every emission is the complete snapshot of one window key (group-by values +
// window bounds) with `revision` (consecutive per key within a run) and
// `state`:
//   EARLY   - processing-time timer (`early_fire_every`, aligned to multiples of
//             the interval) for a window that changed since its last emission
//             and whose end the watermark has not reached;
//   ON_TIME - once, when W >= window_end;
//   LATE    - at the end of a batch in which records within `allowed_lateness`
//             changed an already complete window (a window whose first record
//             arrives late starts with LATE);
//   FINAL   - once, when W >= window_end + allowed_lateness; state is deleted.
// A record whose windows are all final goes to side output `too_late`; with
// hopping windows it still updates the open ones.
//
// Aggregates: count(* | field: non-null values), sum (exact for integers and
// decimals: 128-bit fixed point; doubles make it a double), min, max, avg
// (double), count_distinct (exact), arg_max / arg_min (every row with the
// extreme value, as objects of the `keep` fields: a list). Non-numeric
// values are ignored by sum/avg, nulls by every aggregate but count(*).
//
// State: every window lives in table "windows" (written at Flush, after each
// batch) and in an in-memory map used for processing; Open() reloads the map
// from the table, so a restored backend resumes exactly.
#pragma once

#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "common/job_spec.h"
#include "worker/operators/operator.h"

namespace caravela {

class WindowOperator : public Operator {
 public:
  explicit WindowOperator(WindowSpec spec);
  ~WindowOperator() override;

  std::vector<std::string> SideOutputs() const override { return {"too_late"}; }
  std::vector<std::string> OutputKeyFields() const override;
  absl::Status Open(OperatorContext& ctx) override;
  // Copies the windows whose group the owner gives to this task (their
  // revisions and flags with them).
  absl::Status AdoptState(OperatorContext& from, OperatorContext& to,
                          const KeyOwner& owner) override;
  absl::Status ProcessBatch(OperatorContext& ctx, int input, const RecordBatch& batch,
                            Output& out) override;
  absl::Status OnWatermark(OperatorContext& ctx, Output& out) override;
  int64_t NextTimer() const override { return next_timer_; }
  absl::Status OnProcessingTime(OperatorContext& ctx, Output& out) override;
  absl::Status Flush(OperatorContext& ctx) override;

  // Number of windows currently held (tests).
  size_t window_count() const { return windows_.size(); }

  struct Acc;
  struct Window;

 private:
  using TimeKey = std::pair<int64_t, std::string>;

  Window* Touch(OperatorContext& ctx, const std::string& key, const Record& group_src,
                int64_t start, int64_t end, bool* created);
  void Update(Window& w, const Record& r);
  void MarkChanged(OperatorContext& ctx, const std::string& key, Window& w);
  void Emit(OperatorContext& ctx, Window& w, const char* state, Output& out);
  // Forgets window `key` (and schedules its deletion from the table if it
  // was stored); `in_final` false: the caller already took it out of
  // pending_final_.
  void Erase(const std::string& key, bool in_final = true);
  // How a record arrived (window_records_total{arrival}); indexes below.
  enum Arrival { kOnTime = 0, kLate = 1, kTooLate = 2 };
  Arrival ProcessSession(OperatorContext& ctx, const Record& r, Output& out);
  void Index(const std::string& key, const Window& w);
  void Unindex(const std::string& key, const Window& w, bool in_final = true);
  void ArmEarlyTimer(OperatorContext& ctx);
  std::string GroupKey(const Record& r);

  WindowSpec spec_;
  StateTable* table_ = nullptr;
  absl::flat_hash_map<std::string, std::unique_ptr<Window>> windows_;
  std::set<TimeKey> pending_on_time_;  // (end, key) of windows not yet complete
  std::set<TimeKey> pending_final_;    // (end + lateness, key) of every window
  std::set<TimeKey> late_changed_;     // complete windows changed in this batch
  // Sessions: group key -> (start -> window key).
  absl::flat_hash_map<std::string, std::map<int64_t, std::string>> sessions_;
  absl::flat_hash_set<std::string> to_persist_;
  absl::flat_hash_set<std::string> to_delete_;
  int64_t next_timer_ = kMaxTime;
  int64_t dirty_unfired_ = 0;  // windows with changes not yet emitted and not complete
  Counter* too_late_ = nullptr;
  Counter* emitted_[4] = {nullptr, nullptr, nullptr, nullptr};
  Counter* arrival_records_[3] = {nullptr, nullptr, nullptr};
  DoubleCounter* arrival_amounts_[3] = {nullptr, nullptr, nullptr};
  const FieldPath* amount_path_ = nullptr;  // the first sum aggregate's field
  std::string scratch_;
};

}  // namespace caravela
