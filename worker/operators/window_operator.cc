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

struct WindowOperator::Acc {
  int64_t count = 0;
  __int128 isum = 0;  // exact part, scaled by 10^scale
  uint8_t scale = 0;
  double dsum = 0;
  bool has_double = false;
  OwnedValue ext;  // min / max; arg_max / arg_min: the extreme value
  absl::flat_hash_set<std::string> distinct;
  std::vector<std::string> rows;  // arg_max / arg_min: the kept rows, JSON objects

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
    distinct.insert(o.distinct.begin(), o.distinct.end());
  }
  // arg_max / arg_min (`sign` 1: max, -1: min): > 0 when `v` is more
  // extreme than the rows kept (or none are), 0 on a tie.
  int ArgRank(const Value& v, int sign) const {
    return ext.type == ValueType::kNull ? 1 : sign * CompareValues(v, ext.view());
  }
  // `row` has value `v`: it replaces the rows when more extreme, joins them
  // on a tie.
  void ArgUpdate(const Value& v, int sign, std::string&& row) {
    const int c = ArgRank(v, sign);
    if (c < 0) return;
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
    if (c > 0) {
      ext = o.ext;
      rows = o.rows;
    } else if (c == 0) {
      rows.insert(rows.end(), o.rows.begin(), o.rows.end());
    }
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
  std::string group_key;
  Record group;  // group-by values, fields named as in group_by
  int64_t start = 0;
  int64_t end = 0;
  std::vector<Acc> accs;
  int64_t revision = 0;
  bool fired = false;  // complete (ON_TIME or first LATE emitted)
  bool dirty = false;  // changed since the last emission
  // Reconciliation (spec.reconcile_id): records aggregated and the sum of
  // XXH3-64 of their ids' JSON text (mod 2^64: order-independent, additive
  // when sessions merge).
  int64_t events = 0;
  uint64_t id_digest = 0;
  // Its key is in the state table (written by a Flush, or loaded): erasing
  // it must delete it there. A window created and finalized between two
  // flushes never touches the table.
  bool stored = false;
};

WindowOperator::WindowOperator(WindowSpec spec) : spec_(std::move(spec)) {
  if (spec_.kind == WindowSpec::Kind::kTumbling) spec_.slide = spec_.size;
}
WindowOperator::~WindowOperator() = default;

std::vector<std::string> WindowOperator::OutputKeyFields() const {
  std::vector<std::string> keys = spec_.group_by;
  keys.push_back("window_start");
  keys.push_back("window_end");
  return keys;
}

absl::Status WindowOperator::Open(OperatorContext& ctx) {
  // Read only here; written at Flush.
  ASSIGN_OR_RETURN(table_, ctx.OpenWriteBehindTable("windows"));
  too_late_ = ctx.OpCounter("too_late_total");
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
  windows_.clear();
  pending_on_time_.clear();
  pending_final_.clear();
  sessions_.clear();
  dirty_unfired_ = 0;
  next_timer_ = kMaxTime;
  // Reload every window from the state table.
  JsonDecoder decoder;
  Record rec;
  absl::Status load_error;
  RETURN_IF_ERROR(table_->Scan("", "", [&](std::string_view key, std::string_view value) {
    absl::Status st = decoder.Decode(value, &rec);
    if (!st.ok()) {
      load_error = absl::DataLossError("corrupt window state in " + ctx.name() + ": " +
                                       std::string(st.message()));
      return false;
    }
    auto w = std::make_unique<Window>();
    w->stored = true;  // loaded from the table
    w->group_key.assign(rec.GetPath(FieldPath::Parse("gk")).s);
    int32_t g = rec.FindChild(0, "g");
    w->group.EnsureRoot();
    rec.ForEachChild(static_cast<uint32_t>(g), [&](uint32_t c) {
      w->group.AddValue(rec.Key(c), rec.Get(static_cast<int32_t>(c)));
    });
    w->start = rec.Get(rec.FindChild(0, "s")).i;
    w->end = rec.Get(rec.FindChild(0, "e")).i;
    w->revision = rec.Get(rec.FindChild(0, "r")).i;
    w->fired = rec.Get(rec.FindChild(0, "f")).b;
    w->dirty = rec.Get(rec.FindChild(0, "d")).b;
    w->events = rec.Get(rec.FindChild(0, "n")).i;  // 0 in state of older releases
    w->id_digest = static_cast<uint64_t>(rec.Get(rec.FindChild(0, "h")).i);
    int32_t accs = rec.FindChild(0, "a");
    rec.ForEachChild(static_cast<uint32_t>(accs), [&](uint32_t a) {
      Acc acc;
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
          acc.rows.emplace_back(rec.Get(static_cast<int32_t>(c)).s);
        });
      }
      int32_t dv = rec.FindChild(a, "dv");
      if (dv >= 0) {
        rec.ForEachChild(static_cast<uint32_t>(dv), [&](uint32_t c) {
          acc.distinct.emplace(rec.Get(static_cast<int32_t>(c)).s);
        });
      }
      w->accs.push_back(std::move(acc));
    });
    std::string k(key);
    Index(k, *w);
    if (w->dirty && !w->fired) ++dirty_unfired_;
    windows_.emplace(k, std::move(w));
    return true;
  }));
  RETURN_IF_ERROR(load_error);
  if (dirty_unfired_ > 0) ArmEarlyTimer(ctx);
  return absl::OkStatus();
}

absl::Status WindowOperator::AdoptState(OperatorContext& from, OperatorContext& to,
                                        const KeyOwner& owner) {
  // The partitioning key is a subset of group_by (or all of it): find each of
  // its fields among the stored group values.
  std::vector<size_t> positions;
  for (const FieldPath& k : owner.keys.at(0)) {
    size_t i = 0;
    while (i < spec_.group_paths.size() && !(spec_.group_paths[i].ToString() == k.ToString())) ++i;
    if (i == spec_.group_paths.size()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "window ", to.name(), ": partitioning field ", k.ToString(), " is not in group_by"));
    }
    positions.push_back(i);
  }
  ASSIGN_OR_RETURN(StateTable * old_table, from.OpenTable("windows"));
  ASSIGN_OR_RETURN(StateTable * table, to.OpenTable("windows"));
  JsonDecoder decoder;
  Record rec;
  std::vector<Value> values(positions.size());
  std::vector<Value> group;
  std::string scratch;
  absl::Status bad;
  RETURN_IF_ERROR(old_table->Scan("", "", [&](std::string_view key, std::string_view value) {
    if (absl::Status st = decoder.Decode(value, &rec); !st.ok()) {
      bad = absl::DataLossError("corrupt window state in " + from.name() + ": " +
                                std::string(st.message()));
      return false;
    }
    group.clear();
    const int32_t g = rec.FindChild(0, "g");
    if (g >= 0) {
      rec.ForEachChild(static_cast<uint32_t>(g),
                       [&](uint32_t c) { group.push_back(rec.Get(static_cast<int32_t>(c))); });
    }
    for (size_t i = 0; i < positions.size(); ++i) {
      values[i] = positions[i] < group.size() ? group[positions[i]] : Value::Null();
    }
    if (owner.OwnsHash(KeyOwner::HashValues(values, &scratch))) table->Put(key, value);
    return true;
  }));
  return bad;
}

void WindowOperator::Index(const std::string& key, const Window& w) {
  if (!w.fired) pending_on_time_.emplace(w.end, key);
  pending_final_.emplace(SatAdd(w.end, spec_.allowed_lateness), key);
  if (spec_.kind == WindowSpec::Kind::kSession) sessions_[w.group_key][w.start] = key;
}

void WindowOperator::Unindex(const std::string& key, const Window& w, bool in_final) {
  if (!w.fired) pending_on_time_.erase({w.end, key});  // a fired window left it
  if (in_final) pending_final_.erase({SatAdd(w.end, spec_.allowed_lateness), key});
  if (!late_changed_.empty()) late_changed_.erase({w.end, key});
  if (spec_.kind == WindowSpec::Kind::kSession) {
    auto it = sessions_.find(w.group_key);
    if (it != sessions_.end()) {
      it->second.erase(w.start);
      if (it->second.empty()) sessions_.erase(it);
    }
  }
}

std::string WindowOperator::GroupKey(const Record& r) {
  std::string k;
  for (const FieldPath& p : spec_.group_paths) {
    r.GetPath(p).AppendJson(&k);
    k.push_back('\0');
  }
  return k;
}

WindowOperator::Window* WindowOperator::Touch(OperatorContext& ctx, const std::string& key,
                                              const Record& group_src, int64_t start, int64_t end,
                                              bool* created) {
  auto it = windows_.find(key);
  if (it != windows_.end()) {
    *created = false;
    return it->second.get();
  }
  *created = true;
  auto w = std::make_unique<Window>();
  w->group_key = key.substr(0, key.size() - 8);
  w->group.EnsureRoot();
  for (size_t i = 0; i < spec_.group_paths.size(); ++i) {
    w->group.AddValue(spec_.group_by[i], group_src.GetPath(spec_.group_paths[i]));
  }
  w->start = start;
  w->end = end;
  w->accs.resize(spec_.aggregates.size());
  w->fired = ctx.watermark() >= end;  // first record arrives late: starts with LATE
  Window* raw = w.get();
  Index(key, *raw);
  windows_.emplace(key, std::move(w));
  return raw;
}

void WindowOperator::Update(Window& w, const Record& r) {
  if (!spec_.reconcile_path.empty()) {
    ++w.events;
    scratch_.clear();
    r.GetPath(spec_.reconcile_path).AppendJson(&scratch_);
    w.id_digest += XXH3_64bits(scratch_.data(), scratch_.size());
  }
  for (size_t i = 0; i < spec_.aggregates.size(); ++i) {
    const AggregateSpec& a = spec_.aggregates[i];
    Acc& acc = w.accs[i];
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
        acc.distinct.insert(scratch_);
        break;
      case AggFn::kArgMax:
      case AggFn::kArgMin: {
        if (v.type == ValueType::kObject || v.type == ValueType::kArray) break;
        std::string row;
        if (a.keep_paths.empty()) {
          r.AppendJson(&row);
        } else {
          r.AppendFieldsJson(a.keep, a.keep_paths, &row);
        }
        acc.ArgUpdate(v, a.fn == AggFn::kArgMax ? 1 : -1, std::move(row));
        ++acc.count;
        break;
      }
    }
  }
}

void WindowOperator::ArmEarlyTimer(OperatorContext& ctx) {
  if (spec_.early_fire_every <= 0 || next_timer_ != kMaxTime) return;
  next_timer_ = (FloorDiv(ctx.now(), spec_.early_fire_every) + 1) * spec_.early_fire_every;
}

void WindowOperator::MarkChanged(OperatorContext& ctx, const std::string& key, Window& w) {
  to_persist_.insert(key);
  if (w.fired) {
    late_changed_.emplace(w.end, key);
    w.dirty = true;
    return;
  }
  if (!w.dirty) {
    w.dirty = true;
    ++dirty_unfired_;
  }
  ArmEarlyTimer(ctx);
}

void WindowOperator::Emit(OperatorContext& ctx, Window& w, const char* state, Output& out) {
  if (w.dirty && !w.fired) --dirty_unfired_;
  ++w.revision;
  w.dirty = false;
  Record& o = out.Emit();
  o.EnsureRoot();
  o.AddString("window_start", FormatIso8601(w.start));
  o.AddString("window_end", FormatIso8601(w.end));
  w.group.ForEachChild(
      0, [&](uint32_t c) { o.AddValue(w.group.Key(c), w.group.Get(static_cast<int32_t>(c))); });
  for (size_t i = 0; i < spec_.aggregates.size(); ++i) {
    const AggregateSpec& a = spec_.aggregates[i];
    const Acc& acc = w.accs[i];
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
        o.AddInt(a.as, static_cast<int64_t>(acc.distinct.size()));
        break;
      case AggFn::kArgMax:
      case AggFn::kArgMin: {
        o.BeginArray(a.as);
        JsonDecoder decoder;
        Record row;
        for (const std::string& json : acc.rows) {
          if (decoder.Decode(json, &row).ok()) o.AddValue("", row.Get(0));
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

void WindowOperator::Erase(const std::string& key, bool in_final) {
  auto it = windows_.find(key);
  if (it == windows_.end()) return;
  Window& w = *it->second;
  if (w.dirty && !w.fired) --dirty_unfired_;
  Unindex(key, w, in_final);
  const bool stored = w.stored;
  windows_.erase(it);
  to_persist_.erase(key);
  if (stored) to_delete_.insert(key);
}

WindowOperator::Arrival WindowOperator::ProcessSession(OperatorContext& ctx, const Record& r,
                                                       Output& out) {
  const int64_t W = ctx.watermark();
  int64_t start = r.event_time;
  int64_t end = SatAdd(r.event_time, spec_.gap);
  std::string group = GroupKey(r);
  // Collect sessions that intersect [start, end] (touching sessions merge).
  std::vector<std::string> merge;
  auto sit = sessions_.find(group);
  if (sit != sessions_.end()) {
    for (auto& [s, key] : sit->second) {
      if (s > end) break;
      const Window& w = *windows_.at(key);
      if (w.end >= start) merge.push_back(key);
    }
  }
  int64_t new_start = start, new_end = end;
  for (const std::string& k : merge) {
    const Window& w = *windows_.at(k);
    new_start = std::min(new_start, w.start);
    new_end = std::max(new_end, w.end);
  }
  // As in Flink, lateness is judged on the merged session: a late record that
  // falls into a session still open for corrections joins it.
  if (W >= SatAdd(new_end, spec_.allowed_lateness)) return kTooLate;
  std::string key = group;
  AppendBigEndian64(&key, new_start);
  // Build the merged window; its revision continues from the highest merged one.
  auto merged = std::make_unique<Window>();
  merged->group_key = group;
  merged->start = new_start;
  merged->end = new_end;
  merged->accs.resize(spec_.aggregates.size());
  merged->group.EnsureRoot();
  for (size_t i = 0; i < spec_.group_paths.size(); ++i) {
    merged->group.AddValue(spec_.group_by[i], r.GetPath(spec_.group_paths[i]));
  }
  for (const std::string& k : merge) {
    Window& w = *windows_.at(k);
    merged->revision = std::max(merged->revision, w.revision);
    merged->events += w.events;
    merged->id_digest += w.id_digest;
    for (size_t i = 0; i < w.accs.size(); ++i) {
      Acc& dst = merged->accs[i];
      const Acc& src = w.accs[i];
      const AggregateSpec& a = spec_.aggregates[i];
      if ((a.fn == AggFn::kMin || a.fn == AggFn::kMax) && src.ext.type != ValueType::kNull) {
        int c =
            dst.ext.type == ValueType::kNull ? 0 : CompareValues(src.ext.view(), dst.ext.view());
        if (dst.ext.type == ValueType::kNull || (a.fn == AggFn::kMin ? c < 0 : c > 0)) {
          dst.ext = src.ext;
        }
      }
      if (a.fn == AggFn::kArgMax || a.fn == AggFn::kArgMin) {
        // Sessions merge in start order, so earlier rows stay first on a tie.
        dst.ArgMerge(src, a.fn == AggFn::kArgMax ? 1 : -1);
      }
      dst.Merge(src);
    }
  }
  for (const std::string& k : merge) Erase(k);
  // Its key may be an absorbed session's, stored: the merged one replaces it.
  merged->stored = to_delete_.erase(key) > 0;
  merged->fired = W >= new_end;
  Window* w = merged.get();
  Index(key, *w);
  windows_.emplace(key, std::move(merged));
  Update(*w, r);
  MarkChanged(ctx, key, *w);
  return W >= new_end ? kLate : kOnTime;
}

absl::Status WindowOperator::ProcessBatch(OperatorContext& ctx, int input, const RecordBatch& batch,
                                          Output& out) {
  const int64_t W = ctx.watermark();
  std::string key;
  int64_t records[3] = {0, 0, 0};
  double amounts[3] = {0, 0, 0};
  for (const Record& r : batch) {
    Arrival arrival = kTooLate;
    if (spec_.kind == WindowSpec::Kind::kSession) {
      arrival = ProcessSession(ctx, r, out);
    } else {
      // Windows containing t: starts s = k*slide with s <= t < s + size.
      int64_t last = FloorDiv(r.event_time, spec_.slide) * spec_.slide;
      std::string group;
      bool have_group = false;
      for (int64_t s = last - ((spec_.size - 1) / spec_.slide) * spec_.slide; s <= last;
           s += spec_.slide) {
        int64_t e = SatAdd(s, spec_.size);
        if (r.event_time >= e) continue;
        if (W >= SatAdd(e, spec_.allowed_lateness)) continue;  // already final
        if (!have_group) {
          group = GroupKey(r);
          have_group = true;
        }
        key = group;
        AppendBigEndian64(&key, s);
        bool created;
        Window* w = Touch(ctx, key, r, s, e, &created);
        Update(*w, r);
        MarkChanged(ctx, key, *w);
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
      too_late_->Add();
      BuildSideRecord(ctx, r, "window already final (event time < watermark - allowed_lateness)",
                      &out.EmitSide(0));
    }
  }
  for (int a = 0; a < 3; ++a) {
    if (records[a] == 0) continue;
    arrival_records_[a]->Add(records[a]);
    if (amount_path_ != nullptr) arrival_amounts_[a]->Add(amounts[a]);
  }
  // LATE corrections, one per changed complete window, in (end, key) order.
  for (const TimeKey& tk : late_changed_) {
    auto it = windows_.find(tk.second);
    if (it != windows_.end() && it->second->dirty) Emit(ctx, *it->second, "LATE", out);
  }
  late_changed_.clear();
  return absl::OkStatus();
}

absl::Status WindowOperator::OnWatermark(OperatorContext& ctx, Output& out) {
  const int64_t W = ctx.watermark();
  // Entries are taken out of the ordered sets whole (no key copy, no second
  // lookup to erase them).
  while (!pending_on_time_.empty() && pending_on_time_.begin()->first <= W) {
    auto node = pending_on_time_.extract(pending_on_time_.begin());
    std::string& key = node.value().second;
    Window& w = *windows_.at(key);
    Emit(ctx, w, "ON_TIME", out);
    w.fired = true;
    to_persist_.insert(std::move(key));
  }
  while (!pending_final_.empty() && pending_final_.begin()->first <= W) {
    auto node = pending_final_.extract(pending_final_.begin());
    const std::string& key = node.value().second;
    Window& w = *windows_.at(key);
    Emit(ctx, w, "FINAL", out);
    Erase(key, /*in_final=*/false);
  }
  if (dirty_unfired_ == 0) next_timer_ = kMaxTime;
  return absl::OkStatus();
}

absl::Status WindowOperator::OnProcessingTime(OperatorContext& ctx, Output& out) {
  next_timer_ = kMaxTime;
  for (const TimeKey& tk : pending_on_time_) {
    Window& w = *windows_.at(tk.second);
    if (w.dirty) {
      Emit(ctx, w, "EARLY", out);
      to_persist_.insert(tk.second);
    }
  }
  return absl::OkStatus();
}

absl::Status WindowOperator::Flush(OperatorContext& ctx) {
  for (const std::string& key : to_delete_) table_->Delete(key);
  to_delete_.clear();
  Record rec;
  std::string json;
  for (const std::string& key : to_persist_) {
    auto it = windows_.find(key);
    if (it == windows_.end()) continue;
    const Window& w = *it->second;
    rec.Clear();
    rec.EnsureRoot();
    rec.AddString("gk", w.group_key);
    rec.AddValue("g", w.group.Get(0));
    rec.AddInt("s", w.start);
    rec.AddInt("e", w.end);
    rec.AddInt("r", w.revision);
    rec.AddBool("f", w.fired);
    rec.AddBool("d", w.dirty);
    rec.AddInt("n", w.events);
    rec.AddInt("h", static_cast<int64_t>(w.id_digest));
    rec.BeginArray("a");
    for (const Acc& acc : w.accs) {
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
      if (!acc.rows.empty()) {
        rec.BeginArray("rows");
        for (const std::string& row : acc.rows) rec.AddString("", row);
        rec.EndContainer();
      }
      if (!acc.distinct.empty()) {
        std::vector<std::string> sorted(acc.distinct.begin(), acc.distinct.end());
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
    table_->Put(key, json);
    it->second->stored = true;
  }
  to_persist_.clear();
  return absl::OkStatus();
}

}  // namespace caravela
