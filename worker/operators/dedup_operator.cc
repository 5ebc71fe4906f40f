#include "worker/operators/dedup_operator.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstring>

#include "absl/strings/str_format.h"
#include "common/key_encoding.h"
#include "worker/state/key_codec.h"
// Inlined: the fingerprint hashes many short byte strings per record.
#define XXH_INLINE_ALL
#include "xxhash.h"

namespace caravela {
namespace {

// Blobs group ids by bucket of event time (and by the batch that added them).
constexpr int64_t kBucketMs = 10'000;
constexpr size_t kKeySize = 12;    // bucket start (8) + batch sequence (4)
constexpr size_t kEntrySize = 18;  // time offset (2) + id hash (8) + fingerprint (8)
// Expired blobs are collected and deleted in chunks of this many.
constexpr size_t kExpireChunk = 256;

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

// AppendNodeBytes for a scalar node into `out` (capacity `cap`), without
// std::string appends. Returns the length, or 0 if the bytes do not fit or
// the node is a container.
size_t ScalarNodeBytes(const Record& r, uint32_t node, char* out, size_t cap) {
  const Node& n = r.nodes()[node];
  std::string_view key = r.Key(node);
  size_t len = key.size() + 1;
  std::string_view str;
  switch (n.type) {
    case ValueType::kObject:
    case ValueType::kArray:
      return 0;
    case ValueType::kString:
      str = r.Get(static_cast<int32_t>(node)).s;
      len += 4 + str.size();
      break;
    case ValueType::kBool:
      len += 1;
      break;
    case ValueType::kNull:
      break;
    default:
      len += 9;
  }
  if (len > cap) return 0;
  std::memcpy(out, key.data(), key.size());
  char* p = out + key.size();
  *p++ = static_cast<char>(n.type);
  switch (n.type) {
    case ValueType::kString: {
      uint32_t sl = static_cast<uint32_t>(str.size());
      std::memcpy(p, &sl, 4);
      std::memcpy(p + 4, str.data(), str.size());
      break;
    }
    case ValueType::kBool:
      std::memcpy(p, &n.b, 1);
      break;
    case ValueType::kNull:
      break;
    default:
      std::memcpy(p, &n.i, 8);
      std::memcpy(p + 8, &n.scale, 1);
  }
  return len;
}

std::string Hex(uint64_t v) { return absl::StrFormat("%016x", v); }

// Ids are equal when their key encodings are (common/key_encoding.h:
// numbers by value, so 1 and 1.0 are one id; "1" and 1 are two). The hash is
// ExchangeKeyHash of the id, the hash that routes the id to its task, so a
// rescale can tell from the stored hash which task now owns an id.
uint64_t IdHash(const Value& id, std::string* scratch) {
  scratch->clear();
  AppendKeyField(id, scratch);
  return XXH3_64bits(scratch->data(), scratch->size());
}

// Start of the bucket holding `t`: [start, start + kBucketMs) contains t.
int64_t BucketStart(int64_t t) {
  if (t < kMinTime + kBucketMs) return kMinTime;  // t - FloorMod(t) would overflow
  return t - FloorMod(t, kBucketMs);
}

void MakeKey(int64_t bucket, uint32_t seq, char* key) {
  uint64_t u = static_cast<uint64_t>(bucket) ^ (uint64_t{1} << 63);
  for (int i = 7; i >= 0; --i) {
    key[i] = static_cast<char>(u & 0xff);
    u >>= 8;
  }
  for (int i = 11; i >= 8; --i) {
    key[i] = static_cast<char>(seq & 0xff);
    seq >>= 8;
  }
}

bool ParseKey(std::string_view key, int64_t* bucket, uint32_t* seq) {
  if (key.size() != kKeySize || !ReadBigEndian64(&key, bucket)) return false;
  uint32_t s = 0;
  for (int i = 0; i < 4; ++i) s = (s << 8) | static_cast<uint8_t>(key[i]);
  *seq = s;
  return true;
}

struct Entry {
  uint16_t offset;
  uint64_t hash;
  uint64_t fingerprint;
};

void AppendEntry(const Entry& e, std::string* blob) {
  char buf[kEntrySize];
  std::memcpy(buf, &e.offset, 2);
  std::memcpy(buf + 2, &e.hash, 8);
  std::memcpy(buf + 10, &e.fingerprint, 8);
  blob->append(buf, kEntrySize);
}

Entry ReadEntry(std::string_view blob, size_t i) {
  Entry e;
  const char* p = blob.data() + i * kEntrySize;
  std::memcpy(&e.offset, p, 2);
  std::memcpy(&e.hash, p + 2, 8);
  std::memcpy(&e.fingerprint, p + 10, 8);
  return e;
}

// Binary search of a blob (sorted by offset, then hash) for (offset, hash).
bool FindEntry(std::string_view blob, uint16_t offset, uint64_t hash, uint64_t* fingerprint) {
  size_t lo = 0, hi = blob.size() / kEntrySize;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    Entry e = ReadEntry(blob, mid);
    if (e.offset < offset || (e.offset == offset && e.hash < hash)) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  if (lo == blob.size() / kEntrySize) return false;
  Entry e = ReadEntry(blob, lo);
  if (e.offset != offset || e.hash != hash) return false;
  *fingerprint = e.fingerprint;
  return true;
}

}  // namespace

// Every id in the table, as (32-bit tag of its hash -> first event time and
// blob sequence), in 16-byte slots. Linear probing; a slot's home is the
// tag's top bits, so the table can grow without the full hash. A lookup
// returns every slot with the id's tag: candidates that the caller verifies
// against the blob.
class DedupOperator::IdIndex {
 public:
  IdIndex() { Reset(kMinCapacity); }
  ~IdIndex() { Free(); }
  IdIndex(const IdIndex&) = delete;
  IdIndex& operator=(const IdIndex&) = delete;

  void Clear() { Reset(kMinCapacity); }
  size_t size() const { return size_; }

  void Prefetch(uint64_t hash) const { __builtin_prefetch(&slots_[Home(Tag(hash))]); }

  void Insert(uint64_t hash, int64_t event_time, uint32_t seq) {
    if ((size_ + 1) * 4 > (mask_ + 1) * 3) Grow();
    Place(Slot{Tag(hash), seq, event_time});
    ++size_;
  }

  // Appends (event time, blob sequence) of every slot whose tag matches.
  void Find(uint64_t hash, std::vector<std::pair<int64_t, uint32_t>>* out) const {
    const uint32_t tag = Tag(hash);
    for (size_t i = Home(tag); slots_[i].tag != 0; i = (i + 1) & mask_) {
      if (slots_[i].tag == tag) out->emplace_back(slots_[i].time, slots_[i].seq);
    }
  }

  // Removes one slot with this tag, time and sequence (backward-shift deletion).
  void Erase(uint64_t hash, int64_t event_time, uint32_t seq) {
    const uint32_t tag = Tag(hash);
    size_t i = Home(tag);
    for (; slots_[i].tag != 0; i = (i + 1) & mask_) {
      if (slots_[i].tag == tag && slots_[i].time == event_time && slots_[i].seq == seq) break;
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
    uint32_t seq;
    int64_t time;
  };
  static constexpr size_t kMinCapacity = 1024;
  static uint32_t Tag(uint64_t hash) {
    uint32_t t = static_cast<uint32_t>(hash >> 32);
    return t != 0 ? t : 1;
  }
  size_t Home(uint32_t tag) const { return static_cast<size_t>(tag) >> shift_; }

  // Slots live in anonymous memory: zeroed lazily by the kernel, and on
  // transparent huge pages where available (random probes into a large
  // index would otherwise miss the TLB on most lookups).
  void Reset(size_t capacity) {
    Free();
    bytes_ = capacity * sizeof(Slot);
    void* p = mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CARAVELA_CHECK(p != MAP_FAILED);
    if (bytes_ >= (2u << 20)) madvise(p, bytes_, MADV_HUGEPAGE);
    slots_ = static_cast<Slot*>(p);
    mask_ = capacity - 1;
    shift_ = 32 - __builtin_ctzll(capacity);
    size_ = 0;
  }
  void Free() {
    if (slots_ != nullptr) munmap(slots_, bytes_);
    slots_ = nullptr;
  }
  void Place(const Slot& s) {
    size_t i = Home(s.tag);
    while (slots_[i].tag != 0) i = (i + 1) & mask_;
    slots_[i] = s;
  }
  void Grow() {
    Slot* old = slots_;
    size_t old_capacity = mask_ + 1;
    size_t old_bytes = bytes_;
    size_t n = size_;
    slots_ = nullptr;  // keep `old` mapped while rehashing
    Reset(old_capacity * 2);
    for (size_t i = 0; i < old_capacity; ++i) {
      if (old[i].tag != 0) Place(old[i]);
    }
    munmap(old, old_bytes);
    size_ = n;
  }

  Slot* slots_ = nullptr;
  size_t bytes_ = 0;
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
  // Read only for tag hits, which find committed blobs; written at Flush.
  ASSIGN_OR_RETURN(ids_, ctx.OpenWriteBehindTable("ids"));
  passed_ = ctx.OpCounter("dedup_passed_total");
  duplicates_ = ctx.OpCounter("dedup_duplicates_total");
  conflicts_ = ctx.OpCounter("dedup_conflicts_total");
  too_late_.Open(ctx, {TooLateReason::kBeyondRetention});
  missing_id_ = ctx.OpCounter("dedup_missing_id_total");
  expired_ = ctx.OpCounter("dedup_expired_ids_total");
  ctx.OpCounter("dedup_retention_ms")->Set(retention_);
  // Rebuild the in-memory index from the table (empty, or restored); new
  // blobs continue after the highest sequence found.
  index_->Clear();
  unflushed_.clear();
  expired_before_ = kMinTime;
  seq_ = 0;
  bool any = false;
  absl::Status bad;
  RETURN_IF_ERROR(ids_->Scan("", "", [&](std::string_view key, std::string_view value) {
    int64_t bucket;
    uint32_t seq;
    if (!ParseKey(key, &bucket, &seq) || value.size() % kEntrySize != 0) {
      bad = absl::DataLossError("corrupt dedup state in " + ctx.name() + " (key of " +
                                std::to_string(key.size()) + " bytes, value of " +
                                std::to_string(value.size()) + ")");
      return false;
    }
    for (size_t i = 0; i < value.size() / kEntrySize; ++i) {
      Entry e = ReadEntry(value, i);
      index_->Insert(e.hash, bucket + e.offset, seq);
    }
    if (!any || static_cast<int32_t>(seq - seq_) >= 0) seq_ = seq + 1;
    any = true;
    return true;
  }));
  return bad;
}

absl::Status DedupOperator::AdoptState(OperatorContext& from, OperatorContext& to,
                                       const KeyOwner& owner) {
  ASSIGN_OR_RETURN(StateTable * old_ids, from.OpenTable("ids"));
  ASSIGN_OR_RETURN(StateTable * ids, to.OpenTable("ids"));
  absl::Status bad;
  std::string kept, existing;
  char key[12];
  RETURN_IF_ERROR(old_ids->Scan("", "", [&](std::string_view k, std::string_view value) {
    int64_t bucket;
    uint32_t seq;
    if (!ParseKey(k, &bucket, &seq) || value.size() % kEntrySize != 0) {
      bad = absl::DataLossError("corrupt dedup state in " + from.name());
      return false;
    }
    kept.clear();
    for (size_t i = 0; i < value.size() / kEntrySize; ++i) {
      if (owner.OwnsHash(ReadEntry(value, i).hash)) {
        kept.append(value.data() + i * kEntrySize, kEntrySize);  // stays sorted
      }
    }
    if (kept.empty()) return true;
    // Blob sequences of different old tasks collide: number them anew, past
    // any blob the table holds (a part restored as it is, or adopted).
    for (;;) {
      MakeKey(bucket, adopt_seq_++, key);
      absl::StatusOr<bool> held = ids->Get(std::string_view(key, sizeof key), &existing);
      if (!held.ok()) {
        bad = held.status();
        return false;
      }
      if (!*held) break;
    }
    ids->Put(std::string_view(key, sizeof key), kept);
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
  char stack[256];
  r.ForEachChild(0, [&](uint32_t c) {
    if (!exclude_field_.empty() && r.Key(c) == exclude_field_) return;
    if (size_t len = ScalarNodeBytes(r, c, stack, sizeof stack); len > 0) {
      fp += XXH3_64bits(stack, len);
      return;
    }
    buf.clear();
    AppendNodeBytes(r, c, &buf);
    fp += XXH3_64bits(buf.data(), buf.size());
  });
  return XXH3_64bits(&fp, sizeof fp);
}

absl::StatusOr<bool> DedupOperator::FindFirst(uint64_t hash, int64_t horizon,
                                              uint64_t* fingerprint) {
  candidates_.clear();
  index_->Find(hash, &candidates_);
  for (const auto& [t, seq] : candidates_) {
    if (t < horizon) continue;  // forgotten (its blob is deleted a little later)
    if (seq == seq_) {
      // Added by this batch: not written yet. A scan, newest first: only a
      // copy within one batch (or a tag collision) gets here, while a map
      // of the batch's new ids cost an insert for every one of them.
      for (auto p = pending_.rbegin(); p != pending_.rend(); ++p) {
        if (p->hash == hash && p->event_time == t) {
          *fingerprint = p->fingerprint;
          return true;
        }
      }
      continue;
    }
    const int64_t bucket = BucketStart(t);
    const uint16_t offset = static_cast<uint16_t>(t - bucket);
    if (auto it = unflushed_.find({bucket, seq}); it != unflushed_.end()) {
      if (FindEntry(it->second, offset, hash, fingerprint)) return true;
      continue;
    }
    char key[kKeySize];
    MakeKey(bucket, seq, key);
    ASSIGN_OR_RETURN(bool hit, ids_->Get(std::string_view(key, kKeySize), &value_));
    if (hit && FindEntry(value_, offset, hash, fingerprint)) return true;
  }
  return false;
}

absl::Status DedupOperator::ProcessBatch(OperatorContext& ctx, int input, const RecordBatch& batch,
                                         Output& out) {
  const int64_t horizon = SatAdd(ctx.watermark(), -retention_);
  // Counted here and added once per batch (also on an early error return):
  // an atomic add per record costs about as much as the decision itself.
  struct Counts {
    int64_t passed = 0, duplicates = 0, missing = 0;
    Counter *passed_total, *duplicates_total, *missing_total;
    ~Counts() {
      if (passed > 0) passed_total->Add(passed);
      if (duplicates > 0) duplicates_total->Add(duplicates);
      if (missing > 0) missing_total->Add(missing);
    }
  } counts{0, 0, 0, passed_, duplicates_, missing_id_};
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
    hashes_[i] = IdHash(id, &scratch_);
    if (batch_) continue;  // no fingerprint; its set is prefetched in pass 2
    index_->Prefetch(hashes_[i]);
    fingerprints_[i] = Fingerprint(r);
  }
  // Pass 2: decide, in order. Batch mode prefetches the set's slot a few ids
  // ahead, close enough that its cache line and TLB entry are still there
  // when its turn comes.
  constexpr size_t kAhead = 16;
  for (size_t i = 0; batch_ && i < kAhead && i < n; ++i) {
    if (kinds_[i] == kHasId) first_ids_.Prefetch(hashes_[i]);
  }
  pending_.clear();
  for (size_t i = 0; i < n; ++i) {
    const Record& r = batch[i];
    if (batch_ && i + kAhead < n && kinds_[i + kAhead] == kHasId) {
      first_ids_.Prefetch(hashes_[i + kAhead]);
    }
    if (kinds_[i] == kMissingId) {
      ++counts.missing;
      out.Forward(r);
      continue;
    }
    if (kinds_[i] == kTooLate) {
      too_late_.Add(TooLateReason::kBeyondRetention);
      Record& s = out.EmitSide(1);
      BuildSideRecord(ctx, r, TooLateReason::kBeyondRetention,
                      "older than the dedup horizon (watermark - retention)", &s);
      s.AddString("horizon", FormatIso8601(horizon));
      continue;
    }
    const uint64_t h = hashes_[i];
    if (batch_) {
      if (first_ids_.Insert(h)) {
        ++counts.passed;
        out.Forward(r);
      } else {
        ++counts.duplicates;
      }
      continue;
    }
    const uint64_t fp = fingerprints_[i];
    uint64_t first_fp = 0;
    ASSIGN_OR_RETURN(bool found, FindFirst(h, horizon, &first_fp));
    if (found) {
      if (first_fp == fp) {
        ++counts.duplicates;
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
    pending_.push_back(PendingId{r.event_time, h, fp});
    index_->Insert(h, r.event_time, seq_);
    ++counts.passed;
    out.Forward(r);
  }
  if (pending_.empty()) return absl::OkStatus();
  // One blob per bucket touched, entries sorted by (time, hash).
  std::sort(pending_.begin(), pending_.end(), [](const PendingId& a, const PendingId& b) {
    return a.event_time != b.event_time ? a.event_time < b.event_time : a.hash < b.hash;
  });
  for (size_t i = 0; i < pending_.size();) {
    const int64_t bucket = BucketStart(pending_[i].event_time);
    std::string& blob = unflushed_[{bucket, seq_}];
    for (; i < pending_.size() && BucketStart(pending_[i].event_time) == bucket; ++i) {
      AppendEntry(Entry{static_cast<uint16_t>(pending_[i].event_time - bucket), pending_[i].hash,
                        pending_[i].fingerprint},
                  &blob);
    }
  }
  ++seq_;
  return absl::OkStatus();
}

absl::Status DedupOperator::OnWatermark(OperatorContext& ctx, Output& out) {
  // Forget ids with event_time < W - retention: lookups skip them at once;
  // their blobs are deleted when the whole bucket is behind the horizon
  // (bucket start + kBucketMs <= W - retention). Everything before
  // expired_before_ is gone already, so the scan starts there (and skips the
  // tombstones of earlier expiries).
  const int64_t horizon = SatAdd(ctx.watermark(), -retention_);
  const int64_t cutoff = SatAdd(horizon, -(kBucketMs - 1));  // delete buckets starting before
  if (cutoff <= expired_before_) return absl::OkStatus();
  if (ctx.watermark() == kMaxTime) {
    // End of input: no record can reach this operator any more (every later
    // one would be too late), so the ids are forgotten without deleting them
    // one by one, which would cost as much as inserting them did.
    expired_->Add(static_cast<int64_t>(index_->size()));
    index_->Clear();
    expired_before_ = cutoff;
    return absl::OkStatus();
  }
  int64_t expired = 0;
  // Blobs not flushed yet: dropped before they reach the table.
  for (auto it = unflushed_.begin(); it != unflushed_.end() && it->first.first < cutoff;) {
    const auto& [bucket, seq] = it->first;
    for (size_t i = 0; i < it->second.size() / kEntrySize; ++i) {
      Entry e = ReadEntry(it->second, i);
      index_->Erase(e.hash, bucket + e.offset, seq);
      ++expired;
    }
    it = unflushed_.erase(it);
  }
  std::string begin = expired_before_ == kMinTime ? "" : EncodeBigEndian64(expired_before_);
  const std::string end = EncodeBigEndian64(cutoff);
  std::vector<std::pair<std::string, std::string>> blobs;
  for (;;) {
    blobs.clear();
    RETURN_IF_ERROR(ids_->Scan(begin, end, [&](std::string_view key, std::string_view value) {
      blobs.emplace_back(key, value);
      return blobs.size() < kExpireChunk;
    }));
    for (const auto& [key, value] : blobs) {
      int64_t bucket;
      uint32_t seq;
      if (ParseKey(key, &bucket, &seq)) {
        for (size_t i = 0; i < value.size() / kEntrySize; ++i) {
          Entry e = ReadEntry(value, i);
          index_->Erase(e.hash, bucket + e.offset, seq);
          ++expired;
        }
      }
      ids_->Delete(key);
    }
    if (blobs.size() < kExpireChunk) break;
    begin = blobs.back().first;
    begin.push_back('\0');  // the smallest key after the last one deleted
  }
  expired_before_ = cutoff;
  expired_->Add(expired);
  return absl::OkStatus();
}

absl::Status DedupOperator::Flush(OperatorContext& ctx) {
  // In key order: the memtable inserts each next to the previous one.
  char key[kKeySize];
  for (const auto& [at, blob] : unflushed_) {
    MakeKey(at.first, at.second, key);
    ids_->Put(std::string_view(key, kKeySize), blob);
  }
  unflushed_.clear();
  return absl::OkStatus();
}

}  // namespace caravela
