#include "worker/operators/dedup_operator.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_format.h"
#include "worker/state/key_codec.h"
#define XXH_STATIC_LINKING_ONLY
#include "xxhash.h"

namespace caravela {
namespace {

constexpr size_t kKeySize = 16;
// Expired keys are collected and deleted in chunks of this many.
constexpr size_t kExpireChunk = 4096;
constexpr uint32_t kNoPending = UINT32_MAX;

// Appends the bytes HashNode feeds to the hash. Hashing the concatenation in
// one call gives exactly the streaming XXH3 digest of the same bytes (the
// fingerprint is persisted and printed, so its value must never change).
void AppendNodeBytes(const Record& r, uint32_t node, std::string* buf) {
  const Node& n = r.nodes()[node];
  std::string_view key = r.Key(node);
  buf->append(key.data(), key.size());
  buf->push_back(static_cast<char>(n.type));
  switch (n.type) {
    case ValueType::kObject:
    case ValueType::kArray: {
      uint32_t count = n.size;
      buf->append(reinterpret_cast<const char*>(&count), sizeof count);
      r.ForEachChild(node, [&](uint32_t c) { AppendNodeBytes(r, c, buf); });
      return;
    }
    case ValueType::kString: {
      Value v = r.Get(static_cast<int32_t>(node));
      uint32_t len = static_cast<uint32_t>(v.s.size());
      buf->append(reinterpret_cast<const char*>(&len), sizeof len);
      buf->append(v.s.data(), v.s.size());
      return;
    }
    case ValueType::kBool:
      buf->append(reinterpret_cast<const char*>(&n.b), 1);
      return;
    case ValueType::kNull:
      return;
    default:
      buf->append(reinterpret_cast<const char*>(&n.i), 8);
      buf->append(reinterpret_cast<const char*>(&n.scale), 1);
  }
}

std::string Hex(uint64_t v) { return absl::StrFormat("%016x", v); }

// key = order-preserving big-endian event time + id hash.
void MakeKey(int64_t event_time, uint64_t id_hash, char* key) {
  uint64_t u = static_cast<uint64_t>(event_time) ^ (uint64_t{1} << 63);
  for (int i = 7; i >= 0; --i) {
    key[i] = static_cast<char>(u & 0xff);
    u >>= 8;
  }
  std::memcpy(key + 8, &id_hash, 8);
}

bool ParseKey(std::string_view key, int64_t* event_time, uint64_t* id_hash) {
  if (key.size() != kKeySize || !ReadBigEndian64(&key, event_time)) return false;
  std::memcpy(id_hash, key.data(), 8);
  return true;
}

}  // namespace

// Every id in the table, as (32-bit tag of its hash -> first event time), in
// 12-byte slots. Linear probing; a slot's home is the tag's top bits, so the
// table can grow without the full hash. A lookup returns the event times of
// all slots with the id's tag: candidates that the caller verifies against
// the table.
class DedupOperator::IdIndex {
 public:
  IdIndex() { Reset(kMinCapacity); }

  void Clear() { Reset(kMinCapacity); }
  size_t size() const { return size_; }

  void Prefetch(uint64_t hash) const { __builtin_prefetch(&slots_[Home(Tag(hash))]); }

  void Insert(uint64_t hash, int64_t event_time) {
    if ((size_ + 1) * 4 > slots_.size() * 3) Grow();
    Place(Tag(hash), event_time);
    ++size_;
  }

  // Appends the event time of every slot whose tag matches `hash`.
  void Find(uint64_t hash, std::vector<int64_t>* times) const {
    const uint32_t tag = Tag(hash);
    for (size_t i = Home(tag); slots_[i].tag != 0; i = (i + 1) & mask_) {
      if (slots_[i].tag == tag) times->push_back(slots_[i].time());
    }
  }

  // Removes one slot with this tag and time (backward-shift deletion).
  void Erase(uint64_t hash, int64_t event_time) {
    const uint32_t tag = Tag(hash);
    size_t i = Home(tag);
    for (; slots_[i].tag != 0; i = (i + 1) & mask_) {
      if (slots_[i].tag == tag && slots_[i].time() == event_time) break;
    }
    if (slots_[i].tag == 0) return;
    --size_;
    for (size_t j = i;;) {
      j = (j + 1) & mask_;
      if (slots_[j].tag == 0) break;
      size_t k = Home(slots_[j].tag);
      // The entry at j may move to the hole at i unless its home lies
      // cyclically in (i, j].
      bool stays = i <= j ? (i < k && k <= j) : (i < k || k <= j);
      if (stays) continue;
      slots_[i] = slots_[j];
      i = j;
    }
    slots_[i].tag = 0;
  }

 private:
  struct Slot {
    uint32_t tag;  // 0: empty
    uint32_t time_lo;
    uint32_t time_hi;
    int64_t time() const {
      return static_cast<int64_t>((static_cast<uint64_t>(time_hi) << 32) | time_lo);
    }
  };
  static constexpr size_t kMinCapacity = 1024;
  static uint32_t Tag(uint64_t hash) {
    uint32_t t = static_cast<uint32_t>(hash >> 32);
    return t != 0 ? t : 1;
  }
  size_t Home(uint32_t tag) const { return static_cast<size_t>(tag) >> shift_; }

  void Reset(size_t capacity) {
    slots_.assign(capacity, Slot{0, 0, 0});
    mask_ = capacity - 1;
    shift_ = 32 - __builtin_ctzll(capacity);
    size_ = 0;
  }
  void Place(uint32_t tag, int64_t event_time) {
    size_t i = Home(tag);
    while (slots_[i].tag != 0) i = (i + 1) & mask_;
    uint64_t u = static_cast<uint64_t>(event_time);
    slots_[i] = Slot{tag, static_cast<uint32_t>(u), static_cast<uint32_t>(u >> 32)};
  }
  void Grow() {
    std::vector<Slot> old = std::move(slots_);
    size_t n = size_;
    Reset(old.size() * 2);
    for (const Slot& s : old) {
      if (s.tag != 0) Place(s.tag, s.time());
    }
    size_ = n;
  }

  std::vector<Slot> slots_;
  size_t mask_ = 0;
  int shift_ = 0;
  size_t size_ = 0;
};

DedupOperator::DedupOperator(FieldPath id, int64_t retention,
                             std::vector<FieldPath> fingerprint_fields, std::string exclude_field)
    : id_(std::move(id)),
      retention_(retention),
      fingerprint_fields_(std::move(fingerprint_fields)),
      exclude_field_(std::move(exclude_field)),
      index_(std::make_unique<IdIndex>()),
      expired_before_(kMinTime) {}

DedupOperator::~DedupOperator() = default;

absl::Status DedupOperator::Open(OperatorContext& ctx) {
  ASSIGN_OR_RETURN(ids_, ctx.OpenTable("ids"));
  passed_ = ctx.OpCounter("dedup_passed_total");
  duplicates_ = ctx.OpCounter("dedup_duplicates_total");
  conflicts_ = ctx.OpCounter("dedup_conflicts_total");
  too_late_ = ctx.OpCounter("too_late_total");
  missing_id_ = ctx.OpCounter("dedup_missing_id_total");
  expired_ = ctx.OpCounter("dedup_expired_ids_total");
  ctx.OpCounter("dedup_retention_ms")->Set(retention_);
  // Rebuild the in-memory index from the table (empty, or restored).
  index_->Clear();
  expired_before_ = kMinTime;
  absl::Status bad;
  RETURN_IF_ERROR(ids_->Scan("", "", [&](std::string_view key, std::string_view) {
    int64_t t;
    uint64_t h;
    if (!ParseKey(key, &t, &h)) {
      bad = absl::DataLossError("corrupt dedup state in " + ctx.name() + ": bad key size " +
                                std::to_string(key.size()));
      return false;
    }
    index_->Insert(h, t);
    return true;
  }));
  return bad;
}

uint64_t DedupOperator::Fingerprint(const Record& r) const {
  std::string& buf = scratch_;
  buf.clear();
  if (!fingerprint_fields_.empty()) {
    for (const FieldPath& p : fingerprint_fields_) {
      int32_t n = r.Find(p);
      if (n < 0) {
        buf.push_back(static_cast<char>(0xff));  // absent
      } else {
        AppendNodeBytes(r, static_cast<uint32_t>(n), &buf);
      }
    }
    return XXH3_64bits(buf.data(), buf.size());
  }
  // Top-level fields are combined order-independently (a re-serialized copy
  // with the same fields in another order is the same payload).
  uint64_t fp = 0x9e3779b97f4a7c15ULL;
  if (r.empty()) return fp;
  r.ForEachChild(0, [&](uint32_t c) {
    if (!exclude_field_.empty() && r.Key(c) == exclude_field_) return;
    buf.clear();
    AppendNodeBytes(r, c, &buf);
    fp += XXH3_64bits(buf.data(), buf.size());
  });
  return XXH3_64bits(&fp, sizeof fp);
}

absl::Status DedupOperator::ProcessBatch(OperatorContext& ctx, int input,
                                         const RecordBatch& batch, Output& out) {
  const int64_t horizon = SatAdd(ctx.watermark(), -retention_);
  // Pass 1: classify and hash every record, and prefetch its index slot, so
  // that the index cache misses of a batch overlap.
  const size_t n = batch.size();
  hashes_.resize(n);
  fingerprints_.resize(n);
  kinds_.resize(n);
  for (size_t i = 0; i < n; ++i) {
    const Record& r = batch[i];
    Value id = r.GetPath(id_);
    if (id.is_null() || id.type == ValueType::kObject || id.type == ValueType::kArray) {
      kinds_[i] = kMissingId;
      continue;
    }
    if (r.event_time < horizon) {
      kinds_[i] = kTooLate;
      continue;
    }
    kinds_[i] = kHasId;
    scratch_.clear();
    id.AppendJson(&scratch_);
    hashes_[i] = XXH3_64bits(scratch_.data(), scratch_.size());
    index_->Prefetch(hashes_[i]);
    fingerprints_[i] = Fingerprint(r);
  }
  // Pass 2: decide, in order.
  char key[kKeySize];
  pending_.clear();
  pending_by_hash_.clear();
  for (size_t i = 0; i < n; ++i) {
    const Record& r = batch[i];
    if (kinds_[i] == kMissingId) {
      missing_id_->Add();
      out.Emit() = r;
      continue;
    }
    if (kinds_[i] == kTooLate) {
      too_late_->Add();
      BuildSideRecord(ctx, r, "older than the dedup horizon (watermark - retention)",
                      &out.EmitSide(1));
      continue;
    }
    const uint64_t h = hashes_[i];
    const uint64_t fp = fingerprints_[i];
    // Verify every candidate the index offers (usually none or one) against
    // this batch's new ids, then the table.
    candidates_.clear();
    index_->Find(h, &candidates_);
    bool found = false;
    uint64_t first_fp = 0;
    for (int64_t t : candidates_) {
      if (auto it = pending_by_hash_.find(h); it != pending_by_hash_.end()) {
        for (uint32_t j = it->second; j != kNoPending && !found; j = pending_[j].next) {
          if (pending_[j].event_time == t) {
            first_fp = pending_[j].fingerprint;
            found = true;
          }
        }
      }
      if (found) break;
      MakeKey(t, h, key);
      ASSIGN_OR_RETURN(bool hit, ids_->Get(std::string_view(key, kKeySize), &value_));
      if (hit && value_.size() == 8) {
        std::memcpy(&first_fp, value_.data(), 8);
        found = true;
        break;
      }
    }
    if (found) {
      if (first_fp == fp) {
        duplicates_->Add();
        continue;
      }
      conflicts_->Add();
      Record& s = out.EmitSide(0);
      s.AddString("operator", ctx.name());
      s.AddString("reason", "same id, different payload");
      s.AddValue("id", r.GetPath(id_));
      s.AddString("first_fingerprint", Hex(first_fp));
      s.AddString("fingerprint", Hex(fp));
      s.AddValue("record", r.Get(0));
      s.event_time = r.event_time;
      continue;
    }
    auto [it, inserted] = pending_by_hash_.try_emplace(h, kNoPending);
    pending_.push_back(PendingId{r.event_time, h, fp, it->second});
    it->second = static_cast<uint32_t>(pending_.size() - 1);
    index_->Insert(h, r.event_time);
    passed_->Add();
    out.Emit() = r;
  }
  // New ids are written at the end of the batch in key order: nearly
  // sequential inserts into the write batch index and the memtable.
  std::sort(pending_.begin(), pending_.end(), [](const PendingId& a, const PendingId& b) {
    return a.event_time != b.event_time ? a.event_time < b.event_time : a.hash < b.hash;
  });
  for (const PendingId& p : pending_) {
    MakeKey(p.event_time, p.hash, key);
    ids_->Put(std::string_view(key, kKeySize),
              std::string_view(reinterpret_cast<const char*>(&p.fingerprint), 8));
  }
  return absl::OkStatus();
}

absl::Status DedupOperator::OnWatermark(OperatorContext& ctx, Output& out) {
  // Forget ids with event_time < W - retention. Everything below
  // expired_before_ is gone already, so the scan starts there (and skips the
  // tombstones of earlier expiries).
  const int64_t horizon = SatAdd(ctx.watermark(), -retention_);
  if (horizon <= expired_before_) return absl::OkStatus();
  if (ctx.watermark() == kMaxTime) {
    // End of input: no record can reach this operator any more (every later
    // one would be too late), so the ids are forgotten without deleting them
    // one by one, which would cost as much as inserting them did.
    expired_->Add(static_cast<int64_t>(index_->size()));
    index_->Clear();
    expired_before_ = horizon;
    return absl::OkStatus();
  }
  std::string begin = expired_before_ == kMinTime ? "" : EncodeBigEndian64(expired_before_);
  const std::string end = EncodeBigEndian64(horizon);
  std::string keys;  // kKeySize bytes per key
  int64_t expired = 0;
  for (;;) {
    keys.clear();
    size_t n = 0;
    RETURN_IF_ERROR(ids_->Scan(begin, end, [&](std::string_view key, std::string_view) {
      if (key.size() == kKeySize) {
        keys.append(key);
        ++n;
      }
      return n < kExpireChunk;
    }));
    for (size_t i = 0; i < n; ++i) {
      std::string_view key(keys.data() + i * kKeySize, kKeySize);
      int64_t t;
      uint64_t h;
      ParseKey(key, &t, &h);
      ids_->Delete(key);
      index_->Erase(h, t);
    }
    expired += static_cast<int64_t>(n);
    if (n < kExpireChunk) break;
    begin.assign(keys.data() + (n - 1) * kKeySize, kKeySize);
    begin.push_back('\0');  // the smallest key after the last one deleted
  }
  expired_before_ = horizon;
  expired_->Add(expired);
  return absl::OkStatus();
}

}  // namespace caravela
