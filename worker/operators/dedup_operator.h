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
// State: table "ids" (16-byte id hash -> event_time, fingerprint) and table
// "expiry" (big-endian event_time + id hash) so that expired ids are found by
// a range scan and deleted when the watermark passes event_time + retention.
#pragma once

#include <string>
#include <vector>

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

  std::vector<std::string> SideOutputs() const override { return {"conflicts", "too_late"}; }
  absl::Status Open(OperatorContext& ctx) override;
  absl::Status ProcessBatch(OperatorContext& ctx, int input, const RecordBatch& batch,
                            Output& out) override;
  absl::Status OnWatermark(OperatorContext& ctx, Output& out) override;

  // Payload fingerprint as used by this operator (exposed for tests).
  uint64_t Fingerprint(const Record& r) const;

 private:
  FieldPath id_;
  int64_t retention_;
  std::vector<FieldPath> fingerprint_fields_;
  std::string exclude_field_;
  StateTable* ids_ = nullptr;
  StateTable* expiry_ = nullptr;
  Counter* passed_ = nullptr;
  Counter* duplicates_ = nullptr;
  Counter* conflicts_ = nullptr;
  Counter* too_late_ = nullptr;
  Counter* missing_id_ = nullptr;
  Counter* expired_ = nullptr;
  std::string scratch_;
  std::string value_;
  std::vector<std::string> expired_keys_;
};

}  // namespace caravela
