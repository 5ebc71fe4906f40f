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
//
// State: one table, "ids", keyed by the first copy's event time:
//   key   = AppendBigEndian64(event_time) (8 bytes) + 64-bit hash of the id (8 bytes)
//   value = 64-bit payload fingerprint (8 bytes)
// Time-first keys make expiry one range scan from the previous horizon to the
// new one (every id with event_time < W - retention is deleted when the
// watermark passes), keep memtable inserts nearly sequential, and let
// RocksDB's prefix compression share the time bytes (docs/benchmarks.md (d)).
// An id matches a stored entry only if both its event time and its 64-bit
// hash match, so a false match needs a 64-bit collision within one
// millisecond of event time.
//
// To find an id without knowing its first event time, the operator keeps an
// in-memory index (32-bit hash tag -> event time, 12 bytes per slot) of every
// id in the table, rebuilt from the table by Open() (so after a restore too).
// A new id whose tag is absent costs no state read at all; a tag hit is
// verified with one point read. The table stays the source of truth.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "common/record.h"
#include "worker/operators/operator.h"

namespace caravela {

class DedupOperator : public Operator {
 public:
  // `fingerprint_fields`: fields the fingerprint covers, in order; empty =
  // every top-level field except `exclude_field` (the source's arrival
  // field), in any order.
  DedupOperator(FieldPath id, int64_t retention, std::vector<FieldPath> fingerprint_fields,
                std::string exclude_field);
  ~DedupOperator() override;

  std::vector<std::string> SideOutputs() const override { return {"conflicts", "too_late"}; }
  absl::Status Open(OperatorContext& ctx) override;
  absl::Status ProcessBatch(OperatorContext& ctx, int input, const RecordBatch& batch,
                            Output& out) override;
  absl::Status OnWatermark(OperatorContext& ctx, Output& out) override;

  // Payload fingerprint as used by this operator (exposed for tests).
  uint64_t Fingerprint(const Record& r) const;

  class IdIndex;

 private:
  FieldPath id_;
  int64_t retention_;
  std::vector<FieldPath> fingerprint_fields_;
  std::string exclude_field_;
  StateTable* ids_ = nullptr;
  std::unique_ptr<IdIndex> index_;
  // Every id with event_time < expired_before_ is deleted (kMinTime after Open).
  int64_t expired_before_;
  Counter* passed_ = nullptr;
  Counter* duplicates_ = nullptr;
  Counter* conflicts_ = nullptr;
  Counter* too_late_ = nullptr;
  Counter* missing_id_ = nullptr;
  Counter* expired_ = nullptr;
  mutable std::string scratch_;
  std::string value_;
  // Per-batch scratch (kept for their capacity).
  enum Kind : uint8_t { kHasId, kMissingId, kTooLate };
  struct PendingId {
    int64_t event_time;
    uint64_t hash;
    uint64_t fingerprint;
    uint32_t next;  // previous pending id with the same hash, or UINT32_MAX
  };
  std::vector<uint64_t> hashes_;
  std::vector<uint64_t> fingerprints_;
  std::vector<Kind> kinds_;
  std::vector<int64_t> candidates_;
  // New ids of the current batch, written to the table in key order at its end.
  std::vector<PendingId> pending_;
  absl::flat_hash_map<uint64_t, uint32_t> pending_by_hash_;  // hash -> last index
};

}  // namespace caravela
