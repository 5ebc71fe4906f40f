#include "worker/operators/interval_join_operator.h"

#include <algorithm>

#include "absl/hash/hash.h"
#include "worker/operators/join_key.h"
#include "worker/state/key_codec.h"

namespace caravela {
namespace {

constexpr char kNullKeyPrefix = '\x00';
constexpr char kKeyPrefix = '\x01';
constexpr size_t kTimeSeqBytes = 16;  // big-endian time + sequence after the join key
constexpr const char* kSideNames[] = {"left", "right"};

// Time of a stored row, from its table key.
int64_t RowTime(std::string_view table_key) {
  std::string_view tail = table_key.substr(table_key.size() - kTimeSeqBytes);
  int64_t t = 0;
  ReadBigEndian64(&tail, &t);
  return t;
}

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
  for (const JoinKeySpec& k : spec_.on) {
    paths_[kLeft].push_back(k.left_path);
    paths_[kRight].push_back(k.right_path);
  }
}

bool IntervalJoinOperator::Outer(int side) const {
  if (spec_.type == JoinType::kFull) return true;
  return side == kLeft ? spec_.type == JoinType::kLeft : spec_.type == JoinType::kRight;
}

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

size_t IntervalJoinOperator::KeyHash(std::string_view table_key) {
  return absl::Hash<std::string_view>{}(table_key.substr(0, table_key.size() - kTimeSeqBytes));
}

void IntervalJoinOperator::AddRow(int side, std::string_view table_key, bool matched) {
  Pending p{Expiry(side, RowTime(table_key)), side, std::string(table_key)};
  p.matched = matched;
  pending_.insert(std::move(p));
  ++buffered_[side];
  if (table_key[0] == kKeyPrefix) ++key_rows_[side][KeyHash(table_key)];
}

bool IntervalJoinOperator::EncodeKey(const Record& r, int side) {
  key_.clear();
  key_.push_back(kKeyPrefix);
  return AppendJoinKey(r, paths_[side], &key_);
}

absl::Status IntervalJoinOperator::Open(OperatorContext& ctx) {
  ASSIGN_OR_RETURN(tables_[kLeft], ctx.OpenTable("left"));
  ASSIGN_OR_RETURN(tables_[kRight], ctx.OpenTable("right"));
  ASSIGN_OR_RETURN(meta_, ctx.OpenTable("meta"));
  too_late_ = ctx.OpCounter("too_late_total");
  matches_ = ctx.OpCounter("join_matches_total");
  padded_ = ctx.OpCounter("join_unmatched_total");
  pending_.clear();
  buffered_[kLeft] = buffered_[kRight] = 0;
  key_rows_[kLeft].clear();
  key_rows_[kRight].clear();
  seq_dirty_ = false;
  next_seq_ = 0;
  std::string seq;
  ASSIGN_OR_RETURN(bool has_seq, meta_->Get("seq", &seq));
  if (has_seq) {
    std::string_view in = seq;
    int64_t v = 0;
    if (!ReadBigEndian64(&in, &v)) {
      return absl::DataLossError("corrupt join state in " + ctx.name() + ": bad sequence");
    }
    next_seq_ = static_cast<uint64_t>(v);
  }
  for (int side : {kLeft, kRight}) {
    bool corrupt = false;
    RETURN_IF_ERROR(tables_[side]->Scan("", "", [&](std::string_view key, std::string_view value) {
      if (key.size() <= kTimeSeqBytes || value.empty()) {
        corrupt = true;
        return false;
      }
      AddRow(side, key, value[0] == 'm');
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
    // Skip the range scan when the other side holds no row with this key.
    if (has_key && key_rows_[other].contains(absl::Hash<std::string_view>{}(key_))) {
      // Partner times: r - l in [lower, upper].
      int64_t lo = side == kLeft ? SatAdd(t, spec_.lower) : SatAdd(t, -spec_.upper);
      int64_t hi = side == kLeft ? SatAdd(t, spec_.upper) : SatAdd(t, -spec_.lower);
      begin_ = key_;
      AppendBigEndian64(&begin_, lo);
      if (hi == kMaxTime) {
        end_ = PrefixEnd(key_);
      } else {
        end_ = key_;
        AppendBigEndian64(&end_, hi + 1);
      }
      absl::Status error;
      to_mark_.clear();
      const bool mark_partners = Outer(other);
      RETURN_IF_ERROR(
          tables_[other]->Scan(begin_, end_, [&](std::string_view pkey, std::string_view pvalue) {
            std::string_view json = pvalue.substr(1);
            error = decoder_.Decode(json, &partner_);
            if (!error.ok()) return false;
            const int64_t pt = RowTime(pkey);
            Record& o = out.Emit();
            o.EnsureRoot();
            const Record& left = side == kLeft ? r : partner_;
            const Record& right = side == kLeft ? partner_ : r;
            o.AddValue("left", left.Get(0));
            o.AddValue("right", right.Get(0));
            if (where_ != nullptr && !IsTrue(where_->Eval(o))) {
              out.main().PopBack();
              return true;
            }
            o.event_time = std::max(t, pt);
            o.arrival = r.arrival;
            o.partition = r.partition;
            o.offset = r.offset;
            matches_->Add();
            matched = true;
            if (mark_partners && pvalue[0] != 'm') {
              auto it = pending_.find(Pending{Expiry(other, pt), other, std::string(pkey)});
              if (it != pending_.end()) it->matched = true;
              std::string v;
              v.reserve(pvalue.size());
              v.push_back('m');
              v.append(json);
              to_mark_.emplace_back(std::string(pkey), std::move(v));
            }
            return true;
          }));
      if (!error.ok()) {
        return absl::DataLossError("corrupt join state in " + ctx.name() + ": " +
                                   std::string(error.message()));
      }
      for (const auto& [k, v] : to_mark_) tables_[other]->Put(k, v);
    }
    // Rows that can never match are kept only if they may need a padded row.
    if (!has_key) {
      if (!Outer(side)) continue;
      key_.assign(1, kNullKeyPrefix);
    }
    AppendBigEndian64(&key_, t);
    AppendBigEndian64(&key_, static_cast<int64_t>(next_seq_++));
    seq_dirty_ = true;
    value_.clear();
    value_.push_back(matched ? 'm' : '-');
    r.AppendJson(&value_);
    tables_[side]->Put(key_, value_);
    AddRow(side, key_, matched);
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
    Pending p = *pending_.begin();
    pending_.erase(pending_.begin());
    StateTable* table = tables_[p.side];
    if (Outer(p.side) && !p.matched) {
      ASSIGN_OR_RETURN(bool found, table->Get(p.key, &value_));
      if (found && !value_.empty() && value_[0] == '-') {
        RETURN_IF_ERROR(decoder_.Decode(std::string_view(value_).substr(1), &partner_));
        Record& o = out.Emit();
        o.EnsureRoot();
        if (p.side == kLeft) {
          o.AddValue("left", partner_.Get(0));
          o.AddNull("right");
        } else {
          o.AddNull("left");
          o.AddValue("right", partner_.Get(0));
        }
        o.event_time = RowTime(p.key);
        o.arrival = ctx.now();
        padded_->Add();
      }
    }
    table->Delete(p.key);
    --buffered_[p.side];
    if (p.key[0] == kKeyPrefix) {
      auto it = key_rows_[p.side].find(KeyHash(p.key));
      if (it != key_rows_[p.side].end() && --it->second == 0) key_rows_[p.side].erase(it);
    }
  }
  return absl::OkStatus();
}

absl::Status IntervalJoinOperator::Flush(OperatorContext& ctx) {
  if (seq_dirty_) {
    meta_->Put("seq", EncodeBigEndian64(static_cast<int64_t>(next_seq_)));
    seq_dirty_ = false;
  }
  return absl::OkStatus();
}

}  // namespace caravela
