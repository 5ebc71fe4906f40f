#include "worker/operators/window_operator.h"

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/json.h"
#include "worker/state/key_codec.h"
#include "xxhash.h"

namespace caravela {
namespace {

constexpr const char* kStates[] = {"EARLY", "ON_TIME", "LATE", "FINAL"};

// Decimal scales are at most 18 (record.h), so the shared table covers them.
__int128 Pow10(int n) { return kPow10[n]; }

void AppendInt128(__int128 v, std::string* out) {
  if (v == 0) {
    out->push_back('0');
    return;
  }
  bool neg = v < 0;
  unsigned __int128 u =
      neg ? -static_cast<unsigned __int128>(v) : static_cast<unsigned __int128>(v);
  char buf[48];
  int n = 0;
  while (u > 0) {
    buf[n++] = static_cast<char>('0' + static_cast<int>(u % 10));
    u /= 10;
  }
  if (neg) out->push_back('-');
  while (n > 0) out->push_back(buf[--n]);
}

__int128 ParseInt128(std::string_view s) {
  bool neg = !s.empty() && s[0] == '-';
  if (neg) s.remove_prefix(1);
  __int128 v = 0;
  for (char c : s) v = v * 10 + (c - '0');
  return neg ? -v : v;
}

// Canonical text of a value for count_distinct: numbers compare by value
// (1 == 1.0 == 1.00), everything else by JSON text.
void CanonicalText(const Value& v, std::string* out) {
  out->clear();
  if (v.type == ValueType::kDecimal) {
    int64_t m = v.i;
    uint8_t sc = v.scale;
    while (sc > 0 && m % 10 == 0) {
      m /= 10;
      --sc;
    }
    if (sc == 0) {
      out->append(std::to_string(m));
    } else {
      AppendDecimal(m, sc, out);
    }
    return;
  }
  if (v.type == ValueType::kDouble && v.d == static_cast<double>(static_cast<int64_t>(v.d))) {
    out->append(std::to_string(static_cast<int64_t>(v.d)));
    return;
  }
  v.AppendJson(out);
}

}  // namespace

// A value owned by an accumulator (min/max).
// A value owned by an accumulator (min/max).
struct OwnedValue {
  ValueType type = ValueType::kNull;
  bool b = false;
  int64_t i = 0;
  double d = 0;
  uint8_t scale = 0;
  std::string s;
  Value view() const {
    Value v;
    v.type = type;
    v.b = b;
    v.i = i;
    v.d = d;
    v.scale = scale;
    v.s = s;
    return v;
  }
  void Set(const Value& v) {
    type = v.type;
    b = v.b;
    i = v.i;
    d = v.d;
    scale = v.scale;
    if (v.type == ValueType::kString) s.assign(v.s);
  }
};

// What only count_distinct and arg_max / arg_min keep: allocated on first use,
// so a count or a sum stays small.
struct AccLists {
  absl::flat_hash_set<std::string> distinct;
  std::vector<std::string> rows;  // arg_max / arg_min: the kept rows, JSON objects
};

struct WindowOperator::Acc {
  int64_t count = 0;
  __int128 isum = 0;  // exact part, scaled by 10^scale
  uint8_t scale = 0;
  double dsum = 0;
  bool has_double = false;
  OwnedValue ext;  // min / max; arg_max / arg_min: the extreme value
  std::unique_ptr<AccLists> lists;

  AccLists& L() {
    if (lists == nullptr) lists = std::make_unique<AccLists>();
    return *lists;
  }
  size_t distinct_size() const { return lists == nullptr ? 0 : lists->distinct.size(); }

  void AddNumber(const Value& v) {
    switch (v.type) {
      case ValueType::kInt:
        isum += static_cast<__int128>(v.i) * Pow10(scale);
        break;
      case ValueType::kDecimal:
        if (v.scale > scale) {
          isum *= Pow10(v.scale - scale);
          scale = v.scale;
        }
        isum += static_cast<__int128>(v.i) * Pow10(scale - v.scale);
        break;
      case ValueType::kDouble:
        dsum += v.d;
        has_double = true;
        break;
      default:
        break;
    }
  }
  void Merge(const Acc& o) {
    count += o.count;
    if (o.scale > scale) {
      isum *= Pow10(o.scale - scale);
      scale = o.scale;
    }
    isum += o.isum * Pow10(scale - o.scale);
    dsum += o.dsum;
    has_double = has_double || o.has_double;
    if (o.distinct_size() > 0)
      L().distinct.insert(o.lists->distinct.begin(), o.lists->distinct.end());
  }
  // arg_max / arg_min (`sign` 1: max, -1: min): > 0 when `v` is more
  // extreme than the rows kept (or none are), 0 on a tie.
  int ArgRank(const Value& v, int sign) const {
    return ext.type == ValueType::kNull ? 1 : sign * CompareValues(v, ext.view());
  }
  // `row` has value `v` and rank `c` (ArgRank, >= 0): it replaces the rows
  // when more extreme, joins them on a tie.
  void ArgUpdate(const Value& v, int c, std::string&& row) {
    std::vector<std::string>& rows = L().rows;
    if (c > 0) {
      ext.Set(v);
      rows.clear();
    }
    rows.push_back(std::move(row));
  }
  // Another window's rows (a session merge): the same rule for its extreme.
  void ArgMerge(const Acc& o, int sign) {
    if (o.ext.type == ValueType::kNull) return;
    const int c = ArgRank(o.ext.view(), sign);
    if (c < 0) return;
    std::vector<std::string>& rows = L().rows;
    if (c > 0) {
      ext = o.ext;
      rows.clear();
    }
    if (o.lists != nullptr) rows.insert(rows.end(), o.lists->rows.begin(), o.lists->rows.end());
  }
  double SumDouble() const {
    return static_cast<double>(isum) / static_cast<double>(Pow10(scale)) + dsum;
  }
  // Adds the sum to `out` under `name`: int, exact decimal or double.
  void AddSum(std::string_view name, Record* out) const {
    // A double input, or an exact sum beyond int64, is reported as a double.
    const bool exact = !has_double && isum >= INT64_MIN && isum <= INT64_MAX;
    if (!exact) {
      out->AddDouble(name, SumDouble());
    } else if (scale == 0) {
      out->AddInt(name, static_cast<int64_t>(isum));
    } else {
      out->AddDecimal(name, static_cast<int64_t>(isum), scale);
    }
  }
};

struct WindowOperator::Window {
  uint32_t gid = 0;
  uint32_t gen = 0;  // bumped when the slot is freed
  int64_t start = 0;
  int64_t end = 0;
  int64_t revision = 0;
  // Reconciliation (spec.reconcile_id): records aggregated and the sum of
  // XXH3-64 of their ids' JSON text (mod 2^64: order-independent, additive
  // when sessions merge).
  int64_t events = 0;
  uint64_t id_digest = 0;
  bool live = false;
  bool fired = false;  // complete (ON_TIME or first LATE emitted)
  bool dirty = false;  // changed since the last emission
  // Its key is in the state table (written by a Flush, or loaded): erasing
  // it must delete it there. A window created and finalized between two
  // flushes never touches the table.
  bool stored = false;
  bool persist_queued = false;  // in to_persist_
  bool late_queued = false;     // in late_changed_
};

WindowOperator::WindowOperator(WindowSpec spec) : spec_(std::move(spec)) {
  if (spec_.kind == WindowSpec::Kind::kTumbling) spec_.slide = spec_.size;
  naggs_ = spec_.aggregates.size();
}
WindowOperator::~WindowOperator() = default;

std::vector<std::string> WindowOperator::OutputKeyFields() const {
  std::vector<std::string> keys = spec_.group_by;
  keys.push_back("window_start");
  keys.push_back("window_end");
  return keys;
}

// ---- The store.

WindowOperator::Acc* WindowOperator::AccsOf(uint32_t slot) { return &accs_[slot * naggs_]; }

WindowOperator::Ref WindowOperator::RefOf(uint32_t slot) const {
  return Ref{slot, slots_[slot].gen};
}

bool WindowOperator::Valid(Ref r) const {
  const Window& w = slots_[r.slot];
  return w.live && w.gen == r.gen;
}

uint32_t WindowOperator::AddGroup(std::string_view key) {
  uint32_t gid;
  if (!free_groups_.empty()) {
    gid = free_groups_.back();
    free_groups_.pop_back();
  } else {
    gid = static_cast<uint32_t>(groups_.size());
    groups_.emplace_back();
  }
  Group& g = groups_[gid];
  g.key.assign(key);
  g.key_group = -1;
  g.values.Clear();
  g.values.EnsureRoot();
  g.wins.clear();
  group_index_.emplace(g.key, gid);
  return gid;
}

WindowOperator::GroupCacheEntry* WindowOperator::GroupCacheSlot(const Value& v,
                                                                std::string_view* bytes) {
  if (v.type == ValueType::kString && v.s.size() <= sizeof(GroupCacheEntry::bytes)) {
    *bytes = v.s;
  } else if (v.type == ValueType::kInt) {
    *bytes = std::string_view(reinterpret_cast<const char*>(&v.i), sizeof v.i);
  } else {
    return nullptr;
  }
  if (group_cache_.empty()) group_cache_.resize(kGroupCacheSize);
  return &group_cache_[XXH3_64bits(bytes->data(), bytes->size()) % kGroupCacheSize];
}

uint32_t WindowOperator::InternGroup(const Record& r) {
  GroupCacheEntry* cached = nullptr;
  std::string_view bytes;
  Value v;
  if (spec_.group_paths.size() == 1) {
    v = r.GetPath(spec_.group_paths[0]);
    cached = GroupCacheSlot(v, &bytes);
    if (cached != nullptr && cached->generation == group_generation_ && cached->type == v.type &&
        cached->len == bytes.size() &&
        std::memcmp(cached->bytes, bytes.data(), bytes.size()) == 0) {
      return cached->gid;
    }
  }
  GroupKey(r, &key_scratch_);
  uint32_t gid;
  if (auto it = group_index_.find(key_scratch_); it != group_index_.end()) {
    gid = it->second;
  } else {
    gid = AddGroup(key_scratch_);
    if (key_groups_ != nullptr) {
      groups_[gid].key_group = key_groups_->KeyGroup(r, 0, &key_group_scratch_);
    }
    Record& values = groups_[gid].values;
    for (size_t i = 0; i < spec_.group_paths.size(); ++i) {
      values.AddValue(spec_.group_by[i], r.GetPath(spec_.group_paths[i]));
    }
  }
  if (cached != nullptr) {
    cached->generation = group_generation_;
    cached->gid = gid;
    cached->type = v.type;
    cached->len = static_cast<uint8_t>(bytes.size());
    std::memcpy(cached->bytes, bytes.data(), bytes.size());
  }
  return gid;
}

void WindowOperator::ReleaseGroup(uint32_t gid) {
  Group& g = groups_[gid];
  if (!g.wins.empty()) return;
  group_index_.erase(g.key);
  ++group_generation_;  // cached entries may name this gid
  g.key.clear();
  g.values.Clear();
  free_groups_.push_back(gid);
}

uint32_t WindowOperator::NewSlot(uint32_t gid, int64_t start, int64_t end) {
  uint32_t slot;
  if (!free_slots_.empty()) {
    slot = free_slots_.back();
    free_slots_.pop_back();
  } else {
    slot = static_cast<uint32_t>(slots_.size());
    slots_.emplace_back();
    accs_.resize(accs_.size() + naggs_);
  }
  Window& w = slots_[slot];
  const uint32_t gen = w.gen;
  w = Window();
  w.gen = gen;
  w.live = true;
  w.gid = gid;
  w.start = start;
  w.end = end;
  // In start order; new windows are mostly the latest.
  auto& wins = groups_[gid].wins;
  auto pos = wins.end();
  while (pos != wins.begin() && std::prev(pos)->first > start) --pos;
  wins.insert(pos, {start, slot});
  ++live_windows_;
  return slot;
}

std::string WindowOperator::StateKey(const Window& w) const {
  const Group& g = groups_[w.gid];
  std::string key;
  if (g.key_group >= 0) AppendKeyGroupPrefix(&key, g.key_group);
  key.append(g.key);
  AppendBigEndian64(&key, w.start);
  return key;
}

void WindowOperator::SortByKey(std::vector<Ref>* refs) const {
  // The group key's first 8 bytes as a number make most comparisons cheap.
  struct Item {
    int64_t end;
    uint64_t prefix;
    const std::string* key;
    int64_t start;
    Ref ref;
  };
  std::vector<Item> items;
  items.reserve(refs->size());
  for (Ref r : *refs) {
    const Window& w = slots_[r.slot];
    const std::string& key = groups_[w.gid].key;
    uint64_t prefix = 0;
    for (size_t i = 0; i < 8; ++i) {
      prefix = (prefix << 8) | (i < key.size() ? static_cast<unsigned char>(key[i]) : 0u);
    }
    items.push_back(Item{w.end, prefix, &key, w.start, r});
  }
  std::sort(items.begin(), items.end(), [](const Item& a, const Item& b) {
    if (a.end != b.end) return a.end < b.end;
    if (a.prefix != b.prefix) return a.prefix < b.prefix;
    if (a.key != b.key) {
      const int c = a.key->compare(*b.key);
      if (c != 0) return c < 0;
    }
    return a.start < b.start;
  });
  for (size_t i = 0; i < items.size(); ++i) (*refs)[i] = items[i].ref;
}

void WindowOperator::MaybeCompact() {
  if (stale_refs_ < 1024 || stale_refs_ < 2 * live_windows_) return;
  for (Buckets* buckets : {&pending_on_time_, &pending_final_}) {
    for (auto it = buckets->begin(); it != buckets->end();) {
      std::vector<Ref>& refs = it->second;
      refs.erase(std::remove_if(refs.begin(), refs.end(), [&](Ref r) { return !Valid(r); }),
                 refs.end());
      it = refs.empty() ? buckets->erase(it) : std::next(it);
    }
  }
  stale_refs_ = 0;
}

void WindowOperator::Index(uint32_t slot) {
  const Window& w = slots_[slot];
  const Ref ref = RefOf(slot);
  if (!w.fired) pending_on_time_[w.end].push_back(ref);
  pending_final_[SatAdd(w.end, spec_.allowed_lateness)].push_back(ref);
}

void WindowOperator::Erase(uint32_t slot, bool final_used) {
  Window& w = slots_[slot];
  if (w.dirty && !w.fired) --dirty_unfired_;
  if (w.stored) to_delete_.insert(StateKey(w));
  auto& wins = groups_[w.gid].wins;
  wins.erase(
      std::find_if(wins.begin(), wins.end(), [&](const auto& e) { return e.second == slot; }));
  --live_windows_;
  // Its timer references left in the buckets go stale: the on-time one
  // while it has not fired, the final one unless it is being used.
  stale_refs_ += (w.fired ? 0 : 1) + (final_used ? 0 : 1);
  const uint32_t gid = w.gid;
  w.live = false;
  ++w.gen;
  Acc* accs = AccsOf(slot);
  for (size_t i = 0; i < naggs_; ++i) accs[i] = Acc();
  free_slots_.push_back(slot);
  ReleaseGroup(gid);
}

// ---- Operator.

absl::Status WindowOperator::Open(OperatorContext& ctx) {
  // Read only here; written at Flush.
  ASSIGN_OR_RETURN(table_, ctx.OpenWriteBehindTable("windows"));
  ASSIGN_OR_RETURN(finals_, ctx.OpenWriteBehindTable("finals"));
  finals_cleared_to_ = kMinTime;
  too_late_.Open(ctx, {TooLateReason::kAfterFinal});
  // Arrival classes, and amounts of the first sum aggregate's field.
  amount_path_ = nullptr;
  for (const AggregateSpec& a : spec_.aggregates) {
    if (a.fn == AggFn::kSum) {
      amount_path_ = &a.path;
      break;
    }
  }
  static constexpr const char* kArrivals[3] = {"on_time", "late", "too_late"};
  for (int a = 0; a < 3; ++a) {
    const std::string label = std::string("arrival=\"") + kArrivals[a] + "\"";
    arrival_records_[a] = ctx.OpCounter("window_records_total", label);
    if (amount_path_ != nullptr) {
      arrival_amounts_[a] = ctx.metrics().GetDouble(
          "window_amount_total", absl::StrCat("op=\"", ctx.name(), "\",", label, ",field=\"",
                                              amount_path_->ToString(), "\""));
    }
  }
  for (int s = 0; s < 4; ++s) {
    emitted_[s] =
        ctx.OpCounter("window_emitted_total", std::string("state=\"") + kStates[s] + "\"");
  }
  slots_.clear();
  free_slots_.clear();
  accs_.clear();
  live_windows_ = 0;
  groups_.clear();
  free_groups_.clear();
  group_index_.clear();
  ++group_generation_;
  pending_on_time_.clear();
  pending_final_.clear();
  stale_refs_ = 0;
  late_changed_.clear();
  to_persist_.clear();
  to_delete_.clear();
  dirty_unfired_ = 0;
  next_timer_ = kMaxTime;
  // Reload every window from the state table. With key groups, windows
  // stored without one (a checkpoint from before key groups) move to the
  // layout by key group: written anew at the next Flush.
  key_groups_ = ctx.key_groups();
  std::vector<size_t> positions;
  bool relay = false;
  if (key_groups_ != nullptr) {
    absl::StatusOr<std::vector<size_t>> p =
        key_groups_->GroupPositions(spec_.group_paths, "window " + ctx.name());
    relay = p.ok();
    if (relay) positions = *std::move(p);
  }
  std::vector<std::string> relaid;
  JsonDecoder decoder;
  Record rec;
  absl::Status load_error;
  RETURN_IF_ERROR(table_->Scan("", "", [&](std::string_view key, std::string_view value) {
    std::string_view rest = key;
    const int key_group = ReadKeyGroupPrefix(&rest);
    absl::Status st = decoder.Decode(value, &rec);
    if (!st.ok()) {
      load_error = absl::DataLossError("corrupt window state in " + ctx.name() + ": " +
                                       std::string(st.message()));
      return false;
    }
    const std::string_view gk = rec.GetPath(FieldPath::Parse("gk")).s;
    uint32_t gid;
    if (auto git = group_index_.find(absl::string_view(gk.data(), gk.size()));
        git != group_index_.end()) {
      gid = git->second;
    } else {
      gid = AddGroup(gk);
      Record& values = groups_[gid].values;
      int32_t g = rec.FindChild(0, "g");
      rec.ForEachChild(static_cast<uint32_t>(g), [&](uint32_t c) {
        values.AddValue(rec.Key(c), rec.Get(static_cast<int32_t>(c)));
      });
      groups_[gid].key_group = key_group;
      if (key_group < 0 && relay) {
        groups_[gid].key_group = key_groups_->GroupKeyGroup(rec, positions, &key_group_scratch_);
      }
    }
    const bool relaid_here = key_group < 0 && groups_[gid].key_group >= 0;
    if (relaid_here) relaid.emplace_back(key);
    const int64_t start = rec.Get(rec.FindChild(0, "s")).i;
    const uint32_t slot = NewSlot(gid, start, rec.Get(rec.FindChild(0, "e")).i);
    Window& w = slots_[slot];
    w.stored = true;  // loaded from the table
    w.revision = rec.Get(rec.FindChild(0, "r")).i;
    w.fired = rec.Get(rec.FindChild(0, "f")).b;
    w.dirty = rec.Get(rec.FindChild(0, "d")).b;
    w.events = rec.Get(rec.FindChild(0, "n")).i;  // 0 in state of older releases
    w.id_digest = static_cast<uint64_t>(rec.Get(rec.FindChild(0, "h")).i);
    Acc* accs = AccsOf(slot);
    size_t i = 0;
    int32_t accs_node = rec.FindChild(0, "a");
    rec.ForEachChild(static_cast<uint32_t>(accs_node), [&](uint32_t a) {
      if (i >= naggs_) return;
      Acc& acc = accs[i++];
      auto field = [&](std::string_view name) { return rec.Get(rec.FindChild(a, name)); };
      acc.count = field("c").i;
      acc.isum = ParseInt128(field("is").s);
      acc.scale = static_cast<uint8_t>(field("sc").i);
      int64_t bits = field("ds").i;
      std::memcpy(&acc.dsum, &bits, 8);
      acc.has_double = field("hd").b;
      Value xt = field("xt");
      acc.ext.type = static_cast<ValueType>(xt.i);
      Value x = field("x");
      if (acc.ext.type == ValueType::kDouble) {
        std::memcpy(&acc.ext.d, &x.i, 8);
      } else {
        acc.ext.Set(x);
        acc.ext.type = static_cast<ValueType>(xt.i);
      }
      if (int32_t rows = rec.FindChild(a, "rows"); rows >= 0) {
        rec.ForEachChild(static_cast<uint32_t>(rows), [&](uint32_t c) {
          acc.L().rows.emplace_back(rec.Get(static_cast<int32_t>(c)).s);
        });
      }
      int32_t dv = rec.FindChild(a, "dv");
      if (dv >= 0) {
        rec.ForEachChild(static_cast<uint32_t>(dv), [&](uint32_t c) {
          acc.L().distinct.emplace(rec.Get(static_cast<int32_t>(c)).s);
        });
      }
    });
    Index(slot);
    if (w.dirty && !w.fired) ++dirty_unfired_;
    if (relaid_here) {
      w.persist_queued = true;
      to_persist_.push_back(RefOf(slot));
    }
    return true;
  }));
  RETURN_IF_ERROR(load_error);
  for (const std::string& key : relaid) table_->Delete(key);
  if (dirty_unfired_ > 0) ArmEarlyTimer(ctx);
  return absl::OkStatus();
}
absl::Status WindowOperator::AdoptState(OperatorContext& from, OperatorContext& to,
                                        const KeyOwner& owner) {
  // The partitioning key is a subset of group_by (or all of it): find each of
  // its fields among the stored group values.
  ASSIGN_OR_RETURN(const std::vector<size_t> positions,
                   owner.GroupPositions(spec_.group_paths, "window " + to.name()));
  ASSIGN_OR_RETURN(StateTable * old_table, from.OpenTable("windows"));
  ASSIGN_OR_RETURN(StateTable * table, to.OpenWriteBehindTable("windows"));
  JsonDecoder decoder;
  Record rec;
  std::string scratch;
  absl::Status bad;
  const std::string marker(1, kKeyGroupMarker);
  const std::string after_marker(1, kKeyGroupMarker + 1);
  // Windows laid out by key group: this task's range, copied as it is.
  RETURN_IF_ERROR(owner.CopyOwnedRows(old_table, table));
  // Windows stored before key groups (no 0x02 prefix): decoded.
  auto decoded = [&](std::string_view key, std::string_view value) {
    if (absl::Status st = decoder.Decode(value, &rec); !st.ok()) {
      bad = absl::DataLossError("corrupt window state in " + from.name() + ": " +
                                std::string(st.message()));
      return false;
    }
    if (owner.OwnsGroup(rec, positions, &scratch)) table->Put(key, value);
    return true;
  };
  RETURN_IF_ERROR(old_table->Scan("", marker, decoded));
  if (bad.ok()) RETURN_IF_ERROR(old_table->Scan(after_marker, "", decoded));
  RETURN_IF_ERROR(bad);
  // The FINAL revisions (FinalKey: final time, group key, start), which
  // too_late records name: the group key is each group value's JSON text
  // and a NUL, read back as the array "g" the windows table holds.
  // Laid out by key group after the final time: per final time, this task's
  // range is copied as it is (one seek per time); entries stored before key
  // groups are decoded.
  ASSIGN_OR_RETURN(StateTable * old_finals, from.OpenTable("finals"));
  ASSIGN_OR_RETURN(StateTable * finals, to.OpenWriteBehindTable("finals"));
  std::string json;
  auto decoded_final = [&](std::string_view key, std::string_view value) {
    if (key.size() < 16) {
      bad = absl::DataLossError("corrupt window finals in " + from.name());
      return false;
    }
    const std::string_view group_key = key.substr(8, key.size() - 16);
    json = "{\"g\":[";
    for (size_t begin = 0, n = 0; begin < group_key.size(); ++n) {
      const size_t end = group_key.find('\0', begin);
      if (n > 0) json.push_back(',');
      json.append(group_key.substr(begin, end - begin));
      begin = end == std::string_view::npos ? group_key.size() : end + 1;
    }
    json += "]}";
    if (absl::Status st = decoder.Decode(json, &rec); !st.ok()) {
      bad = absl::DataLossError("corrupt window finals in " + from.name() + ": " +
                                std::string(st.message()));
      return false;
    }
    if (owner.OwnsGroup(rec, positions, &scratch)) finals->Put(key, value);
    return true;
  };
  std::string next;  // the first key of the next final time
  for (;;) {
    std::string time;
    RETURN_IF_ERROR(old_finals->Scan(next, "", [&](std::string_view key, std::string_view) {
      time.assign(key.substr(0, std::min<size_t>(8, key.size())));
      return false;
    }));
    if (time.empty()) break;
    if (time.size() < 8) return absl::DataLossError("corrupt window finals in " + from.name());
    RETURN_IF_ERROR(owner.CopyOwnedRows(old_finals, finals, time));
    RETURN_IF_ERROR(old_finals->Scan(time, time + marker, decoded_final));
    if (bad.ok()) {
      RETURN_IF_ERROR(old_finals->Scan(time + after_marker, PrefixEnd(time), decoded_final));
    }
    RETURN_IF_ERROR(bad);
    next = PrefixEnd(time);
    if (next.empty()) break;
  }
  return bad;
}

void WindowOperator::GroupKey(const Record& r, std::string* out) const {
  out->clear();
  for (const FieldPath& p : spec_.group_paths) {
    r.GetPath(p).AppendJson(out);
    out->push_back('\0');
  }
}

std::string WindowOperator::FinalKey(int64_t final_time, int key_group, std::string_view group_key,
                                     int64_t start) {
  std::string key;
  AppendBigEndian64(&key, final_time);
  if (key_group >= 0) AppendKeyGroupPrefix(&key, key_group);
  key.append(group_key);
  AppendBigEndian64(&key, start);
  return key;
}

void WindowOperator::AddMissedWindow(const Record& r, int64_t start, int64_t end, Record* side) {
  side->BeginObject("window");
  for (size_t i = 0; i < spec_.group_paths.size(); ++i) {
    side->AddValue(spec_.group_by[i], r.GetPath(spec_.group_paths[i]));
  }
  side->AddString("window_start", FormatIso8601(start));
  side->AddString("window_end", FormatIso8601(end));
  // Sessions: the session it would have joined is not known by its bounds.
  std::string revision;
  absl::StatusOr<bool> found = false;
  if (spec_.kind != WindowSpec::Kind::kSession) {
    GroupKey(r, &key_scratch_);
    const int64_t final_time = SatAdd(end, spec_.allowed_lateness);
    if (key_groups_ != nullptr) {
      found = finals_->Get(FinalKey(final_time, key_groups_->KeyGroup(r, 0, &key_group_scratch_),
                                    key_scratch_, start),
                           &revision);
    }
    // Without key groups, or written before them.
    if (found.ok() && !*found) {
      found = finals_->Get(FinalKey(final_time, -1, key_scratch_, start), &revision);
    }
    if (found.ok() && !*found && key_groups_ == nullptr) {
      // Written by tasks with key groups, read by one without (it cannot
      // tell the key group): the final time's entries of every key group.
      const std::string rest = FinalKey(final_time, -1, key_scratch_, start).substr(8);
      std::string begin, end;
      KeyGroupRangeKeys(EncodeBigEndian64(final_time), 0, kMaxMaxParallelism - 1, &begin, &end);
      bool hit = false;
      absl::Status st = finals_->Scan(begin, end, [&](std::string_view k, std::string_view v) {
        if (k.substr(8 + kKeyGroupPrefixBytes) != rest) return true;
        revision.assign(v);
        hit = true;
        return false;
      });
      found = st.ok() ? absl::StatusOr<bool>(hit) : absl::StatusOr<bool>(st);
    }
  }
  if (found.ok() && *found) {
    side->AddInt("revision", std::strtoll(revision.c_str(), nullptr, 10));
  } else {
    side->AddNull("revision");
  }
  side->EndContainer();
}

uint32_t WindowOperator::Touch(OperatorContext& ctx, uint32_t gid, int64_t start, int64_t end) {
  const auto& wins = groups_[gid].wins;
  for (auto it = wins.rbegin(); it != wins.rend() && it->first >= start; ++it) {
    if (it->first == start) return it->second;
  }
  const uint32_t slot = NewSlot(gid, start, end);
  slots_[slot].fired = ctx.watermark() >= end;  // first record arrives late: starts with LATE
  Index(slot);
  return slot;
}

void WindowOperator::Update(uint32_t slot, const Record& r) {
  Window& w = slots_[slot];
  if (!spec_.reconcile_path.empty()) {
    ++w.events;
    scratch_.clear();
    r.GetPath(spec_.reconcile_path).AppendJson(&scratch_);
    w.id_digest += XXH3_64bits(scratch_.data(), scratch_.size());
  }
  Acc* accs = AccsOf(slot);
  for (size_t i = 0; i < naggs_; ++i) {
    const AggregateSpec& a = spec_.aggregates[i];
    Acc& acc = accs[i];
    if (a.fn == AggFn::kCount && a.path.empty()) {
      ++acc.count;
      continue;
    }
    Value v = r.GetPath(a.path);
    if (v.is_null()) continue;
    switch (a.fn) {
      case AggFn::kCount:
        ++acc.count;
        break;
      case AggFn::kSum:
      case AggFn::kAvg:
        if (v.is_number()) {
          acc.AddNumber(v);
          ++acc.count;
        }
        break;
      case AggFn::kMin:
      case AggFn::kMax: {
        if (v.type == ValueType::kObject || v.type == ValueType::kArray) break;
        int c = acc.ext.type == ValueType::kNull ? 0 : CompareValues(v, acc.ext.view());
        if (acc.ext.type == ValueType::kNull || (a.fn == AggFn::kMin ? c < 0 : c > 0)) {
          acc.ext.Set(v);
        }
        ++acc.count;
        break;
      }
      case AggFn::kCountDistinct:
        CanonicalText(v, &scratch_);
        acc.L().distinct.insert(scratch_);
        break;
      case AggFn::kArgMax:
      case AggFn::kArgMin: {
        if (v.type == ValueType::kObject || v.type == ValueType::kArray) break;
        ++acc.count;
        // The row is written only when it is kept.
        const int c = acc.ArgRank(v, a.fn == AggFn::kArgMax ? 1 : -1);
        if (c < 0) break;
        std::string row;
        if (a.keep_paths.empty()) {
          r.AppendJson(&row);
        } else {
          r.AppendFieldsJson(a.keep, a.keep_paths, &row);
        }
        acc.ArgUpdate(v, c, std::move(row));
        break;
      }
    }
  }
}

void WindowOperator::ArmEarlyTimer(OperatorContext& ctx) {
  if (spec_.early_fire_every <= 0 || next_timer_ != kMaxTime) return;
  next_timer_ = (FloorDiv(ctx.now(), spec_.early_fire_every) + 1) * spec_.early_fire_every;
}

void WindowOperator::MarkPersist(uint32_t slot) {
  Window& w = slots_[slot];
  if (!w.persist_queued) {
    w.persist_queued = true;
    to_persist_.push_back(RefOf(slot));
  }
}

void WindowOperator::MarkChanged(OperatorContext& ctx, uint32_t slot) {
  MarkPersist(slot);
  Window& w = slots_[slot];
  if (w.fired) {
    if (!w.late_queued) {
      w.late_queued = true;
      late_changed_.push_back(RefOf(slot));
    }
    w.dirty = true;
    return;
  }
  if (!w.dirty) {
    w.dirty = true;
    ++dirty_unfired_;
  }
  ArmEarlyTimer(ctx);
}

void WindowOperator::Emit(OperatorContext& ctx, uint32_t slot, const char* state, Output& out) {
  Window& w = slots_[slot];
  if (w.dirty && !w.fired) --dirty_unfired_;
  ++w.revision;
  w.dirty = false;
  Record& o = out.Emit();
  o.EnsureRoot();
  o.AddString("window_start", FormatIso8601(w.start));
  o.AddString("window_end", FormatIso8601(w.end));
  const Record& group = groups_[w.gid].values;
  group.ForEachChild(
      0, [&](uint32_t c) { o.AddValue(group.Key(c), group.Get(static_cast<int32_t>(c))); });
  const Acc* accs = AccsOf(slot);
  for (size_t i = 0; i < naggs_; ++i) {
    const AggregateSpec& a = spec_.aggregates[i];
    const Acc& acc = accs[i];
    switch (a.fn) {
      case AggFn::kCount:
        o.AddInt(a.as, acc.count);
        break;
      case AggFn::kSum:
        acc.AddSum(a.as, &o);
        break;
      case AggFn::kAvg:
        if (acc.count == 0) {
          o.AddNull(a.as);
        } else {
          o.AddDouble(a.as, acc.SumDouble() / static_cast<double>(acc.count));
        }
        break;
      case AggFn::kMin:
      case AggFn::kMax:
        o.AddValue(a.as, acc.ext.view());
        break;
      case AggFn::kCountDistinct:
        o.AddInt(a.as, static_cast<int64_t>(acc.distinct_size()));
        break;
      case AggFn::kArgMax:
      case AggFn::kArgMin: {
        o.BeginArray(a.as);
        if (acc.lists != nullptr) {
          // Tied rows in the order of their JSON text, not of their
          // arrival: which producer's rows arrive first depends on the
          // exchange, and the result must not (SPEC §8).
          std::vector<const std::string*> rows;
          rows.reserve(acc.lists->rows.size());
          for (const std::string& json : acc.lists->rows) rows.push_back(&json);
          std::sort(rows.begin(), rows.end(),
                    [](const std::string* x, const std::string* y) { return *x < *y; });
          JsonDecoder decoder;
          Record row;
          for (const std::string* json : rows) {
            if (decoder.Decode(*json, &row).ok()) o.AddValue("", row.Get(0));
          }
        }
        o.EndContainer();
        break;
      }
    }
  }
  if (!spec_.reconcile_path.empty()) {
    o.AddInt("events", w.events);
    char hex[17];
    std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(w.id_digest));
    o.AddString("id_digest", std::string_view(hex, 16));
  }
  o.AddInt("revision", ctx.Revision(w.revision));
  o.AddString("state", state);
  o.event_time = w.end - 1;
  for (int s = 0; s < 4; ++s) {
    if (state == kStates[s]) emitted_[s]->Add();
  }
}

WindowOperator::Arrival WindowOperator::ProcessSession(OperatorContext& ctx, const Record& r,
                                                       Output& out) {
  const int64_t W = ctx.watermark();
  int64_t start = r.event_time;
  int64_t end = SatAdd(r.event_time, spec_.gap);
  const uint32_t gid = InternGroup(r);
  // Collect sessions that intersect [start, end] (touching sessions merge).
  std::vector<uint32_t> merge;
  for (const auto& [s, slot] : groups_[gid].wins) {
    if (s > end) break;
    if (slots_[slot].end >= start) merge.push_back(slot);
  }
  int64_t new_start = start, new_end = end;
  for (uint32_t slot : merge) {
    new_start = std::min(new_start, slots_[slot].start);
    new_end = std::max(new_end, slots_[slot].end);
  }
  // As in Flink, lateness is judged on the merged session: a late record that
  // falls into a session still open for corrections joins it.
  if (W >= SatAdd(new_end, spec_.allowed_lateness)) {
    ReleaseGroup(gid);  // when it was new
    return kTooLate;
  }
  // One session extended at its end keeps its slot (the common case: the
  // next record of an active session); otherwise the merged window is new and
  // its revision continues from the highest merged one.
  uint32_t target;
  if (merge.size() == 1 && slots_[merge[0]].start == new_start && slots_[merge[0]].end == new_end) {
    target = merge[0];
  } else {
    target = NewSlot(gid, new_start, new_end);
    Window& m = slots_[target];
    Acc* dst = AccsOf(target);
    for (uint32_t slot : merge) {
      const Window& w = slots_[slot];
      m.revision = std::max(m.revision, w.revision);
      m.events += w.events;
      m.id_digest += w.id_digest;
      const Acc* src = AccsOf(slot);
      for (size_t i = 0; i < naggs_; ++i) {
        const AggregateSpec& a = spec_.aggregates[i];
        if ((a.fn == AggFn::kMin || a.fn == AggFn::kMax) && src[i].ext.type != ValueType::kNull) {
          int c = dst[i].ext.type == ValueType::kNull
                      ? 0
                      : CompareValues(src[i].ext.view(), dst[i].ext.view());
          if (dst[i].ext.type == ValueType::kNull || (a.fn == AggFn::kMin ? c < 0 : c > 0)) {
            dst[i].ext = src[i].ext;
          }
        }
        if (a.fn == AggFn::kArgMax || a.fn == AggFn::kArgMin) {
          // Sessions merge in start order, so earlier rows stay first on a tie.
          dst[i].ArgMerge(src[i], a.fn == AggFn::kArgMax ? 1 : -1);
        }
        dst[i].Merge(src[i]);
      }
    }
    for (uint32_t slot : merge) Erase(slot);
    // Its key may be an absorbed session's, stored: the merged one replaces it.
    slots_[target].stored = !to_delete_.empty() && to_delete_.erase(StateKey(slots_[target])) > 0;
    slots_[target].fired = W >= new_end;
    Index(target);
    MaybeCompact();
  }
  Update(target, r);
  MarkChanged(ctx, target);
  return W >= new_end ? kLate : kOnTime;
}

absl::Status WindowOperator::ProcessBatch(OperatorContext& ctx, int input, const RecordBatch& batch,
                                          Output& out) {
  const int64_t W = ctx.watermark();
  key_groups_ = ctx.key_groups();
  int64_t records[3] = {0, 0, 0};
  double amounts[3] = {0, 0, 0};
  for (const Record& r : batch) {
    Arrival arrival = kTooLate;
    if (spec_.kind == WindowSpec::Kind::kSession) {
      arrival = ProcessSession(ctx, r, out);
    } else {
      // Windows containing t: starts s = k*slide with s <= t < s + size.
      const int64_t last = LastWindowStart(r.event_time, spec_.slide);
      uint32_t gid = 0;
      bool have_group = false;
      for (int64_t s = FirstWindowStart(r.event_time, spec_.size, spec_.slide); s <= last;
           s += spec_.slide) {
        int64_t e = SatAdd(s, spec_.size);
        if (r.event_time >= e) continue;
        if (W >= SatAdd(e, spec_.allowed_lateness)) continue;  // already final
        if (!have_group) {
          gid = InternGroup(r);
          have_group = true;
        }
        const uint32_t slot = Touch(ctx, gid, s, e);
        Update(slot, r);
        MarkChanged(ctx, slot);
        // Late once it changes a window the watermark completed.
        arrival = arrival == kLate || W >= e ? kLate : kOnTime;
      }
    }
    ++records[arrival];
    if (amount_path_ != nullptr) {
      const Value v = r.GetPath(*amount_path_);
      if (v.is_number()) amounts[arrival] += v.AsDouble();
    }
    if (arrival == kTooLate) {
      too_late_.Add(TooLateReason::kAfterFinal);
      Record& side = out.EmitSide(0);
      BuildSideRecord(ctx, r, TooLateReason::kAfterFinal,
                      "window already final (event time < watermark - allowed_lateness)", &side);
      if (spec_.kind == WindowSpec::Kind::kSession) {
        AddMissedWindow(r, r.event_time, SatAdd(r.event_time, spec_.gap), &side);
      } else {
        // The latest window it falls in (all are final).
        const int64_t last = LastWindowStart(r.event_time, spec_.slide);
        AddMissedWindow(r, last, SatAdd(last, spec_.size), &side);
      }
    }
  }
  for (int a = 0; a < 3; ++a) {
    if (records[a] == 0) continue;
    arrival_records_[a]->Add(records[a]);
    if (amount_path_ != nullptr) arrival_amounts_[a]->Add(amounts[a]);
  }
  // LATE corrections, one per changed complete window, in (end, key) order.
  if (!late_changed_.empty()) {
    late_changed_.erase(std::remove_if(late_changed_.begin(), late_changed_.end(),
                                       [&](Ref r) { return !Valid(r); }),
                        late_changed_.end());
    SortByKey(&late_changed_);
    for (Ref r : late_changed_) {
      slots_[r.slot].late_queued = false;
      if (slots_[r.slot].dirty) Emit(ctx, r.slot, "LATE", out);
    }
    late_changed_.clear();
  }
  return absl::OkStatus();
}

void WindowOperator::Prefetch(const std::vector<Ref>& due, size_t k) const {
  // Due windows are visited in key order, which is random in memory: load
  // the window, its accumulators and then its group a few steps ahead.
  constexpr size_t kWindowAhead = 8, kGroupAhead = 4;
  if (k + kWindowAhead < due.size()) {
    const uint32_t slot = due[k + kWindowAhead].slot;
    __builtin_prefetch(&slots_[slot]);
    if (naggs_ > 0) __builtin_prefetch(&accs_[slot * naggs_]);
  }
  if (k + kGroupAhead < due.size()) {
    const Group& g = groups_[slots_[due[k + kGroupAhead].slot].gid];
    __builtin_prefetch(&g);
    __builtin_prefetch(&g.wins);
  }
}

absl::Status WindowOperator::OnWatermark(OperatorContext& ctx, Output& out) {
  const int64_t W = ctx.watermark();
  std::vector<Ref> due;
  while (!pending_on_time_.empty() && pending_on_time_.begin()->first <= W) {
    due.swap(pending_on_time_.begin()->second);
    pending_on_time_.erase(pending_on_time_.begin());
    due.erase(std::remove_if(due.begin(), due.end(),
                             [&](Ref r) { return !Valid(r) || slots_[r.slot].fired; }),
              due.end());
    SortByKey(&due);
    for (size_t k = 0; k < due.size(); ++k) {
      Prefetch(due, k);
      const Ref r = due[k];
      Emit(ctx, r.slot, "ON_TIME", out);
      slots_[r.slot].fired = true;
      MarkPersist(r.slot);
      RETURN_IF_ERROR(out.MaybeDrain());
    }
  }
  while (!pending_final_.empty() && pending_final_.begin()->first <= W) {
    due.swap(pending_final_.begin()->second);
    pending_final_.erase(pending_final_.begin());
    due.erase(std::remove_if(due.begin(), due.end(), [&](Ref r) { return !Valid(r); }), due.end());
    SortByKey(&due);
    for (size_t k = 0; k < due.size(); ++k) {
      Prefetch(due, k);
      const Ref r = due[k];
      Emit(ctx, r.slot, "FINAL", out);
      if (W < kMaxTime) {
        // For too_late records that miss it later (none can after W = +inf).
        const Window& w = slots_[r.slot];
        const Group& g = groups_[w.gid];
        finals_->Put(FinalKey(SatAdd(w.end, spec_.allowed_lateness), g.key_group, g.key, w.start),
                     std::to_string(ctx.Revision(w.revision)));
      }
      Erase(r.slot, /*final_used=*/true);
      RETURN_IF_ERROR(out.MaybeDrain());
    }
  }
  if (dirty_unfired_ == 0) next_timer_ = kMaxTime;
  return absl::OkStatus();
}

absl::Status WindowOperator::OnProcessingTime(OperatorContext& ctx, Output& out) {
  next_timer_ = kMaxTime;
  std::vector<Ref> dirty;
  for (auto& [end, refs] : pending_on_time_) {
    dirty.clear();
    for (Ref r : refs) {
      if (Valid(r) && !slots_[r.slot].fired && slots_[r.slot].dirty) dirty.push_back(r);
    }
    SortByKey(&dirty);
    for (Ref r : dirty) {
      Emit(ctx, r.slot, "EARLY", out);
      MarkPersist(r.slot);
    }
  }
  return absl::OkStatus();
}

absl::Status WindowOperator::Flush(OperatorContext& ctx) {
  // Forget final revisions older than the audit horizon, an hour of event
  // time at a time (one range tombstone each).
  const int64_t forget = SatAdd(ctx.watermark(), -kAuditHorizon);
  if (ctx.watermark() < kMaxTime && forget > SatAdd(finals_cleared_to_, 3'600'000)) {
    std::string end;
    AppendBigEndian64(&end, forget);
    RETURN_IF_ERROR(finals_->DeleteRange("", end));
    finals_cleared_to_ = forget;
  }
  for (const std::string& key : to_delete_) table_->Delete(key);
  to_delete_.clear();
  Record rec;
  std::string json;
  for (Ref ref : to_persist_) {
    if (!Valid(ref)) continue;
    Window& w = slots_[ref.slot];
    w.persist_queued = false;
    rec.Clear();
    rec.EnsureRoot();
    rec.AddString("gk", groups_[w.gid].key);
    rec.AddValue("g", groups_[w.gid].values.Get(0));
    rec.AddInt("s", w.start);
    rec.AddInt("e", w.end);
    rec.AddInt("r", w.revision);
    rec.AddBool("f", w.fired);
    rec.AddBool("d", w.dirty);
    rec.AddInt("n", w.events);
    rec.AddInt("h", static_cast<int64_t>(w.id_digest));
    rec.BeginArray("a");
    const Acc* accs = AccsOf(ref.slot);
    for (size_t i = 0; i < naggs_; ++i) {
      const Acc& acc = accs[i];
      rec.BeginObject("");
      rec.AddInt("c", acc.count);
      json.clear();
      AppendInt128(acc.isum, &json);
      rec.AddString("is", json);
      rec.AddInt("sc", acc.scale);
      int64_t bits;
      std::memcpy(&bits, &acc.dsum, 8);
      rec.AddInt("ds", bits);
      rec.AddBool("hd", acc.has_double);
      rec.AddInt("xt", static_cast<int64_t>(acc.ext.type));
      if (acc.ext.type == ValueType::kDouble) {
        std::memcpy(&bits, &acc.ext.d, 8);
        rec.AddInt("x", bits);
      } else {
        rec.AddValue("x", acc.ext.view());
      }
      if (acc.lists != nullptr && !acc.lists->rows.empty()) {
        rec.BeginArray("rows");
        for (const std::string& row : acc.lists->rows) rec.AddString("", row);
        rec.EndContainer();
      }
      if (acc.distinct_size() > 0) {
        std::vector<std::string> sorted(acc.lists->distinct.begin(), acc.lists->distinct.end());
        std::sort(sorted.begin(), sorted.end());
        rec.BeginArray("dv");
        for (const std::string& s : sorted) rec.AddString("", s);
        rec.EndContainer();
      }
      rec.EndContainer();
    }
    rec.EndContainer();
    json.clear();
    rec.AppendJson(&json);
    table_->Put(StateKey(w), json);
    w.stored = true;
  }
  to_persist_.clear();
  return absl::OkStatus();
}

}  // namespace caravela
