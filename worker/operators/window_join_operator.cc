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

WindowJoinOperator::~WindowJoinOperator() {
  for (auto& [start, w] : windows_) Drop(std::move(w));
}

WindowJoinOperator::Window& WindowJoinOperator::GetWindow(int64_t start, bool* created) {
  auto [it, inserted] = windows_.try_emplace(start);
  if (inserted && has_spare_) {
    it->second = std::move(spare_);
    has_spare_ = false;
  }
  *created = inserted;
  return it->second;
}

const Record& WindowJoinOperator::Kept(int side, const Record& r) {
  if (spec_.keep_paths[side].empty()) return r;
  kept_.Clear();
  kept_.EnsureRoot();
  for (size_t k = 0; k < spec_.keep_paths[side].size(); ++k) {
    kept_.AddValue(spec_.keep[side][k], r.GetPath(spec_.keep_paths[side][k]));
  }
  kept_.event_time = r.event_time;
  kept_.arrival = r.arrival;
  kept_.partition = r.partition;
  kept_.offset = r.offset;
  return kept_;
}

WindowJoinOperator::KeyGroup& WindowJoinOperator::AddRow(Window& w, const std::string& key,
                                                         int side, int64_t time, uint64_t seq,
                                                         const Record& rec, bool persisted) {
  auto [it, inserted] = w.keys.try_emplace(key, static_cast<uint32_t>(w.groups.size()));
  if (inserted) w.groups.emplace_back().key = key;
  KeyGroup& g = w.groups[it->second];
  const auto index = static_cast<uint32_t>(w.rows.size());
  w.rows.push_back(Row{time, seq, pool_.Pack(rec), static_cast<uint32_t>(rec.PackedSize()),
                       it->second, kNone, static_cast<uint8_t>(side), persisted});
  if (g.tail[side] == kNone) {
    g.head[side] = index;
  } else {
    w.rows[g.tail[side]].next = index;
  }
  g.tail[side] = index;
  return g;
}

void WindowJoinOperator::Drop(Window&& w) {
  for (const Row& row : w.rows) pool_.Free(row.packed, row.packed_bytes);
  w.rows.clear();
  w.groups.clear();
  w.keys.clear();
  w.closed = w.dirty = w.persisted = false;
  if (!has_spare_) {
    spare_ = std::move(w);
    has_spare_ = true;
  }
}

void WindowJoinOperator::SortedRows(const Window& w, const KeyGroup& g, int side) {
  sorted_.clear();
  for (uint32_t i = g.head[side]; i != kNone; i = w.rows[i].next) sorted_.push_back(i);
  // Arrival order is mostly time order already.
  std::stable_sort(sorted_.begin(), sorted_.end(), [&](uint32_t a, uint32_t b) {
    return std::tie(w.rows[a].time, w.rows[a].seq) < std::tie(w.rows[b].time, w.rows[b].seq);
  });
}

void WindowJoinOperator::SortGroups(const Window& w, bool matched_only) {
  groups_order_.clear();
  for (uint32_t i = 0; i < w.groups.size(); ++i) {
    const KeyGroup& g = w.groups[i];
    if (!matched_only ||
        (g.key[0] == kKeyPrefix && g.head[kLeft] != kNone && g.head[kRight] != kNone)) {
      groups_order_.push_back(i);
    }
  }
  std::sort(groups_order_.begin(), groups_order_.end(),
            [&](uint32_t a, uint32_t b) { return w.groups[a].key < w.groups[b].key; });
}

absl::Status WindowJoinOperator::AdoptState(OperatorContext& from, OperatorContext& to,
                                            const KeyOwner& owner) {
  bool corrupt = false;
  std::string scratch;
  // Rows are kept under their window: per window, the rows laid out by key
  // group are this task's range copied as it is, those stored before key
  // groups are decoded to find their owner.
  ASSIGN_OR_RETURN(StateTable * old_windows, from.OpenTable("windows"));
  std::vector<std::string> starts;
  RETURN_IF_ERROR(old_windows->Scan("", "", [&](std::string_view key, std::string_view) {
    starts.emplace_back(key);
    return true;
  }));
  std::string end;
  for (int side : {kLeft, kRight}) {
    ASSIGN_OR_RETURN(StateTable * old_table, from.OpenTable(side == kLeft ? "left" : "right"));
    ASSIGN_OR_RETURN(StateTable * table, to.OpenWriteBehindTable(side == kLeft ? "left" : "right"));
    for (const std::string& start : starts) {
      RETURN_IF_ERROR(owner.CopyOwnedRows(old_table, table, start));
      end = start + kKeyGroupMarker;
      RETURN_IF_ERROR(
          old_table->Scan(start, end, [&](std::string_view key, std::string_view value) {
            if (!decoder_.Decode(value, &scratch_).ok()) {
              corrupt = true;
              return false;
            }
            if (owner.Owns(scratch_, side, &scratch)) table->Put(key, value);
            return true;
          }));
      if (corrupt) break;
    }
  }
  ASSIGN_OR_RETURN(StateTable * windows, to.OpenTable("windows"));
  std::string have;
  RETURN_IF_ERROR(old_windows->Scan("", "", [&](std::string_view key, std::string_view value) {
    if (value.empty()) {
      corrupt = true;
      return false;
    }
    absl::StatusOr<bool> found = windows->Get(key, &have);
    if (!found.ok() || !*found || value[0] == 'o') windows->Put(key, value);
    return true;
  }));
  if (corrupt) return absl::DataLossError("corrupt window join state in " + from.name());
  ASSIGN_OR_RETURN(StateTable * old_meta, from.OpenTable("meta"));
  ASSIGN_OR_RETURN(StateTable * meta, to.OpenTable("meta"));
  return JoinSequence::AdoptMax(old_meta, meta, to.name());
}

absl::Status WindowJoinOperator::Open(OperatorContext& ctx) {
  ASSIGN_OR_RETURN(tables_[kLeft], ctx.OpenWriteBehindTable("left"));
  ASSIGN_OR_RETURN(tables_[kRight], ctx.OpenWriteBehindTable("right"));
  ASSIGN_OR_RETURN(windows_table_, ctx.OpenWriteBehindTable("windows"));
  ASSIGN_OR_RETURN(meta_, ctx.OpenWriteBehindTable("meta"));
  too_late_.Open(ctx, {TooLateReason::kAfterFinal});
  matches_ = ctx.OpCounter("join_matches_total");
  padded_ = ctx.OpCounter("join_unmatched_total");
  for (auto& [start, w] : windows_) Drop(std::move(w));
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
    bool created = false;
    Window& w = GetWindow(start, &created);
    w.closed = value[0] == 'c';
    w.persisted = true;
    return true;
  }));
  // With key groups, rows stored without one (a checkpoint from before key
  // groups) move to the layout by key group: written anew at the next Flush.
  const KeyOwner* key_groups = ctx.key_groups();
  std::vector<std::string> relaid;
  for (int side : {kLeft, kRight}) {
    if (corrupt) break;
    relaid.clear();
    RETURN_IF_ERROR(tables_[side]->Scan("", "", [&](std::string_view key, std::string_view value) {
      if (key.size() < kStartBytes + 1 + kTimeSeqBytes) {
        corrupt = true;
        return false;
      }
      std::string_view in = key;
      int64_t start = 0, t = 0, s = 0;
      ReadBigEndian64(&in, &start);
      int key_group = ReadKeyGroupPrefix(&in);
      if (in.size() < 1 + kTimeSeqBytes) {
        corrupt = true;
        return false;
      }
      std::string_view tail = in.substr(in.size() - kTimeSeqBytes);
      ReadBigEndian64(&tail, &t);
      ReadBigEndian64(&tail, &s);
      if (!decoder_.Decode(value, &scratch_).ok()) {
        corrupt = true;
        return false;
      }
      key_.assign(in.substr(0, in.size() - kTimeSeqBytes));
      bool persisted = true;
      if (key_group < 0 && key_groups != nullptr) {
        key_group = key_groups->KeyGroup(scratch_, side, &key_scratch_);
        relaid.emplace_back(key);
        persisted = false;
      }
      bool created = false;
      Window& w = GetWindow(start, &created);
      if (!persisted) w.dirty = true;
      KeyGroup& g = AddRow(w, key_, side, t, static_cast<uint64_t>(s), scratch_, persisted);
      if (key_group >= 0) g.key_group = key_group;
      return true;
    }));
    for (const std::string& key : relaid) tables_[side]->Delete(key);
  }
  if (corrupt) return absl::DataLossError("corrupt join state in " + ctx.name());
  return absl::OkStatus();
}

void WindowJoinOperator::EmitPair(OperatorContext& ctx, int64_t start, RowRef left, RowRef right,
                                  Output& out) {
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
  auto add = [&o](std::string_view name, RowRef ref) {
    if (ref.rec != nullptr) {
      o.AddValue(name, ref.rec->Get(0));
    } else if (ref.packed != nullptr) {
      o.AddPacked(name, ref.packed);
    } else {
      o.AddNull(name);
    }
  };
  add("left", left);
  add("right", right);
  o.event_time = end - 1;
  o.arrival = ctx.now();
  const bool pair = (left.rec != nullptr || left.packed != nullptr) &&
                    (right.rec != nullptr || right.packed != nullptr);
  (pair ? matches_ : padded_)->Add();
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
  for (const Record& input_row : batch) {
    const int64_t t = input_row.event_time;
    key_.clear();
    key_.push_back(kKeyPrefix);
    const bool has_key = AppendJoinKey(input_row, paths_[side], &key_);
    // What is buffered and emitted of it: the `keep` fields, or all.
    const Record& r = Kept(side, input_row);
    if (!has_key) key_.assign(1, kNullKeyPrefix);
    bool used = false;
    // Windows containing t: starts s = k * slide with s <= t < s + size.
    const int64_t last = LastWindowStart(t, spec_.slide);
    for (int64_t s = FirstWindowStart(t, spec_.size, spec_.slide); s <= last; s += spec_.slide) {
      const int64_t end = End(s);
      if (t >= end || w >= SatAdd(end, spec_.allowed_lateness)) continue;  // final
      used = true;
      if (!has_key && !Outer(side)) continue;  // can never match, never padded
      bool created = false;
      Window& win = GetWindow(s, &created);
      if (created) win.closed = w >= end;
      win.dirty = true;
      if (has_key && win.closed) {
        // Closed, within the lateness: join with the rows already there.
        auto g = win.keys.find(absl::string_view(key_.data(), key_.size()));
        if (g != win.keys.end()) {
          SortedRows(win, win.groups[g->second], other);
          for (uint32_t p : sorted_) {
            const RowRef partner{nullptr, win.rows[p].packed};
            const RowRef self{&r, nullptr};
            if (side == kLeft) {
              EmitPair(ctx, s, self, partner, out);
            } else {
              EmitPair(ctx, s, partner, self, out);
            }
          }
        }
      }
      KeyGroup& g = AddRow(win, key_, side, t, seq_.Next(), r, /*persisted=*/false);
      if (g.key_group < 0 && ctx.key_groups() != nullptr) {
        g.key_group = ctx.key_groups()->KeyGroup(r, side, &key_scratch_);
      }
    }
    if (!used) {
      too_late_.Add(TooLateReason::kAfterFinal);
      Record& s = out.EmitSide(0);
      BuildSideRecord(ctx, input_row, TooLateReason::kAfterFinal,
                      "window already final (event time < watermark - allowed_lateness)", &s);
      s.AddString("side", kSideNames[side]);
      // The latest window it falls in (all are final).
      s.BeginObject("window");
      s.AddString("window_start", FormatIso8601(last));
      s.AddString("window_end", FormatIso8601(End(last)));
      s.EndContainer();
    }
  }
  return absl::OkStatus();
}

absl::Status WindowJoinOperator::Close(OperatorContext& ctx, int64_t start, Window& w,
                                       Output& out) {
  // Keys present on both sides, in encoded order.
  SortGroups(w, /*matched_only=*/true);
  for (uint32_t gi : groups_order_) {
    const KeyGroup& g = w.groups[gi];
    SortedRows(w, g, kRight);
    sorted_other_.swap(sorted_);
    SortedRows(w, g, kLeft);
    for (uint32_t a : sorted_) {
      for (uint32_t b : sorted_other_) {
        EmitPair(ctx, start, RowRef{nullptr, w.rows[a].packed}, RowRef{nullptr, w.rows[b].packed},
                 out);
        RETURN_IF_ERROR(out.MaybeDrain());
      }
    }
  }
  return absl::OkStatus();
}

absl::Status WindowJoinOperator::Final(OperatorContext& ctx, int64_t start, Window& w,
                                       Output& out) {
  if (!Outer(kLeft) && !Outer(kRight)) return absl::OkStatus();
  SortGroups(w, /*matched_only=*/false);
  // A key's rows are unmatched if the other side has none (a null key never
  // matches): left rows, then right rows, key by key.
  for (uint32_t gi : groups_order_) {
    const KeyGroup& g = w.groups[gi];
    const bool has_l = g.head[kLeft] != kNone;
    const bool has_r = g.head[kRight] != kNone;
    const bool matchable = g.key[0] == kKeyPrefix;
    if (Outer(kLeft) && has_l && (!has_r || !matchable)) {
      SortedRows(w, g, kLeft);
      for (uint32_t a : sorted_) {
        EmitPair(ctx, start, RowRef{nullptr, w.rows[a].packed}, RowRef{}, out);
        RETURN_IF_ERROR(out.MaybeDrain());
      }
    }
    if (Outer(kRight) && has_r && (!has_l || !matchable)) {
      SortedRows(w, g, kRight);
      for (uint32_t b : sorted_) {
        EmitPair(ctx, start, RowRef{}, RowRef{nullptr, w.rows[b].packed}, out);
        RETURN_IF_ERROR(out.MaybeDrain());
      }
    }
  }
  return absl::OkStatus();
}

absl::Status WindowJoinOperator::OnWatermark(OperatorContext& ctx, Output& out) {
  const int64_t w = ctx.watermark();
  // Close, in window order, every window the watermark completed...
  for (auto& [start, win] : windows_) {
    if (End(start) > w) break;  // ends grow with starts
    if (win.closed) continue;
    RETURN_IF_ERROR(Close(ctx, start, win, out));
    win.closed = true;
    win.dirty = true;
  }
  // ...then finish every window that is final.
  while (!windows_.empty() && w >= SatAdd(End(windows_.begin()->first), spec_.allowed_lateness)) {
    auto it = windows_.begin();
    RETURN_IF_ERROR(Final(ctx, it->first, it->second, out));
    if (it->second.persisted) deleted_.push_back(it->first);
    Drop(std::move(it->second));
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
    for (Row& row : win.rows) {
      if (row.persisted) continue;
      row_key_ = prefix;
      const KeyGroup& g = win.groups[row.group];
      if (g.key_group >= 0) AppendKeyGroupPrefix(&row_key_, g.key_group);
      row_key_.append(g.key);
      AppendBigEndian64(&row_key_, row.time);
      AppendBigEndian64(&row_key_, static_cast<int64_t>(row.seq));
      json_.clear();
      scratch_.Unpack(row.packed);
      scratch_.AppendJson(&json_);
      tables_[row.side]->Put(row_key_, json_);
      row.persisted = true;
    }
    win.dirty = false;
    win.persisted = true;
  }
  seq_.Flush(meta_);
  return absl::OkStatus();
}

}  // namespace caravela
