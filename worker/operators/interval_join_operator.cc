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

void IntervalJoinOperator::TableKey(const std::string& key, int64_t time, uint64_t seq,
                                    std::string* out) {
  out->assign(key);
  AppendBigEndian64(out, time);
  AppendBigEndian64(out, static_cast<int64_t>(seq));
}

void IntervalJoinOperator::MarkDirty(int side, RowMap::value_type* entry) {
  if (entry->second.dirty) return;
  entry->second.dirty = true;
  dirty_keys_.emplace_back(side, entry);
}

IntervalJoinOperator::Row& IntervalJoinOperator::AddRow(int side, const std::string& key,
                                                        int64_t time, uint64_t seq, bool matched,
                                                        Record rec, bool persisted) {
  auto [it, inserted] = rows_[side].try_emplace(key);
  std::vector<Row>& rows = it->second.rows;
  // Rows mostly arrive in time order: search from the back.
  auto pos = rows.end();
  while (pos != rows.begin() &&
         std::tie(std::prev(pos)->time, std::prev(pos)->seq) > std::tie(time, seq)) {
    --pos;
  }
  pos = rows.insert(pos,
                    Row{time, seq, matched, persisted ? Row::kClean : Row::kNew, std::move(rec)});
  if (!persisted) MarkDirty(side, &*it);
  pending_.insert(Pending{Expiry(side, time), side, seq, time, &*it});
  ++buffered_[side];
  return *pos;
}

bool IntervalJoinOperator::EncodeKey(const Record& r, int side) {
  key_.clear();
  key_.push_back(kKeyPrefix);
  return AppendJoinKey(r, paths_[side], &key_);
}

absl::Status IntervalJoinOperator::Open(OperatorContext& ctx) {
  ASSIGN_OR_RETURN(tables_[kLeft], ctx.OpenWriteBehindTable("left"));
  ASSIGN_OR_RETURN(tables_[kRight], ctx.OpenWriteBehindTable("right"));
  ASSIGN_OR_RETURN(meta_, ctx.OpenWriteBehindTable("meta"));
  too_late_ = ctx.OpCounter("too_late_total");
  matches_ = ctx.OpCounter("join_matches_total");
  padded_ = ctx.OpCounter("join_unmatched_total");
  pending_.clear();
  dirty_keys_.clear();
  deleted_.clear();
  for (int side : {kLeft, kRight}) {
    rows_[side].clear();
    buffered_[side] = 0;
  }
  RETURN_IF_ERROR(seq_.Load(meta_, ctx.name()));
  for (int side : {kLeft, kRight}) {
    bool corrupt = false;
    Record rec;
    RETURN_IF_ERROR(tables_[side]->Scan("", "", [&](std::string_view key, std::string_view value) {
      if (key.size() <= kTimeSeqBytes || value.empty() ||
          !decoder_.Decode(value.substr(1), &rec).ok()) {
        corrupt = true;
        return false;
      }
      std::string_view tail = key.substr(key.size() - kTimeSeqBytes);
      int64_t t = 0, s = 0;
      ReadBigEndian64(&tail, &t);
      ReadBigEndian64(&tail, &s);
      rec.event_time = t;
      AddRow(side, std::string(key.substr(0, key.size() - kTimeSeqBytes)), t,
             static_cast<uint64_t>(s), value[0] == 'm', std::move(rec), true);
      rec = Record();
      return true;
    }));
    if (corrupt) {
      return absl::DataLossError("corrupt join state in " + ctx.name() + "/" + kSideNames[side]);
    }
  }
  return absl::OkStatus();
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
  for (const Record& r : batch) {
    const int64_t t = r.event_time;
    if (t < oldest) {
      too_late_->Add();
      Record& s = out.EmitSide(0);
      BuildSideRecord(ctx, r, "event time < watermark - allowed_lateness: no longer joinable", &s);
      s.AddString("side", kSideNames[side]);
      continue;
    }
    const bool has_key = EncodeKey(r, side);
    bool matched = false;
    auto partners = has_key ? rows_[other].find(key_) : rows_[other].end();
    if (partners != rows_[other].end()) {
      // Partner times: r - l in [lower, upper].
      const int64_t lo = side == kLeft ? SatAdd(t, spec_.lower) : SatAdd(t, -spec_.upper);
      const int64_t hi = side == kLeft ? SatAdd(t, spec_.upper) : SatAdd(t, -spec_.lower);
      std::vector<Row>& rows = partners->second.rows;
      auto p = std::lower_bound(rows.begin(), rows.end(), lo,
                                [](const Row& row, int64_t v) { return row.time < v; });
      for (; p != rows.end() && p->time <= hi; ++p) {
        Record& o = out.Emit();
        o.EnsureRoot();
        const Record& left = side == kLeft ? r : p->rec;
        const Record& right = side == kLeft ? p->rec : r;
        o.AddValue("left", left.Get(0));
        o.AddValue("right", right.Get(0));
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
            MarkDirty(other, &*partners);
          }
        }
      }
    }
    // Rows that can never match are kept only if they may need a padded row.
    if (!has_key) {
      if (!Outer(side)) continue;
      key_.assign(1, kNullKeyPrefix);
    }
    AddRow(side, key_, t, seq_.Next(), matched, r, false);
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
  while (!pending_.empty() && pending_.begin()->expiry < w) {
    const Pending p = *pending_.begin();
    pending_.erase(pending_.begin());
    RowMap::value_type* entry = p.entry;
    std::vector<Row>& rows = entry->second.rows;
    // Rows mostly expire in time order: the row is usually the first.
    auto row = rows.begin();
    if (row == rows.end() || row->seq != p.seq) {
      row = std::lower_bound(rows.begin(), rows.end(), std::make_pair(p.time, p.seq),
                             [](const Row& x, const std::pair<int64_t, uint64_t>& v) {
                               return std::tie(x.time, x.seq) < std::tie(v.first, v.second);
                             });
    }
    if (row == rows.end() || row->seq != p.seq) continue;  // cannot happen
    if (Outer(p.side) && !row->matched) {
      Record& o = out.Emit();
      o.EnsureRoot();
      if (p.side == kLeft) {
        o.AddValue("left", row->rec.Get(0));
        o.AddNull("right");
      } else {
        o.AddNull("left");
        o.AddValue("right", row->rec.Get(0));
      }
      o.event_time = p.time;
      o.arrival = ctx.now();
      padded_->Add();
    }
    if (row->persisted != Row::kNew) {
      TableKey(entry->first, p.time, p.seq, &table_key_);
      deleted_.emplace_back(p.side, table_key_);
    }
    rows.erase(row);
    --buffered_[p.side];
    if (rows.empty() && !entry->second.dirty) rows_[p.side].erase(entry->first);
  }
  return absl::OkStatus();
}

absl::Status IntervalJoinOperator::Flush(OperatorContext& ctx) {
  for (auto& [side, entry] : dirty_keys_) {
    entry->second.dirty = false;
    for (Row& row : entry->second.rows) {
      if (row.persisted == Row::kClean) continue;
      TableKey(entry->first, row.time, row.seq, &table_key_);
      value_.assign(1, row.matched ? 'm' : '-');
      row.rec.AppendJson(&value_);
      tables_[side]->Put(table_key_, value_);
      row.persisted = Row::kClean;
    }
  }
  for (auto& [side, entry] : dirty_keys_) {
    if (entry->second.rows.empty()) rows_[side].erase(entry->first);
  }
  dirty_keys_.clear();
  for (const auto& [side, key] : deleted_) tables_[side]->Delete(key);
  deleted_.clear();
  seq_.Flush(meta_);
  return absl::OkStatus();
}

}  // namespace caravela
