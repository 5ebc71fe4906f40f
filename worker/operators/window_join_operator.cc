#include "worker/operators/window_join_operator.h"

#include <algorithm>

#include "worker/operators/join_key.h"
#include "worker/state/key_codec.h"

namespace caravela {
namespace {

constexpr char kNullKeyPrefix = '\x00';
constexpr char kKeyPrefix = '\x01';
constexpr size_t kStartBytes = 8;     // big-endian window start before the join key
constexpr size_t kTimeSeqBytes = 16;  // big-endian time + sequence after the join key
constexpr const char* kSideNames[] = {"left", "right"};

}  // namespace

WindowJoinOperator::WindowJoinOperator(WindowJoinSpec spec) : spec_(std::move(spec)) {
  if (spec_.kind == WindowJoinSpec::Kind::kTumbling || spec_.slide <= 0) spec_.slide = spec_.size;
  for (const JoinKeySpec& k : spec_.on) {
    paths_[kLeft].push_back(k.left_path);
    paths_[kRight].push_back(k.right_path);
  }
}

bool WindowJoinOperator::Outer(int side) const {
  if (spec_.type == JoinType::kFull) return true;
  return side == kLeft ? spec_.type == JoinType::kLeft : spec_.type == JoinType::kRight;
}

int64_t WindowJoinOperator::End(int64_t start) const { return SatAdd(start, spec_.size); }

int64_t WindowJoinOperator::OutputWatermark(int64_t w) const {
  if (w == kMinTime || w == kMaxTime) return w;
  return SatAdd(w, -spec_.allowed_lateness);
}

absl::Status WindowJoinOperator::Open(OperatorContext& ctx) {
  ASSIGN_OR_RETURN(tables_[kLeft], ctx.OpenTable("left"));
  ASSIGN_OR_RETURN(tables_[kRight], ctx.OpenTable("right"));
  ASSIGN_OR_RETURN(windows_table_, ctx.OpenTable("windows"));
  ASSIGN_OR_RETURN(meta_, ctx.OpenTable("meta"));
  too_late_ = ctx.OpCounter("too_late_total");
  matches_ = ctx.OpCounter("join_matches_total");
  padded_ = ctx.OpCounter("join_unmatched_total");
  windows_.clear();
  next_seq_ = 0;
  seq_dirty_ = false;
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
  bool corrupt = false;
  RETURN_IF_ERROR(windows_table_->Scan("", "", [&](std::string_view key, std::string_view value) {
    int64_t start = 0;
    if (!ReadBigEndian64(&key, &start) || value.empty()) {
      corrupt = true;
      return false;
    }
    windows_[start] = value[0] == 'c';
    return true;
  }));
  if (corrupt) return absl::DataLossError("corrupt join state in " + ctx.name() + "/windows");
  return absl::OkStatus();
}

absl::Status WindowJoinOperator::EmitPair(OperatorContext& ctx, int64_t start,
                                          const std::string* left, const std::string* right,
                                          Output& out) {
  if (left != nullptr) RETURN_IF_ERROR(decoder_.Decode(*left, &left_));
  if (right != nullptr) RETURN_IF_ERROR(decoder_.Decode(*right, &right_));
  const int64_t end = End(start);
  Record& o = out.Emit();
  o.EnsureRoot();
  o.AddString("window_start", FormatIso8601(start));
  o.AddString("window_end", FormatIso8601(end));
  if (left != nullptr) {
    o.AddValue("left", left_.Get(0));
  } else {
    o.AddNull("left");
  }
  if (right != nullptr) {
    o.AddValue("right", right_.Get(0));
  } else {
    o.AddNull("right");
  }
  o.event_time = end - 1;
  o.arrival = ctx.now();
  (left != nullptr && right != nullptr ? matches_ : padded_)->Add();
  return absl::OkStatus();
}

absl::Status WindowJoinOperator::ProcessBatch(OperatorContext& ctx, int input,
                                              const RecordBatch& batch, Output& out) {
  if (input != kLeft && input != kRight) {
    return absl::InvalidArgumentError("window join " + ctx.name() + ": no input " +
                                      std::to_string(input));
  }
  const int side = input;
  const int other = 1 - side;
  const int64_t w = ctx.watermark();
  for (const Record& r : batch) {
    const int64_t t = r.event_time;
    key_.clear();
    key_.push_back(kKeyPrefix);
    const bool has_key = AppendJoinKey(r, paths_[side], &key_);
    if (!has_key) key_.assign(1, kNullKeyPrefix);
    json_.clear();
    r.AppendJson(&json_);
    bool used = false;
    // Windows containing t: starts s = k * slide with s <= t < s + size.
    const int64_t last = FloorDiv(t, spec_.slide) * spec_.slide;
    for (int64_t s = last - ((spec_.size - 1) / spec_.slide) * spec_.slide; s <= last;
         s += spec_.slide) {
      const int64_t end = End(s);
      if (t >= end || w >= SatAdd(end, spec_.allowed_lateness)) continue;  // final
      used = true;
      if (!has_key && !Outer(side)) continue;  // can never match, never padded
      auto [it, created] = windows_.try_emplace(s, w >= end);
      prefix_.clear();
      AppendBigEndian64(&prefix_, s);
      if (created) windows_table_->Put(prefix_, it->second ? "c" : "o");
      prefix_.append(key_);
      if (has_key && it->second) {
        // Closed, within the lateness: join with the rows already there.
        partners_.clear();
        RETURN_IF_ERROR(tables_[other]->Scan(prefix_, PrefixEnd(prefix_),
                                             [&](std::string_view, std::string_view value) {
                                               partners_.emplace_back(value);
                                               return true;
                                             }));
        for (const std::string& p : partners_) {
          RETURN_IF_ERROR(side == kLeft ? EmitPair(ctx, s, &json_, &p, out)
                                        : EmitPair(ctx, s, &p, &json_, out));
        }
      }
      row_key_ = prefix_;
      AppendBigEndian64(&row_key_, t);
      AppendBigEndian64(&row_key_, static_cast<int64_t>(next_seq_++));
      seq_dirty_ = true;
      tables_[side]->Put(row_key_, json_);
    }
    if (!used) {
      too_late_->Add();
      Record& s = out.EmitSide(0);
      BuildSideRecord(ctx, r, "window already final (event time < watermark - allowed_lateness)",
                      &s);
      s.AddString("side", kSideNames[side]);
    }
  }
  return absl::OkStatus();
}

absl::Status WindowJoinOperator::Load(int side, int64_t start, std::vector<Row>* rows) {
  rows->clear();
  prefix_.clear();
  AppendBigEndian64(&prefix_, start);
  bool corrupt = false;
  RETURN_IF_ERROR(tables_[side]->Scan(
      prefix_, PrefixEnd(prefix_), [&](std::string_view key, std::string_view value) {
        if (key.size() < kStartBytes + 1 + kTimeSeqBytes) {
          corrupt = true;
          return false;
        }
        rows->push_back(
            Row{std::string(key.substr(kStartBytes, key.size() - kStartBytes - kTimeSeqBytes)),
                std::string(value)});
        return true;
      }));
  if (corrupt) return absl::DataLossError("corrupt window join state");
  return absl::OkStatus();
}

absl::Status WindowJoinOperator::Close(OperatorContext& ctx, int64_t start, Output& out) {
  RETURN_IF_ERROR(Load(kLeft, start, &rows_[kLeft]));
  RETURN_IF_ERROR(Load(kRight, start, &rows_[kRight]));
  const std::vector<Row>& l = rows_[kLeft];
  const std::vector<Row>& r = rows_[kRight];
  // Merge the two key-ordered lists group by group.
  size_t i = 0, j = 0;
  while (i < l.size() && j < r.size()) {
    if (l[i].key < r[j].key) {
      ++i;
    } else if (r[j].key < l[i].key) {
      ++j;
    } else {
      size_t i_end = i, j_end = j;
      while (i_end < l.size() && l[i_end].key == l[i].key) ++i_end;
      while (j_end < r.size() && r[j_end].key == r[j].key) ++j_end;
      if (l[i].key[0] == kKeyPrefix) {
        for (size_t a = i; a < i_end; ++a) {
          for (size_t b = j; b < j_end; ++b) {
            RETURN_IF_ERROR(EmitPair(ctx, start, &l[a].json, &r[b].json, out));
          }
        }
      }
      i = i_end;
      j = j_end;
    }
  }
  return absl::OkStatus();
}

absl::Status WindowJoinOperator::Final(OperatorContext& ctx, int64_t start, Output& out) {
  if (Outer(kLeft) || Outer(kRight)) {
    RETURN_IF_ERROR(Load(kLeft, start, &rows_[kLeft]));
    RETURN_IF_ERROR(Load(kRight, start, &rows_[kRight]));
    const std::vector<Row>& l = rows_[kLeft];
    const std::vector<Row>& r = rows_[kRight];
    // Group by key in key order; a group is unmatched if the other side has
    // no row with that key (a null key never matches).
    size_t i = 0, j = 0;
    while (i < l.size() || j < r.size()) {
      const std::string* key;
      if (j >= r.size() || (i < l.size() && l[i].key <= r[j].key)) {
        key = &l[i].key;
      } else {
        key = &r[j].key;
      }
      size_t i_end = i, j_end = j;
      while (i_end < l.size() && l[i_end].key == *key) ++i_end;
      while (j_end < r.size() && r[j_end].key == *key) ++j_end;
      const bool matchable = (*key)[0] == kKeyPrefix;
      const bool left_unmatched = i_end > i && (j_end == j || !matchable);
      const bool right_unmatched = j_end > j && (i_end == i || !matchable);
      if (Outer(kLeft) && left_unmatched) {
        for (size_t a = i; a < i_end; ++a) {
          RETURN_IF_ERROR(EmitPair(ctx, start, &l[a].json, nullptr, out));
        }
      }
      if (Outer(kRight) && right_unmatched) {
        for (size_t b = j; b < j_end; ++b) {
          RETURN_IF_ERROR(EmitPair(ctx, start, nullptr, &r[b].json, out));
        }
      }
      i = i_end;
      j = j_end;
    }
  }
  prefix_.clear();
  AppendBigEndian64(&prefix_, start);
  for (int side : {kLeft, kRight}) {
    RETURN_IF_ERROR(tables_[side]->DeleteRange(prefix_, PrefixEnd(prefix_)));
  }
  windows_table_->Delete(prefix_);
  return absl::OkStatus();
}

absl::Status WindowJoinOperator::OnWatermark(OperatorContext& ctx, Output& out) {
  const int64_t w = ctx.watermark();
  // Close, in window order, every window the watermark completed...
  for (auto& [start, closed] : windows_) {
    if (End(start) > w) break;  // ends grow with starts
    if (closed) continue;
    RETURN_IF_ERROR(Close(ctx, start, out));
    closed = true;
    prefix_.clear();
    AppendBigEndian64(&prefix_, start);
    windows_table_->Put(prefix_, "c");
  }
  // ...then finish every window that is final.
  while (!windows_.empty() && w >= SatAdd(End(windows_.begin()->first), spec_.allowed_lateness)) {
    RETURN_IF_ERROR(Final(ctx, windows_.begin()->first, out));
    windows_.erase(windows_.begin());
  }
  return absl::OkStatus();
}

absl::Status WindowJoinOperator::Flush(OperatorContext& ctx) {
  if (seq_dirty_) {
    meta_->Put("seq", EncodeBigEndian64(static_cast<int64_t>(next_seq_)));
    seq_dirty_ = false;
  }
  return absl::OkStatus();
}

}  // namespace caravela
