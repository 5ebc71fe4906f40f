// What metrics cost on the hot path (issue 11: metrics within 2 % of the
// (a) bench's throughput): per record, the arrival-delay histogram (a
// bucket search into a batch-local array) and the late-record count (a
// compare); per batch, the atomic adds; per scrape, the text rendering.
// Google Benchmark:
//
//   ninja -C build metrics_bench && build/bench/metrics_bench
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "benchmark/benchmark.h"
#include "common/metrics.h"

namespace {

constexpr int kBatch = 1024;  // records per batch, as RunOptions::batch_size

// Delays spread over the buckets (10 ms .. hours), like a real stream's.
std::vector<int64_t> Delays() {
  std::mt19937_64 rng(7);
  std::vector<int64_t> d(kBatch);
  for (int64_t& v : d) v = static_cast<int64_t>(rng() % 7'200'000);
  return d;
}

// Per record: Observe into the batch-local histogram; per batch: Flush.
void BM_ArrivalDelayPerRecord(benchmark::State& state) {
  caravela::Histogram h(caravela::DelayBucketsMs());
  caravela::Histogram::Local local(&h);
  const std::vector<int64_t> delays = Delays();
  for (auto _ : state) {
    for (int64_t d : delays) local.Observe(d);
    local.Flush();
  }
  state.SetItemsProcessed(state.iterations() * kBatch);
}
BENCHMARK(BM_ArrivalDelayPerRecord);

// Per record: the late check the runtime does before an operator with a
// too_late output; per batch: one counter add.
void BM_LateCountPerRecord(benchmark::State& state) {
  caravela::MetricsRegistry m;
  caravela::Counter* late = m.Get("operator_late_records_total", "op=\"w\"");
  const std::vector<int64_t> times = Delays();
  const int64_t watermark = 3'600'000;
  for (auto _ : state) {
    int64_t n = 0;
    for (int64_t t : times) n += t < watermark ? 1 : 0;
    benchmark::DoNotOptimize(n);
    late->Add(n);
  }
  state.SetItemsProcessed(state.iterations() * kBatch);
}
BENCHMARK(BM_LateCountPerRecord);

// A scrape of a registry the size of the hourly-revenue job's (about 60
// series and one histogram).
void BM_PrometheusText(benchmark::State& state) {
  caravela::MetricsRegistry m;
  for (int i = 0; i < 60; ++i)
    m.Get("series_" + std::to_string(i % 20), "op=\"o" + std::to_string(i) + "\"")->Add(i);
  m.GetHistogram("arrival_delay_ms", "source=\"purchases\"", caravela::DelayBucketsMs())
      ->Observe(5);
  for (auto _ : state) benchmark::DoNotOptimize(m.ToPrometheusText("caravela_"));
}
BENCHMARK(BM_PrometheusText);

}  // namespace

BENCHMARK_MAIN();
