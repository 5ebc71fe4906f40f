// `caravela demo`: the README's first command. Starts the embedded Kafka
// broker (or uses an existing Kafka: --bootstrap), produces a live stream of
// mobile purchase events into a 4-partition topic (retries, hours-late uploads, cross-partition
// disorder, same-id conflicts, malformed records), runs the hourly-revenue job against it and
// prints every revision as it is published (EARLY -> ON_TIME -> LATE -> FINAL),
// then the side-output counts. Exits by itself.
#include "cli/demo.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <map>
#include <random>
#include <thread>
#include <vector>

#include "absl/strings/str_format.h"
#include "common/json.h"
#include "common/time_util.h"
#include "spdlog/spdlog.h"
#include "worker/connectors/embedded_broker.h"
#include "worker/connectors/file_connectors.h"
#include "worker/connectors/kafka_admin.h"
#include "worker/connectors/kafka_sink.h"
#include "worker/connectors/kafka_source.h"
#include "worker/registry/builtin_kinds.h"
#include "worker/runtime/pipeline.h"

namespace caravela {
namespace {

struct DemoEvent {
  int64_t due;  // index in the production order
  std::string key;
  std::string json;
};

// Builds the purchase stream in production order (deterministic for a seed).
std::vector<DemoEvent> MakeEvents(int count, int64_t start_ms, int64_t end_ms, uint64_t seed,
                                  int* retries, int* late, int* conflicts, int* malformed) {
  std::mt19937_64 rng(seed);
  const char* countries[] = {"PT", "PT", "PT", "ES", "ES", "BR", "BR", "FR", "DE", "US"};
  std::vector<DemoEvent> out;
  out.reserve(count * 11 / 10);
  auto purchase = [&](int i, const std::string& id, int user, int64_t t, int64_t cents) {
    return absl::StrFormat(
        R"({"event_id":"%s","user_id":"u%03d","country":"%s","amount":%d.%02d,"event_time":"%s"})",
        id, user, countries[user % 10], cents / 100, cents % 100, FormatIso8601(t));
  };
  for (int i = 0; i < count; ++i) {
    int64_t sim = start_ms + (end_ms - start_ms) * i / count;
    int user = static_cast<int>(rng() % 400);
    int64_t t = sim - static_cast<int64_t>(rng() % 120'000);  // device clock/queue jitter
    int64_t cents = 199 + static_cast<int64_t>(rng() % 9800);
    std::string id = absl::StrFormat("p-%06d", i);
    std::string key = absl::StrFormat("u%03d", user);
    std::string json = purchase(i, id, user, t, cents);
    int64_t due = i * 10;
    uint64_t roll = rng() % 1000;
    if (roll < 30) {
      // Offline device: uploaded 30-240 minutes (of event time) later; past
      // 2h05m (lateness + out-of-orderness) it is too late for its window.
      int64_t delay_events = count * (30 + static_cast<int64_t>(rng() % 210)) * 60'000 /
                             std::max<int64_t>(1, end_ms - start_ms);
      due += delay_events * 10;
      ++*late;
    }
    out.push_back({due, key, json});
    if (roll >= 30 && roll < 80) {  // retry after a lost ack: byte-identical copy
      out.push_back({due + 10 * static_cast<int64_t>(1 + rng() % 30), key, json});
      ++*retries;
    }
    if (roll >= 80 && roll < 84) {  // buggy client: same id, different amount
      out.push_back({due + 10 * static_cast<int64_t>(1 + rng() % 30), key,
                     purchase(i, id, user, t, cents + 500)});
      ++*conflicts;
    }
    if (roll >= 84 && roll < 87) {  // malformed uploads
      const char* bad[] = {"{\"event_id\":\"x\",\"amount\":", "not json at all",
                           "{\"event_id\":\"y\",\"user_id\":\"u1\",\"event_time\":\"soon\"}"};
      out.push_back({due + 1, key, bad[rng() % 3]});
      ++*malformed;
    }
  }
  std::stable_sort(out.begin(), out.end(),
                   [](const DemoEvent& a, const DemoEvent& b) { return a.due < b.due; });
  return out;
}

std::string HourMinute(std::string_view iso) {
  return iso.size() >= 16 ? std::string(iso.substr(11, 5)) : std::string(iso);
}

}  // namespace

int RunDemo(const std::string& job_file, int seconds, int events, bool quiet,
            const std::string& existing_bootstrap) {
  spdlog::set_level(spdlog::level::warn);  // keep the screen for the results
  ParseResult parsed = LoadJobSpec(job_file);
  if (!parsed.ok()) {
    for (const auto& e : parsed.errors) std::fprintf(stderr, "  %s\n", e.ToString().c_str());
    return 2;
  }
  std::unique_ptr<EmbeddedBroker> broker;
  std::string bootstrap = existing_bootstrap;
  if (bootstrap.empty()) {
    auto broker_or = EmbeddedBroker::Start(0, 4);
    if (!broker_or.ok()) {
      std::fprintf(stderr, "error: embedded broker: %s\n",
                   std::string(broker_or.status().message()).c_str());
      return 1;
    }
    broker = std::move(*broker_or);
    bootstrap = broker->bootstrap();
  }
  // One output partition, so the printer shows revisions in publication order.
  for (auto [topic, partitions] : {std::pair{"purchases", 4}, std::pair{"hourly-revenue", 1}}) {
    // On an existing Kafka through its Admin API; topics that exist hold an
    // earlier demo's records, which would mix with this one's.
    absl::Status st = broker != nullptr ? broker->CreateTopic(topic, partitions)
                                        : CreateKafkaTopic(bootstrap, topic, partitions);
    if (absl::IsAlreadyExists(st) && broker == nullptr) {
      std::fprintf(stderr,
                   "error: %s: the demo needs fresh topics (delete them, or start a fresh "
                   "cluster: scripts/kafka start --fresh)\n",
                   std::string(st.message()).c_str());
      return 1;
    }
    if (!st.ok()) {
      std::fprintf(stderr, "error: %s\n", std::string(st.message()).c_str());
      return 1;
    }
  }
  std::printf("%s at %s; topics purchases (4 partitions), hourly-revenue (1)\n",
              broker != nullptr ? "Embedded Kafka broker" : "Kafka (--bootstrap)",
              bootstrap.c_str());

  const int64_t now = SystemClock().NowMs();
  const int64_t start = FloorDiv(now, 3'600'000) * 3'600'000 - 5 * 3'600'000;
  int retries = 0, late = 0, conflicts = 0, malformed = 0;
  std::vector<DemoEvent> stream =
      MakeEvents(events, start, now, 1497, &retries, &late, &conflicts, &malformed);
  std::printf(
      "Producing %zu messages over ~%ds: %d purchases, %d retries, %d uploads 30-240 min late, "
      "%d same-id conflicts, %d malformed\n\n",
      stream.size(), seconds, events, retries, late, conflicts, malformed);
  std::printf("%-8s %-5s %-14s %-8s %10s %7s %7s\n", "state", "rev", "hour (UTC)", "country",
              "revenue", "orders", "buyers");
  std::fflush(stdout);

  std::atomic<bool> produced{false}, stop{false}, job_done{false};
  absl::Status producer_status;
  std::thread producer([&] {
    KafkaSinkOptions o;
    o.bootstrap = bootstrap;
    o.topic = "purchases";
    KafkaSink sink(o);
    producer_status = sink.Open();
    auto t0 = std::chrono::steady_clock::now();
    for (size_t i = 0; i < stream.size() && producer_status.ok(); ++i) {
      producer_status = sink.Write(stream[i].key, stream[i].json);
      if (i % 50 == 49) {
        (void)sink.Flush();
        auto due = t0 + std::chrono::milliseconds(int64_t{seconds} * 1000 * (i + 1) /
                                                  static_cast<int64_t>(stream.size()));
        std::this_thread::sleep_until(due);
      }
    }
    if (producer_status.ok()) producer_status = sink.Close();
    produced.store(true);
  });

  // Prints every revision published to the output topic.
  std::map<std::string, std::string> finals;
  std::thread printer([&] {
    KafkaSourceOptions o;
    o.bootstrap = bootstrap;
    o.topic = "hourly-revenue";
    KafkaSource source(o);
    if (!source.Open().ok()) return;
    JsonDecoder dec;
    Record r;
    int idle_polls = 0;
    while (true) {
      auto n = source.Poll(500, 100, [&](const RawMessage& m) {
        if (!dec.Decode(m.payload, &r).ok()) return;
        auto s = [&](const char* f) { return r.GetPath(FieldPath::Parse(f)); };
        std::string state(s("state").s);
        std::string hour = HourMinute(s("window_start").s) + "-" + HourMinute(s("window_end").s);
        std::printf("%-8s %-5lld %-14s %-8s %10s %7s %7s\n", state.c_str(),
                    static_cast<long long>(s("revision").i), hour.c_str(),
                    std::string(s("country").s).c_str(), s("revenue").ToJson().c_str(),
                    s("orders").ToJson().c_str(), s("buyers").ToJson().c_str());
        if (state == "FINAL")
          finals[hour + " " + std::string(s("country").s)] = s("revenue").ToJson();
      });
      std::fflush(stdout);
      if (n.ok() && *n == 0 && job_done.load()) {
        if (++idle_polls >= 10) break;
      } else {
        idle_polls = 0;
      }
    }
  });

  RunOptions options;
  options.data_dir = "caravela-data/demo";
  // Each demo starts afresh: its broker (or its topics) are new, so the
  // checkpoints of an earlier demo (offsets in other topics) must not be
  // resumed.
  {
    std::error_code ec;
    std::filesystem::remove_all(options.data_dir, ec);
  }
  options.embedded_bootstrap = bootstrap;
  options.stop = &stop;
  options.end_of_input = &produced;
  options.progress_interval_ms = quiet ? 0 : 5000;
  int rc = 0;
  std::string summary;
  MetricsRegistry* metrics = nullptr;
  auto pipeline = Pipeline::Create(parsed.spec, options);
  if (!pipeline.ok()) {
    std::fprintf(stderr, "error: %s\n", std::string(pipeline.status().message()).c_str());
    rc = 1;
    stop.store(true);
  } else {
    absl::Status st = (*pipeline)->Run();
    if (!st.ok()) {
      std::fprintf(stderr, "error: %s\n", std::string(st.message()).c_str());
      rc = 1;
    }
    summary = (*pipeline)->Summary();
    metrics = &(*pipeline)->metrics();
  }
  job_done.store(true);
  producer.join();
  printer.join();
  if (!producer_status.ok()) {
    std::fprintf(stderr, "error: producer: %s\n", std::string(producer_status.message()).c_str());
    rc = 1;
  }
  std::printf("\n%zu hourly results are FINAL.\n", finals.size());
  if (metrics != nullptr) {
    const int64_t too_late = metrics->Sum("too_late_total", "op=\"revenue\"") +
                             metrics->Sum("too_late_total", "op=\"unique\"");
    std::printf(
        "records read: %lld | duplicates dropped: %lld | conflicts: %lld | too late: %lld | "
        "invalid: %lld | revisions published: %lld\n",
        static_cast<long long>(metrics->Value("records_in_total", "source=\"purchases\"")),
        static_cast<long long>(metrics->Value("dedup_duplicates_total", "op=\"unique\"")),
        static_cast<long long>(metrics->Value("dedup_conflicts_total", "op=\"unique\"")),
        static_cast<long long>(too_late),
        static_cast<long long>(metrics->Sum("invalid_records_total", "source=\"purchases\"")),
        static_cast<long long>(metrics->Value("sink_records_total", "from=\"revenue\"")));
  }
  std::printf("Side outputs:\n");
  for (const SinkSpec& sink : parsed.spec.sinks) {
    if (const FileSinkSpec* file = sink.As<FileSinkSpec>()) {
      std::printf("  %-18s -> %s\n", sink.from.c_str(), file->path.c_str());
    }
  }
  return rc;
}

}  // namespace caravela
