// clickhouse_bench: revisions per second the ClickHouse sink writes into a
// real clickhouse-server on loopback (issue 14; docs/benchmarks.md
// "ClickHouse sink").
//
//   clickhouse_bench [--revisions 2000000] [--keys 100000] [--flush-every 4096]
//
// Window results of the hourly-revenue shape (sku, window bounds, a count and
// a sum, revision, state) for --keys windows, each revised until
// --revisions results were written, are handed to ClickHouseSink::WriteRecord
// and flushed every --flush-every results (the runtime flushes at the end of
// each batch; a batch holds up to 4096 records). The results are built
// before the clock starts. Prints revisions/s (wall), the CPU seconds of the
// writing thread, and checks the table's row count and, after OPTIMIZE
// FINAL, one row per key.
#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "bench/bench_util.h"
#include "common/time_util.h"
#include "spdlog/spdlog.h"
#include "worker/connectors/clickhouse_sink.h"
#include "worker/testing/clickhouse_server.h"

int main(int argc, char** argv) {
  caravela::bench::Flags flags(argc, argv);
  const int64_t revisions = flags.Int("revisions", 2'000'000);
  const int64_t keys = flags.Int("keys", 100'000);
  const int64_t flush_every = flags.Int("flush-every", 4096);
  spdlog::set_level(spdlog::level::warn);
  if (std::string missing = caravela::ClickHouseServer::Missing(); !missing.empty()) {
    std::fprintf(stderr, "%s\n", missing.c_str());
    return 1;
  }
  auto server = caravela::ClickHouseServer::Start();
  if (!server.ok()) {
    std::fprintf(stderr, "%s\n", std::string(server.status().message()).c_str());
    return 1;
  }
  constexpr int64_t kBase = 1790812800000;
  std::vector<std::string> key_json(static_cast<size_t>(revisions));
  std::vector<std::string> value_json(static_cast<size_t>(revisions));
  for (int64_t i = 0; i < revisions; ++i) {
    const int64_t k = i % keys;
    const int64_t rev = i / keys + 1;
    const std::string start = caravela::FormatIso8601(kBase + (k / 5000) * 3'600'000);
    const std::string end = caravela::FormatIso8601(kBase + (k / 5000 + 1) * 3'600'000);
    key_json[i] = absl::StrCat(R"({"sku":"sku-)", k % 5000, R"(","window_start":")", start,
                               R"(","window_end":")", end, R"("})");
    value_json[i] = absl::StrCat(R"({"sku":"sku-)", k % 5000, R"(","window_start":")", start,
                                 R"(","window_end":")", end, R"(","orders":)", rev,
                                 R"(,"revenue":)", rev * 12.5, R"(,"revision":)", rev,
                                 R"(,"state":")", rev == 1 ? "EARLY" : "LATE", R"("})");
  }
  caravela::ClickHouseSinkOptions o;
  o.url = (*server)->url();
  o.database = "bench";
  o.table = "hourly";
  o.hints = {{"orders", "Int64"}, {"revenue", "Nullable(Float64)"}};
  caravela::ClickHouseSink sink(o);
  if (absl::Status st = sink.Open(); !st.ok()) {
    std::fprintf(stderr, "%s\n", std::string(st.message()).c_str());
    return 1;
  }
  const double t0 = caravela::bench::NowSeconds();
  const double cpu0 = caravela::bench::ThreadCpuSeconds();
  for (int64_t i = 0; i < revisions; ++i) {
    caravela::SinkRecord r;
    r.key = key_json[i];
    r.value = value_json[i];
    absl::Status st = sink.WriteRecord(r);
    if (st.ok() && (i + 1) % flush_every == 0) st = sink.Flush();
    if (!st.ok()) {
      std::fprintf(stderr, "%s\n", std::string(st.message()).c_str());
      return 1;
    }
  }
  if (absl::Status st = sink.Close(); !st.ok()) {
    std::fprintf(stderr, "%s\n", std::string(st.message()).c_str());
    return 1;
  }
  const double seconds = caravela::bench::NowSeconds() - t0;
  const double cpu = caravela::bench::ThreadCpuSeconds() - cpu0;
  auto rows = (*server)->Query("SELECT count() FROM bench.hourly");
  (void)(*server)->Query("OPTIMIZE TABLE bench.hourly FINAL");
  auto merged = (*server)->Query("SELECT count() FROM bench.hourly FINAL");
  std::printf(
      "clickhouse sink: %lld revisions of %lld windows in %.2f s: %.0f revisions/s (wall); "
      "writer thread %.2f CPU s (%.0f revisions/CPU s); flush every %lld; table rows %s, after "
      "OPTIMIZE FINAL %s",
      static_cast<long long>(revisions), static_cast<long long>(keys), seconds,
      static_cast<double>(revisions) / seconds, cpu, static_cast<double>(revisions) / cpu,
      static_cast<long long>(flush_every), rows.ok() ? rows->c_str() : "?\n",
      merged.ok() ? merged->c_str() : "?\n");
  return 0;
}
