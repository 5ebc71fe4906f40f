// Sink kind `clickhouse: {url, database?, table, user?, password_file?}`: a
// ReplacingMergeTree by revision over ClickHouse's HTTP interface
// (ClickHouseSink, clickhouse_sink.h). Read back (reconcile) from the
// table's `_result` column, revisions not yet merged included.
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/sink_kind.h"
#include "common/spec_reader.h"
#include "worker/connectors/clickhouse_sink.h"
#include "worker/connectors/sink_factory.h"

namespace caravela {
namespace {

ClickHouseSinkOptions OptionsOf(const ClickHouseSinkSpec& spec) {
  ClickHouseSinkOptions co;
  co.url = spec.url;
  co.database = spec.database;
  co.table = spec.table;
  co.user = spec.user;
  co.password_file = spec.password_file;
  return co;
}

class ClickHouseSinkKind final : public SinkKind {
 public:
  std::string_view name() const override { return "clickhouse"; }
  int legacy_id() const override { return 5; }

  std::any Parse(SinkParseContext& ctx) const override {
    ClickHouseSinkSpec spec;
    SpecReader& r = ctx.r;
    const YAML::Node& k = ctx.node;
    const std::string& kpath = ctx.path;
    if (!r.CheckMap(k, kpath, {"url", "database", "table", "user", "password_file"})) return spec;
    if (auto u = r.String(k, "url", kpath, true)) {
      spec.url = *u;
      const bool http = absl::StartsWith(*u, "http://") || absl::StartsWith(*u, "https://");
      if (!http || u->find('?') != std::string::npos) {
        r.Err(SpecReader::Join(kpath, "url"),
              absl::StrCat("expected the server's HTTP interface such as http://127.0.0.1:8123 ",
                           "(scheme http or https, no query), got ", SpecReader::Quote(*u)));
      }
    }
    for (const char* field : {"database", "table"}) {
      const bool required = std::string_view(field) == "table";
      if (auto v = r.String(k, field, kpath, required)) {
        if (!IsSqlIdentifier(*v)) {
          r.Err(SpecReader::Join(kpath, field),
                absl::StrCat("expected a ClickHouse name such as hourly_revenue (letters, digits ",
                             "and _, not starting with a digit), got ", SpecReader::Quote(*v)));
        } else if (required) {
          spec.table = *v;
        } else {
          spec.database = *v;
        }
      }
    }
    if (auto u = r.String(k, "user", kpath, false)) spec.user = *u;
    if (auto f = r.String(k, "password_file", kpath, false)) spec.password_file = *f;
    return spec;
  }
  std::string Label(const SinkSpec& sink) const override {
    const ClickHouseSinkSpec& spec = sink.Get<ClickHouseSinkSpec>();
    return "clickhouse:" + spec.database + "." + spec.table;
  }
  std::string Output(const SinkSpec& sink) const override {
    const ClickHouseSinkSpec& spec = sink.Get<ClickHouseSinkSpec>();
    return absl::StrCat("clickhouse table ", spec.database, ".", spec.table, " at ", spec.url);
  }
  // A secret the worker reads and sends to the job's URL: a file like the
  // others (resolved against the job file, checked for jobs from the network).
  std::vector<std::pair<std::string, std::string*>> Files(SinkSpec& sink) const override {
    std::string* password_file = &sink.Mutable<ClickHouseSinkSpec>()->password_file;
    if (password_file->empty()) return {};
    return {{"clickhouse.password_file", password_file}};
  }
  absl::StatusOr<std::unique_ptr<Sink>> Create(const SinkSpec& sink,
                                               const SinkContext& ctx) const override {
    ClickHouseSinkOptions co = OptionsOf(sink.Get<ClickHouseSinkSpec>());
    co.yaml_path = absl::StrCat("spec.sinks[", ctx.sink_index, "].clickhouse");
    if (ctx.from != nullptr) co.hints = ClickHouseTypeHints(*ctx.from);
    return std::unique_ptr<Sink>(new ClickHouseSink(co));
  }

  bool readable() const override { return true; }
  absl::Status ReadBack(const SinkSpec& sink, const std::string& bootstrap,
                        const std::function<void(std::string_view)>& add) const override {
    return ReadClickHouseResults(OptionsOf(sink.Get<ClickHouseSinkSpec>()), add);
  }
};

}  // namespace

const SinkKind& ClickHouseSinkKind() {
  static const class ClickHouseSinkKind kind;
  return kind;
}

}  // namespace caravela
