// reconcile_bench: how fast `caravela reconcile` recomputes and reads back
// (issue 13; docs/benchmarks.md "Reconciliation").
//
//   reconcile_bench [--purchases 10000000] [--results 100000] [--work-dir DIR]
//
// 1. Recompute: generates the purchase stream (bench/purchase_generator.h,
//    24 h of event time, retries, late uploads) into DIR/purchases.jsonl,
//    runs the hourly revenue job (dedup by event_id, revenue per country and
//    hour) once so a file sink holds its FINAL results, then times
//    Reconcile() over it: input records per second of the recomputation (wall
//    time, and per CPU second of this process: every thread, RocksDB's
//    included).
// 2. Read-back: a job whose window emits --results FINAL results (one per
//    sku and hour) into a Kafka topic on the embedded broker and a PostgreSQL
//    table (a real server, Debian's binaries); times reading each back
//    (ReconcileReport::read_seconds).
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "bench/bench_util.h"
#include "bench/purchase_generator.h"
#include "common/job_spec.h"
#include "spdlog/spdlog.h"
#include "worker/connectors/embedded_broker.h"
#include "worker/reconcile/reconcile.h"
#include "worker/registry/builtin_kinds.h"
#include "worker/runtime/pipeline.h"
#include "worker/testing/postgres_server.h"

namespace {

namespace fs = std::filesystem;
using caravela::bench::Flags;

caravela::JobSpec Parse(const std::string& yaml, const fs::path& dir) {
  caravela::ParseResult r = caravela::ParseJobSpec(yaml);
  if (!r.ok()) {
    for (const auto& e : r.errors) std::fprintf(stderr, "%s\n", e.ToString().c_str());
    std::exit(1);
  }
  r.spec.ResolvePaths(dir.string());
  return r.spec;
}

void Check(const absl::Status& st, const char* what) {
  if (st.ok()) return;
  std::fprintf(stderr, "error: %s: %s\n", what, std::string(st.message()).c_str());
  std::exit(1);
}

void RunJob(const caravela::JobSpec& spec, const fs::path& data, const std::string& bootstrap) {
  caravela::RunOptions o;
  o.data_dir = data.string();
  o.embedded_bootstrap = bootstrap;
  auto p = caravela::Pipeline::Create(spec, o);
  Check(p.status(), "creating the job");
  Check((*p)->Run(), "running the job");
}

}  // namespace

int main(int argc, char** argv) {
  Flags flags(argc, argv);
  const int64_t purchases = flags.Int("purchases", 10'000'000);
  const int64_t results = flags.Int("results", 100'000);
  const fs::path dir = flags.Str("work-dir", "/tmp/caravela-reconcile-bench");
  spdlog::set_level(spdlog::level::warn);
  fs::create_directories(dir);

  // 1. Recompute.
  const fs::path input = dir / absl::StrCat("purchases-", purchases, ".jsonl");
  if (!fs::exists(input)) {
    caravela::bench::PurchaseStreamOptions po;
    po.purchases = purchases;
    caravela::bench::PurchaseGenerator gen(po);
    std::ofstream out(input.string() + ".tmp");
    std::string line;
    while (gen.Next(&line)) out << line << '\n';
    out.close();
    fs::rename(input.string() + ".tmp", input);
  }
  // The benches' hourly revenue job (dedup, revenue per country and hour),
  // its side outputs kept in files: the audit trail reconcile reads causes
  // from.
  const caravela::JobSpec revenue = Parse(
      absl::StrCat("apiVersion: caravela/v1\nkind: Job\nmetadata: {name: bench-revenue}\n",
                   "spec:\n  sources:\n    - name: purchases\n      file: {path: ", input.string(),
                   "}\n      event_time: {field: event_time, format: iso8601}\n",
                   "      watermark: {max_out_of_orderness: 5m}\n",
                   caravela::bench::kHourlyRevenueOperators,
                   "  sinks:\n    - {from: revenue, file: {path: out/revenue.jsonl}}\n",
                   caravela::bench::HourlyRevenueSideSinks("out")),
      dir);
  fs::remove_all(dir / "out");
  fs::remove_all(dir / "data");
  RunJob(revenue, dir / "data", "");
  caravela::ReconcileOptions ro;
  ro.work_dir = (dir / "reconcile").string();
  const double cpu0 = caravela::bench::ProcessCpuSeconds();
  auto report = caravela::Reconcile(revenue, ro);
  const double cpu = caravela::bench::ProcessCpuSeconds() - cpu0;
  Check(report.status(), "reconcile");
  std::printf(
      "recompute: %lld records in %.2f s wall, %.2f CPU s: %.0f records/s (wall), %.0f "
      "records/CPU s; %lld windows, %lld differ (the late uploads)\n",
      static_cast<long long>(report->records_read), report->recompute_seconds, cpu,
      static_cast<double>(report->records_read) / report->recompute_seconds,
      static_cast<double>(report->records_read) / cpu, static_cast<long long>(report->windows),
      static_cast<long long>(report->differences.size()));

  // 2. Read-back of `results` FINAL results from Kafka and PostgreSQL.
  auto broker = caravela::EmbeddedBroker::Start(0, 32);
  Check(broker.status(), "embedded broker");
  // Auto-created topics get 4 partitions and the mock broker keeps ~5 MiB
  // per partition: enough partitions for every revision (~200 B each).
  Check((*broker)->CreateTopic("per-sku", static_cast<int>(results * 2 * 200 / (2 << 20) + 1)),
        "creating per-sku");
  auto pg = caravela::PostgresServer::Start();
  Check(pg.status(), "postgres");
  const fs::path windows_input = dir / absl::StrCat("windows-", results, ".jsonl");
  {
    std::ofstream out(windows_input);
    for (int64_t i = 0; i < results; ++i) {
      // One record per (sku, hour): results windows.
      out << "{\"sku\":\"sku-" << (i % 5000)
          << "\",\"amount\":1,\"t\":" << 1790812800000 + (i / 5000) * 3600000 << "}\n";
    }
  }
  const caravela::JobSpec windows = Parse(absl::StrCat(R"(apiVersion: caravela/v1
kind: Job
metadata: {name: bench-readback}
spec:
  sources:
    - name: sales
      file: {path: )",
                                                       windows_input.string(), R"(}
      event_time: {field: t, format: epoch_ms}
  operators:
    - name: per_sku
      window: {from: sales, tumbling: 1h, group_by: [sku], aggregates: [{as: n, count: "*"}]}
  sinks:
    - {from: per_sku, kafka: {topic: per-sku, bootstrap: ")",
                                                       (*broker)->bootstrap(), R"("}}
    - {from: per_sku, postgres: {dsn: ")",
                                                       (*pg)->Dsn(), R"(", table: per_sku}}
)"),
                                          dir);
  fs::remove_all(dir / "data-readback");
  RunJob(windows, dir / "data-readback", "");
  for (const char* sink : {"kafka:per-sku", "postgres:per_sku"}) {
    caravela::ReconcileOptions o;
    o.sink = sink;
    o.work_dir = (dir / "reconcile-readback").string();
    auto r = caravela::Reconcile(windows, o);
    Check(r.status(), sink);
    std::printf("read back %lld FINAL results from %s in %.3f s (%.0f results/s); %lld match\n",
                static_cast<long long>(r->sink_results), sink, r->read_seconds,
                static_cast<double>(r->sink_results) / r->read_seconds,
                static_cast<long long>(r->matching));
  }
  return 0;
}
