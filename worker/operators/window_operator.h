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
// batch) and in an in-memory store used for processing; Open() reloads the
// store from the table, so a restored backend resumes exactly.
//
// The store is compact: group-by values are interned once per group (a
// hopping window's group has size/slide windows), windows live in a slot
// vector listed by start in their group, their accumulators in one array, and
// the timers are buckets of slot references per time, sorted by key only
// when they fire (so emissions keep the (end, group key, start) order).
// Slots are reused; a reference carries the slot's generation, so queues drop
// entries of windows erased since (sessions merge) lazily.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "common/job_spec.h"
#include "worker/operators/operator.h"

namespace caravela {

// kArgMax / kArgMin: the rows with the highest / lowest value of `field`
// (every tied row, in arrival order), each as an object of the `keep`
// fields (all fields when `keep` is empty): a list.
enum class AggFn { kCount, kSum, kMin, kMax, kAvg, kCountDistinct, kArgMax, kArgMin };

struct AggregateSpec {
  std::string as;
  AggFn fn = AggFn::kCount;
  std::string field;  // "*" for count(*)
  FieldPath path;     // parsed `field` (empty for "*")
  // arg_max / arg_min: the fields each kept row has (output names: their
  // dotted paths); empty: the whole record.
  std::vector<std::string> keep;
  std::vector<FieldPath> keep_paths;
};

struct WindowSpec {
  std::string from;
  enum class Kind { kTumbling, kHopping, kSession } kind = Kind::kTumbling;
  int64_t size = 0;                   // tumbling/hopping
  int64_t slide = 0;                  // hopping (== size for tumbling)
  int64_t gap = 0;                    // session
  std::vector<std::string> group_by;  // as written; output field names
  std::vector<FieldPath> group_paths;
  std::vector<AggregateSpec> aggregates;
  int64_t early_fire_every = 0;  // 0 = no EARLY results
  int64_t allowed_lateness = 0;
  // `reconcile: {id: field}`: every result also carries `events` (records
  // aggregated) and `id_digest` (order-independent digest of their ids), so a
  // batch recompute can compare a window cheaply (SPEC §10).
  std::string reconcile_id;  // as written; empty = off
  FieldPath reconcile_path;
};

class WindowOperator : public Operator {
 public:
  // How long (event time after FINAL) a window's last revision is kept for
  // the too_late records that miss it.
  static constexpr int64_t kAuditHorizon = int64_t{7} * 24 * 3600 * 1000;

  explicit WindowOperator(WindowSpec spec);
  ~WindowOperator() override;

  // Its side outputs, declared once: its kind (OperatorKind::SideOutputs)
  // and the runtime read this list.
  static std::vector<std::string> DeclaredSideOutputs() { return {"too_late"}; }
  std::vector<std::string> SideOutputs() const override { return DeclaredSideOutputs(); }
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
  size_t window_count() const { return live_windows_; }

  struct Acc;
  struct Window;

 private:
  // A window slot and the generation it had: stale once the slot is freed.
  struct Ref {
    uint32_t slot;
    uint32_t gen;
  };
  // Group-by values shared by the group's windows, and the windows: a
  // hopping window's group has size/slide of them, a session's usually one,
  // so finding one by start is a short scan of hot memory.
  struct Group {
    std::string key;  // JSON text of each group-by value, '\0'-terminated
    // Its key group in the tables (OperatorContext::key_groups); -1: stored
    // without one.
    int32_t key_group = -1;
    Record values;                                   // fields named as in group_by
    std::vector<std::pair<int64_t, uint32_t>> wins;  // (start, slot), by start
  };
  using Buckets = std::map<int64_t, std::vector<Ref>>;

  // The group of `r` (created with no windows if new).
  uint32_t InternGroup(const Record& r);
  // A new group with key `key` and no values yet.
  uint32_t AddGroup(std::string_view key);
  void ReleaseGroup(uint32_t gid);
  // A new window slot, in its group's list (not yet in the timers).
  uint32_t NewSlot(uint32_t gid, int64_t start, int64_t end);
  Acc* AccsOf(uint32_t slot);
  Ref RefOf(uint32_t slot) const;
  bool Valid(Ref r) const;
  // The window's key in the state table: group key + big-endian start.
  std::string StateKey(const Window& w) const;
  // Sorts references by (end, group key, start): the emission order.
  void SortByKey(std::vector<Ref>* refs) const;
  // Prefetches what emitting due[k + a few] will read.
  void Prefetch(const std::vector<Ref>& due, size_t k) const;
  // Drops stale references from every timer bucket once they outnumber the
  // windows (sessions merge often).
  void MaybeCompact();

  uint32_t Touch(OperatorContext& ctx, uint32_t gid, int64_t start, int64_t end);
  void Update(uint32_t slot, const Record& r);
  void MarkChanged(OperatorContext& ctx, uint32_t slot);
  void MarkPersist(uint32_t slot);  // written at the next Flush
  void Emit(OperatorContext& ctx, uint32_t slot, const char* state, Output& out);
  // Forgets the window (and schedules its deletion from the table if it was
  // stored).
  // `final_used`: called for its final timer, whose reference is used up.
  void Erase(uint32_t slot, bool final_used = false);
  // How a record arrived (window_records_total{arrival}); indexes below.
  enum Arrival { kOnTime = 0, kLate = 1, kTooLate = 2 };
  Arrival ProcessSession(OperatorContext& ctx, const Record& r, Output& out);
  void Index(uint32_t slot);
  void ArmEarlyTimer(OperatorContext& ctx);
  void GroupKey(const Record& r, std::string* out) const;
  // `key_group` -1: the layout without key groups.
  static std::string FinalKey(int64_t final_time, int key_group, std::string_view group_key,
                              int64_t start);
  // Adds "window" (group-by values, bounds, its last revision or null) to the
  // too_late record of `r`, which missed the window [start, end).
  void AddMissedWindow(const Record& r, int64_t start, int64_t end, Record* side);

  WindowSpec spec_;
  size_t naggs_ = 0;
  StateTable* table_ = nullptr;
  // The audit trail: FINAL windows' last revisions, for the too_late records
  // that miss them (key: big-endian end + lateness, group key, big-endian
  // start; value: the revision as decimal text), kept kAuditHorizon of event
  // time after FINAL.
  StateTable* finals_ = nullptr;
  int64_t finals_cleared_to_ = kMinTime;
  std::vector<Window> slots_;
  std::vector<uint32_t> free_slots_;
  std::vector<Acc> accs_;  // naggs_ per slot
  size_t live_windows_ = 0;
  std::vector<Group> groups_;
  std::vector<uint32_t> free_groups_;
  absl::flat_hash_map<std::string, uint32_t> group_index_;
  // InternGroup's shortcut for one group-by field holding a short string or
  // an integer (a country, a user id): the group of the last record whose
  // value had these bytes, in a slot picked by their hash. Same type and
  // bytes mean the same group key, so a hit is exact; a miss takes the
  // encoded key. Entries of an older generation are void: ReleaseGroup
  // and Open start a new one (a freed gid may come back for another key).
  struct GroupCacheEntry {
    uint64_t generation = 0;  // 0: never filled
    uint32_t gid = 0;
    ValueType type = ValueType::kNull;
    uint8_t len = 0;
    char bytes[16];  // a string's bytes, or an integer's
  };
  static constexpr size_t kGroupCacheSize = 256;
  std::vector<GroupCacheEntry> group_cache_;
  uint64_t group_generation_ = 1;
  // The cache entry for `v`, or nullptr when `v` is not cacheable.
  GroupCacheEntry* GroupCacheSlot(const Value& v, std::string_view* bytes);
  Buckets pending_on_time_;        // end -> windows not yet complete
  Buckets pending_final_;          // end + lateness -> every window
  size_t stale_refs_ = 0;          // references to freed slots left in the buckets
  std::vector<Ref> late_changed_;  // complete windows changed in this batch
  std::vector<Ref> to_persist_;
  absl::flat_hash_set<std::string> to_delete_;
  int64_t next_timer_ = kMaxTime;
  int64_t dirty_unfired_ = 0;  // windows with changes not yet emitted and not complete
  TooLateCounters too_late_;
  Counter* emitted_[4] = {nullptr, nullptr, nullptr, nullptr};
  Counter* arrival_records_[3] = {nullptr, nullptr, nullptr};
  DoubleCounter* arrival_amounts_[3] = {nullptr, nullptr, nullptr};
  const FieldPath* amount_path_ = nullptr;  // the first sum aggregate's field
  std::string scratch_;
  std::string key_scratch_;
  // The runtime's key groups, as of the last ProcessBatch (null: none).
  const KeyOwner* key_groups_ = nullptr;
  std::string key_group_scratch_;
};

}  // namespace caravela
