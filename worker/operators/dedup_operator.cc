#include "worker/operators/dedup_operator.h"

#include <cstring>

#include "absl/strings/str_format.h"
#include "worker/state/key_codec.h"
#define XXH_STATIC_LINKING_ONLY
#include "xxhash.h"

namespace caravela {
namespace {

void HashNode(const Record& r, uint32_t node, XXH3_state_t* st) {
  const Node& n = r.nodes()[node];
  std::string_view key = r.Key(node);
  XXH3_64bits_update(st, key.data(), key.size());
  uint8_t t = static_cast<uint8_t>(n.type);
  XXH3_64bits_update(st, &t, 1);
  switch (n.type) {
    case ValueType::kObject:
    case ValueType::kArray: {
      uint32_t count = n.size;
      XXH3_64bits_update(st, &count, sizeof count);
      r.ForEachChild(node, [&](uint32_t c) { HashNode(r, c, st); });
      return;
    }
    case ValueType::kString: {
      Value v = r.Get(static_cast<int32_t>(node));
      uint32_t len = static_cast<uint32_t>(v.s.size());
      XXH3_64bits_update(st, &len, sizeof len);
      XXH3_64bits_update(st, v.s.data(), v.s.size());
      return;
    }
    case ValueType::kBool:
      XXH3_64bits_update(st, &n.b, 1);
      return;
    case ValueType::kNull:
      return;
    default:
      XXH3_64bits_update(st, &n.i, 8);
      XXH3_64bits_update(st, &n.scale, 1);
  }
}

std::string Hex(uint64_t v) { return absl::StrFormat("%016x", v); }
}  // namespace

DedupOperator::DedupOperator(FieldPath id, int64_t retention,
                             std::vector<FieldPath> fingerprint_fields, std::string exclude_field)
    : id_(std::move(id)),
      retention_(retention),
      fingerprint_fields_(std::move(fingerprint_fields)),
      exclude_field_(std::move(exclude_field)) {}

absl::Status DedupOperator::Open(OperatorContext& ctx) {
  ASSIGN_OR_RETURN(ids_, ctx.OpenTable("ids"));
  ASSIGN_OR_RETURN(expiry_, ctx.OpenTable("expiry"));
  passed_ = ctx.OpCounter("dedup_passed_total");
  duplicates_ = ctx.OpCounter("dedup_duplicates_total");
  conflicts_ = ctx.OpCounter("dedup_conflicts_total");
  too_late_ = ctx.OpCounter("too_late_total");
  missing_id_ = ctx.OpCounter("dedup_missing_id_total");
  expired_ = ctx.OpCounter("dedup_expired_ids_total");
  ctx.OpCounter("dedup_retention_ms")->Set(retention_);
  return absl::OkStatus();
}

uint64_t DedupOperator::Fingerprint(const Record& r) const {
  XXH3_state_t st;
  XXH3_64bits_reset(&st);
  if (!fingerprint_fields_.empty()) {
    for (const FieldPath& p : fingerprint_fields_) {
      int32_t n = r.Find(p);
      if (n < 0) {
        uint8_t absent = 0xff;
        XXH3_64bits_update(&st, &absent, 1);
      } else {
        HashNode(r, static_cast<uint32_t>(n), &st);
      }
    }
    return XXH3_64bits_digest(&st);
  }
  // Top-level fields are combined order-independently (a re-serialized copy
  // with the same fields in another order is the same payload).
  uint64_t fp = 0x9e3779b97f4a7c15ULL;
  if (r.empty()) return fp;
  r.ForEachChild(0, [&](uint32_t c) {
    if (!exclude_field_.empty() && r.Key(c) == exclude_field_) return;
    XXH3_64bits_reset(&st);
    HashNode(r, c, &st);
    fp += XXH3_64bits_digest(&st);
  });
  return XXH3_64bits(&fp, sizeof fp);
}

absl::Status DedupOperator::ProcessBatch(OperatorContext& ctx, int input,
                                         const RecordBatch& batch, Output& out) {
  const int64_t horizon = SatAdd(ctx.watermark(), -retention_);
  for (const Record& r : batch) {
    Value id = r.GetPath(id_);
    if (id.is_null() || id.type == ValueType::kObject || id.type == ValueType::kArray) {
      missing_id_->Add();
      out.Emit() = r;
      continue;
    }
    if (r.event_time < horizon) {
      too_late_->Add();
      BuildSideRecord(ctx, r, "older than the dedup horizon (watermark - retention)",
                      &out.EmitSide(1));
      continue;
    }
    scratch_.clear();
    id.AppendJson(&scratch_);
    XXH128_hash_t h = XXH3_128bits(scratch_.data(), scratch_.size());
    char key[16];
    std::memcpy(key, &h.high64, 8);
    std::memcpy(key + 8, &h.low64, 8);
    std::string_view k(key, 16);
    uint64_t fp = Fingerprint(r);
    ASSIGN_OR_RETURN(bool found, ids_->Get(k, &value_));
    if (found && value_.size() == 16) {
      uint64_t first_fp;
      std::memcpy(&first_fp, value_.data() + 8, 8);
      if (first_fp == fp) {
        duplicates_->Add();
        continue;
      }
      conflicts_->Add();
      Record& s = out.EmitSide(0);
      s.AddString("operator", ctx.name());
      s.AddString("reason", "same id, different payload");
      s.AddValue("id", id);
      s.AddString("first_fingerprint", Hex(first_fp));
      s.AddString("fingerprint", Hex(fp));
      s.AddValue("record", r.Get(0));
      s.event_time = r.event_time;
      continue;
    }
    char v[16];
    std::memcpy(v, &r.event_time, 8);
    std::memcpy(v + 8, &fp, 8);
    ids_->Put(k, std::string_view(v, 16));
    scratch_.clear();
    AppendBigEndian64(&scratch_, r.event_time);
    scratch_.append(k);
    expiry_->Put(scratch_, "");
    passed_->Add();
    out.Emit() = r;
  }
  return absl::OkStatus();
}

absl::Status DedupOperator::OnWatermark(OperatorContext& ctx, Output& out) {
  // Forget ids with event_time < W - retention.
  const int64_t horizon = SatAdd(ctx.watermark(), -retention_);
  if (horizon == kMinTime) return absl::OkStatus();
  std::string end;
  AppendBigEndian64(&end, horizon);
  expired_keys_.clear();
  RETURN_IF_ERROR(expiry_->Scan("", end, [&](std::string_view key, std::string_view) {
    expired_keys_.emplace_back(key);
    return true;
  }));
  for (const std::string& key : expired_keys_) {
    ids_->Delete(std::string_view(key).substr(8));
    expiry_->Delete(key);
  }
  expired_->Add(static_cast<int64_t>(expired_keys_.size()));
  return absl::OkStatus();
}

}  // namespace caravela
