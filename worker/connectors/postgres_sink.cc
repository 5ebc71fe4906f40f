#include "worker/connectors/postgres_sink.h"

#include <libpq-fe.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/job_spec.h"
#include "common/logging.h"
#include "spdlog/spdlog.h"

namespace caravela {
namespace {

// This abseil build does not alias absl::string_view to std::string_view.
absl::string_view Sv(std::string_view s) { return absl::string_view(s.data(), s.size()); }

// Columns the sink owns; key fields may not use these names.
constexpr std::string_view kSinkColumns[] = {"revision", "state", "epoch", "value", "updated_at"};

std::shared_ptr<spdlog::logger> PostgresLogger() {
  static const std::shared_ptr<spdlog::logger> logger = SubsystemLogger("postgres");
  return logger;
}

void NoticeToLog(void* /*arg*/, const char* message) {
  std::string_view m = message == nullptr ? "" : message;
  while (!m.empty() && m.back() == '\n') m.remove_suffix(1);
  PostgresLogger()->debug("server notice: {}", m);
}

std::string Trimmed(const char* msg) {
  std::string s = msg == nullptr ? "" : msg;
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  // libpq messages span lines ("ERROR: ...\nDETAIL: ..."); keep them on one.
  std::replace(s.begin(), s.end(), '\n', ' ');
  std::replace(s.begin(), s.end(), '\t', ' ');
  return s;
}

// The DSN with its password hidden, for messages.
std::string MaskDsn(std::string_view dsn) {
  std::string out(dsn);
  // URI form: scheme://user:password@host...
  size_t scheme = out.find("://");
  if (scheme != std::string::npos) {
    size_t start = scheme + 3;
    size_t at = out.find('@', start);
    size_t slash = out.find('/', start);
    if (at != std::string::npos && (slash == std::string::npos || at < slash)) {
      size_t colon = out.find(':', start);
      if (colon != std::string::npos && colon < at) out.replace(colon + 1, at - colon - 1, "***");
    }
  }
  // key=value form (and URI query parameters): password=...
  for (size_t pos = out.find("password"); pos != std::string::npos;
       pos = out.find("password", pos + 1)) {
    size_t eq = pos + 8;
    while (eq < out.size() && out[eq] == ' ') ++eq;
    if (eq >= out.size() || out[eq] != '=') continue;
    size_t v = eq + 1;
    while (v < out.size() && out[v] == ' ') ++v;
    size_t end = v;
    if (end < out.size() && out[end] == '\'') {
      ++end;
      while (end < out.size() && out[end] != '\'') end += out[end] == '\\' ? 2 : 1;
      end = std::min(end + 1, out.size());
    } else {
      while (end < out.size() && out[end] != ' ' && out[end] != '&') ++end;
    }
    out.replace(v, end - v, "***");
  }
  return out;
}

std::string QuoteIdent(std::string_view name) {
  std::string out = "\"";
  for (char c : name) {
    if (c == '"') out.push_back('"');
    out.push_back(c);
  }
  out.push_back('"');
  return out;
}

// One element of a PostgreSQL array literal: "..." with " and \ escaped.
void AppendArrayString(std::string_view s, std::string* out) {
  out->push_back('"');
  for (char c : s) {
    if (c == '"' || c == '\\') out->push_back('\\');
    out->push_back(c);
  }
  out->push_back('"');
}

void AppendLengthPrefixed(std::string_view s, std::string* out) {
  uint32_t n = static_cast<uint32_t>(s.size());
  out->append(reinterpret_cast<const char*>(&n), sizeof n);
  out->append(s);
}

bool IsSinkColumn(std::string_view name) {
  return std::find(std::begin(kSinkColumns), std::end(kSinkColumns), name) !=
         std::end(kSinkColumns);
}

absl::StatusCode CodeForSqlState(std::string_view state) {
  if (state.size() < 2) return absl::StatusCode::kInternal;
  std::string_view cls = state.substr(0, 2);
  if (cls == "08" || cls == "57" || cls == "53") return absl::StatusCode::kUnavailable;
  if (cls == "22" || cls == "23") return absl::StatusCode::kInvalidArgument;
  if (cls == "42" || cls == "3F" || cls == "28") return absl::StatusCode::kFailedPrecondition;
  return absl::StatusCode::kInternal;
}

}  // namespace

std::string MaskPostgresDsn(std::string_view dsn) { return MaskDsn(dsn); }

std::string PostgresMessage(const char* message) { return Trimmed(message); }

absl::StatusOr<std::pair<std::string, std::string>> PostgresTableNames(std::string_view table) {
  // [schema.]table, folded to lower case as PostgreSQL folds unquoted names,
  // then quoted (so reserved words work).
  const size_t dot = table.find('.');
  std::vector<std::string> parts;
  if (dot == std::string_view::npos) {
    parts.emplace_back(table);
  } else {
    parts.emplace_back(table.substr(0, dot));
    parts.emplace_back(table.substr(dot + 1));
  }
  std::string quoted;
  for (std::string& p : parts) {
    if (!IsSqlIdentifier(p)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "expected [schema.]table made of SQL identifiers, got \"", std::string(table), "\""));
    }
    for (char& c : p) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (!quoted.empty()) quoted.push_back('.');
    quoted += QuoteIdent(p);
  }
  return std::make_pair(absl::StrJoin(parts, "."), quoted);
}

void PostgresSink::ResultDeleter::operator()(PGresult* r) const { PQclear(r); }

PostgresSink::PostgresSink(PostgresSinkOptions options) : options_(std::move(options)) {}

PostgresSink::~PostgresSink() { Disconnect(); }

std::string PostgresSink::Where() const {
  return absl::StrCat(options_.yaml_path, " (table ", table_display_, ")");
}

void PostgresSink::Disconnect() {
  if (conn_ != nullptr) {
    PQfinish(conn_);
    conn_ = nullptr;
  }
}

absl::Status PostgresSink::Connect() {
  Disconnect();
  // Defaults first: the DSN (expanded from "dbname") overrides them.
  const char* const keys[] = {"connect_timeout", "application_name", "client_encoding", "dbname",
                              nullptr};
  const char* const values[] = {"10", "caravela", "UTF8", options_.dsn.c_str(), nullptr};
  conn_ = PQconnectdbParams(keys, values, /*expand_dbname=*/1);
  if (conn_ == nullptr || PQstatus(conn_) != CONNECTION_OK) {
    std::string err = conn_ == nullptr ? "out of memory" : Trimmed(PQerrorMessage(conn_));
    Disconnect();
    return absl::UnavailableError(absl::StrCat(
        options_.yaml_path, ": cannot connect to PostgreSQL with dsn \"", MaskDsn(options_.dsn),
        "\": ", err,
        " (check that the server is running and that the dsn's host, port, dbname, user and "
        "password are right)"));
  }
  PQsetNoticeProcessor(conn_, NoticeToLog, nullptr);
  return absl::OkStatus();
}

absl::StatusOr<PostgresSink::Result> PostgresSink::Exec(const std::string& sql,
                                                        const std::vector<std::string>& params,
                                                        std::string_view what) {
  std::vector<const char*> ptrs;
  ptrs.reserve(params.size());
  for (const std::string& p : params) ptrs.push_back(p.c_str());
  for (int attempt = 0;; ++attempt) {
    if (conn_ == nullptr || PQstatus(conn_) != CONNECTION_OK) RETURN_IF_ERROR(Connect());
    Result res(PQexecParams(conn_, sql.c_str(), static_cast<int>(ptrs.size()), nullptr, ptrs.data(),
                            nullptr, nullptr, 0));
    ExecStatusType st = res == nullptr ? PGRES_FATAL_ERROR : PQresultStatus(res.get());
    if (st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK) return res;
    bool lost = PQstatus(conn_) == CONNECTION_BAD;
    std::string err =
        res == nullptr ? Trimmed(PQerrorMessage(conn_)) : Trimmed(PQresultErrorMessage(res.get()));
    if (lost && attempt == 0) {
      PostgresLogger()->warn("{}: connection to \"{}\" lost during {} ({}); reconnecting once",
                             Where(), MaskDsn(options_.dsn), what, err);
      Disconnect();
      continue;
    }
    if (lost) {
      return absl::UnavailableError(
          absl::StrCat(Where(), ": ", Sv(what), " failed: connection to \"", MaskDsn(options_.dsn),
                       "\" lost again after reconnecting: ", err, " (is the server restarting?)"));
    }
    const char* state = res == nullptr ? nullptr : PQresultErrorField(res.get(), PG_DIAG_SQLSTATE);
    std::string sqlstate = state == nullptr ? "" : state;
    return absl::Status(
        CodeForSqlState(sqlstate),
        absl::StrCat(Where(), ": ", Sv(what), " failed: ", err,
                     sqlstate.empty() ? "" : absl::StrCat(" [SQLSTATE ", sqlstate, "]")));
  }
}

absl::Status PostgresSink::Open() {
  absl::StatusOr<std::pair<std::string, std::string>> names = PostgresTableNames(options_.table);
  if (!names.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(options_.yaml_path, ".table: ", names.status().message()));
  }
  table_display_ = names->first;
  qtable_ = names->second;

  RETURN_IF_ERROR(Connect());
  if (!options_.fence_job.empty()) RETURN_IF_ERROR(RaiseFence());
  ASSIGN_OR_RETURN(TableInfo info, ReadTable());
  if (info.exists) RETURN_IF_ERROR(UseTable(info));
  PostgresLogger()->info("{}: connected to \"{}\", table {}", Where(), MaskDsn(options_.dsn),
                         info.exists ? "exists" : "will be created at the first flush");
  return absl::OkStatus();
}

// The condition that keeps rows of a fenced writer out (empty without
// fencing): $job_param, $job_param+1 are the fence's job and target.
std::string PostgresSink::FenceClause(int job_param, int epoch_param) const {
  if (options_.fence_job.empty()) return "";
  return absl::StrCat(" WHERE EXISTS (SELECT 1 FROM caravela_fences f WHERE f.job = $", job_param,
                      " AND f.target = $", job_param + 1, " AND f.epoch <= $", epoch_param,
                      "::bigint)");
}

absl::Status PostgresSink::RaiseFence() {
  // A concurrent creator can make CREATE TABLE IF NOT EXISTS fail with a
  // unique violation: the table exists then, which is all that counts.
  (void)Exec(
      "CREATE TABLE IF NOT EXISTS caravela_fences (job text NOT NULL, target text NOT NULL, "
      "epoch bigint NOT NULL, PRIMARY KEY (job, target))",
      {}, "creating caravela_fences");
  ASSIGN_OR_RETURN(Result r,
                   Exec("INSERT INTO caravela_fences AS f VALUES ($1, $2, $3::bigint) "
                        "ON CONFLICT (job, target) DO UPDATE SET epoch = "
                        "GREATEST(f.epoch, excluded.epoch) RETURNING f.epoch",
                        {options_.fence_job, table_display_, absl::StrCat(options_.epoch)},
                        "raising the epoch fence"));
  return FencedBy(r);
}

absl::Status PostgresSink::FencedBy(const Result& r) const {
  const int64_t fence = PQntuples(r.get()) == 1 ? std::atoll(PQgetvalue(r.get(), 0, 0)) : -1;
  if (fence > options_.epoch) {
    return absl::FailedPreconditionError(
        absl::StrCat(Where(), ": fenced: epoch ", fence, " of job ", options_.fence_job,
                     " writes this table; this writer has epoch ", options_.epoch));
  }
  return absl::OkStatus();
}

absl::Status PostgresSink::CheckFence() {
  if (options_.fence_job.empty()) return absl::OkStatus();
  ASSIGN_OR_RETURN(Result r,
                   Exec("SELECT epoch FROM caravela_fences WHERE job = $1 AND target = $2",
                        {options_.fence_job, table_display_}, "reading the epoch fence"));
  return FencedBy(r);
}

absl::StatusOr<PostgresSink::TableInfo> PostgresSink::ReadTable() {
  TableInfo info;
  ASSIGN_OR_RETURN(Result r, Exec(R"sql(
      SELECT a.attname, format_type(a.atttypid, a.atttypmod), a.attnotnull,
             array_position(i.indkey::int2[], a.attnum)
      FROM pg_attribute a
      LEFT JOIN pg_index i ON i.indrelid = a.attrelid AND i.indisprimary
      WHERE a.attrelid = to_regclass($1) AND a.attnum > 0 AND NOT a.attisdropped
      ORDER BY a.attnum)sql",
                                  {qtable_}, "reading the table's columns"));
  int n = PQntuples(r.get());
  info.exists = n > 0;
  std::vector<std::pair<int, std::string>> pk;
  absl::flat_hash_map<std::string, std::string> types;
  for (int i = 0; i < n; ++i) {
    std::string col = PQgetvalue(r.get(), i, 0);
    std::string type = PQgetvalue(r.get(), i, 1);
    if (!PQgetisnull(r.get(), i, 3)) {
      pk.emplace_back(std::atoi(PQgetvalue(r.get(), i, 3)), col);
      if (type != "text") {
        info.problems.push_back(
            absl::StrCat("key column ", col, " is ", type, " (the sink writes text)"));
      }
      if (IsSinkColumn(col)) {
        info.problems.push_back(absl::StrCat("column ", col, " is part of the primary key"));
      }
    }
    types[col] = type;
  }
  std::sort(pk.begin(), pk.end());
  for (auto& [pos, col] : pk) info.key_columns.push_back(std::move(col));
  const std::pair<std::string_view, std::string_view> want[] = {
      {"revision", "bigint"}, {"state", "text"}, {"epoch", "bigint"}, {"value", "jsonb"}};
  for (const auto& [col, type] : want) {
    auto it = types.find(std::string(col));
    if (it == types.end()) {
      info.problems.push_back(absl::StrCat("column ", Sv(col), " (", Sv(type), ") is missing"));
    } else if (it->second != type) {
      info.problems.push_back(
          absl::StrCat("column ", Sv(col), " is ", it->second, ", expected ", Sv(type)));
    }
  }
  auto up = types.find("updated_at");
  info.has_updated_at = up != types.end();
  if (info.has_updated_at && up->second != "timestamp with time zone") {
    info.problems.push_back(
        absl::StrCat("column updated_at is ", up->second, ", expected timestamptz"));
  }
  return info;
}

absl::Status PostgresSink::UseTable(const TableInfo& info) {
  std::vector<std::string> problems = info.problems;
  Shape table_shape = info.key_columns.empty() ? Shape::kKeyless : Shape::kKeyed;
  if (shape_ != Shape::kUnknown) {
    // Records already defined what they need (the table appeared meanwhile).
    if (shape_ != table_shape) {
      problems.push_back(shape_ == Shape::kKeyed
                             ? absl::StrCat("it has no primary key, but the records have key "
                                            "fields (",
                                            absl::StrJoin(key_columns_, ", "), ")")
                             : absl::StrCat("it has primary key (",
                                            absl::StrJoin(info.key_columns, ", "),
                                            "), but the records have no key"));
    } else if (shape_ == Shape::kKeyed) {
      std::vector<std::string> a = key_columns_, b = info.key_columns;
      std::sort(a.begin(), a.end());
      std::sort(b.begin(), b.end());
      if (a != b) {
        problems.push_back(absl::StrCat(
            "its primary key is (", absl::StrJoin(info.key_columns, ", "),
            ") but the records' key fields are (", absl::StrJoin(key_columns_, ", "), ")"));
      }
    }
  }
  if (!problems.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        Where(),
        ": the table exists but does not fit the postgres sink: ", absl::StrJoin(problems, "; "),
        ". Drop or rename it, or choose another table (the sink creates its own: one text column "
        "per key field, revision bigint, state text, epoch bigint, value jsonb, updated_at "
        "timestamptz, primary key = the key fields)"));
  }
  table_exists_ = true;
  has_updated_at_ = info.has_updated_at;
  if (shape_ == Shape::kUnknown) {
    shape_ = table_shape;
    key_columns_ = info.key_columns;
  }
  upsert_sql_.clear();
  return absl::OkStatus();
}

absl::Status PostgresSink::SetKeyColumns(const std::vector<std::string>& names) {
  for (const std::string& n : names) {
    std::string problem;
    if (n.empty()) {
      problem = "is empty";
    } else if (n.size() > 63) {
      problem = "is longer than 63 bytes (PostgreSQL's limit for column names)";
    } else if (n.find('\0') != std::string::npos) {
      problem = "contains a NUL byte";
    } else if (IsSinkColumn(n)) {
      problem =
          "is also the name of one of the sink's own columns (revision, state, epoch, "
          "value, updated_at); rename it with a project operator before the sink";
    } else if (std::count(names.begin(), names.end(), n) > 1) {
      problem = "appears twice";
    }
    if (!problem.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(Where(), ": key field \"", n, "\" ", problem));
    }
  }
  shape_ = Shape::kKeyed;
  key_columns_ = names;
  return absl::OkStatus();
}

absl::Status PostgresSink::MapKey() {
  values_scratch_.resize(key_columns_.size());
  bool same = names_scratch_.size() == key_columns_.size();
  for (size_t i = 0; same && i < key_columns_.size(); ++i) {
    same = names_scratch_[i] == key_columns_[i];
  }
  if (same) {
    for (size_t i = 0; i < key_columns_.size(); ++i) values_scratch_[i].swap(fields_scratch_[i]);
    return absl::OkStatus();
  }
  bool ok = names_scratch_.size() == key_columns_.size();
  for (size_t c = 0; ok && c < key_columns_.size(); ++c) {
    auto it = std::find(names_scratch_.begin(), names_scratch_.end(), key_columns_[c]);
    ok = it != names_scratch_.end();
    if (ok) values_scratch_[c].swap(fields_scratch_[it - names_scratch_.begin()]);
  }
  if (!ok) {
    return absl::FailedPreconditionError(absl::StrCat(
        Where(), ": a record's key has fields (", absl::StrJoin(names_scratch_, ", "),
        ") but the table's key columns are (", absl::StrJoin(key_columns_, ", "),
        "); a postgres table holds the results of one operator: give each its own table"));
  }
  return absl::OkStatus();
}

absl::Status PostgresSink::WriteRecord(const SinkRecord& r) {
  names_scratch_.clear();
  fields_scratch_.clear();
  if (!r.key.empty()) {
    absl::Status st = decoder_.Decode(r.key, &key_record_);
    if (!st.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(Where(), ": record key is not a JSON object (", st.message(), ")"));
    }
    key_record_.ForEachChild(0, [&](uint32_t c) {
      names_scratch_.emplace_back(key_record_.Key(c));
      Value v = key_record_.Get(static_cast<int32_t>(c));
      if (v.type == ValueType::kString) {
        fields_scratch_.emplace_back(v.s);
      } else {
        std::string text;
        key_record_.AppendNodeJson(c, &text);
        fields_scratch_.push_back(std::move(text));
      }
    });
  }
  const bool keyed = !names_scratch_.empty();

  if (!keyed) {
    if (shape_ == Shape::kKeyed) {
      return absl::FailedPreconditionError(absl::StrCat(
          Where(), ": got a record without a key, but the table is keyed by (",
          absl::StrJoin(key_columns_, ", "),
          "); a postgres table holds the results of one operator: give each its own table"));
    }
    shape_ = Shape::kKeyless;
    Row row;
    row.revision = r.revision;
    row.state = std::string(r.state);
    row.value = std::string(r.value);
    keyless_.push_back(std::move(row));
  } else {
    if (r.revision < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          Where(), ": a record with key ", Sv(r.key),
          " has no integer \"revision\" field; the postgres sink upserts by revision, so it "
          "reads results that carry one (window operators) or records without a key"));
    }
    if (shape_ == Shape::kKeyless) {
      return absl::FailedPreconditionError(absl::StrCat(
          Where(), ": got a record with key fields (", absl::StrJoin(names_scratch_, ", "),
          "), but the table has no key columns; a postgres table holds the results of one "
          "operator: give each its own table"));
    }
    if (shape_ == Shape::kUnknown) RETURN_IF_ERROR(SetKeyColumns(names_scratch_));
    RETURN_IF_ERROR(MapKey());
    canon_.clear();
    for (const std::string& v : values_scratch_) AppendLengthPrefixed(v, &canon_);
    auto [it, inserted] = keyed_index_.try_emplace(canon_, keyed_.size());
    if (inserted) {
      keyed_.emplace_back();
    } else if (r.revision <= keyed_[it->second].revision) {
      ++rejected_;  // the buffer already holds this or a newer revision
      return absl::OkStatus();
    } else {
      ++superseded_;
    }
    Row& row = keyed_[it->second];
    row.key.swap(values_scratch_);
    row.revision = r.revision;
    row.state.assign(r.state);
    row.value.assign(r.value);
  }
  if (pending() >= options_.max_buffered) return Flush();
  return absl::OkStatus();
}

absl::Status PostgresSink::CreateTable() {
  std::string sql = absl::StrCat("CREATE TABLE IF NOT EXISTS ", qtable_, " (");
  for (const std::string& c : key_columns_)
    absl::StrAppend(&sql, QuoteIdent(c), " text NOT NULL, ");
  absl::StrAppend(&sql,
                  shape_ == Shape::kKeyed ? "revision bigint NOT NULL, " : "revision bigint, ",
                  "state text, epoch bigint NOT NULL, value jsonb NOT NULL, "
                  "updated_at timestamptz NOT NULL DEFAULT now()");
  if (!key_columns_.empty()) {
    std::vector<std::string> quoted;
    for (const std::string& c : key_columns_) quoted.push_back(QuoteIdent(c));
    absl::StrAppend(&sql, ", PRIMARY KEY (", absl::StrJoin(quoted, ", "), ")");
  }
  sql.push_back(')');
  absl::StatusOr<Result> created = Exec(sql, {}, "CREATE TABLE");
  // A concurrent creator can make CREATE TABLE IF NOT EXISTS fail with a
  // unique violation; what counts is the table that exists afterwards.
  ASSIGN_OR_RETURN(TableInfo info, ReadTable());
  if (!info.exists) return created.ok() ? absl::InternalError("table vanished") : created.status();
  RETURN_IF_ERROR(UseTable(info));
  if (created.ok()) {
    PostgresLogger()->info("{}: created the table (key columns: {})", Where(),
                           key_columns_.empty() ? "none" : absl::StrJoin(key_columns_, ", "));
  }
  return absl::OkStatus();
}

absl::Status PostgresSink::Flush() {
  if (keyed_.empty() && keyless_.empty()) return absl::OkStatus();
  if (!table_exists_) RETURN_IF_ERROR(CreateTable());
  if (!keyed_.empty()) RETURN_IF_ERROR(FlushKeyed());
  if (!keyless_.empty()) RETURN_IF_ERROR(FlushKeyless());
  return absl::OkStatus();
}

absl::Status PostgresSink::FlushKeyed() {
  const size_t k = key_columns_.size();
  if (upsert_sql_.empty()) {
    std::vector<std::string> cols, aliases, arrays;
    for (size_t i = 0; i < k; ++i) {
      cols.push_back(QuoteIdent(key_columns_[i]));
      aliases.push_back(absl::StrCat("u.c", i));
      arrays.push_back(absl::StrCat("$", i + 1, "::text[]"));
    }
    std::vector<std::string> names;
    for (size_t i = 0; i < k; ++i) names.push_back(absl::StrCat("c", i));
    upsert_sql_ = absl::StrCat(
        "INSERT INTO ", qtable_, " AS cur (", absl::StrJoin(cols, ", "),
        ", revision, state, epoch, value) SELECT ", absl::StrJoin(aliases, ", "), ", u.r, u.s, $",
        k + 4, "::bigint, u.v FROM unnest(", absl::StrJoin(arrays, ", "), ", $", k + 1,
        "::bigint[], $", k + 2, "::text[], $", k + 3, "::jsonb[]) AS u(",
        absl::StrJoin(names, ", "), ", r, s, v)", FenceClause(k + 5, k + 4), " ON CONFLICT (",
        absl::StrJoin(cols, ", "),
        ") DO UPDATE SET revision = excluded.revision, state = excluded.state, "
        "epoch = excluded.epoch, value = excluded.value",
        has_updated_at_ ? ", updated_at = now()" : "", " WHERE excluded.revision > cur.revision");
  }
  size_t sent = 0;
  absl::Status status;
  std::vector<std::string> params(k + 4);
  if (!options_.fence_job.empty()) {
    params.push_back(options_.fence_job);
    params.push_back(table_display_);
  }
  while (sent < keyed_.size()) {
    size_t end =
        std::min(keyed_.size(), sent + std::max<size_t>(1, options_.max_rows_per_statement));
    for (size_t c = 0; c < k + 3; ++c) params[c].assign("{");
    for (size_t i = sent; i < end; ++i) {
      const Row& row = keyed_[i];
      const char* sep = i == sent ? "" : ",";
      for (size_t c = 0; c < k; ++c) {
        params[c].append(sep);
        AppendArrayString(row.key[c], &params[c]);
      }
      absl::StrAppend(&params[k], sep, row.revision);
      params[k + 1].append(sep);
      if (row.state.empty()) {
        params[k + 1].append("NULL");
      } else {
        AppendArrayString(row.state, &params[k + 1]);
      }
      params[k + 2].append(sep);
      AppendArrayString(row.value, &params[k + 2]);
    }
    for (size_t c = 0; c < k + 3; ++c) params[c].push_back('}');
    params[k + 3] = absl::StrCat(options_.epoch);
    absl::StatusOr<Result> r =
        Exec(upsert_sql_, params, absl::StrCat("upsert of ", end - sent, " rows"));
    if (!r.ok()) {
      status = r.status();
      break;
    }
    const int64_t applied = std::atoll(PQcmdTuples(r->get()));
    const auto n = static_cast<int64_t>(end - sent);
    written_ += applied;
    rejected_ += n - applied;
    sent = end;
    if (applied < n) {
      status = CheckFence();
      if (!status.ok()) break;
    }
  }
  // Keep what was not sent, for a later Flush.
  keyed_.erase(keyed_.begin(), keyed_.begin() + static_cast<ptrdiff_t>(sent));
  keyed_index_.clear();
  for (size_t i = 0; i < keyed_.size(); ++i) {
    canon_.clear();
    for (const std::string& v : keyed_[i].key) AppendLengthPrefixed(v, &canon_);
    keyed_index_[canon_] = i;
  }
  return status;
}

absl::Status PostgresSink::FlushKeyless() {
  const std::string sql =
      absl::StrCat("INSERT INTO ", qtable_,
                   " (revision, state, epoch, value) SELECT u.r, u.s, $4::bigint, u.v FROM "
                   "unnest($1::bigint[], $2::text[], $3::jsonb[]) AS u(r, s, v)",
                   FenceClause(5, 4));
  size_t sent = 0;
  absl::Status status;
  std::vector<std::string> params(4);
  if (!options_.fence_job.empty()) {
    params.push_back(options_.fence_job);
    params.push_back(table_display_);
  }
  while (sent < keyless_.size()) {
    size_t end =
        std::min(keyless_.size(), sent + std::max<size_t>(1, options_.max_rows_per_statement));
    for (size_t c = 0; c < 3; ++c) params[c].assign("{");
    for (size_t i = sent; i < end; ++i) {
      const Row& row = keyless_[i];
      const char* sep = i == sent ? "" : ",";
      if (row.revision < 0) {
        absl::StrAppend(&params[0], sep, "NULL");
      } else {
        absl::StrAppend(&params[0], sep, row.revision);
      }
      params[1].append(sep);
      if (row.state.empty()) {
        params[1].append("NULL");
      } else {
        AppendArrayString(row.state, &params[1]);
      }
      params[2].append(sep);
      AppendArrayString(row.value, &params[2]);
    }
    for (size_t c = 0; c < 3; ++c) params[c].push_back('}');
    params[3] = absl::StrCat(options_.epoch);
    absl::StatusOr<Result> r = Exec(sql, params, absl::StrCat("insert of ", end - sent, " rows"));
    if (!r.ok()) {
      status = r.status();
      break;
    }
    const int64_t applied = std::atoll(PQcmdTuples(r->get()));
    const auto n = static_cast<int64_t>(end - sent);
    written_ += applied;
    sent = end;
    if (applied < n) {
      status = CheckFence();
      if (!status.ok()) break;
    }
  }
  keyless_.erase(keyless_.begin(), keyless_.begin() + static_cast<ptrdiff_t>(sent));
  return status;
}

absl::Status PostgresSink::Close() {
  absl::Status st = Flush();
  Disconnect();
  return st;
}

}  // namespace caravela
