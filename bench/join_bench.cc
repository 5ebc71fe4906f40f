// Join benchmarks (issue 3), both from files with RocksDB state, in-process:
//
//  --case interval  impressions LEFT interval-joined to clicks on
//                   (ad_id, user_id), between 0 and 4 h. 1000 ads x 100 users
//                   = 100k keys; half the impressions get a click 0-4 h later
//                   (a few 4-5 h later: no match); disorder up to 3 min.
//  --case window    Nexmark-q8-like: persons JOIN auctions ON
//                   person.id = auction.seller in 10 s tumbling windows;
//                   1 person : 3 auctions, sellers among the 1000 most recent
//                   persons, 10,000 events/s of event time, disorder up to 2 s.
//
//   join_bench --case interval|window [--events 2000000] [--work-dir DIR]
//              [--memory-state] [--flush-ms N] [--state-sample]
//              [--kafka-partitions P [--parallelism N] [--keyed]]
//
// --kafka-partitions P: the inputs are two topics of P partitions on an
// in-process embedded broker instead of files, produced up front (round
// robin over partitions in arrival order; the mock broker keeps ~5 MiB per
// partition, so P * 5 MiB must hold the input: 64 partitions for 1M events)
// and read as bounded Kafka sources, the job run with --parallelism N. The
// sources declare no key, so both inputs cross an exchange to the join's
// stage; with --keyed they are produced by the join key and declare it, and
// the join runs in the source stage (co-partitioned, no exchange).
// Production time is not counted.
//
// Records carry an `arrival` field (event time + a delay, rounded to 10 s)
// so the two files are merged in arrival order, as two live topics would be.
// Prints events/s over Pipeline::Create + Run, peak RSS, matches. With
// --state-sample it then feeds the first half of the events through the
// operator alone (harness, RocksDB), flushes, compacts and prints the state
// bytes per buffered row.
#include <cinttypes>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "bench/bench_util.h"
#include "common/job_spec.h"
#include "common/time_util.h"
#include "worker/connectors/embedded_broker.h"
#include "worker/connectors/kafka_test_util.h"
#include "worker/operators/interval_join_operator.h"
#include "worker/operators/operator.h"
#include "worker/registry/builtin_kinds.h"
#include "worker/runtime/pipeline.h"
#include "worker/testing/operator_harness.h"

namespace {

using caravela::FormatIso8601;

int Fail(const char* what, const absl::Status& st) {
  std::fprintf(stderr, "join_bench: %s: %s\n", what, std::string(st.message()).c_str());
  return 1;
}

constexpr int64_t kStart = 1798761600000;  // 2027-01-01T00:00:00Z
constexpr int64_t kMinute = 60'000;
constexpr int64_t kHour = 60 * kMinute;

struct Event {
  int64_t arrival;
  int64_t time;
  std::string json;
};

// Writes events sorted by arrival (stable) as JSONL.
void WriteFile(std::vector<Event>& ev, const std::string& path) {
  std::stable_sort(ev.begin(), ev.end(),
                   [](const Event& a, const Event& b) { return a.arrival < b.arrival; });
  std::FILE* f = std::fopen(path.c_str(), "w");
  for (const Event& e : ev) {
    std::fwrite(e.json.data(), 1, e.json.size(), f);
    std::fputc('\n', f);
  }
  std::fclose(f);
}

int64_t Arrival(int64_t t, int64_t delay) { return (t + delay) / 10000 * 10000; }

// Impressions and clicks: `events` in all, 2/3 impressions.
void GenerateInterval(long long events, std::vector<Event>* left, std::vector<Event>* right) {
  std::mt19937_64 rng(42);
  const long long impressions = events * 2 / 3;
  const int64_t span = 24 * kHour;
  std::uniform_int_distribution<int> ad(0, 999), user(0, 99);
  std::uniform_int_distribution<int64_t> disorder(0, 3 * kMinute);
  std::exponential_distribution<double> latency(1.0 / (40.0 * kMinute));
  for (long long i = 0; i < impressions; ++i) {
    const int64_t t = kStart + span * i / impressions;
    const int a = ad(rng), u = user(rng);
    const int64_t arr = Arrival(t, disorder(rng));
    left->push_back(
        {arr, t,
         absl::StrFormat(R"({"imp_id":%lld,"ad_id":%d,"user_id":%d,"ts":"%s","arrival":%lld})", i,
                         a, u, FormatIso8601(t), arr)});
    if (i % 2 == 0 && static_cast<long long>(right->size()) < events - impressions) {
      // Half the impressions are clicked; 2% of those after the 4 h bound.
      int64_t lat = static_cast<int64_t>(latency(rng)) % (4 * kHour);
      if (i % 100 == 0) lat = 4 * kHour + 1 + static_cast<int64_t>(latency(rng)) % kHour;
      const int64_t ct = t + lat;
      const int64_t carr = Arrival(ct, disorder(rng));
      right->push_back(
          {carr, ct,
           absl::StrFormat(R"({"click_id":%lld,"ad_id":%d,"user_id":%d,"ts":"%s","arrival":%lld})",
                           i, a, u, FormatIso8601(ct), carr)});
    }
  }
}

// Nexmark-like persons and auctions: `events` in all, 1 : 3.
void GenerateWindow(long long events, std::vector<Event>* left, std::vector<Event>* right) {
  std::mt19937_64 rng(7);
  std::uniform_int_distribution<int64_t> disorder(0, 2000);
  std::uniform_int_distribution<int> recent(0, 999);
  const int64_t step_us = 100;  // 10,000 events/s of event time
  long long persons = 0;
  const char* states[] = {"OR", "ID", "CA", "WA", "AZ"};
  for (long long i = 0; i < events; ++i) {
    const int64_t t = kStart + i * step_us / 1000;
    const int64_t arr = Arrival(t, disorder(rng));
    if (i % 4 == 0) {
      left->push_back(
          {arr, t,
           absl::StrFormat(
               R"({"id":%lld,"name":"person %lld","city":"Portland","state":"%s","ts":"%s","arrival":%lld})",
               persons, persons, states[persons % 5], FormatIso8601(t), arr)});
      ++persons;
    } else {
      long long seller = std::max<long long>(0, persons - 1 - recent(rng));
      right->push_back(
          {arr, t,
           absl::StrFormat(
               R"({"id":%lld,"seller":%lld,"item":"item %lld","reserve":%lld,"category":%lld,"ts":"%s","arrival":%lld})",
               i, seller, i, 100 + i % 9000, i % 10, FormatIso8601(t), arr)});
    }
  }
}

// Where the job reads: the files, or Kafka topics (key: the declared source
// key, empty for none).
struct Input {
  bool kafka = false;
  std::string left_key, right_key;
};

std::string SourceYaml(const std::string& name, const std::string& file, const std::string& ooo,
                       const Input& in, const std::string& key) {
  const std::string where = in.kafka
                                ? absl::StrCat("kafka: {topic: ", name, ", bounded: true}")
                                : absl::StrCat("file: {path: ", file, ", arrival_field: arrival}");
  return absl::StrCat("    - name: ", name, "\n      ", where, "\n",
                      key.empty() ? "" : absl::StrCat("      key: [", key, "]\n"),
                      "      event_time: {field: ts, format: iso8601}\n",
                      "      watermark: {max_out_of_orderness: ", ooo, "}\n");
}

std::string JobYaml(const std::string& kase, const std::string& dir, const Input& in) {
  // Disorder bound: 3 min for impressions/clicks, 2 s for the Nexmark-like
  // stream (its whole event-time span is only events / 10,000 seconds).
  const std::string ooo = kase == "interval" ? "5m" : "5s";
  std::string sources = absl::StrCat(
      "\n  sources:\n", SourceYaml("left_src", dir + "/left.jsonl", ooo, in, in.left_key),
      SourceYaml("right_src", dir + "/right.jsonl", ooo, in, in.right_key));
  std::string op = kase == "interval" ? R"(
  operators:
    - name: joined
      interval_join:
        type: left
        left: left_src
        right: right_src
        on: [ad_id, user_id]
        between: {lower: 0s, upper: 4h}
)"
                                      : R"(
  operators:
    - name: joined
      window_join:
        type: inner
        left: left_src
        right: right_src
        on: [[id, seller]]
        tumbling: 10s
)";
  return absl::StrCat("apiVersion: caravela/v1\nkind: Job\nmetadata: {name: join-bench}\nspec:",
                      sources, op, "  sinks:\n    - {from: joined, file: {path: ", dir,
                      "/out/joined.jsonl}}\n  dead_letter: {path: ", dir, "/out/dead.jsonl}\n");
}

// Produces `events` (sorted by arrival) into `topic`: by `key_fields`' values
// (the producer's partitioner), or round robin when there are none.
absl::Status Produce(const std::string& bootstrap, const std::string& topic,
                     std::vector<Event>& events, int partitions,
                     const std::vector<std::string>& key_fields) {
  std::stable_sort(events.begin(), events.end(),
                   [](const Event& a, const Event& b) { return a.arrival < b.arrival; });
  std::vector<caravela::KafkaTestRecord> records;
  records.reserve(events.size());
  for (size_t i = 0; i < events.size(); ++i) {
    caravela::KafkaTestRecord r;
    r.value = events[i].json;
    if (key_fields.empty()) {
      r.partition = static_cast<int32_t>(i % static_cast<size_t>(partitions));
    } else {
      for (const std::string& f : key_fields) {
        // "f":value up to the next comma (the generators write flat JSON).
        const size_t at = r.value.find("\"" + f + "\":");
        const size_t from = at + f.size() + 3;
        absl::StrAppend(&r.key, r.value.substr(from, r.value.find(',', from) - from), "|");
      }
    }
    records.push_back(std::move(r));
  }
  return caravela::ProduceRecords(bootstrap, topic, records, 600000);
}

// Feeds the first half of the events (by arrival) through the operator alone
// and returns state bytes per buffered row after flush + compaction.
void StateSample(const std::string& kase, const caravela::JobSpec& spec, std::vector<Event> left,
                 std::vector<Event> right, const std::string& dir) {
  std::vector<std::pair<int, Event*>> all;
  all.reserve(left.size() + right.size());
  for (Event& e : left) all.push_back({0, &e});
  for (Event& e : right) all.push_back({1, &e});
  std::stable_sort(all.begin(), all.end(), [](const auto& a, const auto& b) {
    return a.second->arrival < b.second->arrival;
  });
  all.resize(all.size() / 2);
  auto backend = caravela::OpenRocksDbBackend(dir + "/sample-state");
  if (!backend.ok()) return;
  std::unique_ptr<caravela::Operator> op;
  auto made = spec.operators[0].kind->Create(spec.operators[0], caravela::OperatorBuildContext{});
  if (!made.ok()) return;
  op = std::move(*made);
  caravela::OperatorHarness h(op.get(), std::move(*backend));
  if (!h.Open().ok()) return;
  int64_t max_t = caravela::kMinTime;
  for (size_t i = 0; i < all.size();) {
    std::vector<std::pair<std::string, int64_t>> batch[2];
    for (size_t n = 0; n < 1024 && i < all.size(); ++n, ++i) {
      batch[all[i].first].push_back({all[i].second->json, all[i].second->time});
      max_t = std::max(max_t, all[i].second->time);
    }
    for (int s = 0; s < 2; ++s) {
      if (!batch[s].empty() && !h.ProcessBatch(batch[s], s).ok()) return;
    }
    if (!h.AdvanceWatermark(max_t - (kase == "interval" ? 5 * kMinute : 5000)).ok()) return;
    h.TakeOutput();
  }
  if (!h.Commit().ok() || !h.state().Compact().ok()) return;
  uint64_t rows = 0;
  if (kase == "interval") {
    auto* ij = static_cast<caravela::IntervalJoinOperator*>(op.get());
    rows = ij->buffered_rows(0) + ij->buffered_rows(1);
  } else {
    for (const char* t : {"op/left", "op/right"}) {
      auto table = h.state().OpenTable(t);
      if (table.ok()) rows += *(*table)->CountKeys();
    }
  }
  const uint64_t bytes = h.state().ApproximateBytes();
  std::printf("STATE %s buffered_rows=%" PRIu64 " state_bytes=%" PRIu64
              " bytes_per_row=%.1f peak_rss_mib=%.1f\n",
              kase.c_str(), rows, bytes, rows ? static_cast<double>(bytes) / rows : 0.0,
              caravela::bench::PeakRssMiB());
}

}  // namespace

int main(int argc, char** argv) {
  caravela::bench::Flags flags(argc, argv);
  const std::string kase = flags.Str("case", "interval");
  const long long events = flags.Int("events", 2'000'000);
  const std::string work = flags.Str("work-dir", "/tmp/caravela-join-bench-" + kase);
  if (kase != "interval" && kase != "window") {
    std::fprintf(stderr,
                 "usage: join_bench --case interval|window [--events N] [--work-dir DIR]\n");
    return 2;
  }
  std::filesystem::remove_all(work);
  std::filesystem::create_directories(work + "/out");
  std::vector<Event> left, right;
  if (kase == "interval") {
    GenerateInterval(events, &left, &right);
  } else {
    GenerateWindow(events, &left, &right);
  }
  const int kafka_partitions = static_cast<int>(flags.Int("kafka-partitions", 0));
  Input input;
  std::unique_ptr<caravela::EmbeddedBroker> broker;
  if (kafka_partitions > 0) {
    input.kafka = true;
    const bool keyed = flags.Bool("keyed");
    if (keyed) {
      input.left_key = kase == "interval" ? "ad_id, user_id" : "id";
      input.right_key = kase == "interval" ? "ad_id, user_id" : "seller";
    }
    auto b = caravela::EmbeddedBroker::Start(0, kafka_partitions);
    if (!b.ok()) return Fail("broker", b.status());
    broker = std::move(*b);
    const double p0 = caravela::bench::NowSeconds();
    for (auto [topic, events, key] :
         {std::tuple{"left_src", &left, input.left_key}, {"right_src", &right, input.right_key}}) {
      if (auto st = broker->CreateTopic(topic, kafka_partitions); !st.ok()) {
        return Fail("topic", st);
      }
      std::vector<std::string> fields = absl::StrSplit(key, ", ", absl::SkipEmpty());
      if (auto st = Produce(broker->bootstrap(), topic, *events, kafka_partitions, fields);
          !st.ok()) {
        return Fail("produce", st);
      }
    }
    std::fprintf(stderr, "join_bench: produced %zu + %zu events into %d partitions in %.1f s\n",
                 left.size(), right.size(), kafka_partitions, caravela::bench::NowSeconds() - p0);
  } else {
    WriteFile(left, work + "/left.jsonl");
    WriteFile(right, work + "/right.jsonl");
  }
  caravela::ParseResult parsed = caravela::ParseJobSpec(JobYaml(kase, work, input));
  if (!parsed.ok()) {
    std::fprintf(stderr, "job spec: %s\n", parsed.errors[0].ToString().c_str());
    return 1;
  }
  caravela::RunOptions options;
  options.data_dir = work + "/data";
  options.in_memory_state = flags.Bool("memory-state");
  options.state_flush_interval_ms =
      static_cast<int>(flags.Int("flush-ms", options.state_flush_interval_ms));
  options.parallelism = static_cast<int>(flags.Int("parallelism", 1));
  if (broker != nullptr) options.embedded_bootstrap = broker->bootstrap();
  const double t0 = caravela::bench::NowSeconds();
  const double c0 = caravela::bench::ThreadCpuSeconds();
  const double pc0 = caravela::bench::ProcessCpuSeconds();
  auto pipeline = caravela::Pipeline::Create(parsed.spec, options);
  if (!pipeline.ok()) {
    std::fprintf(stderr, "create: %s\n", std::string(pipeline.status().message()).c_str());
    return 1;
  }
  absl::Status st = (*pipeline)->Run();
  const double secs = caravela::bench::NowSeconds() - t0;
  const double thread_cpu = caravela::bench::ThreadCpuSeconds() - c0;
  const double process_cpu = caravela::bench::ProcessCpuSeconds() - pc0;
  if (!st.ok()) {
    std::fprintf(stderr, "run: %s\n", std::string(st.message()).c_str());
    return 1;
  }
  caravela::MetricsRegistry& m = (*pipeline)->metrics();
  const long long in = m.Value("records_in_total", "source=\"left_src\"") +
                       m.Value("records_in_total", "source=\"right_src\"");
  std::fprintf(stderr, "%s\n", (*pipeline)->Summary().c_str());
  const int tasks = (*pipeline)->task_count();
  caravela::bench::PrintResult(
      absl::StrCat(kase, "_join", options.in_memory_state ? "_memory_state" : "_rocksdb",
                   input.kafka ? "_kafka" : ""),
      in, secs,
      absl::StrCat("left=", left.size(), " right=", right.size(),
                   " matches=", m.Value("join_matches_total", "op=\"joined\""),
                   " unmatched=", m.Value("join_unmatched_total", "op=\"joined\""),
                   " out=", m.Value("sink_records_total", "from=\"joined\""), " tasks=", tasks,
                   " process_cpu_s=", process_cpu),
      tasks > 1 ? process_cpu : thread_cpu);
  pipeline->reset();
  if (flags.Bool("state-sample")) StateSample(kase, parsed.spec, left, right, work);
  if (!flags.Bool("keep")) std::filesystem::remove_all(work);
  return 0;
}
