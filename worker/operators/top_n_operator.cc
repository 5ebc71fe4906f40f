// Operator kind `top_n` (Flink's Window Top-N): per group_by key, and per
// tumbling or hopping window when one is given, the N rows with the highest
// (order: desc, the default) or lowest (asc) value of the expression `by`,
// emitted as revisions like every window result (SPEC §4):
//
//   - name: hot_items
//     top_n:
//       from: bids_per_item
//       n: 3
//       by: bids                 # an expression over the input record
//       order: desc              # desc (default) | asc
//       group_by: [category]     # optional: one ranking over all records
//       tumbling: 1h             # or hopping: {size, slide}; optional
//       allowed_lateness: 10m    # windows only
//       keep: [item, bids]       # the fields of each row (default: all)
//
// One result per (window, group): {"window_start", "window_end", <group_by
// fields>, "top": [{"rank": 1, <row fields>}, ...], "revision", "state"}.
// With a window: ON_TIME when the watermark passes window_end (a window whose
// first record comes late starts with LATE), LATE when a record within
// allowed_lateness changes the ranking, FINAL at window_end + allowed_lateness
// (the state is then freed; later records go to `<op>.too_late`). Without a
// window the whole stream is one window per group that ends when the input
// does: an EARLY revision at each watermark advance after the ranking
// changed, ON_TIME and FINAL when the input ends (watermark +inf); no
// window_start/window_end fields.
//
// Ranking: by CompareValues of `by` (numbers numerically, strings
// bytewise); rows whose `by` is null or missing rank after every other; a
// tie keeps the row that came first (a new row must be strictly better than
// the N-th to enter). State: one state-table entry per (group, window) with
// its N rows, keyed by the group's key group (worker/state/key_codec.h; in
// a task with key groups), the group's values and the window start: a
// rescale copies a new task's key-group range as it is; entries stored
// without key groups are read by their group values, and an Open lays
// entries of the other layout out anew.
#include <map>
#include <set>

#include "absl/strings/str_cat.h"
#include "common/expr.h"
#include "common/job_plan.h"
#include "common/json.h"
#include "common/operator_kind.h"
#include "common/spec_reader.h"
#include "common/time_util.h"
#include "worker/operators/operator.h"
#include "worker/state/key_codec.h"

namespace caravela {

struct TopNSpec {
  std::string from;
  int n = 0;
  std::string by;  // expression text
  bool descending = true;
  std::vector<std::string> group_by;  // as written; output field names
  std::vector<FieldPath> group_paths;
  bool windowed = false;
  int64_t size = 0, slide = 0;  // tumbling: slide == size
  int64_t allowed_lateness = 0;
  std::vector<std::string> keep;  // empty: whole rows
  std::vector<FieldPath> keep_paths;
};

namespace {

constexpr int kMaxN = 1000;

class TopNOperator final : public Operator {
 public:
  TopNOperator(TopNSpec spec, std::unique_ptr<Expr> by)
      : spec_(std::move(spec)), by_(std::move(by)) {}

  // Its side outputs, declared once: TopN (the kind) and the runtime read this.
  static std::vector<std::string> DeclaredSideOutputs() { return {"too_late"}; }
  std::vector<std::string> SideOutputs() const override { return DeclaredSideOutputs(); }

  std::vector<std::string> OutputKeyFields() const override {
    std::vector<std::string> keys = spec_.group_by;
    if (spec_.windowed) {
      keys.push_back("window_start");
      keys.push_back("window_end");
    }
    return keys;
  }

  absl::Status Open(OperatorContext& ctx) override {
    too_late_.Open(ctx, {TooLateReason::kAfterFinal});
    ASSIGN_OR_RETURN(table_, ctx.OpenTable("tops"));
    key_groups_ = ctx.key_groups();
    std::vector<size_t> positions;
    if (key_groups_ != nullptr) {
      ASSIGN_OR_RETURN(positions,
                       key_groups_->GroupPositions(spec_.group_paths, "top_n " + ctx.name()));
    }
    entries_.clear();
    touched_.clear();
    absl::Status bad;
    std::vector<std::string> relaid;  // stored under the other layout's key
    RETURN_IF_ERROR(table_->Scan("", "", [&](std::string_view key, std::string_view value) {
      Entry e;
      if (absl::Status st = Decode(value, &e); !st.ok()) {
        bad = absl::DataLossError(
            absl::StrCat("corrupt top_n state in ", ctx.name(), ": ", st.message()));
        return false;
      }
      StoredGroupKey(e.group, &group_);
      const int key_group = key_groups_ != nullptr
                                ? key_groups_->GroupKeyGroup(e.group, positions, &scratch_key_)
                                : -1;
      std::string mine = EntryKey(key_group, group_, e.start);
      const bool moved = mine != key;
      if (moved) relaid.emplace_back(key);
      auto it = entries_.emplace(std::move(mine), std::move(e)).first;
      if (moved) touched_.insert(it->first);  // written by the next Flush
      return true;
    }));
    for (const std::string& key : relaid) table_->Delete(key);
    return bad;
  }

  absl::Status ProcessBatch(OperatorContext& ctx, int input, const RecordBatch& batch,
                            Output& out) override {
    for (const Record& r : batch) {
      Row row;
      BuildRow(r, &row);
      GroupKey(r, &group_);
      const int key_group =
          key_groups_ != nullptr ? key_groups_->KeyGroup(r, 0, &scratch_key_) : -1;
      const int64_t w = ctx.watermark();
      bool placed = false;
      ForEachWindow(r.event_time, [&](int64_t start, int64_t end) {
        if (spec_.windowed && end + spec_.allowed_lateness <= w && w != kMinTime) return;
        placed = true;
        std::string key = EntryKey(key_group, group_, start);
        auto it = entries_.find(key);
        if (it == entries_.end()) {
          Entry e;
          e.start = start;
          e.end = end;
          GroupValues(r, &e.group);
          it = entries_.emplace(std::move(key), std::move(e)).first;
        }
        if (Insert(it->second, row)) {
          it->second.dirty = true;
          touched_.insert(it->first);
        }
      });
      if (!placed) {
        too_late_.Add(TooLateReason::kAfterFinal);
        BuildSideRecord(ctx, r, TooLateReason::kAfterFinal,
                        "every window of the record is final (event time < watermark - "
                        "allowed_lateness)",
                        &out.EmitSide(0));
      }
    }
    // A change to a window that has fired (or whose end has passed) is a
    // correction: LATE, now.
    if (spec_.windowed) {
      for (const std::string& key : touched_) {
        auto it = entries_.find(key);
        if (it == entries_.end() || !it->second.dirty) continue;
        Entry& e = it->second;
        if (e.fired || e.end <= ctx.watermark()) {
          Emit(ctx, e, "LATE", out);
          e.fired = true;
        }
      }
    }
    return absl::OkStatus();
  }

  absl::Status OnWatermark(OperatorContext& ctx, Output& out) override {
    const int64_t w = ctx.watermark();
    for (auto it = entries_.begin(); it != entries_.end();) {
      Entry& e = it->second;
      if (!spec_.windowed && w != kMaxTime) {
        if (e.dirty) {
          Emit(ctx, e, "EARLY", out);
          touched_.insert(it->first);
        }
        ++it;
        continue;
      }
      if (!e.fired && e.end <= w) {
        Emit(ctx, e, "ON_TIME", out);
        e.fired = true;
        touched_.insert(it->first);
      }
      if (e.end != kMaxTime ? e.end + spec_.allowed_lateness <= w : w == kMaxTime) {
        Emit(ctx, e, "FINAL", out);
        touched_.insert(it->first);
        it = entries_.erase(it);
        RETURN_IF_ERROR(out.MaybeDrain());
        continue;
      }
      ++it;
    }
    return absl::OkStatus();
  }

  absl::Status Flush(OperatorContext& ctx) override {
    std::string value;
    for (const std::string& key : touched_) {
      auto it = entries_.find(key);
      if (it == entries_.end()) {
        table_->Delete(key);
      } else {
        Encode(it->second, &value);
        table_->Put(key, value);
      }
    }
    touched_.clear();
    return absl::OkStatus();
  }

  absl::Status AdoptState(OperatorContext& from, OperatorContext& to,
                          const KeyOwner& owner) override {
    // The partitioning key is a subset of group_by: find its fields among
    // the stored group values.
    ASSIGN_OR_RETURN(const std::vector<size_t> positions,
                     owner.GroupPositions(spec_.group_paths, "top_n " + to.name()));
    ASSIGN_OR_RETURN(StateTable * old_table, from.OpenTable("tops"));
    ASSIGN_OR_RETURN(StateTable * table, to.OpenTable("tops"));
    // Entries laid out by key group: this task's range, copied as it is.
    RETURN_IF_ERROR(owner.CopyOwnedRows(old_table, table));
    // Entries stored without key groups (their keys start with a group
    // value's JSON text, or a window start without group_by): decoded.
    std::string scratch;
    absl::Status bad;
    auto decoded = [&](std::string_view key, std::string_view value) {
      Entry e;
      if (absl::Status st = Decode(value, &e); !st.ok()) {
        bad = absl::DataLossError(absl::StrCat("corrupt top_n state in ", from.name()));
        return false;
      }
      if (owner.OwnsGroup(e.group, positions, &scratch)) table->Put(key, value);
      return true;
    };
    RETURN_IF_ERROR(old_table->Scan("", std::string(1, kKeyGroupMarker), decoded));
    if (bad.ok()) {
      RETURN_IF_ERROR(old_table->Scan(std::string(1, kKeyGroupMarker + 1), "", decoded));
    }
    return bad;
  }

 private:
  // A ranked row: {"v": <by value>, "r": <row fields>}.
  using Row = Record;
  struct Entry {
    int64_t start = 0, end = 0;
    Record group;           // {"g": [group values]}
    std::vector<Row> rows;  // best first
    int64_t revisions = 0;  // published so far
    bool fired = false;     // ON_TIME (or a first LATE) published
    bool dirty = false;     // changed since the last publication
  };

  Value By(const Row& row) const { return row.Get(row.FindChild(0, "v")); }

  // <0 when a ranks before b.
  int Rank(const Value& a, const Value& b) const {
    if (a.is_null() || b.is_null()) return a.is_null() == b.is_null() ? 0 : (a.is_null() ? 1 : -1);
    const int c = CompareValues(a, b);
    return spec_.descending ? -c : c;
  }

  // Places `row` if it ranks among the N; true if the ranking changed.
  bool Insert(Entry& e, const Row& row) {
    const Value v = By(row);
    size_t pos = e.rows.size();
    while (pos > 0 && Rank(v, By(e.rows[pos - 1])) < 0) --pos;
    if (pos >= static_cast<size_t>(spec_.n)) return false;
    e.rows.insert(e.rows.begin() + static_cast<std::ptrdiff_t>(pos), row);
    if (e.rows.size() > static_cast<size_t>(spec_.n)) e.rows.pop_back();
    return true;
  }

  void BuildRow(const Record& r, Row* row) const {
    row->Clear();
    row->AddValue("v", by_->Eval(r));
    if (spec_.keep.empty()) {
      row->AddValue("r", r.Get(0));
      return;
    }
    row->BeginObject("r");
    for (size_t k = 0; k < spec_.keep.size(); ++k) {
      row->AddValue(spec_.keep[k], r.GetPath(spec_.keep_paths[k]));
    }
    row->EndContainer();
  }

  void GroupKey(const Record& r, std::string* out) const {
    out->clear();
    for (const FieldPath& p : spec_.group_paths) {
      r.GetPath(p).AppendJson(out);
      out->push_back('\0');
    }
  }
  void GroupValues(const Record& r, Record* group) const {
    group->Clear();
    group->BeginArray("g");
    for (const FieldPath& p : spec_.group_paths) group->AddValue("", r.GetPath(p));
    group->EndContainer();
  }
  // The group key GroupKey gives, from the stored group values.
  static void StoredGroupKey(const Record& group, std::string* out) {
    out->clear();
    const int32_t g = group.FindChild(0, "g");
    if (g < 0) return;
    group.ForEachChild(static_cast<uint32_t>(g), [&](uint32_t c) {
      group.Get(static_cast<int32_t>(c)).AppendJson(out);
      out->push_back('\0');
    });
  }
  // The key group (none if < 0), the group key, then the window start
  // big-endian (sign flipped) so entries of one group sort by window.
  static std::string EntryKey(int key_group, const std::string& group, int64_t start) {
    std::string key;
    if (key_group >= 0) AppendKeyGroupPrefix(&key, key_group);
    key.append(group);
    const uint64_t u = static_cast<uint64_t>(start) ^ (uint64_t{1} << 63);
    for (int i = 7; i >= 0; --i) key.push_back(static_cast<char>((u >> (8 * i)) & 0xff));
    return key;
  }

  template <typename F>
  void ForEachWindow(int64_t t, F&& f) const {
    if (!spec_.windowed) {
      f(kMinTime, kMaxTime);
      return;
    }
    auto floor_div = [](int64_t a, int64_t b) {
      return a / b - ((a % b != 0) && ((a < 0) != (b < 0)));
    };
    const int64_t last = floor_div(t, spec_.slide) * spec_.slide;
    for (int64_t start = last; start > t - spec_.size; start -= spec_.slide)
      f(start, start + spec_.size);
  }

  void Emit(OperatorContext& ctx, Entry& e, const char* state, Output& out) {
    Record& rec = out.Emit();
    if (spec_.windowed) {
      rec.AddString("window_start", FormatIso8601(e.start));
      rec.AddString("window_end", FormatIso8601(e.end));
    }
    const int32_t g = e.group.FindChild(0, "g");
    size_t i = 0;
    if (g >= 0) {
      e.group.ForEachChild(static_cast<uint32_t>(g), [&](uint32_t c) {
        rec.AddValue(spec_.group_by[i++], e.group.Get(static_cast<int32_t>(c)));
      });
    }
    rec.BeginArray("top");
    int64_t rank = 0;
    for (const Row& row : e.rows) {
      rec.BeginObject("");
      rec.AddInt("rank", ++rank);
      const int32_t fields = row.FindChild(0, "r");
      if (fields >= 0 && row.nodes()[static_cast<size_t>(fields)].type == ValueType::kObject) {
        row.ForEachChild(static_cast<uint32_t>(fields), [&](uint32_t c) {
          rec.AddValue(row.Key(c), row.Get(static_cast<int32_t>(c)));
        });
      }
      rec.EndContainer();
    }
    rec.EndContainer();
    rec.AddInt("revision", ctx.Revision(++e.revisions));
    rec.AddString("state", state);
    rec.event_time = spec_.windowed ? e.end - 1 : ctx.watermark();
    e.dirty = false;
  }

  // State value: {"s","e","g":[..],"n","f","rows":[{"v","r"}, ...]}.
  void Encode(const Entry& e, std::string* out) {
    scratch_.Clear();
    scratch_.AddInt("s", e.start);
    scratch_.AddInt("e", e.end);
    const int32_t g = e.group.FindChild(0, "g");
    scratch_.AddValue("g", e.group.Get(g));
    scratch_.AddInt("n", e.revisions);
    scratch_.AddBool("f", e.fired);
    scratch_.AddBool("d", e.dirty);
    scratch_.BeginArray("rows");
    for (const Row& row : e.rows) scratch_.AddValue("", row.Get(0));
    scratch_.EndContainer();
    out->clear();
    scratch_.AppendJson(out);
  }
  absl::Status Decode(std::string_view value, Entry* e) {
    RETURN_IF_ERROR(decoder_.Decode(value, &scratch_));
    auto get = [&](std::string_view k) { return scratch_.Get(scratch_.FindChild(0, k)); };
    e->start = get("s").i;
    e->end = get("e").i;
    e->revisions = get("n").i;
    e->fired = get("f").b;
    e->dirty = get("d").b;
    e->group.Clear();
    e->group.AddValue("g", get("g"));
    const int32_t rows = scratch_.FindChild(0, "rows");
    if (rows < 0) return absl::DataLossError("no rows");
    // Each stored row is a {"v", "r"} object: copied field by field.
    scratch_.ForEachChild(static_cast<uint32_t>(rows), [&](uint32_t c) {
      Row row;
      scratch_.ForEachChild(c, [&](uint32_t f) {
        row.AddValue(scratch_.Key(f), scratch_.Get(static_cast<int32_t>(f)));
      });
      e->rows.push_back(std::move(row));
    });
    return absl::OkStatus();
  }

  TopNSpec spec_;
  std::unique_ptr<Expr> by_;
  StateTable* table_ = nullptr;
  const KeyOwner* key_groups_ = nullptr;  // OperatorContext::key_groups()
  std::string scratch_key_;
  std::map<std::string, Entry> entries_;  // by EntryKey
  std::set<std::string> touched_;         // entries changed since Flush
  TooLateCounters too_late_;
  std::string group_;
  Record scratch_;
  JsonDecoder decoder_;
};

class TopN final : public OperatorKind {
 public:
  std::string_view name() const override { return "top_n"; }
  std::vector<std::string> SideOutputs() const override {
    return TopNOperator::DeclaredSideOutputs();
  }

  std::any Parse(OperatorParseContext& ctx) const override {
    TopNSpec spec;
    SpecReader& r = ctx.r;
    const YAML::Node& k = ctx.node;
    const std::string& kpath = ctx.path;
    if (!r.CheckMap(k, kpath,
                    {"from", "n", "by", "order", "group_by", "tumbling", "hopping",
                     "allowed_lateness", "keep"})) {
      return spec;
    }
    ctx.has_event_time = ctx.Input(&spec.from);
    if (!ctx.has_event_time) r.NoEventTime(kpath, spec.from, "top_n");
    if (!r.Missing(SpecReader::Field(k, "n"), SpecReader::Join(kpath, "n"), true)) {
      if (auto n = r.PositiveInt(k, "n", kpath)) {
        if (*n <= kMaxN) {
          spec.n = *n;
        } else {
          r.Err(SpecReader::Join(kpath, "n"),
                absl::StrCat("expected at most ", kMaxN, " rows, got ", *n));
        }
      }
    }
    if (auto by = r.ExprString(k, "by", kpath)) spec.by = *by;
    if (auto o = r.OneOf(k, "order", kpath, {"desc", "asc"})) spec.descending = *o == "desc";
    spec.group_paths = r.PathList(k, "group_by", kpath, &spec.group_by);
    const bool has_window =
        SpecReader::Field(k, "tumbling").IsDefined() || SpecReader::Field(k, "hopping").IsDefined();
    if (has_window) {
      SpecReader::WindowShape shape;
      spec.windowed = !r.Window(k, kpath, /*session=*/false, &shape).empty();
      spec.size = shape.size;
      spec.slide = shape.slide;
    }
    if (auto d = r.Duration(k, "allowed_lateness", kpath, false, SpecReader::Bound::kNonNegative)) {
      if (has_window) {
        spec.allowed_lateness = *d;
      } else {
        r.Err(SpecReader::Join(kpath, "allowed_lateness"),
              "allowed_lateness needs a window (tumbling or hopping): without one the ranking "
              "is final when the input ends");
      }
    }
    spec.keep_paths = r.NonEmptyPathList(k, "keep", kpath, &spec.keep);
    for (const std::string& f : spec.keep) {
      if (f == "rank") {
        r.Err(SpecReader::Join(kpath, "keep"), "\"rank\" is the output's own field of each row");
      }
    }
    return spec;
  }
  std::vector<std::string> Inputs(const OperatorSpec& op) const override {
    return {op.Get<TopNSpec>().from};
  }
  void Plan(const OperatorSpec& op, OperatorPlanContext& plan) const override {
    const TopNSpec& spec = op.Get<TopNSpec>();
    if (spec.group_paths.empty()) {
      plan.Global();
      return;
    }
    plan.Keyed(spec.group_paths);
    // The output holds the group_by fields under their names as written.
    for (const std::string& f : plan.OutputKey()) {
      if (f.find('.') != std::string::npos) plan.OutputUnpartitioned();
    }
    for (const std::string& f : spec.group_by) {
      if (f.find('.') != std::string::npos) plan.OutputUnpartitioned();
    }
  }
  absl::StatusOr<std::unique_ptr<Operator>> Create(const OperatorSpec& op,
                                                   const OperatorBuildContext& ctx) const override {
    const TopNSpec& spec = op.Get<TopNSpec>();
    ASSIGN_OR_RETURN(std::unique_ptr<Expr> by, Expr::Compile(spec.by));
    return std::unique_ptr<Operator>(new TopNOperator(spec, std::move(by)));
  }
};

}  // namespace

const OperatorKind& TopNKind() {
  static const TopN kind;
  return kind;
}

}  // namespace caravela
