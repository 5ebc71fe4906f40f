// The operator interface (Arroyo/Flink style): one required method that
// processes a batch; watermark, processing-time timer, snapshot and close hooks
// have defaults. Operators declare their state tables in Open(); the runtime
// owns the state backend and commits it after every batch.
//
// Lifecycle: Open() once -> any sequence of ProcessBatch / OnWatermark /
// OnProcessingTime -> Close(). All calls come from one task thread.
//
// Time contract: before each call the runtime sets ctx.watermark() (the min of
// the operator's inputs; monotonic) and ctx.now() (processing time, from the
// injected clock). A record is late when event_time < watermark.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/key_groups.h"
#include "common/metrics.h"
#include "common/record.h"
#include "common/status.h"
#include "common/time_util.h"
#include "worker/operators/output.h"
#include "worker/state/state_backend.h"

namespace caravela {

struct KeyOwner;

// What the runtime gives an operator.
class OperatorContext {
 public:
  OperatorContext(std::string name, StateBackend* state, MetricsRegistry* metrics,
                  const Clock* clock)
      : name_(std::move(name)), state_(state), metrics_(metrics), clock_(clock) {}

  const std::string& name() const { return name_; }
  // Opens the operator's state table `table` (namespaced by operator name).
  absl::StatusOr<StateTable*> OpenTable(const std::string& table) {
    RETURN_IF_ERROR(MayOpen(table));
    return state_->OpenTable(name_ + "/" + table);
  }
  // Opens a table the operator only writes behind its in-memory working set
  // and reads in Open() (StateBackend::OpenWriteBehindTable).
  absl::StatusOr<StateTable*> OpenWriteBehindTable(const std::string& table) {
    RETURN_IF_ERROR(MayOpen(table));
    return state_->OpenWriteBehindTable(name_ + "/" + table);
  }
  // Set by Operator::AdoptState's default in a rescaled restore: the
  // operator has no rescale rule, so opening a state table fails (its state
  // would be lost) and with it the rescale.
  void RefuseStateTables() { refuse_tables_ = true; }
  // How this task's records divide into key groups: the exchange keys that
  // route each input, max_parallelism and this task's place (KeyOwner). Set
  // by the runtime before it restores state, for an operator whose inputs
  // all come through keyed exchanges; null otherwise. An operator lays its
  // keyed state out by key group with it (KeyOwner::KeyGroup), so that a
  // rescale copies key-group ranges without reading rows.
  const KeyOwner* key_groups() const { return key_groups_.get(); }
  void set_key_groups(std::shared_ptr<const KeyOwner> k) { key_groups_ = std::move(k); }
  MetricsRegistry& metrics() { return *metrics_; }
  // Counter `name{op="<op>"[,extra]}`.
  Counter* OpCounter(const std::string& name, const std::string& extra_labels = "") {
    std::string labels = "op=\"" + name_ + "\"";
    if (!extra_labels.empty()) labels += "," + extra_labels;
    return metrics_->Get(name, labels);
  }
  int64_t now() const { return clock_->NowMs(); }
  int64_t watermark() const { return watermark_; }
  void set_watermark(int64_t w) { watermark_ = w; }
  // The run's epoch: 0 for a fresh job, +1 on every start from a checkpoint
  // or savepoint (SPEC §4: revisions increase across restores).
  int64_t epoch() const { return epoch_; }
  void set_epoch(int64_t e) { epoch_ = e; }
  // The published revision for a per-key counter `n` (1, 2, ... over the
  // key's life, restored with the state): epoch * kRevisionEpochStride + n.
  // Consecutive within one run; after a restore, greater than anything the
  // previous runs can have published, even after the checkpoint.
  static constexpr int64_t kRevisionEpochStride = 1'000'000'000;
  int64_t Revision(int64_t n) const { return epoch_ * kRevisionEpochStride + n; }

 private:
  std::string name_;
  StateBackend* state_;
  MetricsRegistry* metrics_;
  const Clock* clock_;
  int64_t watermark_ = kMinTime;
  int64_t epoch_ = 0;
  bool refuse_tables_ = false;
  std::shared_ptr<const KeyOwner> key_groups_;

  absl::Status MayOpen(const std::string& table) const;
};

// What the runtime gives an operator kind's factory (OperatorKind::Create,
// common/operator_kind.h).
struct OperatorBuildContext {
  // The arrival field of the source at the root of input 0 (through
  // single-input operators), "" when it has none: a dedup's fingerprint
  // ignores it.
  std::string upstream_arrival_field;
};

// Which keys a task owns after a rescale (SPEC §8 "Tasks and keys"): a key
// belongs to task `index` of `tasks` when the key group of ExchangeKeyHash
// over the fields that partition the operator's input (`keys[input]`, paths
// on the input records, in the exchange's order) is in that task's range
// (common/key_groups.h) -- the task its records are routed to from now on.
struct KeyOwner {
  std::vector<std::vector<FieldPath>> keys;  // per operator input
  int tasks = 1;
  int index = 0;
  int max_parallelism = kDefaultMaxParallelism;  // spec.max_parallelism
  bool OwnsHash(uint64_t hash) const {
    return tasks <= 1 || TaskOfKeyHash(hash, max_parallelism, tasks) == index;
  }
  // The key group of `r`, a record of input `input`.
  int KeyGroup(const Record& r, int input, std::string* scratch) const;
  // The key groups this task owns (all of them for one task).
  KeyGroupRange Range() const {
    return tasks <= 1 ? KeyGroupRange{0, max_parallelism - 1}
                      : KeyGroupRangeOfTask(max_parallelism, tasks, index);
  }
  // Whether `r`, a record of input `input`, belongs to this task.
  bool Owns(const Record& r, int input, std::string* scratch) const;
  // Hash of key values in the exchange's order (what ExchangeKeyHash gives
  // for a record holding them).
  static uint64_t HashValues(const std::vector<Value>& values, std::string* scratch);

  // For operators keyed by group_by (window, top_n), whose state stores a
  // group's values as the array "g": where each field of the partitioning
  // key (keys[0], a subset of `group_paths`) stands among the group values;
  // FailedPrecondition naming `what` if one is not in group_by.
  absl::StatusOr<std::vector<size_t>> GroupPositions(const std::vector<FieldPath>& group_paths,
                                                     const std::string& what) const;
  // Whether the group stored as the array "g" of `rec` belongs to this task
  // (`positions` from GroupPositions; missing values count as null).
  bool OwnsGroup(const Record& rec, const std::vector<size_t>& positions,
                 std::string* scratch) const;
  // The key group of that group.
  int GroupKeyGroup(const Record& rec, const std::vector<size_t>& positions,
                    std::string* scratch) const;
  // Copies into `to`, as they are, the rows of `from` laid out by key group
  // under `prefix` (worker/state/key_codec.h) whose key group this task owns:
  // one range scan, no row decoded.
  absl::Status CopyOwnedRows(StateTable* from, StateTable* to, std::string_view prefix = "") const;
};

// Why a record went to a `too_late` side output (SPEC §10's audit trail):
//   after_final        - its window (or every window it falls in) is FINAL;
//   beyond_retention   - older than the dedup horizon (watermark - retention);
//   before_join_bound  - older than the oldest time the join still matches;
//   behind_watermark   - a temporal join record older than the watermark.
enum class TooLateReason { kAfterFinal, kBeyondRetention, kBeforeJoinBound, kBehindWatermark };
const char* TooLateReasonCode(TooLateReason reason);

// too_late_total{op,reason}: one counter per reason an operator can give.
class TooLateCounters {
 public:
  void Open(OperatorContext& ctx, std::initializer_list<TooLateReason> reasons);
  void Add(TooLateReason reason) { counters_[static_cast<int>(reason)]->Add(); }

 private:
  Counter* counters_[4] = {nullptr, nullptr, nullptr, nullptr};
};

// Fills `side` with the standard side-output record for `r`:
// {"operator", "reason" (a TooLateReason code), "detail" (the rule, in
// words), "event_time", "watermark", "record"}; callers add what the record
// missed ("window", "horizon", "bound").
void BuildSideRecord(const OperatorContext& ctx, const Record& r, TooLateReason reason,
                     std::string_view detail, Record* side);

class Operator {
 public:
  virtual ~Operator() = default;

  // Names of side outputs (e.g. {"too_late"}); Output has this many sides.
  virtual std::vector<std::string> SideOutputs() const { return {}; }
  // Declares state and restores it from the backend (which may hold a
  // restored snapshot).
  virtual absl::Status Open(OperatorContext& ctx) { return absl::OkStatus(); }
  // Processes records of input `input` (index into the operator's inputs).
  virtual absl::Status ProcessBatch(OperatorContext& ctx, int input, const RecordBatch& batch,
                                    Output& out) = 0;
  // Called after ctx.watermark() advanced.
  virtual absl::Status OnWatermark(OperatorContext& ctx, Output& out) { return absl::OkStatus(); }
  // Earliest processing time at which OnProcessingTime wants to run; kMaxTime
  // for none.
  virtual int64_t NextTimer() const { return kMaxTime; }
  // Called when ctx.now() >= NextTimer().
  virtual absl::Status OnProcessingTime(OperatorContext& ctx, Output& out) {
    return absl::OkStatus();
  }
  // Writes every in-memory change to the state tables (before a snapshot or
  // commit). Operators that write through need not override.
  virtual absl::Status Flush(OperatorContext& ctx) { return absl::OkStatus(); }
  // Watermark of the main output given the operator's input watermark (must
  // be monotonic in it and map kMinTime/kMaxTime to themselves). An operator
  // that emits records older than its input watermark holds it back by as
  // much, so those records are not late downstream (an outer join's padded
  // rows). Default: the input watermark.
  virtual int64_t OutputWatermark(int64_t input_watermark) const { return input_watermark; }
  // Key fields of output records (sinks key by them), e.g. group-by fields and
  // window bounds. Empty: inherit from the input.
  virtual std::vector<std::string> OutputKeyFields() const { return {}; }
  virtual absl::Status Close(OperatorContext& ctx, Output& out) { return absl::OkStatus(); }
  // Rescaling (SPEC §8): a job restored with another task count moves each
  // key's state to the task that now owns it. Called before Open(), once per
  // task of the old layout: copies into `to`'s tables what `from` (this
  // operator's tables in that old task's checkpoint, read-only) holds for
  // the keys `owner` gives to this task. State that cannot move returns
  // Unimplemented naming why.
  // The default is no rule: it lets an operator without state through and
  // makes one that opens a state table fail the rescale in Open() with an
  // error naming it (OperatorContext::RefuseStateTables). Every operator
  // that keeps state overrides it.
  virtual absl::Status AdoptState(OperatorContext& from, OperatorContext& to,
                                  const KeyOwner& owner) {
    to.RefuseStateTables();
    return absl::OkStatus();
  }
  // Whether AdoptState may write into tables that already hold keys: when
  // an old task's whole key-group range falls in the new task's (3 -> 2,
  // N -> 1), the runtime restores that part as it is, like a plain restore,
  // and adopts the other old parts onto it. True for state whose keys of
  // different key groups never collide; an operator that numbers what it
  // adopts anew (sequences the restored part also uses) returns false, and
  // the runtime then adopts every part into empty tables.
  virtual bool AdoptsOntoRestoredState() const { return true; }
};

}  // namespace caravela
