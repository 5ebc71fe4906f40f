// Sink kind `postgres: {dsn, table}`: an upsert of the highest revision per
// key, or an append for keyless results (PostgresSink, postgres_sink.h).
// Read back (reconcile) from the table's `value` column.
#include <memory>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "common/sink_kind.h"
#include "common/spec_reader.h"
#include "libpq-fe.h"
#include "worker/connectors/postgres_sink.h"
#include "worker/connectors/sink_factory.h"

namespace caravela {
namespace {

class PostgresSinkKind final : public SinkKind {
 public:
  std::string_view name() const override { return "postgres"; }
  int legacy_id() const override { return 3; }

  std::any Parse(SinkParseContext& ctx) const override {
    PostgresSinkSpec spec;
    SpecReader& r = ctx.r;
    const YAML::Node& k = ctx.node;
    const std::string& kpath = ctx.path;
    if (!r.CheckMap(k, kpath, {"dsn", "table"})) return spec;
    if (auto d = r.String(k, "dsn", kpath, true)) spec.dsn = *d;
    if (auto t = r.String(k, "table", kpath, true)) {
      spec.table = *t;
      std::string_view name = *t;
      size_t dot = name.find('.');
      bool ok = dot == std::string_view::npos
                    ? IsSqlIdentifier(name)
                    : IsSqlIdentifier(name.substr(0, dot)) && IsSqlIdentifier(name.substr(dot + 1));
      if (!ok) {
        r.Err(SpecReader::Join(kpath, "table"),
              absl::StrCat("expected a table name such as hourly_revenue or "
                           "analytics.hourly_revenue (letters, digits and _, not starting "
                           "with a digit, at most 63 characters per part), got ",
                           SpecReader::Quote(*t)));
      }
    }
    return spec;
  }
  std::string Label(const SinkSpec& sink) const override {
    return "postgres:" + sink.Get<PostgresSinkSpec>().table;
  }
  std::string Output(const SinkSpec& sink) const override {
    const PostgresSinkSpec& spec = sink.Get<PostgresSinkSpec>();
    return absl::StrCat("postgres table ", absl::AsciiStrToLower(spec.table), " at \"",
                        MaskPostgresDsn(spec.dsn), "\"");
  }
  absl::StatusOr<std::unique_ptr<Sink>> Create(const SinkSpec& sink,
                                               const SinkContext& ctx) const override {
    const PostgresSinkSpec& spec = sink.Get<PostgresSinkSpec>();
    PostgresSinkOptions po;
    po.dsn = spec.dsn;
    po.table = spec.table;
    po.epoch = ctx.epoch;
    if (ctx.fence) po.fence_job = ctx.job_name;
    po.yaml_path = absl::StrCat("spec.sinks[", ctx.sink_index, "].postgres");
    return std::unique_ptr<Sink>(new PostgresSink(po));
  }

  bool readable() const override { return true; }
  // The table's results (keyed tables: one row per key, its value jsonb),
  // in single-row mode so that a big table is not held whole by libpq.
  absl::Status ReadBack(const SinkSpec& sink, const std::string& bootstrap,
                        const std::function<void(std::string_view)>& add) const override {
    const PostgresSinkSpec& spec = sink.Get<PostgresSinkSpec>();
    ASSIGN_OR_RETURN(auto names, PostgresTableNames(spec.table));
    const std::string where =
        absl::StrCat("postgres sink ", names.first, " (dsn \"", MaskPostgresDsn(spec.dsn), "\")");
    std::unique_ptr<PGconn, void (*)(PGconn*)> conn(PQconnectdb(spec.dsn.c_str()), PQfinish);
    if (PQstatus(conn.get()) != CONNECTION_OK) {
      return absl::UnavailableError(
          absl::StrCat(where, ": cannot connect: ", PostgresMessage(PQerrorMessage(conn.get()))));
    }
    const std::string sql = absl::StrCat("SELECT value::text FROM ", names.second);
    if (PQsendQuery(conn.get(), sql.c_str()) != 1 || PQsetSingleRowMode(conn.get()) != 1) {
      return absl::UnavailableError(
          absl::StrCat(where, ": ", PostgresMessage(PQerrorMessage(conn.get()))));
    }
    absl::Status error;
    while (PGresult* res = PQgetResult(conn.get())) {
      const ExecStatusType st = PQresultStatus(res);
      if (st == PGRES_SINGLE_TUPLE) {
        add(std::string_view(PQgetvalue(res, 0, 0), static_cast<size_t>(PQgetlength(res, 0, 0))));
      } else if (st != PGRES_TUPLES_OK && error.ok()) {
        error = absl::FailedPreconditionError(absl::StrCat(
            where, ": cannot read it back: ", PostgresMessage(PQresultErrorMessage(res))));
      }
      PQclear(res);
    }
    return error;
  }
};

}  // namespace

const SinkKind& PostgresSinkKind() {
  static const class PostgresSinkKind kind;
  return kind;
}

}  // namespace caravela
