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
  SplitJoinKeyPaths(spec_.on, paths_);
}

bool WindowJoinOperator::Outer(int side) const { return IsOuterSide(spec_.type, side); }

int64_t WindowJoinOperator::End(int64_t start) const { return SatAdd(start, spec_.size); }

int64_t WindowJoinOperator::OutputWatermark(int64_t w) const {
  if (w == kMinTime || w == kMaxTime) return w;
  return SatAdd(w, -spec_.allowed_lateness);
}

absl::Status WindowJoinOperator::Open(OperatorContext& ctx) {
  ASSIGN_OR_RETURN(tables_[kLeft], ctx.OpenWriteBehindTable("left"));
  ASSIGN_OR_RETURN(tables_[kRight], ctx.OpenWriteBehindTable("right"));
  ASSIGN_OR_RETURN(windows_table_, ctx.OpenWriteBehindTable("windows"));
  ASSIGN_OR_RETURN(meta_, ctx.OpenWriteBehindTable("meta"));
  too_late_ = ctx.OpCounter("too_late_total");
  matches_ = ctx.OpCounter("join_matches_total");
  padded_ = ctx.OpCounter("join_unmatched_total");
  windows_.clear();
  deleted_.clear();
  RETURN_IF_ERROR(seq_.Load(meta_, ctx.name()));
  bool corrupt = false;
  RETURN_IF_ERROR(windows_table_->Scan("", "", [&](std::string_view key, std::string_view value) {
    int64_t start = 0;
    if (!ReadBigEndian64(&key, &start) || value.empty()) {
      corrupt = true;
      return false;
    }
    Window& w = windows_[start];
    w.closed = value[0] == 'c';
    w.persisted = true;
    return true;
  }));
  for (int side : {kLeft, kRight}) {
    if (corrupt) break;
    RETURN_IF_ERROR(tables_[side]->Scan("", "", [&](std::string_view key, std::string_view value) {
      if (key.size() < kStartBytes + 1 + kTimeSeqBytes) {
        corrupt = true;
        return false;
      }
      std::string_view in = key;
      int64_t start = 0, t = 0, s = 0;
      ReadBigEndian64(&in, &start);
      std::string_view tail = key.substr(key.size() - kTimeSeqBytes);
      ReadBigEndian64(&tail, &t);
      ReadBigEndian64(&tail, &s);
      Row row{t, static_cast<uint64_t>(s), true, Record()};
      if (!decoder_.Decode(value, &row.rec).ok()) {
        corrupt = true;
        return false;
      }
      row.rec.event_time = t;
      std::string jk(key.substr(kStartBytes, key.size() - kStartBytes - kTimeSeqBytes));
      windows_[start].sides[side][jk].push_back(std::move(row));
      return true;
    }));
  }
  if (corrupt) return absl::DataLossError("corrupt join state in " + ctx.name());
  return absl::OkStatus();
}

void WindowJoinOperator::EmitPair(OperatorContext& ctx, int64_t start, const Record* left,
                                  const Record* right, Output& out) {
  const int64_t end = End(start);
  if (start != formatted_start_ || start_text_.empty()) {
    formatted_start_ = start;
    start_text_ = FormatIso8601(start);
    end_text_ = FormatIso8601(end);
  }
  Record& o = out.Emit();
  o.EnsureRoot();
  o.AddString("window_start", start_text_);
  o.AddString("window_end", end_text_);
  if (left != nullptr) {
    o.AddValue("left", left->Get(0));
  } else {
    o.AddNull("left");
  }
  if (right != nullptr) {
    o.AddValue("right", right->Get(0));
  } else {
    o.AddNull("right");
  }
  o.event_time = end - 1;
  o.arrival = ctx.now();
  (left != nullptr && right != nullptr ? matches_ : padded_)->Add();
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
    bool used = false;
    // Windows containing t: starts s = k * slide with s <= t < s + size.
    const int64_t last = FloorDiv(t, spec_.slide) * spec_.slide;
    for (int64_t s = last - ((spec_.size - 1) / spec_.slide) * spec_.slide; s <= last;
         s += spec_.slide) {
      const int64_t end = End(s);
      if (t >= end || w >= SatAdd(end, spec_.allowed_lateness)) continue;  // final
      used = true;
      if (!has_key && !Outer(side)) continue;  // can never match, never padded
      auto [it, created] = windows_.try_emplace(s);
      Window& win = it->second;
      if (created) win.closed = w >= end;
      win.dirty = true;
      if (has_key && win.closed) {
        // Closed, within the lateness: join with the rows already there.
        auto partners = win.sides[other].find(key_);
        if (partners != win.sides[other].end()) {
          std::vector<Row>& rows = partners->second;
          std::sort(rows.begin(), rows.end(), [](const Row& a, const Row& b) {
            return std::tie(a.time, a.seq) < std::tie(b.time, b.seq);
          });
          for (const Row& p : rows) {
            if (side == kLeft) {
              EmitPair(ctx, s, &r, &p.rec, out);
            } else {
              EmitPair(ctx, s, &p.rec, &r, out);
            }
          }
        }
      }
      win.sides[side][key_].push_back(Row{t, seq_.Next(), false, r});
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

std::vector<std::pair<const std::string*, std::vector<WindowJoinOperator::Row>*>>
WindowJoinOperator::Sorted(SideRows& rows) {
  std::vector<std::pair<const std::string*, std::vector<Row>*>> keys;
  keys.reserve(rows.size());
  for (auto& [k, v] : rows) {
    std::sort(v.begin(), v.end(), [](const Row& a, const Row& b) {
      return std::tie(a.time, a.seq) < std::tie(b.time, b.seq);
    });
    keys.emplace_back(&k, &v);
  }
  std::sort(keys.begin(), keys.end(),
            [](const auto& a, const auto& b) { return *a.first < *b.first; });
  return keys;
}

void WindowJoinOperator::Close(OperatorContext& ctx, int64_t start, Window& w, Output& out) {
  // Keys present on both sides, in encoded order.
  std::vector<std::pair<const std::string*, std::vector<Row>*>> keys;
  const bool left_smaller = w.sides[kLeft].size() <= w.sides[kRight].size();
  SideRows& probe = w.sides[left_smaller ? kLeft : kRight];
  SideRows& build = w.sides[left_smaller ? kRight : kLeft];
  for (auto& [k, v] : probe) {
    if (k[0] == kKeyPrefix && build.contains(k)) keys.emplace_back(&k, &v);
  }
  std::sort(keys.begin(), keys.end(),
            [](const auto& a, const auto& b) { return *a.first < *b.first; });
  auto by_time = [](const Row& a, const Row& b) {
    return std::tie(a.time, a.seq) < std::tie(b.time, b.seq);
  };
  for (const auto& [key, unused] : keys) {
    std::vector<Row>& l = w.sides[kLeft].find(*key)->second;
    std::vector<Row>& r = w.sides[kRight].find(*key)->second;
    std::sort(l.begin(), l.end(), by_time);
    std::sort(r.begin(), r.end(), by_time);
    for (const Row& a : l) {
      for (const Row& b : r) EmitPair(ctx, start, &a.rec, &b.rec, out);
    }
  }
}

void WindowJoinOperator::Final(OperatorContext& ctx, int64_t start, Window& w, Output& out) {
  if (!Outer(kLeft) && !Outer(kRight)) return;
  auto l = Sorted(w.sides[kLeft]);
  auto r = Sorted(w.sides[kRight]);
  // Group by key in key order; a group is unmatched if the other side has no
  // row with that key (a null key never matches).
  size_t i = 0, j = 0;
  while (i < l.size() || j < r.size()) {
    const std::string* key;
    if (j >= r.size() || (i < l.size() && *l[i].first <= *r[j].first)) {
      key = l[i].first;
    } else {
      key = r[j].first;
    }
    const bool has_l = i < l.size() && *l[i].first == *key;
    const bool has_r = j < r.size() && *r[j].first == *key;
    const bool matchable = (*key)[0] == kKeyPrefix;
    if (Outer(kLeft) && has_l && (!has_r || !matchable)) {
      for (const Row& a : *l[i].second) EmitPair(ctx, start, &a.rec, nullptr, out);
    }
    if (Outer(kRight) && has_r && (!has_l || !matchable)) {
      for (const Row& b : *r[j].second) EmitPair(ctx, start, nullptr, &b.rec, out);
    }
    if (has_l) ++i;
    if (has_r) ++j;
  }
}

absl::Status WindowJoinOperator::OnWatermark(OperatorContext& ctx, Output& out) {
  const int64_t w = ctx.watermark();
  // Close, in window order, every window the watermark completed...
  for (auto& [start, win] : windows_) {
    if (End(start) > w) break;  // ends grow with starts
    if (win.closed) continue;
    Close(ctx, start, win, out);
    win.closed = true;
    win.dirty = true;
  }
  // ...then finish every window that is final.
  while (!windows_.empty() && w >= SatAdd(End(windows_.begin()->first), spec_.allowed_lateness)) {
    auto it = windows_.begin();
    Final(ctx, it->first, it->second, out);
    if (it->second.persisted) deleted_.push_back(it->first);
    windows_.erase(it);
  }
  return absl::OkStatus();
}

absl::Status WindowJoinOperator::Flush(OperatorContext& ctx) {
  std::string prefix;
  for (int64_t start : deleted_) {
    prefix.clear();
    AppendBigEndian64(&prefix, start);
    for (int side : {kLeft, kRight}) {
      RETURN_IF_ERROR(tables_[side]->DeleteRange(prefix, PrefixEnd(prefix)));
    }
    windows_table_->Delete(prefix);
  }
  deleted_.clear();
  for (auto& [start, win] : windows_) {
    if (!win.dirty) continue;
    prefix.clear();
    AppendBigEndian64(&prefix, start);
    windows_table_->Put(prefix, win.closed ? "c" : "o");
    for (int side : {kLeft, kRight}) {
      for (auto& [key, rows] : win.sides[side]) {
        for (Row& row : rows) {
          if (row.persisted) continue;
          row_key_ = prefix;
          row_key_.append(key);
          AppendBigEndian64(&row_key_, row.time);
          AppendBigEndian64(&row_key_, static_cast<int64_t>(row.seq));
          json_.clear();
          row.rec.AppendJson(&json_);
          tables_[side]->Put(row_key_, json_);
          row.persisted = true;
        }
      }
    }
    win.dirty = false;
    win.persisted = true;
  }
  seq_.Flush(meta_);
  return absl::OkStatus();
}

}  // namespace caravela
