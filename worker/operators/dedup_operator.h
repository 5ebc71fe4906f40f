// Dedup (SPEC §4): remembers event_id -> (event_time, payload fingerprint) for
// `retention` of event time, measured against the watermark.
//
//  * first copy of an id passes;
//  * a copy with the same fingerprint is dropped and counted
//    (`dedup_duplicates_total`);
//  * a copy with a different fingerprint goes to side output `conflicts` with
//    both fingerprints and is not passed on (`dedup_conflicts_total`);
//  * a record older than the horizon (event_time < W - retention) goes to
//    side output `too_late`: its id may have been forgotten, so passing it
//    could count it twice;
//  * a record without an id (missing/null) passes and is counted
//    (`dedup_missing_id_total`): it cannot be deduplicated.
// An id is forgotten as soon as W - retention passes its first event time:
// a later copy with event_time >= W - retention passes as a first copy.
//
// State: table "ids" holds the remembered ids in blobs, one per (10-second
// bucket of event time, batch that added them):
//   key   = AppendBigEndian64(bucket start) (8 bytes) + big-endian batch sequence (4 bytes)
//   value = entries sorted by (time, hash), 18 bytes each: event time offset
//           in the bucket (uint16 LE), 64-bit id hash, 64-bit fingerprint
// A batch writes one blob per bucket it touched (not one key per id), which
// keeps the per-record state cost low, and time-first keys make expiry a
// range scan from the previous horizon. A blob is deleted when the watermark
// passes its bucket's end + retention (so the physical cleanup lags the
// logical one by < 10 s of event time; lookups ignore ids already older than
// the horizon, so decisions are exact). An id matches a stored entry only if
// its 64-bit hash and its event time both match.
//
// Blobs are written behind: the blobs of the batches since the last Flush
// live in memory (ordered by key, so expiry drops them as it deletes stored
// ones) and reach the table, written sorted, at Flush (checkpoints, the end,
// and every state_flush_interval_ms). A table read is then a read of
// committed state: the read-your-writes index of uncommitted writes (a
// skip list over the write batch, one cache miss per level) cost more than
// the decision itself when every batch wrote its blobs through it.
//
// To find an id without knowing its first event time, the operator keeps an
// in-memory index (32-bit hash tag -> event time and blob sequence; 16 bytes
// per slot) of every id in the table, rebuilt from the table by Open() (so
// after a restore too). A new id whose tag is absent costs no state read; a
// tag hit is verified with one point read of the blob (or against the
// current batch, or the blobs not flushed yet). Blob sequences wrap after
// 2^32 batches: a bucket that stays live that long (retention of ~50 days at
// 1000 batches/s) is not supported.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/btree_map.h"
#include "common/job_spec.h"
#include "common/record.h"
#include "worker/operators/id_hash_set.h"
#include "worker/operators/operator.h"

namespace caravela {

struct DedupSpec {
  std::string from;
  FieldPath id;
  int64_t retention = 0;
  std::vector<FieldPath> fingerprint;  // empty: every field but the arrival field
  // Not in YAML: set by `caravela reconcile`, whose batch run never expires
  // an id nor restores state: ids live in an in-memory set only.
  bool batch = false;
  // Not in YAML: with `batch`, how many ids reconcile expects (estimated
  // from the input files' sizes; 0 if unknown). The set is sized once.
  size_t expected_ids = 0;
};

class DedupOperator : public Operator {
 public:
  // `fingerprint_fields`: fields the fingerprint covers, in order; empty =
  // every top-level field except `exclude_field` (the source's arrival
  // field), in any order.
  DedupOperator(FieldPath id, int64_t retention, std::vector<FieldPath> fingerprint_fields,
                std::string exclude_field);
  ~DedupOperator() override;

  // Its side outputs, declared once: its kind (OperatorKind::SideOutputs)
  // and the runtime read this list.
  static std::vector<std::string> DeclaredSideOutputs() { return {"conflicts", "too_late"}; }
  std::vector<std::string> SideOutputs() const override { return DeclaredSideOutputs(); }
  absl::Status Open(OperatorContext& ctx) override;
  // Keeps the entries of ids the owner gives to this task (the stored hash
  // is the routing hash, so no record is decoded), in blobs of their own
  // under sequences no blob of the table holds: onto a part restored as it
  // is too.
  absl::Status AdoptState(OperatorContext& from, OperatorContext& to,
                          const KeyOwner& owner) override;
  absl::Status ProcessBatch(OperatorContext& ctx, int input, const RecordBatch& batch,
                            Output& out) override;
  absl::Status OnWatermark(OperatorContext& ctx, Output& out) override;
  // Writes the blobs added since the last Flush to the table.
  absl::Status Flush(OperatorContext& ctx) override;

  // Batch mode (reconciliation): no retention and no state; the 64-bit hash
  // of every id seen (the identity the stored blobs use) is kept in an
  // in-memory set, so decisions are those of an unbounded retention without
  // the index, blobs or expiry: the first copy of an id passes, every later
  // one is dropped. Payloads are not compared (a recomputation's answer does
  // not depend on it), so later copies all count as duplicates and
  // `conflicts` stays empty. Set before Open.
  void set_batch(bool batch) { batch_ = batch; }
  // Batch mode: sizes the id set for n ids at once (no growth on the way).
  void ReserveIds(size_t n) { first_ids_.Reserve(n); }

  // Payload fingerprint as used by this operator (exposed for tests).
  uint64_t Fingerprint(const Record& r) const;

  class IdIndex;

 private:
  // Looks up the first copy of id `hash` among the index's candidates that
  // are not older than `horizon`; sets *fingerprint and returns true if found.
  absl::StatusOr<bool> FindFirst(uint64_t hash, int64_t horizon, uint64_t* fingerprint);

  FieldPath id_;
  int64_t retention_;
  bool batch_ = false;
  IdHashSet first_ids_;  // batch mode
  std::vector<FieldPath> fingerprint_fields_;
  std::string exclude_field_;
  StateTable* ids_ = nullptr;
  std::unique_ptr<IdIndex> index_;
  uint32_t seq_ = 0;        // sequence of the blobs the current batch writes
  uint32_t adopt_seq_ = 0;  // sequence of the next blob AdoptState writes
  // Every blob whose bucket starts before this is deleted (kMinTime after Open).
  int64_t expired_before_;
  Counter* passed_ = nullptr;
  Counter* duplicates_ = nullptr;
  Counter* conflicts_ = nullptr;
  TooLateCounters too_late_;
  Counter* missing_id_ = nullptr;
  Counter* expired_ = nullptr;
  // Per-batch scratch (kept for their capacity).
  enum Kind : uint8_t { kHasId, kMissingId, kTooLate };
  struct PendingId {
    int64_t event_time;
    uint64_t hash;
    uint64_t fingerprint;
  };
  mutable std::string scratch_;
  std::string value_;
  std::vector<uint64_t> hashes_;
  std::vector<uint64_t> fingerprints_;
  std::vector<Kind> kinds_;
  std::vector<std::pair<int64_t, uint32_t>> candidates_;  // (event time, blob sequence)
  // New ids of the current batch, written as blobs at its end.
  std::vector<PendingId> pending_;
  // Blobs of the batches since the last Flush, by (bucket start, sequence):
  // the table's key order.
  absl::btree_map<std::pair<int64_t, uint32_t>, std::string> unflushed_;
};

}  // namespace caravela
