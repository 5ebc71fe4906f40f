#include "worker/operators/interval_join_operator.h"

#include <algorithm>

#include "worker/operators/join_key.h"
#include "worker/state/key_codec.h"

namespace caravela {
namespace {

constexpr char kNullKeyPrefix = '\x00';
constexpr char kKeyPrefix = '\x01';
constexpr size_t kTimeSeqBytes = 16;  // big-endian time + sequence after the join key
constexpr const char* kSideNames[] = {"left", "right"};

}  // namespace

absl::StatusOr<std::unique_ptr<IntervalJoinOperator>> IntervalJoinOperator::Create(
    IntervalJoinSpec spec) {
  std::unique_ptr<Expr> where;
  if (!spec.where.empty()) {
    ASSIGN_OR_RETURN(where, Expr::Compile(spec.where));
  }
  return std::unique_ptr<IntervalJoinOperator>(
      new IntervalJoinOperator(std::move(spec), std::move(where)));
}

IntervalJoinOperator::IntervalJoinOperator(IntervalJoinSpec spec, std::unique_ptr<Expr> where)
    : spec_(std::move(spec)), where_(std::move(where)) {
  SplitJoinKeyPaths(spec_.on, paths_);
}

void IntervalJoinOperator::DropAllRows() {
  for (auto& [key, kr] : rows_) {
    for (SideRows& sr : kr.sides) {
      for (size_t i = sr.begin; i < sr.rows.size(); ++i) {
        pool_.Free(sr.rows[i].packed, sr.rows[i].packed_bytes);
      }
    }
  }
  rows_.clear();
  pool_.Clear();
}

bool IntervalJoinOperator::Outer(int side) const { return IsOuterSide(spec_.type, side); }

int64_t IntervalJoinOperator::Expiry(int side, int64_t t) const {
  // Last time a partner can have, plus the lateness a partner may arrive with.
  int64_t last = side == kLeft ? SatAdd(t, spec_.upper) : SatAdd(t, -spec_.lower);
  return SatAdd(last, spec_.allowed_lateness);
}

int64_t IntervalJoinOperator::OutputWatermark(int64_t w) const {
  if (w == kMinTime || w == kMaxTime) return w;
  int64_t pad = 0;
  if (Outer(kLeft)) pad = std::max(pad, spec_.upper);
  if (Outer(kRight)) pad = std::max(pad, -spec_.lower);
  return SatAdd(SatAdd(w, -spec_.allowed_lateness), -pad);
}

void IntervalJoinOperator::TableKey(const RowMap::value_type& entry, int64_t time, uint64_t seq,
                                    std::string* out) {
  out->clear();
  if (entry.second.key_group >= 0) AppendKeyGroupPrefix(out, entry.second.key_group);
  out->append(entry.first);
  AppendBigEndian64(out, time);
  AppendBigEndian64(out, static_cast<int64_t>(seq));
}

void IntervalJoinOperator::MarkDirty(RowMap::value_type* entry) {
  if (entry->second.dirty) return;
  entry->second.dirty = true;
  dirty_keys_.push_back(entry);
}

void IntervalJoinOperator::AddRow(int side, RowMap::value_type* entry, int64_t time, uint64_t seq,
                                  bool matched, const Record& rec, bool persisted) {
  SideRows& sr = entry->second.sides[side];
  std::vector<Row>& rows = sr.rows;
  if (rows.capacity() == 0) rows.reserve(4);  // skips the 1, 2 steps of growth
  if (rows.size() == rows.capacity() && sr.begin > 0) {
    // Reuse the dropped front instead of growing.
    rows.erase(rows.begin(), rows.begin() + sr.begin);
    sr.begin = 0;
  }
  // Rows mostly arrive in time order: search from the back.
  auto pos = rows.end();
  const auto first = rows.begin() + sr.begin;
  while (pos != first &&
         std::tie(std::prev(pos)->time, std::prev(pos)->seq) > std::tie(time, seq)) {
    --pos;
  }
  rows.insert(pos, Row{time, seq, pool_.Pack(rec), static_cast<uint32_t>(rec.PackedSize()), matched,
                       persisted ? Row::kClean : Row::kNew});
  if (!persisted) MarkDirty(entry);
  const Pending p{Expiry(side, time), side, seq, time, entry};
  const int64_t bucket = FloorDiv(p.expiry, kExpiryBucketMs);
  ExpiryBucket*& cached = last_bucket_[side];
  if (cached == nullptr || last_bucket_number_[side] != bucket) {
    auto [it, created] = expiry_.try_emplace(bucket);
    if (created) expiry_order_.insert(bucket);
    cached = &it->second;
    last_bucket_number_[side] = bucket;
  }
  std::vector<Pending>& items = cached->items;
  if (items.capacity() == 0) items.reserve(32);
  if (items.size() > cached->next && p < items.back()) cached->sorted = false;
  items.push_back(p);
  ++buffered_[side];
}

void IntervalJoinOperator::RemoveRow(SideRows& sr, size_t i) {
  pool_.Free(sr.rows[i].packed, sr.rows[i].packed_bytes);
  if (i != sr.begin) {
    sr.rows.erase(sr.rows.begin() + static_cast<ptrdiff_t>(i));
    return;
  }
  ++sr.begin;
  if (sr.begin == sr.rows.size()) {
    sr.rows.clear();
    sr.begin = 0;
  } else if (sr.begin >= 16 && sr.begin * 2 >= sr.rows.size()) {
    sr.rows.erase(sr.rows.begin(), sr.rows.begin() + sr.begin);
    sr.begin = 0;
  }
}

absl::Status IntervalJoinOperator::Open(OperatorContext& ctx) {
  ASSIGN_OR_RETURN(tables_[kLeft], ctx.OpenWriteBehindTable("left"));
  ASSIGN_OR_RETURN(tables_[kRight], ctx.OpenWriteBehindTable("right"));
  ASSIGN_OR_RETURN(meta_, ctx.OpenWriteBehindTable("meta"));
  too_late_.Open(ctx, {TooLateReason::kBeforeJoinBound});
  matches_ = ctx.OpCounter("join_matches_total");
  padded_ = ctx.OpCounter("join_unmatched_total");
  expiry_.clear();
  expiry_order_.clear();
  last_bucket_[kLeft] = last_bucket_[kRight] = nullptr;
  dirty_keys_.clear();
  empty_keys_.clear();
  DropAllRows();
  buffered_[kLeft] = buffered_[kRight] = 0;
  RETURN_IF_ERROR(seq_.Load(meta_, ctx.name()));
  // With key groups, rows stored without one (a checkpoint from before key
  // groups) move to the layout by key group: written anew at the next Flush.
  const KeyOwner* key_groups = ctx.key_groups();
  std::vector<std::string> relaid;
  for (int side : {kLeft, kRight}) {
    bool corrupt = false;
    relaid.clear();
    RETURN_IF_ERROR(tables_[side]->Scan("", "", [&](std::string_view key, std::string_view value) {
      std::string_view row_key = key;
      int key_group = ReadKeyGroupPrefix(&row_key);
      if (row_key.size() <= kTimeSeqBytes || value.empty() ||
          !decoder_.Decode(value.substr(1), &scratch_).ok()) {
        corrupt = true;
        return false;
      }
      std::string_view tail = row_key.substr(row_key.size() - kTimeSeqBytes);
      int64_t t = 0, s = 0;
      ReadBigEndian64(&tail, &t);
      ReadBigEndian64(&tail, &s);
      auto* entry =
          &*rows_.try_emplace(std::string(row_key.substr(0, row_key.size() - kTimeSeqBytes))).first;
      bool persisted = true;
      if (key_group < 0 && key_groups != nullptr) {
        key_group = key_groups->KeyGroup(scratch_, side, &key_scratch_);
        relaid.emplace_back(key);
        persisted = false;
      }
      if (key_group >= 0) entry->second.key_group = key_group;
      AddRow(side, entry, t, static_cast<uint64_t>(s), value[0] == 'm', scratch_, persisted);
      return true;
    }));
    if (corrupt) {
      return absl::DataLossError("corrupt join state in " + ctx.name() + "/" + kSideNames[side]);
    }
    for (const std::string& key : relaid) tables_[side]->Delete(key);
  }
  return absl::OkStatus();
}

absl::Status IntervalJoinOperator::AdoptState(OperatorContext& from, OperatorContext& to,
                                              const KeyOwner& owner) {
  for (int side : {kLeft, kRight}) {
    ASSIGN_OR_RETURN(StateTable * old_table, from.OpenTable(kSideNames[side]));
    ASSIGN_OR_RETURN(StateTable * table, to.OpenWriteBehindTable(kSideNames[side]));
    // Rows laid out by key group: this task's range, copied as they are.
    RETURN_IF_ERROR(owner.CopyOwnedRows(old_table, table));
    // Rows stored before key groups: decoded to find their owner.
    bool corrupt = false;
    std::string scratch;
    const std::string layout_end(1, kKeyGroupMarker);
    RETURN_IF_ERROR(
        old_table->Scan("", layout_end, [&](std::string_view key, std::string_view value) {
          if (value.empty() || !decoder_.Decode(value.substr(1), &scratch_).ok()) {
            corrupt = true;
            return false;
          }
          if (owner.Owns(scratch_, side, &scratch)) table->Put(key, value);
          return true;
        }));
    if (corrupt) {
      return absl::DataLossError("corrupt join state in " + from.name() + "/" + kSideNames[side]);
    }
  }
  ASSIGN_OR_RETURN(StateTable * old_meta, from.OpenTable("meta"));
  ASSIGN_OR_RETURN(StateTable * meta, to.OpenTable("meta"));
  return JoinSequence::AdoptMax(old_meta, meta, to.name());
}

absl::Status IntervalJoinOperator::ProcessBatch(OperatorContext& ctx, int input,
                                                const RecordBatch& batch, Output& out) {
  if (input != kLeft && input != kRight) {
    return absl::InvalidArgumentError("interval join " + ctx.name() + ": no input " +
                                      std::to_string(input));
  }
  const int side = input;
  const int other = 1 - side;
  const bool mark_partners = Outer(other);
  const int64_t oldest = SatAdd(ctx.watermark(), -spec_.allowed_lateness);
  // The hash probes miss the cache (the working set is large), so they are
  // pipelined over the batch: all keys are encoded first, then the probe of
  // record i + kProbeAhead is prefetched and the entry of record
  // i + kFindAhead looked up (and its node prefetched) while record i is
  // processed.
  const size_t n = batch.size();
  batch_keys_.clear();
  key_ends_.resize(n);
  entries_.assign(n, nullptr);
  for (size_t i = 0; i < n; ++i) {
    // A record with a null or missing key field gets an empty key.
    const size_t begin = batch_keys_.size();
    batch_keys_.push_back(kKeyPrefix);
    if (!AppendJoinKey(batch[i], paths_[side], &batch_keys_)) batch_keys_.resize(begin);
    key_ends_[i] = static_cast<uint32_t>(batch_keys_.size());
  }
  auto key_of = [&](size_t i) {
    const uint32_t begin = i == 0 ? 0 : key_ends_[i - 1];
    return absl::string_view(batch_keys_.data() + begin, key_ends_[i] - begin);
  };
  auto find = [&](size_t i) -> RowMap::value_type* {
    const absl::string_view k = key_of(i);
    if (k.empty()) return nullptr;
    auto it = rows_.find(k);
    return it == rows_.end() ? nullptr : &*it;
  };
  // Then the partners' row array (kRowsAhead) and their first packed row
  // (kPackedAhead) are prefetched too: each stage's address comes from the
  // line the stage before fetched.
  constexpr size_t kProbeAhead = 16, kFindAhead = 12, kRowsAhead = 8, kPackedAhead = 4;
  auto partner_rows = [&](size_t j) -> const SideRows* {
    const RowMap::value_type* e = j < n ? entries_[j] : nullptr;
    return e == nullptr || e->second.sides[other].empty() ? nullptr : &e->second.sides[other];
  };
  for (size_t i = 0; i < std::min(n, kProbeAhead); ++i) rows_.prefetch(key_of(i));
  for (size_t i = 0; i < std::min(n, kFindAhead); ++i) entries_[i] = find(i);
  for (size_t i = 0; i < n; ++i) {
    if (i + kProbeAhead < n) rows_.prefetch(key_of(i + kProbeAhead));
    if (i + kFindAhead < n) {
      RowMap::value_type* e = entries_[i + kFindAhead] = find(i + kFindAhead);
      if (e != nullptr) {
        __builtin_prefetch(e);
        __builtin_prefetch(reinterpret_cast<const char*>(e) + 64);
      }
    }
    if (const SideRows* sr = partner_rows(i + kRowsAhead)) {
      __builtin_prefetch(sr->rows.data() + sr->begin);
    }
    if (const SideRows* sr = partner_rows(i + kPackedAhead)) {
      __builtin_prefetch(sr->rows[sr->begin].packed);
    }
    const Record& r = batch[i];
    const int64_t t = r.event_time;
    if (t < oldest) {
      too_late_.Add(TooLateReason::kBeforeJoinBound);
      Record& s = out.EmitSide(0);
      BuildSideRecord(ctx, r, TooLateReason::kBeforeJoinBound,
                      "event time < watermark - allowed_lateness: no longer joinable", &s);
      s.AddString("side", kSideNames[side]);
      s.AddString("bound", FormatIso8601(oldest));
      continue;
    }
    const absl::string_view key = key_of(i);
    const bool has_key = !key.empty();
    bool matched = false;
    // Looked up ahead; a key first inserted by an earlier record of this
    // batch is looked up again.
    RowMap::value_type* entry = entries_[i];
    if (entry == nullptr) entry = find(i);
    if (entry != nullptr && !entry->second.sides[other].empty()) {
      // Partner times: r - l in [lower, upper].
      const int64_t lo = side == kLeft ? SatAdd(t, spec_.lower) : SatAdd(t, -spec_.upper);
      const int64_t hi = side == kLeft ? SatAdd(t, spec_.upper) : SatAdd(t, -spec_.lower);
      SideRows& partners = entry->second.sides[other];
      auto p = std::lower_bound(partners.rows.begin() + partners.begin, partners.rows.end(), lo,
                                [](const Row& row, int64_t v) { return row.time < v; });
      for (; p != partners.rows.end() && p->time <= hi; ++p) {
        Record& o = out.Emit();
        o.EnsureRoot();
        if (side == kLeft) {
          o.AddValue("left", r.Get(0));
          o.AddPacked("right", p->packed);
        } else {
          o.AddPacked("left", p->packed);
          o.AddValue("right", r.Get(0));
        }
        if (where_ != nullptr && !IsTrue(where_->Eval(o))) {
          out.main().PopBack();
          continue;
        }
        o.event_time = std::max(t, p->time);
        o.arrival = r.arrival;
        o.partition = r.partition;
        o.offset = r.offset;
        matches_->Add();
        matched = true;
        if (mark_partners && !p->matched) {
          p->matched = true;
          if (p->persisted == Row::kClean) {
            p->persisted = Row::kStale;
            MarkDirty(entry);
          }
        }
      }
    }
    // Rows that can never match are kept only if they may need a padded row.
    if (entry == nullptr) {
      if (has_key) {
        entry = &*rows_.try_emplace(std::string(key.data(), key.size())).first;
      } else if (Outer(side)) {
        entry = &*rows_.try_emplace(std::string(1, kNullKeyPrefix)).first;
      } else {
        continue;
      }
    }
    if (entry->second.key_group < 0 && ctx.key_groups() != nullptr) {
      entry->second.key_group = ctx.key_groups()->KeyGroup(r, side, &key_scratch_);
    }
    AddRow(side, entry, t, seq_.Next(), matched, r, false);
  }
  // Rows of this batch that no future record can match (possible with a
  // negative upper or positive lower bound) are expired right away.
  return Expire(ctx, out);
}

absl::Status IntervalJoinOperator::OnWatermark(OperatorContext& ctx, Output& out) {
  return Expire(ctx, out);
}

absl::Status IntervalJoinOperator::Expire(OperatorContext& ctx, Output& out) {
  const int64_t w = ctx.watermark();
  if (w == kMinTime) return absl::OkStatus();
  // Rows with expiry < w, i.e. <= w - 1, are in buckets up to this one.
  const int64_t last_due = FloorDiv(w - 1, kExpiryBucketMs);
  while (!expiry_order_.empty() && *expiry_order_.begin() <= last_due) {
    auto bucket = expiry_.find(*expiry_order_.begin());
    ExpiryBucket& b = bucket->second;
    if (!b.sorted) {
      std::sort(b.items.begin() + static_cast<ptrdiff_t>(b.next), b.items.end());
      b.sorted = true;
    }
    while (b.next < b.items.size() && b.items[b.next].expiry < w) {
      // The entries, then the rows of the rows due next are prefetched.
      if (b.next + 8 < b.items.size()) {
        const char* e = reinterpret_cast<const char*>(b.items[b.next + 8].entry);
        __builtin_prefetch(e);
        __builtin_prefetch(e + 64);
      }
      if (b.next + 4 < b.items.size()) {
        const Pending& p = b.items[b.next + 4];
        const SideRows& sr = p.entry->second.sides[p.side];
        if (!sr.empty()) __builtin_prefetch(sr.rows.data() + sr.begin);
      }
      ExpireRow(ctx, b.items[b.next++], out);
      RETURN_IF_ERROR(out.MaybeDrain());
    }
    if (b.next < b.items.size()) break;  // the rest is due later
    for (ExpiryBucket*& cached : last_bucket_) {
      if (cached == &b) cached = nullptr;
    }
    expiry_.erase(bucket);
    expiry_order_.erase(expiry_order_.begin());
  }
  return absl::OkStatus();
}

void IntervalJoinOperator::ExpireRow(OperatorContext& ctx, const Pending& p, Output& out) {
  RowMap::value_type* entry = p.entry;
  SideRows& sr = entry->second.sides[p.side];
  // Rows mostly expire in time order: the row is usually the first.
  size_t i = sr.begin;
  if (i >= sr.rows.size() || sr.rows[i].seq != p.seq) {
    auto it =
        std::lower_bound(sr.rows.begin() + sr.begin, sr.rows.end(), std::make_pair(p.time, p.seq),
                         [](const Row& x, const std::pair<int64_t, uint64_t>& v) {
                           return std::tie(x.time, x.seq) < std::tie(v.first, v.second);
                         });
    i = static_cast<size_t>(it - sr.rows.begin());
  }
  if (i >= sr.rows.size() || sr.rows[i].seq != p.seq) return;  // cannot happen
  const Row& row = sr.rows[i];
  if (Outer(p.side) && !row.matched) {
    Record& o = out.Emit();
    o.EnsureRoot();
    if (p.side == kLeft) {
      o.AddPacked("left", row.packed);
      o.AddNull("right");
    } else {
      o.AddNull("left");
      o.AddPacked("right", row.packed);
    }
    o.event_time = p.time;
    o.arrival = ctx.now();
    padded_->Add();
  }
  if (row.persisted != Row::kNew) {
    TableKey(*entry, p.time, p.seq, &table_key_);
    tables_[p.side]->Delete(table_key_);
  }
  RemoveRow(sr, i);
  --buffered_[p.side];
  KeyRows& kr = entry->second;
  if (kr.sides[kLeft].empty() && kr.sides[kRight].empty() && !kr.dirty && !kr.listed_empty) {
    kr.listed_empty = true;
    empty_keys_.push_back(entry);
  }
}

absl::Status IntervalJoinOperator::Flush(OperatorContext& ctx) {
  // Keys that emptied and stayed empty go (dirty ones after they are written).
  for (RowMap::value_type* entry : empty_keys_) {
    KeyRows& kr = entry->second;
    kr.listed_empty = false;
    if (kr.sides[kLeft].empty() && kr.sides[kRight].empty() && !kr.dirty) {
      rows_.erase(entry->first);
    }
  }
  empty_keys_.clear();
  for (RowMap::value_type* entry : dirty_keys_) {
    entry->second.dirty = false;
    for (int side : {kLeft, kRight}) {
      SideRows& sr = entry->second.sides[side];
      for (size_t i = sr.begin; i < sr.rows.size(); ++i) {
        Row& row = sr.rows[i];
        if (row.persisted == Row::kClean) continue;
        TableKey(*entry, row.time, row.seq, &table_key_);
        value_.assign(1, row.matched ? 'm' : '-');
        scratch_.Unpack(row.packed);
        scratch_.AppendJson(&value_);
        tables_[side]->Put(table_key_, value_);
        row.persisted = Row::kClean;
      }
    }
  }
  for (RowMap::value_type* entry : dirty_keys_) {
    const KeyRows& kr = entry->second;
    if (kr.sides[kLeft].empty() && kr.sides[kRight].empty()) rows_.erase(entry->first);
  }
  dirty_keys_.clear();
  seq_.Flush(meta_);
  return absl::OkStatus();
}

}  // namespace caravela
