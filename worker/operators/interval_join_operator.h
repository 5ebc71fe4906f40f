// Interval join (SPEC §5): input 0 is the left side, input 1 the right side.
//
// A left row at time l and a right row at time r match when every `on` key
// is equal on both sides (numbers by value: 1 == 1.0; a key that is null or
// missing on a row never matches anything) and r - l lies in [lower, upper],
// both ends inclusive, and the optional `where` condition, evaluated over the
// combined record, is true.
//
// Output (main):
//  * a match, as soon as its second row is processed:
//      {"left": {...}, "right": {...}}  with event time max(l, r);
//  * for `left`/`full` joins, a left row that never matched, once, when
//    W > l + upper + allowed_lateness:  {"left": {...}, "right": null};
//    for `right`/`full` joins, a right row that never matched, once, when
//    W > r - lower + allowed_lateness:  {"left": null, "right": {...}};
//    padded rows keep their own event time. Nothing is ever retracted.
//  `where` is part of the join condition (like SQL's ON): a row whose only
//  equal-key partners fail it is unmatched and gets its padded row.
// A record with event time < W - allowed_lateness goes to side output
// `too_late` (with "side": "left" | "right") and takes no part in the join.
// W is the operator's watermark before the batch (SPEC §2).
//
// Output watermark: padded rows are older than W, so the operator holds its
// output watermark back by allowed_lateness + the largest padding delay
// (upper for left-outer, -lower for right-outer, at least 0), as Flink's
// row-time interval join does; neither padded rows nor matches are then late
// for a downstream operator.
//
// State: one table per side ("left"/"right"):
//   key   = [0x02 + key group (2 bytes, big-endian)] + join-key bytes
//           + AppendBigEndian64(time) + AppendBigEndian64(seq)
//   value = 1 flag byte ('m' matched, '-' not yet) + the row's JSON
// The key-group prefix is there when the runtime gives the operator its key
// groups (OperatorContext::key_groups: its inputs come through keyed
// exchanges): a rescale then copies the new task's range of key groups as
// it is, without reading the other rows. Rows stored without it (a
// checkpoint from before key groups, or a job that runs as one task) are
// read by their record's key and moved to the layout by key group when a
// task with key groups opens them.
// Join-key bytes are 0x01 + AppendJoinKey (join_key.h: self-delimiting), so
// the rows of one key sorted by time are one range of the table. Rows with a
// null key are stored only on an outer side (for their padded row) under the
// prefix 0x00, which never matches. Table "meta" holds the next sequence
// number.
// The working set is in memory, write-behind: join key -> both sides' rows
// sorted by (time, seq), each decoded once and kept packed (one allocation:
// Record::PackTo); partners of a row at t are a binary search + walk over the
// other side's rows of its key within [t + lower, t + upper] (or
// [t - upper, t - lower]). Flush() (called by the runtime before a
// checkpoint and at least every state_flush_interval_ms, 10 s) writes rows
// that are new or whose matched flag changed since the last Flush; persisted
// rows are deleted from the tables when they expire; a row that lives and
// dies between two flushes never touches the backend. The tables are opened
// write-behind (StateBackend::OpenWriteBehindTable) and read only by Open(),
// which rebuilds the working set from them, so a restored backend resumes
// exactly. (The working set must fit in memory: per buffered row 32 bytes,
// 40 in the expiry index and its packed record, 8 + 24 per field + its key
// and string bytes rounded up to 64 bytes; plus ~150 bytes per live key.)
// A row is dropped as soon as no future record can match it: future records
// have time >= W - allowed_lateness, so a left row at l goes when
// W > l + upper + allowed_lateness, a right row at r when
// W > r - lower + allowed_lateness; that is also when its padded row is due.
// Expiry goes through buckets of one second of expiry time, each sorted by
// (expiry time, side, seq) when it comes due, which is also the order of
// padded rows.
//
// Threading: one task thread, like every operator.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "absl/container/btree_set.h"
#include "absl/container/node_hash_map.h"
#include "common/expr.h"
#include "common/job_spec.h"
#include "common/json.h"
#include "worker/operators/join_key.h"
#include "worker/operators/operator.h"
#include "worker/operators/row_pool.h"

namespace caravela {

// SPEC §5 interval join: keys equal and right.time - left.time in
// [lower, upper] (both inclusive; bounds may be negative, lower <= upper).
struct IntervalJoinSpec {
  std::string left, right;
  std::vector<JoinKeySpec> on;
  int64_t lower = 0;
  int64_t upper = 0;
  JoinType type = JoinType::kInner;
  int64_t allowed_lateness = 0;
  // Optional join condition over the combined record (`left.x`, `right.y`);
  // empty: none. Part of the join condition, i.e. applied before padding.
  std::string where;
};

class IntervalJoinOperator : public Operator {
 public:
  static constexpr int kLeft = 0;
  static constexpr int kRight = 1;

  // `spec` must be valid (ParseJobSpec accepted it). Returns InvalidArgument
  // if its `where` does not compile.
  static absl::StatusOr<std::unique_ptr<IntervalJoinOperator>> Create(IntervalJoinSpec spec);

  // Its side outputs, declared once: its kind (OperatorKind::SideOutputs)
  // and the runtime read this list.
  static std::vector<std::string> DeclaredSideOutputs() { return {"too_late"}; }
  std::vector<std::string> SideOutputs() const override { return DeclaredSideOutputs(); }
  ~IntervalJoinOperator() override { DropAllRows(); }
  absl::Status Open(OperatorContext& ctx) override;
  // Copies the rows (with their matched flags) whose join key the owner
  // gives to this task.
  absl::Status AdoptState(OperatorContext& from, OperatorContext& to,
                          const KeyOwner& owner) override;
  absl::Status ProcessBatch(OperatorContext& ctx, int input, const RecordBatch& batch,
                            Output& out) override;
  absl::Status OnWatermark(OperatorContext& ctx, Output& out) override;
  absl::Status Flush(OperatorContext& ctx) override;
  int64_t OutputWatermark(int64_t input_watermark) const override;

  // Rows currently buffered for side `side` (kLeft/kRight) (tests; after a
  // Flush the tables hold the same number of keys).
  size_t buffered_rows(int side) const { return buffered_[side]; }

 private:
  IntervalJoinOperator(IntervalJoinSpec spec, std::unique_ptr<Expr> where);

  // One buffered row; its record packed in pool_ (Record::PackTo).
  struct Row {
    int64_t time;
    uint64_t seq;
    char* packed;  // owned: pool_.Free when the row is dropped
    uint32_t packed_bytes;
    bool matched = false;
    // kNew: not in the table; kClean: in the table as is; kStale: in the
    // table with an outdated matched flag.
    enum : uint8_t { kNew, kClean, kStale } persisted = kNew;
  };
  // The live rows of one side of a key: rows[begin..] sorted by (time, seq).
  // Rows mostly expire oldest first, so the front is dropped lazily.
  struct SideRows {
    std::vector<Row> rows;
    uint32_t begin = 0;
    bool empty() const { return begin == rows.size(); }
  };
  // Both sides of one join key (one hash probe per record finds partners and
  // the place of the new row). `dirty` while some row must be written at the
  // next Flush (the entry then outlives its rows until that Flush, so
  // dirty_keys_ may point at it).
  // An entry whose rows all expired stays until the next Flush (in
  // empty_keys_), so that a key that comes back soon reuses its buffers.
  struct KeyRows {
    SideRows sides[2];
    bool dirty = false;
    bool listed_empty = false;  // in empty_keys_
    // Its rows' key group in the tables (OperatorContext::key_groups); -1:
    // stored without one.
    int32_t key_group = -1;
  };
  using RowMap = absl::node_hash_map<std::string, KeyRows>;
  struct Pending {
    int64_t expiry;  // the row is dropped (and padded) once W > expiry
    int side;
    uint64_t seq;  // unique per row
    int64_t time;
    RowMap::value_type* entry;  // its key's rows (node_hash_map: stable)
    bool operator<(const Pending& o) const {
      return std::tie(expiry, side, seq) < std::tie(o.expiry, o.side, o.seq);
    }
  };
  // Pending rows whose expiry falls in one kExpiryBucketMs of time;
  // items[next..] are due, sorted by (expiry, side, seq) when `sorted` (rows
  // mostly arrive in that order, so a bucket is rarely sorted at all).
  static constexpr int64_t kExpiryBucketMs = 1000;
  struct ExpiryBucket {
    std::vector<Pending> items;
    size_t next = 0;
    bool sorted = true;
  };

  bool Outer(int side) const;
  int64_t Expiry(int side, int64_t t) const;
  // Buffers a row of `side` (a packed copy of `rec`) under `entry`.
  void AddRow(int side, RowMap::value_type* entry, int64_t time, uint64_t seq, bool matched,
              const Record& rec, bool persisted);
  // Drops rows[i] of `side_rows`.
  void RemoveRow(SideRows& side_rows, size_t i);
  // Drops every buffered row and key.
  void DropAllRows();
  void MarkDirty(RowMap::value_type* entry);
  // Drops every row with expiry < W, emitting padded rows for unmatched rows
  // of outer sides, in (expiry, side, seq) order.
  absl::Status Expire(OperatorContext& ctx, Output& out);
  // Drops the row of `p`, emitting its padded row if due.
  void ExpireRow(OperatorContext& ctx, const Pending& p, Output& out);
  // The table key of a row of `entry`.
  static void TableKey(const RowMap::value_type& entry, int64_t time, uint64_t seq,
                       std::string* out);

  IntervalJoinSpec spec_;
  std::unique_ptr<Expr> where_;
  std::vector<FieldPath> paths_[2];
  StateTable* tables_[2] = {nullptr, nullptr};
  StateTable* meta_ = nullptr;
  RowMap rows_;
  RowPool pool_;  // the rows' packed records
  // Bucket number -> pending rows (hashed: rows arrive out of order, so
  // consecutive rows often hit different buckets), and the bucket numbers
  // in order.
  absl::node_hash_map<int64_t, ExpiryBucket> expiry_;
  absl::btree_set<int64_t> expiry_order_;
  // Per side, the bucket AddRow used last (rows of a side mostly go to the
  // same bucket as the row before).
  ExpiryBucket* last_bucket_[2] = {nullptr, nullptr};
  int64_t last_bucket_number_[2] = {0, 0};
  std::vector<RowMap::value_type*> dirty_keys_;
  std::vector<RowMap::value_type*> empty_keys_;  // emptied since the last Flush
  size_t buffered_[2] = {0, 0};
  JoinSequence seq_;

  TooLateCounters too_late_;
  Counter* matches_ = nullptr;
  Counter* padded_ = nullptr;

  // Scratch, reused across records.
  JsonDecoder decoder_;
  Record scratch_;
  std::string table_key_, value_;
  std::string key_scratch_;  // KeyOwner::KeyGroup
  // Per batch: the encoded keys (empty for a null key) and their entries.
  std::string batch_keys_;
  std::vector<uint32_t> key_ends_;
  std::vector<RowMap::value_type*> entries_;
};

}  // namespace caravela
