// Microbenchmarks of the record hot paths every job runs: decoding an input
// line into a Record, copying whole records into an output (as joins do),
// and serializing the output to JSON (as sinks do). Google Benchmark:
//
//   ninja -C build-bench record_json_bench && build-bench/bench/record_json_bench
#include <string>

#include "benchmark/benchmark.h"
#include "common/json.h"
#include "common/record.h"

namespace {

constexpr const char* kImpression =
    R"({"imp_id":638,"ad_id":437,"user_id":46,"ts":"2027-01-01T00:00:41.342Z","arrival":1798761680000})";
constexpr const char* kClick =
    R"({"click_id":638,"ad_id":437,"user_id":46,"ts":"2027-01-01T00:01:08.032Z","arrival":1798761700000,"price":12.50,"note":"say \"hi\""})";

caravela::Record Decoded(const char* json) {
  caravela::JsonDecoder dec;
  caravela::Record r;
  (void)dec.Decode(json, &r);
  return r;
}

void BM_Decode(benchmark::State& state) {
  caravela::JsonDecoder dec;
  caravela::Record r;
  const std::string line = kImpression;
  for (auto _ : state) {
    r.Clear();
    benchmark::DoNotOptimize(dec.Decode(line, &r));
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * line.size()));
}
BENCHMARK(BM_Decode);

// {"left": impression, "right": click} built from two records.
void BM_BuildJoinOutput(benchmark::State& state) {
  const caravela::Record left = Decoded(kImpression), right = Decoded(kClick);
  caravela::Record o;
  for (auto _ : state) {
    o.Clear();
    o.EnsureRoot();
    o.AddValue("left", left.Get(0));
    o.AddValue("right", right.Get(0));
    benchmark::DoNotOptimize(o.nodes().data());
  }
}
BENCHMARK(BM_BuildJoinOutput);

void BM_SerializeJoinOutput(benchmark::State& state) {
  const caravela::Record left = Decoded(kImpression), right = Decoded(kClick);
  caravela::Record o;
  o.EnsureRoot();
  o.AddValue("left", left.Get(0));
  o.AddValue("right", right.Get(0));
  std::string out;
  for (auto _ : state) {
    out.clear();
    o.AppendJson(&out);
    benchmark::DoNotOptimize(out.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * out.size()));
}
BENCHMARK(BM_SerializeJoinOutput);

}  // namespace

BENCHMARK_MAIN();
