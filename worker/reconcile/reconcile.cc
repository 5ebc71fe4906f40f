#include "worker/reconcile/reconcile.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/json.h"
#include "common/logging.h"
#include "common/sink_kind.h"
#include "common/source_kind.h"
#include "worker/connectors/file_connectors.h"
#include "worker/connectors/sink_factory.h"
#include "worker/operators/dedup_operator.h"
#include "worker/operators/operator.h"
#include "worker/operators/table_join_operators.h"
#include "worker/operators/window_operator.h"
#include "worker/registry/builtin_kinds.h"
#include "worker/runtime/pipeline.h"

namespace caravela {
namespace {

namespace fs = std::filesystem;

std::shared_ptr<spdlog::logger> ReconcileLogger() { return SubsystemLogger("reconcile"); }

// 1000 years: a watermark delay or retention no input outlasts.
constexpr int64_t kForever = int64_t{1000} * 366 * 24 * 3600 * 1000;
constexpr int64_t kEpochStride = OperatorContext::kRevisionEpochStride;

// Result fields that say which version a result is, not what it holds.
bool IsVersionField(std::string_view name) {
  return name == "revision" || name == "state" || name == "reconciled";
}

// Appends {"name": value, ...} of the children `names` of object `node` of
// `r`; false if one is missing. The window key of a result and of a
// too_late record's "window".
bool AppendNamedFieldsJson(const Record& r, uint32_t node, const std::vector<std::string>& names,
                           std::string* out) {
  out->push_back('{');
  for (size_t i = 0; i < names.size(); ++i) {
    const int32_t c = r.FindChild(node, names[i]);
    if (c < 0) return false;
    if (i > 0) out->push_back(',');
    AppendJsonString(names[i], out);
    out->push_back(':');
    r.Get(c).AppendJson(out);
  }
  out->push_back('}');
  return true;
}

// Calls `f` with every line of the file at `path`; NotFound if it cannot be
// opened.
absl::Status ForEachLine(const std::string& path, const std::function<void(std::string_view)>& f) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError("cannot open " + path);
  std::string line;
  while (std::getline(in, line)) f(line);
  return absl::OkStatus();
}

bool IsWindowSink(const JobSpec& spec, const SinkSpec& s) {
  const OperatorSpec* op = spec.FindOperator(s.from);
  return op != nullptr && op->is("window");
}

// Joins whose rows a recomputation reproduces (a lookup join enriches with
// the table as it was when the row passed: not replayable).
bool IsJoinSink(const JobSpec& spec, const SinkSpec& s) {
  const OperatorSpec* op = spec.FindOperator(s.from);
  return op != nullptr &&
         (op->is("window_join") || op->is("interval_join") || op->is("temporal_join"));
}

// The sink `want` names (label, label suffix for files, or index); empty:
// the first sink of a window's results, else of a join's.
absl::StatusOr<size_t> FindSink(const JobSpec& spec, const std::string& want) {
  std::vector<std::string> labels;
  for (const SinkSpec& s : spec.sinks) labels.push_back(s.Label());
  const std::string known = labels.empty() ? "none" : absl::StrJoin(labels, ", ");
  constexpr const char* kWhat =
      "reconcile compares the results of windows and of window, interval and temporal joins";
  if (want.empty()) {
    for (const auto& is : {IsWindowSink, IsJoinSink}) {
      for (size_t i = 0; i < spec.sinks.size(); ++i) {
        if (is(spec, spec.sinks[i])) return i;
      }
    }
    return absl::InvalidArgumentError(absl::StrCat(
        "job ", spec.name, " has no sink of a window's or a join's results (sinks: ", known, "); ",
        kWhat));
  }
  size_t found = spec.sinks.size();
  if (std::all_of(want.begin(), want.end(), ::isdigit)) {
    found = std::stoul(want);
  } else {
    for (size_t i = 0; i < labels.size() && found == spec.sinks.size(); ++i) {
      const SinkSpec& s = spec.sinks[i];
      if (labels[i] == want) found = i;
      // A relative file path as the user wrote it: the end of the resolved one.
      const FileSinkSpec* file = s.As<FileSinkSpec>();
      if (file != nullptr && absl::StartsWith(want, "file:") &&
          absl::EndsWith(file->path, "/" + want.substr(5))) {
        found = i;
      }
    }
  }
  if (found >= spec.sinks.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--sink ", want, ": the job has no such sink (sinks: ", known, ")"));
  }
  const SinkSpec& s = spec.sinks[found];
  if (!IsWindowSink(spec, s) && !IsJoinSink(spec, s)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--sink ", want, ": it writes the results of ", s.from, "; ", kWhat));
  }
  if (!s.kind->readable()) {
    std::vector<std::string> readable;
    for (const SinkKind* k : BuiltinKinds().sinks.all()) {
      if (k->readable()) readable.emplace_back(k->name());
    }
    std::string kinds = readable.back();
    if (readable.size() > 1) {
      readable.pop_back();
      kinds = absl::StrCat(absl::StrJoin(readable, ", "), " and ", kinds);
    }
    return absl::InvalidArgumentError(absl::StrCat("--sink ", want, ": results written to ",
                                                   s.Label(), " cannot be read back (", kinds,
                                                   " sinks can)"));
  }
  return found;
}

// One window's result as read from a sink or recomputed.
struct Result {
  std::string json;
  int64_t revision = -1;
  std::string state;
  int64_t start = 0;  // window_start
  int64_t end = 0;    // window_end
};

// Reads a results stream: keeps per window key the highest revision.
class ResultMap {
 public:
  explicit ResultMap(std::vector<std::string> key_fields) : key_fields_(std::move(key_fields)) {}

  // One result (JSON object); false if it is not one of a window's results.
  bool Add(std::string_view json) {
    if (!decoder_.Decode(json, &rec_).ok()) return false;
    key_.clear();
    if (!AppendNamedFieldsJson(rec_, 0, key_fields_, &key_)) return false;
    const Value rev = rec_.Get(rec_.FindChild(0, "revision"));
    const Value state = rec_.Get(rec_.FindChild(0, "state"));
    const Value start = rec_.Get(rec_.FindChild(0, "window_start"));
    const std::optional<int64_t> t = ParseIso8601(start.s);
    const std::optional<int64_t> end = ParseIso8601(rec_.Get(rec_.FindChild(0, "window_end")).s);
    if (rev.type != ValueType::kInt || !t.has_value() || !end.has_value()) return false;
    ++added_;
    Result& r = results_[key_];
    if (r.revision >= rev.i) return true;
    r.json.assign(json);
    r.revision = rev.i;
    r.state.assign(state.s);
    r.start = *t;
    r.end = *end;
    return true;
  }
  const std::map<std::string, Result>& results() const { return results_; }
  int64_t added() const { return added_; }

 private:
  std::vector<std::string> key_fields_;
  JsonDecoder decoder_;
  Record rec_;
  std::string key_;
  std::map<std::string, Result> results_;
  int64_t added_ = 0;
};

// Takes one result read back (JSON); false if it is not one.
using AddResult = std::function<bool(std::string_view)>;

// Lines of a JSONL file into `add`; NotFound if the file is missing.
absl::Status ReadJsonl(const std::string& path, const AddResult& add) {
  return ForEachLine(path, [&](std::string_view line) {
    if (!line.empty()) add(line);
  });
}

// Calls `f` with every record of the job's audit trail: the too_late outputs
// it keeps in a file or a topic, and the dead letter. Missing files are
// skipped (the trail is best effort).
void ForEachAuditRecord(const JobSpec& spec, const std::string& bootstrap,
                        const std::function<void(std::string_view)>& f) {
  for (const SinkSpec& s : spec.sinks) {
    if (!absl::EndsWith(s.from, ".too_late") || !s.kind->readable()) continue;
    (void)s.kind->ReadBack(s, bootstrap, f);
  }
  if (!spec.dead_letter_path.empty()) (void)ForEachLine(spec.dead_letter_path, f);
}

// Per window key, the too_late records of the job's audit trail that missed
// it, by reason.
class AuditTrail {
 public:
  AuditTrail(const JobSpec& spec, const OperatorSpec& window,
             const std::vector<std::string>& key_fields)
      : spec_(spec), window_(window), key_fields_(key_fields) {}

  void Read(const std::string& bootstrap) {
    ForEachAuditRecord(spec_, bootstrap, [&](std::string_view json) { Add(json); });
  }
  // The causes of window `key`; `missed`: how many records they are.
  std::vector<std::string> Causes(const std::string& key, int64_t* missed) const {
    std::vector<std::string> out;
    auto it = counts_.find(key);
    if (it == counts_.end()) return out;
    for (const auto& [what, n] : it->second) {
      out.push_back(absl::StrCat(n, n == 1 ? " record " : " records ", what));
      *missed += n;
    }
    return out;
  }

 private:
  // One too_late record (possibly wrapped in the dead letter's envelope).
  void Add(std::string_view json) {
    if (!decoder_.Decode(json, &rec_).ok()) return;
    const Value reason = rec_.Get(rec_.FindChild(0, "reason"));
    const Value op = rec_.Get(rec_.FindChild(0, "operator"));
    if (reason.type != ValueType::kString || op.type != ValueType::kString) return;
    const std::string where = absl::StrCat("(", std::string(op.s), ".too_late)");
    const WindowSpec& w = window_.Get<WindowSpec>();
    if (reason.s == "after_final" && op.s == window_.name) {
      const int32_t win = rec_.FindChild(0, "window");
      key_.clear();
      if (win < 0 || !AppendNamedFieldsJson(rec_, static_cast<uint32_t>(win), key_fields_, &key_)) {
        return;
      }
      ++counts_[key_][absl::StrCat("arrived after FINAL ", where)];
    } else if (reason.s == "beyond_retention" && w.kind != WindowSpec::Kind::kSession) {
      // The windows its event time falls in, by the group values it carries.
      const std::optional<int64_t> t = ParseIso8601(rec_.Get(rec_.FindChild(0, "event_time")).s);
      const int32_t r = rec_.FindChild(0, "record");
      if (!t.has_value() || r < 0) return;
      std::string group;
      for (size_t i = 0; i < w.group_by.size(); ++i) {
        int32_t c = static_cast<int32_t>(r);
        for (const std::string& part : w.group_paths[i].parts) {
          c = c < 0 ? -1 : rec_.FindChild(static_cast<uint32_t>(c), part);
        }
        if (c < 0) return;
        if (i > 0) group.push_back(',');
        AppendJsonString(w.group_by[i], &group);
        group.push_back(':');
        rec_.Get(c).AppendJson(&group);
      }
      const int64_t last = LastWindowStart(*t, w.slide);
      for (int64_t s = FirstWindowStart(*t, w.size, w.slide); s <= last; s += w.slide) {
        if (*t >= s + w.size) continue;
        key_.assign("{");
        key_.append(group);
        if (!group.empty()) key_.push_back(',');
        absl::StrAppend(&key_, "\"window_start\":\"", FormatIso8601(s), "\",\"window_end\":\"",
                        FormatIso8601(s + w.size), "\"}");
        ++counts_[key_][absl::StrCat("were older than the dedup horizon ", where)];
      }
    }
  }

  const JobSpec& spec_;
  const OperatorSpec& window_;
  const std::vector<std::string>& key_fields_;  // group-by fields, window bounds
  JsonDecoder decoder_;
  Record rec_;
  std::string key_;
  std::map<std::string, std::map<std::string, int64_t>> counts_;
};

// Canonical JSON of node `node` of `r`, for comparing rows whatever wrote
// them: object members sorted by name (a PostgreSQL jsonb column reorders
// them), numbers by value (1 == 1.0), the version fields of the top level
// (and the member `drop`, if given) left out.
void AppendCanonicalJson(const Record& r, uint32_t node, bool top, std::string* out,
                         std::string_view drop = {}) {
  const Value v = r.Get(static_cast<int32_t>(node));
  if (v.type == ValueType::kObject) {
    std::vector<uint32_t> members;
    r.ForEachChild(node, [&](uint32_t c) {
      if (!top || (!IsVersionField(r.Key(c)) && (drop.empty() || r.Key(c) != drop))) {
        members.push_back(c);
      }
    });
    std::sort(members.begin(), members.end(),
              [&](uint32_t a, uint32_t b) { return r.Key(a) < r.Key(b); });
    out->push_back('{');
    for (size_t i = 0; i < members.size(); ++i) {
      if (i > 0) out->push_back(',');
      AppendJsonString(r.Key(members[i]), out);
      out->push_back(':');
      AppendCanonicalJson(r, members[i], false, out);
    }
    out->push_back('}');
  } else if (v.type == ValueType::kArray) {
    out->push_back('[');
    bool first = true;
    r.ForEachChild(node, [&](uint32_t c) {
      if (!first) out->push_back(',');
      first = false;
      AppendCanonicalJson(r, c, false, out);
    });
    out->push_back(']');
  } else if (v.is_number() && v.type != ValueType::kInt) {
    const double d = v.AsDouble();
    if (d == static_cast<double>(static_cast<int64_t>(d)) && std::abs(d) < 9.0e15) {
      absl::StrAppend(out, static_cast<int64_t>(d));
    } else {
      absl::StrAppendFormat(out, "%.17g", d);
    }
  } else {
    v.AppendJson(out);
  }
}

// A join's rows as a multiset (join rows have no key and no revision: each
// is published once), by canonical JSON.
class RowMultiset {
 public:
  struct Row {
    std::string json;  // as read (the first copy)
    int64_t count = 0;
    int64_t start = kMinTime;  // window_start of a window join's row
  };
  bool Add(std::string_view json) {
    if (!decoder_.Decode(json, &rec_).ok() || rec_.empty()) return false;
    key_.clear();
    AppendCanonicalJson(rec_, 0, true, &key_);
    Row& row = rows_[key_];
    if (row.count++ == 0) {
      row.json.assign(json);
      const Value start = rec_.Get(rec_.FindChild(0, "window_start"));
      if (start.type == ValueType::kString) row.start = ParseIso8601(start.s).value_or(kMinTime);
    }
    ++added_;
    return true;
  }
  const std::map<std::string, Row>& rows() const { return rows_; }
  int64_t added() const { return added_; }

 private:
  JsonDecoder decoder_;
  Record rec_;
  std::string key_;
  std::map<std::string, Row> rows_;
  int64_t added_ = 0;
};

// The join's too_late records by the canonical JSON of the record that was
// too late: a recomputed row holding it on one side is explained by it.
class JoinAuditTrail {
 public:
  // `table`: a temporal join's table source (its rows nest the table's row
  // under that name in the stream record).
  JoinAuditTrail(const JobSpec& spec, const std::string& join, std::string table,
                 const std::string& bootstrap)
      : table_(std::move(table)) {
    ForEachAuditRecord(spec, bootstrap, [&](std::string_view json) {
      if (!decoder_.Decode(json, &rec_).ok()) return;
      const Value op = rec_.Get(rec_.FindChild(0, "operator"));
      const Value reason = rec_.Get(rec_.FindChild(0, "reason"));
      const int32_t record = rec_.FindChild(0, "record");
      if (op.s != join || reason.type != ValueType::kString || record < 0) return;
      key_.clear();
      AppendCanonicalJson(rec_, static_cast<uint32_t>(record), false, &key_);
      const Value side = rec_.Get(rec_.FindChild(0, "side"));
      what_[key_] = absl::StrCat(
          "its ", side.type == ValueType::kString ? std::string(side.s) : std::string("input"),
          " record was too late (",
          reason.s == "after_final" ? std::string("arrived after FINAL") : std::string(reason.s),
          ", ", join, ".too_late)");
    });
  }
  // Why the row `json` is missing from the sink, if its left or right record
  // (or, for a temporal join, the stream record) was too late.
  std::vector<std::string> Causes(std::string_view json) {
    std::vector<std::string> out;
    if (what_.empty() || !decoder_.Decode(json, &rec_).ok() || rec_.empty()) return out;
    auto check = [&](uint32_t node, bool top) {
      key_.clear();
      AppendCanonicalJson(rec_, node, top, &key_, table_);
      auto it = what_.find(key_);
      if (it != what_.end()) out.push_back(it->second);
    };
    // A window or interval join's sides; a temporal join's table row,
    // nested under the table's name.
    for (std::string_view side :
         {std::string_view("left"), std::string_view("right"), std::string_view(table_)}) {
      const int32_t c = side.empty() ? -1 : rec_.FindChild(0, side);
      if (c >= 0) check(static_cast<uint32_t>(c), false);
    }
    if (out.empty() && !table_.empty()) check(0, true);
    return out;
  }

 private:
  std::string table_;
  JsonDecoder decoder_;
  Record rec_;
  std::string key_;
  std::map<std::string, std::string> what_;
};

// "events" of a result (reconcile: {id}), -1 without.
int64_t EventsOf(std::string_view json) {
  JsonDecoder d;
  Record r;
  if (!d.Decode(json, &r).ok()) return -1;
  const Value v = r.Get(r.FindChild(0, "events"));
  return v.type == ValueType::kInt ? v.i : -1;
}

// How many lines the files the job's sources read hold (SourceKind::Files),
// from their sizes and the mean length of the lines in their first MiB (at
// least one per file that has one); 0 when a source reads no file (Kafka) or
// one cannot be read: the id set then grows as it goes.
size_t ExpectedLines(const JobSpec& job) {
  constexpr size_t kSample = size_t{1} << 20;
  size_t lines = 0;
  std::vector<char> buf(kSample);
  for (SourceSpec src : job.sources) {
    const std::vector<std::pair<std::string, std::string*>> files = src.kind->Files(src);
    if (files.empty()) return 0;
    for (const auto& [yaml_path, path] : files) {
      std::error_code ec;
      const uintmax_t size = fs::file_size(*path, ec);
      if (ec) return 0;
      std::ifstream in(*path, std::ios::binary);
      in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
      const size_t got = static_cast<size_t>(in.gcount());
      const size_t newlines = static_cast<size_t>(std::count(buf.data(), buf.data() + got, '\n'));
      if (got == 0) continue;
      lines += newlines == 0 ? 1 : static_cast<size_t>(size / (got / newlines)) + 1;
    }
  }
  return lines;
}

// The job with no lateness cut-off, writing the window's results to `out`.
JobSpec RecomputeSpec(const JobSpec& job, const std::string& window, const std::string& out,
                      const std::string& dead_letter) {
  JobSpec s = job;
  std::optional<size_t> lines;  // read from the files once, and only for a dedup
  s.parallelism = 1;
  s.checkpoint = CheckpointSpec{};
  for (SourceSpec& src : s.sources) {
    src.kind->MakeBounded(src);
    if (src.event_time.has_value()) {
      src.watermark.max_out_of_orderness = kForever;
      src.watermark.idle_timeout = 0;
    }
  }
  for (OperatorSpec& op : s.operators) {
    if (WindowSpec* w = op.Mutable<WindowSpec>()) {
      w->allowed_lateness = kForever;
      w->early_fire_every = 0;
    } else if (DedupSpec* d = op.Mutable<DedupSpec>()) {
      d->retention = kForever;
      d->batch = true;  // ids in memory only: nothing expires or is restored
      // An estimate of the ids to come (a line holds at most one): the set
      // is sized once, not doubled and rehashed eight times on the way to
      // 10 M (3 % of the run: docs/benchmarks.md "Session 26").
      if (!lines.has_value()) lines = ExpectedLines(job);
      d->expected_ids = *lines;
    }
  }
  SinkSpec sink;
  sink.from = window;
  sink.kind = BuiltinKinds().sinks.Find("file");
  sink.config = FileSinkSpec{out};
  s.sinks = {sink};
  s.dead_letter_path = dead_letter;
  return s;
}

// Compares results: the same fields but the version ones, numbers by value
// (1 == 1.0), the rest by canonical JSON (members sorted: a PostgreSQL jsonb
// column reorders an arg_max row's members). Its decoders serve every
// comparison.
class ResultComparer {
 public:
  bool Same(std::string_view a_json, std::string_view b_json) {
    if (!da_.Decode(a_json, &a_).ok() || !db_.Decode(b_json, &b_).ok()) return false;
    ValueFields(a_, &fa_);
    ValueFields(b_, &fb_);
    if (fa_.size() != fb_.size()) return false;
    for (const auto& [name, ia] : fa_) {
      auto it = fb_.find(name);
      if (it == fb_.end()) return false;
      const Value va = a_.Get(ia);
      const Value vb = b_.Get(it->second);
      if (va.is_number() && vb.is_number()) {
        if (CompareValues(va, vb) != 0) return false;
        continue;
      }
      ja_.clear();
      jb_.clear();
      AppendCanonicalJson(a_, static_cast<uint32_t>(ia), false, &ja_);
      AppendCanonicalJson(b_, static_cast<uint32_t>(it->second), false, &jb_);
      if (ja_ != jb_) return false;
    }
    return true;
  }

 private:
  // Field name -> child index, but the version fields.
  static void ValueFields(const Record& r, std::map<std::string, int32_t>* out) {
    out->clear();
    r.ForEachChild(0, [&](uint32_t c) {
      if (!IsVersionField(r.Key(c))) (*out)[std::string(r.Key(c))] = static_cast<int32_t>(c);
    });
  }
  JsonDecoder da_, db_;
  Record a_, b_;
  std::map<std::string, int32_t> fa_, fb_;
  std::string ja_, jb_;
};

// `json` as published by apply: FINAL, reconciled, the given revision.
std::string ReconciledJson(std::string_view json, int64_t revision) {
  JsonDecoder d;
  Record in;
  Record out;
  if (!d.Decode(json, &in).ok()) return std::string(json);
  out.EnsureRoot();
  in.ForEachChild(0, [&](uint32_t c) {
    if (!IsVersionField(in.Key(c))) out.AddValue(in.Key(c), in.Get(static_cast<int32_t>(c)));
  });
  out.AddInt("revision", revision);
  out.AddString("state", "FINAL");
  out.AddBool("reconciled", true);
  return out.ToJson();
}

// Apply to a file sink: reconciled lines appended to the sink's file (one
// write and an fsync per flush), next to what the job committed; readers
// keep the highest revision per key, as they do for the job's own lines.
class AppendFileSink : public Sink {
 public:
  explicit AppendFileSink(std::string path) : path_(std::move(path)) {}
  ~AppendFileSink() override {
    if (fd_ >= 0) ::close(fd_);
  }
  absl::Status Open() override {
    fd_ = ::open(path_.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (fd_ < 0) return absl::InternalError("cannot open " + path_ + " for appending");
    return absl::OkStatus();
  }
  absl::Status WriteRecord(const SinkRecord& r) override {
    buf_.append(r.value);
    buf_.push_back('\n');
    return absl::OkStatus();
  }
  absl::Status Flush() override {
    if (!buf_.empty() &&
        (::write(fd_, buf_.data(), buf_.size()) != static_cast<ssize_t>(buf_.size()) ||
         ::fsync(fd_) != 0)) {
      return absl::InternalError("cannot append to " + path_);
    }
    buf_.clear();
    return absl::OkStatus();
  }
  absl::Status Close() override { return Flush(); }

 private:
  std::string path_;
  int fd_ = -1;
  std::string buf_;
};

// The writer apply publishes through: the sink's own kind, not
// transactional (one batch, flushed once).
absl::StatusOr<std::unique_ptr<Sink>> OpenReconcileSink(const SinkSpec& spec,
                                                        const std::string& job, int64_t epoch,
                                                        const std::string& bootstrap) {
  std::unique_ptr<Sink> sink;
  if (const FileSinkSpec* file = spec.As<FileSinkSpec>()) {
    sink = std::make_unique<AppendFileSink>(file->path);
  } else {
    SinkContext ctx;
    ctx.job_name = job;
    ctx.epoch = epoch;  // PostgreSQL's epoch column
    ctx.embedded_bootstrap = bootstrap;
    ctx.single_batch = true;
    ASSIGN_OR_RETURN(sink, MakeSink(spec, ctx));
  }
  RETURN_IF_ERROR(sink->Open());
  return sink;
}

const char* KindName(ReconcileDifference::Kind k) {
  switch (k) {
    case ReconcileDifference::Kind::kDiffers:
      return "differs";
    case ReconcileDifference::Kind::kOnlyRecomputed:
      return "only_recomputed";
    case ReconcileDifference::Kind::kOnlyInSink:
      return "only_in_sink";
  }
  return "?";
}

std::string RangeText(int64_t start, int64_t end) {
  return absl::StrCat(start == kMinTime ? "" : FormatIso8601(start), "..",
                      end == kMaxTime ? "" : FormatIso8601(end));
}

// Reads the sink's results into `add`; what `add` refuses (lines, messages
// or rows that are no results) is counted and logged once.
absl::Status ReadSink(const SinkSpec& sink, const std::string& bootstrap, const AddResult& add) {
  int64_t skipped = 0;
  const AddResult counted = [&](std::string_view json) {
    if (add(json)) return true;
    ++skipped;
    return false;
  };
  // A ClickHouse table may still hold older revisions next to the newest,
  // which the caller keeps apart.
  const absl::Status st =
      sink.kind->ReadBack(sink, bootstrap, [&](std::string_view json) { counted(json); });
  RETURN_IF_ERROR(st);
  if (skipped > 0) {
    ReconcileLogger()->warn(
        "{}: {} of the results read back are not results of the job's "
        "window or join, ignored",
        sink.Label(), skipped);
  }
  return absl::OkStatus();
}

// Runs the recomputation of `op`'s results into `add`.
absl::Status Recompute(const JobSpec& spec, const std::string& op, const ReconcileOptions& options,
                       const AddResult& add, ReconcileReport* report) {
  const std::string work =
      options.work_dir.empty()
          ? (fs::temp_directory_path() / ("caravela-reconcile-" + std::to_string(::getpid())))
                .string()
          : options.work_dir;
  std::error_code ec;
  fs::remove_all(work, ec);
  fs::create_directories(work, ec);
  if (ec) return absl::InternalError("cannot create the work directory " + work);
  const std::string out_path = work + "/recomputed.jsonl";
  RunOptions run;
  run.data_dir = work + "/state";
  // A batch job: nothing to restore, so no RocksDB (its indexed write
  // batches were a third of the recomputation).
  run.in_memory_state = true;
  run.embedded_bootstrap = options.bootstrap;
  run.progress_interval_ms = 0;
  // Half the streaming default: a decoded purchase takes about half a KB
  // (record, nodes, bytes), so a batch of 512 stays in a core's 512 KB L2
  // from decode through dedup and window, and one of 1024 does not (10.5 M
  // records interleaved: 8.0-10.2 s against 8.7-10.4 s; docs/benchmarks.md).
  run.batch_size = 512;
  const auto t0 = std::chrono::steady_clock::now();
  {
    ASSIGN_OR_RETURN(
        std::unique_ptr<Pipeline> p,
        Pipeline::Create(RecomputeSpec(spec, op, out_path, work + "/dead-letter.jsonl"), run));
    RETURN_IF_ERROR(p->Run());
    report->records_read = p->metrics().Sum("records_in_total");
  }
  report->recompute_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  RETURN_IF_ERROR(ReadJsonl(out_path, add));
  fs::remove_all(work, ec);
  return absl::OkStatus();
}

// Reads the sink's results into `in_sink` (first: a sink that cannot be
// read fails fast), then recomputes `op`'s into `recomputed`; `Results` is
// ResultMap or RowMultiset.
template <typename Results>
absl::Status ReadBothSides(const JobSpec& spec, const SinkSpec& sink, const std::string& op,
                           const ReconcileOptions& options, Results* in_sink, Results* recomputed,
                           ReconcileReport* report) {
  const auto read_start = std::chrono::steady_clock::now();
  RETURN_IF_ERROR(
      ReadSink(sink, options.bootstrap, [&](std::string_view j) { return in_sink->Add(j); }));
  report->sink_results = in_sink->added();
  report->read_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - read_start).count();
  return Recompute(
      spec, op, options, [&](std::string_view j) { return recomputed->Add(j); }, report);
}

// Calls f(key, a's value or nullptr, b's value or nullptr) for every key of
// either sorted map, in key order.
template <typename V, typename F>
void ForEachKeyOfEither(const std::map<std::string, V>& a, const std::map<std::string, V>& b, F f) {
  auto ia = a.begin();
  auto ib = b.begin();
  while (ia != a.end() || ib != b.end()) {
    const bool take_a = ib == b.end() || (ia != a.end() && ia->first <= ib->first);
    const bool take_b = ia == a.end() || (ib != b.end() && ib->first <= ia->first);
    const std::string& key = take_a ? ia->first : ib->first;
    f(key, take_a ? &ia->second : nullptr, take_b ? &ib->second : nullptr);
    if (take_a) ++ia;
    if (take_b) ++ib;
  }
}

// Window results: compared window by window (key order), with causes from
// the audit trail and, with apply, published as reconciled revisions.
absl::Status ReconcileWindows(const JobSpec& spec, const SinkSpec& sink, const OperatorSpec& window,
                              const ReconcileOptions& options, ReconcileReport* report) {
  std::vector<std::string> key_fields = window.Get<WindowSpec>().group_by;
  key_fields.push_back("window_start");
  key_fields.push_back("window_end");

  ResultMap in_sink(key_fields);
  ResultMap recomputed(key_fields);
  RETURN_IF_ERROR(ReadBothSides(spec, sink, window.name, options, &in_sink, &recomputed, report));

  // Compare, window by window, in key order.
  auto in_range = [&](const Result& r) {
    return r.start >= options.range_start && r.start < options.range_end;
  };
  const auto& a = in_sink.results();
  const auto& b = recomputed.results();
  // A FINAL result of a window ending at E means the stream's watermark
  // reached E + lateness, so every window ending by E is final there too. A
  // window only the recomputation has and that ends later may still be open
  // in the stream (no result yet): it is the stream's, not a difference.
  int64_t final_by = kMinTime;
  for (const auto& [key, r] : a) {
    if (r.state == "FINAL") final_by = std::max(final_by, r.end);
  }
  ResultComparer comparer;
  ForEachKeyOfEither(a, b, [&](const std::string& key, const Result* ra, const Result* rb) {
    if (!in_range(ra != nullptr ? *ra : *rb)) return;
    ++report->windows;
    if ((ra != nullptr && ra->state != "FINAL") || (ra == nullptr && rb->end > final_by)) {
      ++report->not_final;
      return;
    }
    ReconcileDifference d;
    d.key = key;
    if (ra == nullptr) {
      d.kind = ReconcileDifference::Kind::kOnlyRecomputed;
    } else if (rb == nullptr) {
      d.kind = ReconcileDifference::Kind::kOnlyInSink;
    } else if (comparer.Same(ra->json, rb->json)) {
      ++report->matching;
      return;
    }
    if (ra != nullptr) {
      d.sink = ra->json;
      d.sink_revision = ra->revision;
    }
    if (rb != nullptr) d.recomputed = rb->json;
    report->differences.push_back(std::move(d));
  });
  if (!report->differences.empty()) {
    AuditTrail trail(spec, window, key_fields);
    trail.Read(options.bootstrap);
    for (ReconcileDifference& d : report->differences) {
      int64_t missed = 0;
      d.causes = trail.Causes(d.key, &missed);
      // With reconcile: {id}: events the stream counted beyond what the
      // recomputation keeps, once the records it missed are added back.
      const int64_t in_sink = EventsOf(d.sink);
      const int64_t recomputed_events = EventsOf(d.recomputed);
      const int64_t excess = in_sink + missed - recomputed_events;
      if (in_sink >= 0 && recomputed_events >= 0 && excess > 0) {
        d.causes.push_back(absl::StrCat(excess, excess == 1 ? " event" : " events",
                                        " counted by the stream that the recomputation drops as "
                                        "copies: ids counted again after the dedup retention"));
      }
    }
  }
  if (!options.apply) return absl::OkStatus();

  // Through the job's own sink: one writer, committed like a checkpoint.
  int64_t epoch = 0;
  for (const ReconcileDifference& d : report->differences) {
    epoch = std::max(epoch, ReconciledRevision(d.sink_revision) / kEpochStride);
  }
  ASSIGN_OR_RETURN(std::unique_ptr<Sink> writer,
                   OpenReconcileSink(sink, spec.name, epoch, options.bootstrap));
  for (ReconcileDifference& d : report->differences) {
    if (d.recomputed.empty()) continue;  // nothing to publish for a window only the sink has
    SinkRecord r;
    const std::string value = ReconciledJson(d.recomputed, ReconciledRevision(d.sink_revision));
    r.key = d.key;
    r.value = value;
    r.revision = ReconciledRevision(d.sink_revision);
    r.state = "FINAL";
    RETURN_IF_ERROR(writer->WriteRecord(r));
    d.applied = true;
    ++report->applied;
  }
  RETURN_IF_ERROR(writer->Flush());
  return writer->Close();
}

// A join's rows: compared as multisets (report only).
absl::Status ReconcileJoinRows(const JobSpec& spec, const SinkSpec& sink, const OperatorSpec& join,
                               const ReconcileOptions& options, ReconcileReport* report) {
  RowMultiset in_sink;
  RowMultiset recomputed;
  RETURN_IF_ERROR(ReadBothSides(spec, sink, join.name, options, &in_sink, &recomputed, report));
  using Row = RowMultiset::Row;
  ForEachKeyOfEither(
      in_sink.rows(), recomputed.rows(), [&](const std::string&, const Row* ra, const Row* rb) {
        const int64_t start = ra != nullptr ? ra->start : rb->start;
        if (start < options.range_start || start >= options.range_end) return;
        const int64_t na = ra != nullptr ? ra->count : 0;
        const int64_t nb = rb != nullptr ? rb->count : 0;
        report->windows += std::max(na, nb);
        report->matching += std::min(na, nb);
        if (na == nb) return;
        ReconcileDifference d;
        d.kind = na > nb ? ReconcileDifference::Kind::kOnlyInSink
                         : ReconcileDifference::Kind::kOnlyRecomputed;
        d.rows = std::abs(na - nb);
        if (ra != nullptr) d.sink = ra->json;
        if (rb != nullptr) d.recomputed = rb->json;
        if (na > 0 && nb > 0) {
          d.causes.push_back(absl::StrCat(
              "the sink holds ", na, " copies of the row, the recomputation ", nb,
              na > nb && !sink.is("file") ? " (a sink without transactions may repeat rows "
                                            "after a recovery)"
                                          : ""));
        }
        report->differences.push_back(std::move(d));
      });
  if (!report->differences.empty()) {
    JoinAuditTrail trail(spec, join.name,
                         join.is("temporal_join") ? join.Get<TableJoinSpec>().table : std::string(),
                         options.bootstrap);
    for (ReconcileDifference& d : report->differences) {
      if (d.kind != ReconcileDifference::Kind::kOnlyRecomputed) continue;
      for (std::string& c : trail.Causes(d.recomputed)) d.causes.push_back(std::move(c));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::pair<int64_t, int64_t>> ParseTimeRange(std::string_view range, int64_t now_ms) {
  const std::string text(range);
  constexpr int64_t kDay = 24 * 3600 * 1000;
  if (text == "today" || text == "yesterday") {
    const int64_t today = FloorDiv(now_ms, kDay) * kDay;
    return text == "today" ? std::make_pair(today, today + kDay)
                           : std::make_pair(today - kDay, today);
  }
  const size_t dots = text.find("..");
  if (dots == std::string_view::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("--range ", text, ": expected START..END with ISO-8601 UTC times, e.g. ",
                     "2026-10-01T00:00:00Z..2026-10-02T00:00:00Z (either side may be left out)"));
  }
  std::pair<int64_t, int64_t> r{kMinTime, kMaxTime};
  const std::string a = text.substr(0, dots);
  const std::string b = text.substr(dots + 2);
  for (const auto& [part, out] : {std::pair{a, &r.first}, std::pair{b, &r.second}}) {
    if (part.empty()) continue;
    const std::optional<int64_t> t = ParseIso8601(part);
    if (!t.has_value()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--range ", text, ": \"", part, "\" is not an ISO-8601 UTC time (2026-10-01T00:00:00Z)"));
    }
    *out = *t;
  }
  if (r.first >= r.second) {
    return absl::InvalidArgumentError(
        absl::StrCat("--range ", text, ": the start must be before the end"));
  }
  return r;
}

int64_t ReconciledRevision(int64_t revision) {
  const int64_t epoch = revision < 0 ? 0 : revision / kEpochStride;
  return (epoch + 1) * kEpochStride + (kEpochStride - 1);
}

absl::StatusOr<ReconcileReport> Reconcile(const JobSpec& spec, const ReconcileOptions& options) {
  ASSIGN_OR_RETURN(const size_t sink_index, FindSink(spec, options.sink));
  const SinkSpec& sink = spec.sinks[sink_index];
  const OperatorSpec& op = *spec.FindOperator(sink.from);
  ReconcileReport report;
  report.job = spec.name;
  report.window = op.name;
  report.sink = sink.Label();
  report.range_start = options.range_start;
  report.range_end = options.range_end;
  report.join_rows = !op.is("window");
  if (spec.NeedsEmbeddedBroker() && options.bootstrap.empty()) {
    return absl::InvalidArgumentError(
        "the job reads or writes Kafka topics on the embedded broker (no bootstrap): give "
        "--bootstrap HOST:PORT of the broker that holds them");
  }
  if (!report.join_rows) {
    RETURN_IF_ERROR(ReconcileWindows(spec, sink, op, options, &report));
    return report;
  }
  if (options.apply) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--apply: ", op.name, " is a join; its rows are reported, not applied (a join row ",
        "has no revision to raise); run without --apply for the report"));
  }
  const bool ranged = options.range_start != kMinTime || options.range_end != kMaxTime;
  if (ranged && !op.is("window_join")) {
    return absl::InvalidArgumentError(
        absl::StrCat("--range: the rows of ", op.name,
                     " carry no window to select them by; leave --range out to compare them all"));
  }
  RETURN_IF_ERROR(ReconcileJoinRows(spec, sink, op, options, &report));
  return report;
}

std::string ReconcileReport::ToText() const {
  const char* unit = join_rows ? "rows" : "windows";
  std::string out = absl::StrCat("job ", job, ": ", join_rows ? "join " : "window ", window,
                                 ", sink ", sink, "\n");
  absl::StrAppend(&out, "recomputed from ", records_read, " input records in ",
                  absl::StrFormat("%.2f", recompute_seconds), " s; read back ", sink_results,
                  " results in ", absl::StrFormat("%.2f", read_seconds), " s\n");
  absl::StrAppend(&out, unit,
                  range_start == kMinTime && range_end == kMaxTime
                      ? ""
                      : absl::StrCat(" with window_start in ", RangeText(range_start, range_end)),
                  ": ", windows, ", matching ", matching, ", different ", differences.size());
  if (!join_rows) absl::StrAppend(&out, ", not yet FINAL in the sink ", not_final);
  absl::StrAppend(&out, "\n");
  for (const ReconcileDifference& d : differences) {
    if (join_rows) {
      absl::StrAppend(&out, "\n", KindName(d.kind), d.rows == 1 ? "" : absl::StrCat(" x", d.rows),
                      "\n  row:        ",
                      d.kind == ReconcileDifference::Kind::kOnlyInSink ? d.sink : d.recomputed,
                      "\n");
    } else {
      absl::StrAppend(&out, "\n", KindName(d.kind), " ", d.key, "\n");
      if (!d.sink.empty()) absl::StrAppend(&out, "  sink:       ", d.sink, "\n");
      if (!d.recomputed.empty()) absl::StrAppend(&out, "  recomputed: ", d.recomputed, "\n");
    }
    for (const std::string& c : d.causes) absl::StrAppend(&out, "  cause:      ", c, "\n");
    if (d.applied) {
      absl::StrAppend(&out, "  applied as revision ", ReconciledRevision(d.sink_revision), "\n");
    }
  }
  if (differences.empty()) absl::StrAppend(&out, "all ", unit, " match\n");
  if (join_rows && !differences.empty()) {
    absl::StrAppend(&out,
                    "join rows are reported only (--apply publishes window results); rows a "
                    "running job has not emitted yet show as only_recomputed\n");
  }
  if (applied > 0) absl::StrAppend(&out, "applied ", applied, " reconciled results\n");
  return out;
}

std::string ReconcileReport::ToJson() const {
  Record r;
  r.EnsureRoot();
  r.AddString("job", job);
  r.AddString("window", window);
  r.AddString("sink", sink);
  if (range_start != kMinTime) r.AddString("range_start", FormatIso8601(range_start));
  if (range_end != kMaxTime) r.AddString("range_end", FormatIso8601(range_end));
  r.AddInt("records_read", records_read);
  r.AddDouble("recompute_seconds", recompute_seconds);
  r.AddInt("sink_results", sink_results);
  r.AddDouble("read_seconds", read_seconds);
  r.AddString("compared", join_rows ? "rows" : "windows");
  r.AddInt(join_rows ? "rows" : "windows", windows);
  r.AddInt("matching", matching);
  if (!join_rows) r.AddInt("not_final", not_final);
  r.AddInt("applied", applied);
  r.BeginArray("differences");
  JsonDecoder d;
  Record part;
  for (const ReconcileDifference& diff : differences) {
    r.BeginObject("");
    r.AddString("kind", KindName(diff.kind));
    if (join_rows) r.AddInt("rows", diff.rows);
    if (!diff.key.empty() && d.Decode(diff.key, &part).ok()) r.AddValue("key", part.Get(0));
    if (!diff.sink.empty() && d.Decode(diff.sink, &part).ok()) r.AddValue("sink", part.Get(0));
    if (!diff.recomputed.empty() && d.Decode(diff.recomputed, &part).ok()) {
      r.AddValue("recomputed", part.Get(0));
    }
    r.BeginArray("causes");
    for (const std::string& c : diff.causes) r.AddString("", c);
    r.EndContainer();
    if (diff.applied) r.AddInt("applied_revision", ReconciledRevision(diff.sink_revision));
    r.EndContainer();
  }
  r.EndContainer();
  return r.ToJson();
}

}  // namespace caravela
