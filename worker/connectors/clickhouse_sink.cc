#include "worker/connectors/clickhouse_sink.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <optional>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/job_spec.h"
#include "common/logging.h"
#include "common/time_util.h"
#include "worker/operators/window_operator.h"

namespace caravela {
namespace {

std::shared_ptr<spdlog::logger> Logger() { return SubsystemLogger("clickhouse"); }

std::string Backquote(std::string_view name) { return absl::StrCat("`", std::string(name), "`"); }

bool IsWindowBound(std::string_view name) { return name == "window_start" || name == "window_end"; }

constexpr char kResultColumn[] = "_result";

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

absl::flat_hash_map<std::string, std::string> ClickHouseTypeHints(const OperatorSpec& op) {
  absl::flat_hash_map<std::string, std::string> hints;
  const WindowSpec* window = op.As<WindowSpec>();
  if (window == nullptr) return hints;
  for (const AggregateSpec& a : window->aggregates) {
    switch (a.fn) {
      case AggFn::kCount:
      case AggFn::kCountDistinct:
        hints[a.as] = "Int64";
        break;
      case AggFn::kSum:
      case AggFn::kMin:
      case AggFn::kMax:
      case AggFn::kAvg:
        hints[a.as] = "Nullable(Float64)";
        break;
      case AggFn::kArgMax:
      case AggFn::kArgMin:
        hints[a.as] = "Nullable(String)";
        break;
    }
  }
  if (!window->reconcile_id.empty()) {
    hints["events"] = "Int64";
    hints["id_digest"] = "String";
  }
  return hints;
}

std::string ClickHouseTimeType(std::string_view version) {
  int major = 0;
  int minor = 0;
  std::sscanf(std::string(version).c_str(), "%d.%d", &major, &minor);
  return major > 20 || (major == 20 && minor >= 1) ? "DateTime64(3, 'UTC')" : "Int64";
}

ClickHouseSink::ClickHouseSink(ClickHouseSinkOptions options) : options_(std::move(options)) {
  qualified_ = absl::StrCat(Backquote(options_.database), ".", Backquote(options_.table));
}

ClickHouseSink::~ClickHouseSink() = default;

absl::Status ClickHouseSink::Error(const absl::Status& st) const {
  return absl::Status(st.code(), absl::StrCat(options_.yaml_path, " (table ", options_.database,
                                              ".", options_.table, "): ", st.message()));
}

ClickHouseSink::Column ClickHouseSink::MakeColumn(std::string name, std::string type) {
  Column c;
  c.name = std::move(name);
  c.type = std::move(type);
  absl::string_view t = c.type;
  if (absl::StartsWith(t, "Nullable(") && absl::EndsWith(t, ")")) {
    c.nullable = true;
    t = t.substr(9, t.size() - 10);
  }
  if (t == "String") {
    c.kind = ColumnKind::kString;
  } else if (absl::StartsWith(t, "Int") || absl::StartsWith(t, "UInt")) {
    c.kind = t == "UInt8" ? ColumnKind::kBool : ColumnKind::kInt;
    if (IsWindowBound(c.name) && t == "Int64") c.kind = ColumnKind::kTimeMs;
  } else if (absl::StartsWith(t, "Float") || absl::StartsWith(t, "Decimal")) {
    c.kind = ColumnKind::kFloat;
  } else if (absl::StartsWith(t, "DateTime64")) {
    c.kind = ColumnKind::kDateTime64;
  }
  if (c.name == kResultColumn) c.kind = ColumnKind::kJson;
  return c;
}

namespace {
// The client the sink's options describe, its password read from the file.
absl::StatusOr<ClickHouseClientOptions> ClientOptions(const ClickHouseSinkOptions& o) {
  ClickHouseClientOptions co;
  co.url = o.url;
  co.user = o.user;
  co.retries = o.retries;
  co.backoff_ms = o.backoff_ms;
  if (!o.password_file.empty()) {
    std::ifstream in(o.password_file);
    if (!in) {
      return absl::NotFoundError(absl::StrCat("cannot read password_file ", o.password_file));
    }
    std::stringstream ss;
    ss << in.rdbuf();
    co.password = ss.str();
    while (!co.password.empty() && (co.password.back() == '\n' || co.password.back() == '\r')) {
      co.password.pop_back();
    }
  }
  return co;
}
}  // namespace

absl::Status ReadClickHouseResults(const ClickHouseSinkOptions& options,
                                   const std::function<void(std::string_view)>& each) {
  const std::string where =
      absl::StrCat("clickhouse sink ", options.database, ".", options.table, " at ", options.url);
  absl::StatusOr<ClickHouseClientOptions> co = ClientOptions(options);
  if (!co.ok())
    return absl::Status(co.status().code(), absl::StrCat(where, ": ", co.status().message()));
  ClickHouseClient client(*co);
  // TabSeparatedRaw: one JSON object per line as it is (JSON text holds no
  // raw tab or newline).
  absl::StatusOr<std::string> body = client.Execute(
      absl::StrCat("SELECT ", Backquote(kResultColumn), " FROM ", Backquote(options.database), ".",
                   Backquote(options.table), " FORMAT TabSeparatedRaw"));
  if (!body.ok()) {
    return absl::Status(body.status().code() == absl::StatusCode::kUnavailable ||
                                body.status().code() == absl::StatusCode::kUnauthenticated
                            ? body.status().code()
                            : absl::StatusCode::kFailedPrecondition,
                        absl::StrCat(where, ": cannot read it back: ", body.status().message()));
  }
  for (absl::string_view line : absl::StrSplit(*body, '\n', absl::SkipEmpty())) {
    each(std::string_view(line.data(), line.size()));
  }
  return absl::OkStatus();
}

absl::Status ClickHouseSink::Open() {
  absl::StatusOr<ClickHouseClientOptions> co = ClientOptions(options_);
  if (!co.ok()) return Error(co.status());
  client_ = std::make_unique<ClickHouseClient>(*co);
  absl::StatusOr<std::string> version = client_->Execute("SELECT version()");
  if (!version.ok()) return Error(version.status());
  time_type_ = ClickHouseTimeType(*version);
  if (options_.database != "default") {
    absl::StatusOr<std::string> r = client_->Execute(
        absl::StrCat("CREATE DATABASE IF NOT EXISTS ", Backquote(options_.database)));
    if (!r.ok()) return Error(r.status());
  }
  return ReadTable();
}

absl::Status ClickHouseSink::ReadTable() {
  absl::StatusOr<std::string> r = client_->Execute(absl::StrCat(
      "SELECT name, type FROM system.columns WHERE database = ", ClickHouseQuote(options_.database),
      " AND table = ", ClickHouseQuote(options_.table), " FORMAT TabSeparated"));
  if (!r.ok()) return Error(r.status());
  columns_.clear();
  for (absl::string_view line : absl::StrSplit(*r, '\n', absl::SkipEmpty())) {
    std::vector<std::string> parts = absl::StrSplit(line, '\t');
    if (parts.size() == 2) columns_.push_back(MakeColumn(parts[0], parts[1]));
  }
  table_ready_ = !columns_.empty();
  keyed_ = false;
  std::vector<std::string> names;
  for (const Column& c : columns_) {
    names.push_back(Backquote(c.name));
    keyed_ = keyed_ || c.name == "revision";
  }
  insert_ = absl::StrCat("INSERT INTO ", qualified_, " (", absl::StrJoin(names, ", "),
                         ") FORMAT JSONEachRow");
  return absl::OkStatus();
}

absl::Status ClickHouseSink::CreateTable(const SinkRecord& first) {
  if (!decoder_.Decode(first.value, &rec_).ok()) {
    return Error(absl::InvalidArgumentError("the first result is not a JSON object"));
  }
  std::vector<std::string> key;
  if (!first.key.empty()) {
    Record k;
    if (!decoder_.Decode(first.key, &k).ok()) {
      return Error(absl::InvalidArgumentError("the first result's key is not a JSON object"));
    }
    k.ForEachChild(0, [&](uint32_t c) { key.emplace_back(k.Key(c)); });
  }
  auto is_key = [&](std::string_view name) {
    return std::find(key.begin(), key.end(), name) != key.end();
  };
  auto type_of = [&](std::string_view name, bool in_key) -> std::string {
    if (IsWindowBound(name)) return time_type_;
    auto hint = options_.hints.find(std::string(name));
    if (hint != options_.hints.end()) return hint->second;
    const Value v = rec_.Get(rec_.FindChild(0, name));
    if (in_key) return v.type == ValueType::kInt ? "Int64" : "String";
    if (v.is_number()) return "Nullable(Float64)";
    if (v.type == ValueType::kBool) return "Nullable(UInt8)";
    return "Nullable(String)";
  };
  std::vector<std::string> defs;
  std::vector<std::string> order;
  for (const std::string& k : key) {
    defs.push_back(absl::StrCat(Backquote(k), " ", type_of(k, true)));
    order.push_back(Backquote(k));
  }
  rec_.ForEachChild(0, [&](uint32_t c) {
    const std::string_view name = rec_.Key(c);
    if (is_key(name) || name == "revision" || name == "state" || name == "reconciled" ||
        name == kResultColumn) {
      return;
    }
    defs.push_back(absl::StrCat(Backquote(name), " ", type_of(name, false)));
  });
  const bool keyed = !key.empty();
  if (keyed) {
    defs.push_back("`revision` UInt64");
    defs.push_back("`state` String");
    defs.push_back("`reconciled` UInt8");
  }
  defs.push_back(absl::StrCat(Backquote(kResultColumn), " String"));
  const std::string sql = absl::StrCat(
      "CREATE TABLE IF NOT EXISTS ", qualified_, " (", absl::StrJoin(defs, ", "), ") ENGINE = ",
      keyed ? absl::StrCat("ReplacingMergeTree(`revision`) ORDER BY (", absl::StrJoin(order, ", "),
                           ")")
            : std::string("MergeTree ORDER BY tuple()"));
  Logger()->info("{}: {}", options_.yaml_path, sql);
  absl::StatusOr<std::string> r = client_->Execute(sql);
  if (!r.ok()) return Error(r.status());
  return ReadTable();
}

void ClickHouseSink::AppendCell(const Column& c, const Value& v) {
  std::string& out = buf_;
  auto null_or_default = [&] {
    if (c.nullable) {
      out.append("null");
      return true;
    }
    return false;
  };
  switch (c.kind) {
    case ColumnKind::kString:
      if (v.type == ValueType::kString) {
        AppendJsonString(v.s, &out);
      } else if (v.is_null()) {
        if (!null_or_default()) out.append("\"\"");
      } else {
        scratch_.clear();
        v.AppendJson(&scratch_);
        AppendJsonString(scratch_, &out);
      }
      return;
    case ColumnKind::kJson:
      return;  // written by AppendRow
    case ColumnKind::kTimeMs:
    case ColumnKind::kDateTime64: {
      std::optional<int64_t> t;
      if (v.type == ValueType::kString) t = ParseIso8601(v.s);
      if (v.type == ValueType::kInt) t = v.i;
      if (!t.has_value()) break;
      if (c.kind == ColumnKind::kTimeMs) {
        absl::StrAppend(&out, *t);
      } else {
        std::string text = FormatIso8601(*t);  // 2026-10-01T10:00:00.000Z
        if (text.size() > 1 && text.back() == 'Z') text.pop_back();
        for (char& ch : text) {
          if (ch == 'T') ch = ' ';
        }
        AppendJsonString(text, &out);
      }
      return;
    }
    case ColumnKind::kInt:
      if (v.type == ValueType::kInt) {
        absl::StrAppend(&out, v.i);
        return;
      }
      if (v.is_number() &&
          v.AsDouble() == static_cast<double>(static_cast<int64_t>(v.AsDouble()))) {
        absl::StrAppend(&out, static_cast<int64_t>(v.AsDouble()));
        return;
      }
      break;
    case ColumnKind::kFloat:
      if (v.is_number()) {
        v.AppendJson(&out);
        return;
      }
      break;
    case ColumnKind::kBool:
      if (v.type == ValueType::kBool) {
        out.push_back(v.b ? '1' : '0');
        return;
      }
      break;
    case ColumnKind::kOther:
      if (!v.is_null()) {
        v.AppendJson(&out);
        return;
      }
      break;
  }
  if (!v.is_null()) ++mismatched_;
  if (!null_or_default()) {
    // The column's default: an empty string for text, 0 otherwise.
    out.append(c.kind == ColumnKind::kDateTime64 || c.kind == ColumnKind::kString ? "\"\"" : "0");
  }
}

void ClickHouseSink::AppendRow(const SinkRecord& r) {
  const bool decoded = decoder_.Decode(r.value, &rec_).ok();
  buf_.push_back('{');
  bool first = true;
  for (const Column& c : columns_) {
    if (!first) buf_.push_back(',');
    first = false;
    AppendJsonString(c.name, &buf_);
    buf_.push_back(':');
    if (c.kind == ColumnKind::kJson) {
      AppendJsonString(r.value, &buf_);
      continue;
    }
    AppendCell(c, decoded ? rec_.Get(rec_.FindChild(0, c.name)) : Value::Null());
  }
  buf_.append("}\n");
  ++buffered_rows_;
}

absl::Status ClickHouseSink::CheckTable(const SinkRecord& first) {
  if (first.key.empty()) return absl::OkStatus();
  Record k;
  std::vector<std::string> missing;
  if (decoder_.Decode(first.key, &k).ok()) {
    k.ForEachChild(0, [&](uint32_t c) {
      const std::string_view name = k.Key(c);
      if (std::none_of(columns_.begin(), columns_.end(),
                       [&](const Column& col) { return col.name == name; })) {
        missing.emplace_back(name);
      }
    });
  }
  if (!keyed_) missing.emplace_back("revision");
  if (missing.empty()) return absl::OkStatus();
  return Error(absl::FailedPreconditionError(absl::StrCat(
      "the existing table has no column ", absl::StrJoin(missing, ", "),
      " (the results are keyed by their key fields and replaced by revision); drop it or name "
      "another table")));
}

absl::Status ClickHouseSink::WriteRecord(const SinkRecord& r) {
  if (!table_ready_) {
    RETURN_IF_ERROR(CreateTable(r));
  } else if (!checked_) {
    RETURN_IF_ERROR(CheckTable(r));
  }
  checked_ = true;
  if (keyed_ && !r.key.empty() && r.revision < 0) {
    return Error(absl::InvalidArgumentError(
        "a keyed result without a revision: the table keeps the highest revision per key, so "
        "write results of a window (or a keyless stream) here"));
  }
  if (keyed_ && r.key.empty()) {
    return Error(absl::InvalidArgumentError(
        "the table keeps revisions per key (it has a revision column) but this result has no "
        "key: write keyless rows (joins, side outputs) to a table of their own"));
  }
  if (buffered_rows_ == 0) oldest_ms_ = NowMs();
  AppendRow(r);
  if (buf_.size() >= options_.max_buffered_bytes) return Send();
  return absl::OkStatus();
}

absl::Status ClickHouseSink::Flush() {
  if (buffered_rows_ == 0) return absl::OkStatus();
  if (buf_.size() < options_.max_buffered_bytes &&
      NowMs() - oldest_ms_ < options_.flush_interval_ms) {
    return absl::OkStatus();
  }
  return Send();
}

absl::StatusOr<std::string> ClickHouseSink::PreCommit(int64_t checkpoint_id) {
  RETURN_IF_ERROR(Send());
  RETURN_IF_ERROR(Wait());
  return std::string();
}

absl::Status ClickHouseSink::Wait() {
  if (!inflight_.valid()) return absl::OkStatus();
  return inflight_.get();
}

absl::Status ClickHouseSink::Send() {
  RETURN_IF_ERROR(Wait());
  if (buffered_rows_ == 0) return absl::OkStatus();
  sending_.swap(buf_);
  buf_.clear();
  const auto rows = static_cast<int64_t>(buffered_rows_);
  buffered_rows_ = 0;
  inflight_ = std::async(std::launch::async, [this, rows]() -> absl::Status {
    absl::StatusOr<std::string> r = client_->Execute(insert_, sending_);
    if (!r.ok()) return Error(r.status());
    written_ += rows;
    return absl::OkStatus();
  });
  return absl::OkStatus();
}

absl::Status ClickHouseSink::Close() {
  if (client_ == nullptr) return absl::OkStatus();
  RETURN_IF_ERROR(Send());
  return Wait();
}

}  // namespace caravela
