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
// State (in the backend, write-through; one table per side, "left"/"right"):
//   key   = join-key bytes + AppendBigEndian64(time) + AppendBigEndian64(seq)
//   value = 1 flag byte ('m' matched, '-' not yet) + the row's JSON
// Join-key bytes are 0x01 + AppendJoinKey (join_key.h: self-delimiting), so
// the partners of a left row at t are exactly one range scan over
// (key, [t + lower, t + upper]) of the right table (and symmetrically). Rows
// with a null key are stored only on an outer side (for their padded row)
// under the prefix 0x00, which no scan visits. Table "meta" holds the next
// sequence number.
// A row is deleted as soon as no future record can match it: future records
// have time >= W - allowed_lateness, so a left row at l goes when
// W > l + upper + allowed_lateness, a right row at r when
// W > r - lower + allowed_lateness; that is also when its padded row is due.
// Expiry uses an in-memory index ordered by (expiry time, side, table key)
// that also knows whether each row matched (so a matched row is deleted
// without being read), and a per-side count of buffered rows per join-key
// hash, so a record whose key the other side does not hold skips its range
// scan. Open() rebuilds both from the tables, so a restored backend resumes
// exactly.
//
// Threading: one task thread, like every operator.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "absl/container/btree_set.h"
#include "absl/container/flat_hash_map.h"
#include "common/expr.h"
#include "common/job_spec.h"
#include "common/json.h"
#include "worker/operators/operator.h"

namespace caravela {

class IntervalJoinOperator : public Operator {
 public:
  static constexpr int kLeft = 0;
  static constexpr int kRight = 1;

  // `spec` must be valid (ParseJobSpec accepted it). Returns InvalidArgument
  // if its `where` does not compile.
  static absl::StatusOr<std::unique_ptr<IntervalJoinOperator>> Create(IntervalJoinSpec spec);

  std::vector<std::string> SideOutputs() const override { return {"too_late"}; }
  absl::Status Open(OperatorContext& ctx) override;
  absl::Status ProcessBatch(OperatorContext& ctx, int input, const RecordBatch& batch,
                            Output& out) override;
  absl::Status OnWatermark(OperatorContext& ctx, Output& out) override;
  absl::Status Flush(OperatorContext& ctx) override;
  int64_t OutputWatermark(int64_t input_watermark) const override;

  // Rows currently held in state for side `side` (kLeft/kRight), from the
  // in-memory index (tests; the tables hold the same number of keys).
  size_t buffered_rows(int side) const { return buffered_[side]; }

 private:
  IntervalJoinOperator(IntervalJoinSpec spec, std::unique_ptr<Expr> where);

  struct Pending {
    int64_t expiry;  // the row is deleted (and padded) once W > expiry
    int side;
    std::string key;               // table key
    mutable bool matched = false;  // not part of the order
    bool operator<(const Pending& o) const {
      return std::tie(expiry, side, key) < std::tie(o.expiry, o.side, o.key);
    }
  };

  bool Outer(int side) const;
  int64_t Expiry(int side, int64_t t) const;
  // Fills key_ with the encoded join key of `r` read through `side`'s paths;
  // false if some key field is null or missing.
  bool EncodeKey(const Record& r, int side);
  // Hash of the join-key bytes of a table key (without time and sequence).
  static size_t KeyHash(std::string_view table_key);
  void AddRow(int side, std::string_view table_key, bool matched);
  // Deletes every row with expiry < W, emitting padded rows for unmatched
  // rows of outer sides, in (expiry, side, key) order.
  absl::Status Expire(OperatorContext& ctx, Output& out);

  IntervalJoinSpec spec_;
  std::unique_ptr<Expr> where_;
  std::vector<FieldPath> paths_[2];
  StateTable* tables_[2] = {nullptr, nullptr};
  StateTable* meta_ = nullptr;
  absl::btree_set<Pending> pending_;
  // Per side: join-key hash -> buffered rows with that key (null keys excluded).
  absl::flat_hash_map<size_t, uint32_t> key_rows_[2];
  size_t buffered_[2] = {0, 0};
  uint64_t next_seq_ = 0;
  bool seq_dirty_ = false;

  Counter* too_late_ = nullptr;
  Counter* matches_ = nullptr;
  Counter* padded_ = nullptr;

  // Scratch, reused across records.
  JsonDecoder decoder_;
  Record partner_;
  std::string key_, begin_, end_, value_;
  std::vector<std::pair<std::string, std::string>> to_mark_;
};

}  // namespace caravela
