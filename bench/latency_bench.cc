// End-to-end latency (issue 30): from the moment a record is produced to the
// moment a result that counts it is visible in the sink topic.
//
// A `caravela broker` process holds the input topic `purchases` and the
// sink topic `latency-out` (or, with --bootstrap HOST:PORT, an existing
// Kafka such as `scripts/kafka start`: the bench creates its topics there
// through the Admin API, named for this run — `purchases-<run>`,
// `latency-out-<run>`, and the job `latency-<job>-<run>`, so that nothing
// of an earlier run is read — and deletes them, with the job's exchange
// topics, at the end). A producer thread writes purchases at a fixed
// rate, each stamped with its produce time (`produce_ms`, also its event
// time); a consumer thread reads the sink topic from its start and records,
// when a result arrives, the latency of every record it newly counts. The
// job runs with checkpoints (every --checkpoint-ms, file storage):
//
//   passthrough  purchases keyed by user_id -> dedup by event_id (one
//                exchange, re-keyed) -> Kafka sink (changelog): each
//                output record is its input record; latency = arrival of
//                the output - its produce_ms.
//   filter-dedup purchases keyed by user_id -> filter `amount >= 0` (passes
//                every record; stays in the source's stage) -> dedup by
//                event_id (one exchange) -> Kafka sink: measured as
//                passthrough.
//   revenue      the exchange job: dedup -> hourly revenue by country with
//                early_fire_every 1s -> Kafka sink; a revision of (window,
//                country) with `orders` = c counts the group's first c
//                records in produce order (an approximation where records
//                of one group race through different partitions); latency
//                = arrival of the first revision counting a record - its
//                produce_ms.
//
// It runs in `caravela run` (--where run, --exchange memory|network|kafka)
// or on a cluster of processes (--where cluster: a coordinator and
// --workers workers, --exchange network|kafka). Records produced during the
// first --warmup seconds are not counted. Prints p50, p99, p99.9 and max
// (ms) and, with --json, writes them with a histogram (1 ms buckets up to
// 100 ms, then 10 ms up to 1 s, then 100 ms) for scripts/latency_plot.
//
// LATENCY_TRACE=1 also prints the sink topic's log range against the
// consumer's position every second, and the worst latency and unseen
// records per second of produce time (where a run falls behind).
//
//   build/bench/latency_bench --job passthrough --where cluster
//       --exchange network --rate 2000 --seconds 60 --json /tmp/lat.json
#include <librdkafka/rdkafka.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cinttypes>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/job_plan.h"
#include "common/job_spec.h"
#include "coordinator/job_client.h"
#include "tests/child_process.h"
#include "worker/connectors/kafka_admin.h"
#include "worker/registry/builtin_kinds.h"

namespace caravela {
namespace {

namespace fs = std::filesystem;
using milliseconds = std::chrono::milliseconds;
using SteadyClock = std::chrono::steady_clock;

constexpr int kCountries = 8;

struct Flags {
  std::string job = "passthrough";
  std::string where = "run";
  std::string exchange;  // default: memory (run), network (cluster)
  int rate = 2000;
  int seconds = 60;
  int warmup = 5;
  int partitions = 4;
  int parallelism = 2;
  int workers = 2;
  int sink_linger_ms = 5;  // the job's Kafka sink linger
  int checkpoint_ms = 1000;
  std::string json;
  std::string dir;
  std::string bootstrap;  // an existing Kafka; empty: start `caravela broker`
};

// The names of one run: its topics and job.
struct Names {
  std::string input = "purchases";
  std::string output = "latency-out";
  std::string job;
};

int64_t NowMs() {
  return std::chrono::duration_cast<milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string JobYaml(const Flags& f, const Names& n, const std::string& bootstrap) {
  std::string yaml = absl::StrCat(R"(apiVersion: caravela/v1
kind: Job
metadata: {name: )",
                                  n.job, R"(}
spec:
  parallelism: )",
                                  f.parallelism, R"(
  checkpoint: {interval: )",
                                  f.checkpoint_ms, R"(ms}
)");
  if (f.exchange == "kafka") yaml += "  exchange: kafka\n";
  absl::StrAppend(&yaml, R"(  sources:
    - name: purchases
      kafka: {bootstrap: ")",
                  bootstrap, R"(", topic: )", n.input, R"(}
      key: [user_id]
      event_time: {field: produce_ms, format: epoch_ms}
      watermark: {max_out_of_orderness: 1s, idle_timeout: 1s}
  operators:
)");
  std::string dedup_from = "purchases";
  if (f.job == "filter-dedup") {
    yaml += R"(    - name: valid
      filter: {from: purchases, where: "amount >= 0"}
)";
    dedup_from = "valid";
  }
  absl::StrAppend(&yaml, R"(    - name: unique
      dedup: {from: )",
                  dedup_from, R"(, id: event_id, retention: 10m}
)");
  std::string from = "unique";
  if (f.job == "revenue") {
    yaml += R"(    - name: revenue
      window:
        from: unique
        tumbling: 1h
        group_by: [country]
        aggregates: [{as: orders, count: "*"}]
        early_fire_every: 1s
        allowed_lateness: 1m
)";
    from = "revenue";
  }
  absl::StrAppend(&yaml, "  sinks:\n    - {from: ", from, ", kafka: {bootstrap: \"", bootstrap,
                  "\", topic: ", n.output, ", mode: changelog, linger: ", f.sink_linger_ms,
                  "ms}}\n");
  return yaml;
}

// The produce times of every record, and per (hour, country) group in
// produce order (revenue), shared by the producer and the consumer.
struct Ledger {
  std::mutex mu;
  std::vector<int64_t> produced;                       // by sequence number
  std::vector<int64_t> latency;                        // by sequence number; -1: not seen
  std::map<std::string, std::vector<int64_t>> groups;  // group -> sequence numbers
  std::map<std::string, size_t> counted;               // group -> records counted so far
  int64_t first_counted_seq = 0;                       // records before it are the warm-up
};

// Finds `"field":` in `json` and reads the number or string after it.
std::string_view Field(std::string_view json, std::string_view field) {
  const std::string pat = "\"" + std::string(field) + "\":";
  const size_t at = json.find(pat);
  if (at == std::string_view::npos) return {};
  size_t b = at + pat.size();
  if (b < json.size() && json[b] == '"') {
    const size_t e = json.find('"', b + 1);
    return e == std::string_view::npos ? std::string_view() : json.substr(b + 1, e - b - 1);
  }
  size_t e = b;
  while (e < json.size() && json[e] != ',' && json[e] != '}') ++e;
  return json.substr(b, e - b);
}

rd_kafka_t* NewClient(rd_kafka_type_t type, const std::string& bootstrap,
                      const std::vector<std::pair<std::string, std::string>>& config) {
  rd_kafka_conf_t* conf = rd_kafka_conf_new();
  char err[512];
  rd_kafka_conf_set(conf, "bootstrap.servers", bootstrap.c_str(), err, sizeof(err));
  for (const auto& [k, v] : config) {
    if (rd_kafka_conf_set(conf, k.c_str(), v.c_str(), err, sizeof(err)) != RD_KAFKA_CONF_OK) {
      std::fprintf(stderr, "config %s: %s\n", k.c_str(), err);
    }
  }
  rd_kafka_t* rk = rd_kafka_new(type, conf, err, sizeof(err));
  if (rk == nullptr) std::fprintf(stderr, "kafka client: %s\n", err);
  return rk;
}

class Bench {
 public:
  explicit Bench(Flags f) : f_(std::move(f)), dir_(f_.dir) {
    n_.job = absl::StrCat("latency-", f_.job);
    if (!f_.bootstrap.empty()) {
      // Fresh names on a Kafka that outlives the run.
      const std::string run = absl::StrCat(::getpid(), "-", NowMs() % 100'000'000);
      n_.input = absl::StrCat("purchases-", run);
      n_.output = absl::StrCat("latency-out-", run);
      n_.job = absl::StrCat(n_.job, "-", run);
    }
  }
  ~Bench() {
    StopAll();
    DeleteTopics();
  }

  int Run() {
    // The job's exchange topics (Kafka exchanges).
    std::vector<std::string> exchange_topics;
    if (f_.exchange == "kafka") {
      ParseResult parsed = ParseJobSpec(JobYaml(f_, n_, "127.0.0.1:1"));
      if (!parsed.ok()) {
        std::fprintf(stderr, "job: %s\n", parsed.errors[0].ToString().c_str());
        return 1;
      }
      auto plan = PlanJob(parsed.spec, f_.parallelism, {{"purchases", f_.partitions}});
      if (!plan.ok()) return 1;
      for (const ExchangePlan& ex : plan->exchanges) {
        exchange_topics.push_back(absl::StrCat(ex.topic, ":", ex.CreatePartitions(*plan)));
      }
    }
    if (f_.bootstrap.empty()) {
      std::vector<std::string> args = {CARAVELA_BINARY, "broker",
                                       "--topic",       absl::StrCat(n_.input, ":", f_.partitions),
                                       "--topic",       absl::StrCat(n_.output, ":1")};
      // The mock broker creates no topics for other processes, so the job's
      // exchange topics are made here.
      for (const std::string& t : exchange_topics) {
        args.push_back("--topic");
        args.push_back(t);
      }
      broker_ = std::make_unique<ChildProcess>(args, dir_ / "broker.log");
      bootstrap_ = broker_->WaitFor(R"(listening on (\S+))", milliseconds(20000));
      if (bootstrap_.empty()) return Fail("the broker did not start");
    } else {
      // A real Kafka: the topics through its Admin API (the workers create
      // the exchange topics themselves; they are deleted at the end).
      bootstrap_ = f_.bootstrap;
      for (const auto& [topic, partitions] :
           {std::pair{n_.input, f_.partitions}, std::pair{n_.output, 1}}) {
        if (absl::Status st = CreateKafkaTopic(bootstrap_, topic, partitions); !st.ok()) {
          return Fail(std::string(st.message()));
        }
        created_.push_back(topic);
      }
      for (const std::string& t : exchange_topics) created_.push_back(t.substr(0, t.rfind(':')));
    }
    const std::string yaml = JobYaml(f_, n_, bootstrap_);
    if (!StartJob(yaml)) return 1;

    std::atomic<bool> stop_consumer{false};
    std::thread consumer([&] { Consume(stop_consumer); });
    // LATENCY_TRACE: each second, every task's cumulative times (ms):
    // alignment/back-pressure/checkpoint sync.
    std::thread times([&] {
      if (getenv("LATENCY_TRACE") == nullptr || job_id_.empty()) return;
      while (!stop_consumer.load()) {
        std::this_thread::sleep_for(std::chrono::seconds(1));
        auto j = JobClient(address_, "").Get(job_id_);
        if (!j.ok()) continue;
        std::string line = absl::StrCat("times at ", NowMs() % 100000, ":");
        for (const v1::TaskStatus& t : j->tasks()) {
          const v1::TaskActivity& a = t.activity();
          absl::StrAppend(&line, " ", a.alignment_ms(), "/", a.backpressure_ms(), "/",
                          a.checkpoint_sync_ms());
        }
        std::printf("%s\n", line.c_str());
      }
    });
    const int64_t produced = Produce();
    // Results of the last records: wait until each was seen, or 15 s.
    const auto deadline = SteadyClock::now() + std::chrono::seconds(15);
    while (SteadyClock::now() < deadline && Missing() > 0) {
      std::this_thread::sleep_for(milliseconds(50));
    }
    stop_consumer = true;
    consumer.join();
    times.join();
    PrintTaskTimes();
    StopAll();
    return Report(produced);
  }

  // Cluster: where each task's time went (TaskActivity), before the stop.
  void PrintTaskTimes() {
    if (job_id_.empty()) return;
    auto j = JobClient(address_, "").Get(job_id_);
    if (!j.ok()) return;
    for (int g = 0; g < j->tasks_size(); ++g) {
      const v1::TaskStatus& t = j->tasks(g);
      const v1::TaskActivity& a = t.activity();
      std::printf(
          "task %d (stage %d on %s): alignment %lld ms (last %lld, skew %lld), back-pressure "
          "%lld ms, checkpoint sync %lld ms (last: state flush %lld, sink pre-commit %lld, "
          "snapshot %lld)\n",
          g, t.stage(), t.worker().c_str(), static_cast<long long>(a.alignment_ms()),
          static_cast<long long>(a.last_alignment_ms()),
          static_cast<long long>(a.last_alignment_skew_ms()),
          static_cast<long long>(a.backpressure_ms()),
          static_cast<long long>(a.checkpoint_sync_ms()),
          static_cast<long long>(a.last_state_flush_ms()),
          static_cast<long long>(a.last_sink_precommit_ms()),
          static_cast<long long>(a.last_snapshot_ms()));
    }
  }

 private:
  int Fail(const std::string& why) {
    std::fprintf(stderr, "latency_bench: %s\n", why.c_str());
    return 1;
  }

  // The topics this run made on an existing Kafka.
  void DeleteTopics() {
    if (created_.empty()) return;
    if (absl::Status st = DeleteKafkaTopics(bootstrap_, created_); !st.ok()) {
      std::fprintf(stderr, "latency_bench: %s\n", std::string(st.message()).c_str());
    }
    created_.clear();
  }

  bool StartJob(const std::string& yaml) {
    const fs::path job = dir_ / "job.yaml";
    std::ofstream(job) << yaml;
    if (f_.where == "run") {
      run_ = std::make_unique<ChildProcess>(
          std::vector<std::string>{CARAVELA_BINARY, "--log-level", "info,checkpoint=debug", "run",
                                   "-q", "--exchange", f_.exchange, "--data-dir",
                                   (dir_ / "run").string(), job.string()},
          dir_ / "run.log");
      return true;
    }
    coordinator_ = std::make_unique<ChildProcess>(
        std::vector<std::string>{CARAVELA_BINARY, "coordinator", "--listen", "127.0.0.1:0",
                                 "--data-dir", (dir_ / "coordinator").string(), "--allow-path",
                                 dir_.string()},
        dir_ / "coordinator.log");
    address_ = coordinator_->WaitFor(R"(grpc=(\S+))", milliseconds(20000));
    if (address_.empty()) return Fail("the coordinator did not start") == 0;
    const int slots = (3 * f_.parallelism + f_.workers - 1) / f_.workers;
    for (int i = 0; i < f_.workers; ++i) {
      workers_.push_back(std::make_unique<ChildProcess>(
          std::vector<std::string>{CARAVELA_BINARY, "--log-level", "info,checkpoint=debug",
                                   "worker", "--coordinator", address_, "--slots",
                                   std::to_string(slots), "--data-dir",
                                   (dir_ / absl::StrCat("w", i)).string(), "--bootstrap",
                                   bootstrap_, "--allow-path", dir_.string()},
          dir_ / absl::StrCat("worker-", i, ".log")));
      if (workers_.back()->WaitFor(R"(id=(\S+))", milliseconds(20000)).empty()) {
        return Fail("a worker did not start") == 0;
      }
    }
    auto submitted = JobClient(address_, "").Submit(yaml, f_.parallelism);
    if (!submitted.ok() || submitted->job_id().empty()) {
      return Fail(submitted.ok() ? submitted->DebugString()
                                 : std::string(submitted.status().message())) == 0;
    }
    job_id_ = submitted->job_id();
    const auto deadline = SteadyClock::now() + std::chrono::seconds(60);
    while (SteadyClock::now() < deadline) {
      auto j = JobClient(address_, "").Get(job_id_);
      if (j.ok() && j->state() == v1::RUNNING) return true;
      std::this_thread::sleep_for(milliseconds(50));
    }
    return Fail("the job did not start running within 60 s") == 0;
  }

  void StopAll() {
    if (run_ != nullptr) run_->Stop(SIGINT);
    if (!job_id_.empty()) (void)JobClient(address_, "").Cancel(job_id_);
    for (auto& w : workers_) w->Stop(SIGTERM, milliseconds(5000));
    if (coordinator_ != nullptr) coordinator_->Stop(SIGTERM);
    if (broker_ != nullptr) broker_->Stop(SIGTERM);
    run_.reset();
    workers_.clear();
    coordinator_.reset();
    broker_.reset();
    job_id_.clear();
  }

  // Produces at --rate for --warmup + --seconds; returns how many.
  int64_t Produce() {
    rd_kafka_t* rk = NewClient(RD_KAFKA_PRODUCER, bootstrap_,
                               {{"linger.ms", "5"}, {"partitioner", "murmur2_random"}});
    if (rk == nullptr) return 0;
    const auto start = SteadyClock::now();
    const auto warm = start + std::chrono::seconds(f_.warmup);
    const auto end = warm + std::chrono::seconds(f_.seconds);
    int64_t seq = 0;
    std::string value;
    while (true) {
      const auto now = SteadyClock::now();
      if (now >= end) break;
      // Records due by now at the rate.
      const auto due =
          static_cast<int64_t>(std::chrono::duration<double>(now - start).count() * f_.rate);
      if (now >= warm && ledger_.first_counted_seq == 0) {
        std::lock_guard<std::mutex> lock(ledger_.mu);
        ledger_.first_counted_seq = seq;
      }
      for (; seq < due; ++seq) {
        const int64_t t = NowMs();
        const std::string user = absl::StrCat("u-", seq % 1000);
        const int country = static_cast<int>(seq % kCountries);
        value =
            absl::StrCat(R"({"event_id":"e-)", seq, R"(","user_id":")", user, R"(","country":"C)",
                         country, R"(","amount":1.5,"produce_ms":)", t, "}");
        std::vector<int64_t>* group = nullptr;  // revenue: this record's window and country
        {
          std::lock_guard<std::mutex> lock(ledger_.mu);
          ledger_.produced.push_back(t);
          ledger_.latency.push_back(-1);
          if (f_.job == "revenue") {
            group = &ledger_.groups[absl::StrCat(t / 3'600'000 * 3'600'000, "/C", country)];
            group->push_back(seq);
          }
        }
        rd_kafka_resp_err_t err = rd_kafka_producev(
            rk, RD_KAFKA_V_TOPIC(n_.input.c_str()), RD_KAFKA_V_KEY(user.data(), user.size()),
            RD_KAFKA_V_VALUE(value.data(), value.size()), RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
            RD_KAFKA_V_END);
        if (err != RD_KAFKA_RESP_ERR_NO_ERROR) {
          // Not produced (the client's queue is full): take its ledger
          // entries back, so the retry does not shift every later sequence
          // number by one (each retry used to count as a record "not seen").
          {
            std::lock_guard<std::mutex> lock(ledger_.mu);
            ledger_.produced.pop_back();
            ledger_.latency.pop_back();
            if (group != nullptr) group->pop_back();
          }
          rd_kafka_poll(rk, 10);
          --seq;  // retry this one
          continue;
        }
      }
      rd_kafka_poll(rk, 0);
      std::this_thread::sleep_for(std::chrono::microseconds(500));
    }
    rd_kafka_flush(rk, 10000);
    rd_kafka_destroy(rk);
    return seq;
  }

  void Consume(const std::atomic<bool>& stop) {
    rd_kafka_t* rk = NewClient(RD_KAFKA_CONSUMER, bootstrap_,
                               {{"group.id", "latency-bench"},
                                {"enable.auto.commit", "false"},
                                {"fetch.wait.max.ms", "10"},
                                {"fetch.error.backoff.ms", "1"}});
    if (rk == nullptr) return;
    rd_kafka_topic_partition_list_t* parts = rd_kafka_topic_partition_list_new(1);
    rd_kafka_topic_partition_list_add(parts, n_.output.c_str(), 0)->offset =
        RD_KAFKA_OFFSET_BEGINNING;
    rd_kafka_assign(rk, parts);
    rd_kafka_topic_partition_list_destroy(parts);
    const bool trace = getenv("LATENCY_TRACE") != nullptr;
    auto next_trace = SteadyClock::now();
    int64_t last_offset = -1;
    while (!stop.load()) {
      if (trace && SteadyClock::now() >= next_trace) {
        int64_t lo = 0, hi = 0;
        rd_kafka_get_watermark_offsets(rk, n_.output.c_str(), 0, &lo, &hi);
        std::printf("consumer at %" PRId64 ", log [%" PRId64 ", %" PRId64 ")\n", last_offset, lo,
                    hi);
        next_trace += std::chrono::seconds(1);
      }
      rd_kafka_message_t* m = rd_kafka_consumer_poll(rk, 20);
      if (m != nullptr) last_offset = m->offset;
      if (m == nullptr) continue;
      if (m->err == RD_KAFKA_RESP_ERR_NO_ERROR && m->payload != nullptr) {
        Seen(std::string_view(static_cast<const char*>(m->payload), m->len), NowMs());
      }
      rd_kafka_message_destroy(m);
    }
    rd_kafka_consumer_close(rk);
    rd_kafka_destroy(rk);
  }

  // A result visible at `now`: the latency of each record it newly counts.
  void Seen(std::string_view json, int64_t now) {
    std::lock_guard<std::mutex> lock(ledger_.mu);
    if (f_.job != "revenue") {  // each output record is its input record
      int64_t seq = 0;
      std::string_view id = Field(json, "event_id");
      if (id.size() < 3 || !absl::SimpleAtoi(std::string(id.substr(2)), &seq)) return;
      if (seq < 0 || seq >= static_cast<int64_t>(ledger_.latency.size())) return;
      int64_t& l = ledger_.latency[seq];
      if (l < 0) l = now - ledger_.produced[seq];
      return;
    }
    int64_t start = 0, orders = 0;
    if (!ParseWindowStart(Field(json, "window_start"), &start)) return;
    if (!absl::SimpleAtoi(std::string(Field(json, "orders")), &orders)) return;
    const std::string group = absl::StrCat(start, "/", std::string(Field(json, "country")));
    auto it = ledger_.groups.find(group);
    if (it == ledger_.groups.end()) return;
    size_t& counted = ledger_.counted[group];
    const size_t upto = std::min<size_t>(static_cast<size_t>(orders), it->second.size());
    for (; counted < upto; ++counted) {
      const int64_t seq = it->second[counted];
      if (ledger_.latency[seq] < 0) ledger_.latency[seq] = now - ledger_.produced[seq];
    }
  }

  // "2026-12-05T21:00:00Z" (what window_start holds) -> epoch ms.
  static bool ParseWindowStart(std::string_view s, int64_t* ms) {
    std::tm tm{};
    if (s.size() < 19 ||
        strptime(std::string(s.substr(0, 19)).c_str(), "%Y-%m-%dT%H:%M:%S", &tm) == nullptr) {
      return false;
    }
    *ms = static_cast<int64_t>(timegm(&tm)) * 1000;
    return true;
  }

  int64_t Missing() {
    std::lock_guard<std::mutex> lock(ledger_.mu);
    int64_t n = 0;
    for (size_t i = static_cast<size_t>(ledger_.first_counted_seq); i < ledger_.latency.size();
         ++i) {
      n += ledger_.latency[i] < 0 ? 1 : 0;
    }
    return n;
  }

  int Report(int64_t produced) {
    std::vector<int64_t> lat;
    int64_t missing = 0;
    {
      std::lock_guard<std::mutex> lock(ledger_.mu);
      for (size_t i = static_cast<size_t>(ledger_.first_counted_seq); i < ledger_.latency.size();
           ++i) {
        if (ledger_.latency[i] < 0) {
          ++missing;
        } else {
          lat.push_back(ledger_.latency[i]);
        }
      }
    }
    if (lat.empty()) return Fail("no result was seen (see the logs in " + dir_.string() + ")");
    if (getenv("LATENCY_TRACE") != nullptr) {
      std::lock_guard<std::mutex> lock(ledger_.mu);
      for (size_t i = 0; i < ledger_.latency.size(); i += static_cast<size_t>(f_.rate)) {
        int64_t worst = 0, unseen = 0;
        for (size_t j = i; j < std::min(ledger_.latency.size(), i + f_.rate); ++j) {
          worst = std::max(worst, ledger_.latency[j]);
          unseen += ledger_.latency[j] < 0;
        }
        std::printf("second %zu: max %" PRId64 " ms, unseen %" PRId64 "\n", i / f_.rate, worst,
                    unseen);
      }
      // Records that took over 50 ms, by the time they were produced (UTC,
      // to compare with the processes' logs), one line per 10 ms.
      int64_t last_slot = -1;
      for (size_t i = 0; i < ledger_.latency.size(); ++i) {
        const int64_t at = ledger_.produced[i];
        if (ledger_.latency[i] <= 50 || at / 10 == last_slot) continue;
        last_slot = at / 10;
        std::printf("slow: produced %02" PRId64 ":%02" PRId64 ":%02" PRId64 ".%03" PRId64
                    " took %" PRId64 " ms\n",
                    at / 3600000 % 24, at / 60000 % 60, at / 1000 % 60, at % 1000,
                    ledger_.latency[i]);
      }
    }
    std::sort(lat.begin(), lat.end());
    auto pct = [&](double p) {
      return lat[std::min(lat.size() - 1,
                          static_cast<size_t>(p * static_cast<double>(lat.size())))];
    };
    const std::string where =
        f_.where == "run" ? "caravela run" : absl::StrCat("cluster of ", f_.workers, " workers");
    const std::string kafka =
        f_.bootstrap.empty() ? "embedded broker" : absl::StrCat("Kafka at ", f_.bootstrap);
    std::printf(
        "latency %s, %s, %s, %s exchange, parallelism %d, %d records/s, checkpoints every %d "
        "ms: %zu records over %d s (%" PRId64 " produced, %" PRId64 " not seen): p50 %" PRId64
        " ms, p99 %" PRId64 " ms, p99.9 %" PRId64 " ms, max %" PRId64 " ms\n",
        f_.job.c_str(), where.c_str(), kafka.c_str(), f_.exchange.c_str(), f_.parallelism, f_.rate,
        f_.checkpoint_ms, lat.size(), f_.seconds, produced, missing, pct(0.5), pct(0.99),
        pct(0.999), lat.back());
    if (!f_.json.empty()) {
      std::map<int64_t, int64_t> hist;  // bucket lower bound (ms) -> count
      for (int64_t l : lat) {
        const int64_t b = l < 100 ? l : l < 1000 ? l / 10 * 10 : l / 100 * 100;
        ++hist[std::max<int64_t>(b, 0)];
      }
      std::ofstream out(f_.json);
      out << "{\"job\":\"" << f_.job << "\",\"where\":\"" << f_.where << "\",\"kafka\":\""
          << (f_.bootstrap.empty() ? "embedded" : f_.bootstrap) << "\",\"exchange\":\""
          << f_.exchange << "\",\"parallelism\":" << f_.parallelism
          << ",\"workers\":" << (f_.where == "run" ? 1 : f_.workers) << ",\"rate\":" << f_.rate
          << ",\"seconds\":" << f_.seconds << ",\"checkpoint_ms\":" << f_.checkpoint_ms
          << ",\"records\":" << lat.size() << ",\"missing\":" << missing
          << ",\"p50_ms\":" << pct(0.5) << ",\"p99_ms\":" << pct(0.99)
          << ",\"p999_ms\":" << pct(0.999) << ",\"max_ms\":" << lat.back() << ",\"histogram\":[";
      bool first = true;
      for (const auto& [b, n] : hist) {
        out << (first ? "" : ",") << "[" << b << "," << n << "]";
        first = false;
      }
      out << "]}\n";
    }
    return missing > static_cast<int64_t>(lat.size()) / 100 ? 3 : 0;
  }

  Flags f_;
  Names n_;
  std::vector<std::string> created_;  // topics to delete at the end
  fs::path dir_;
  std::unique_ptr<ChildProcess> broker_, coordinator_, run_;
  std::vector<std::unique_ptr<ChildProcess>> workers_;
  std::string bootstrap_, address_, job_id_;
  Ledger ledger_;
};

}  // namespace
}  // namespace caravela

int main(int argc, char** argv) {
  (void)caravela::BuiltinKinds();
  caravela::Flags f;
  CLI::App app{"End-to-end latency of a job: produce time -> result visible in the sink topic"};
  app.add_option("--job", f.job, "passthrough | filter-dedup | revenue")
      ->check(CLI::IsMember({"passthrough", "filter-dedup", "revenue"}))
      ->capture_default_str();
  app.add_option("--where", f.where, "run (caravela run) | cluster (coordinator + workers)")
      ->check(CLI::IsMember({"run", "cluster"}))
      ->capture_default_str();
  app.add_option("--exchange", f.exchange,
                 "memory | network | kafka (default: memory in run, network in a cluster)")
      ->check(CLI::IsMember({"memory", "network", "kafka"}));
  app.add_option("--rate", f.rate, "Records produced per second")->capture_default_str();
  app.add_option("--seconds", f.seconds, "Measured seconds")->capture_default_str();
  app.add_option("--warmup", f.warmup, "Seconds produced before measuring")->capture_default_str();
  app.add_option("--partitions", f.partitions, "Partitions of the input topic")
      ->capture_default_str();
  app.add_option("--parallelism", f.parallelism, "Tasks per stage")->capture_default_str();
  app.add_option("--workers", f.workers, "Worker processes (cluster)")->capture_default_str();
  app.add_option("--sink-linger-ms", f.sink_linger_ms, "The job's Kafka sink linger (ms)")
      ->capture_default_str();
  app.add_option("--checkpoint-ms", f.checkpoint_ms, "Checkpoint interval")->capture_default_str();
  app.add_option("--json", f.json, "Write the result and a histogram here");
  app.add_option("--dir", f.dir, "Working directory (default: a new temp dir, removed)");
  app.add_option("--bootstrap", f.bootstrap,
                 "An existing Kafka (HOST:PORT[,...], e.g. scripts/kafka start) instead of\n"
                 "starting `caravela broker`; the run's topics are created there and deleted");
  CLI11_PARSE(app, argc, argv);
  if (f.exchange.empty()) f.exchange = f.where == "run" ? "memory" : "network";
  if (f.where == "cluster" && f.exchange == "memory") {
    std::fprintf(stderr, "a cluster has no memory exchange: use network or kafka\n");
    return 2;
  }
  const bool temp = f.dir.empty();
  if (temp) {
    f.dir = (std::filesystem::temp_directory_path() /
             absl::StrCat("caravela-latency-bench-", ::getpid()))
                .string();
  }
  std::filesystem::create_directories(f.dir);
  // The job's processes (children) fetch with a 10 ms wait: the embedded
  // broker holds an empty fetch to the end of the wait, which would add up
  // to the default 100 ms to every record (worker/connectors/kafka_source.cc).
  // A real Kafka answers a fetch as soon as a record arrives: the default.
  if (f.bootstrap.empty()) setenv("CARAVELA_KAFKA_FETCH_WAIT_MS", "10", 0);
  const int rc = caravela::Bench(f).Run();
  if (temp && rc == 0) std::filesystem::remove_all(f.dir);
  return rc;
}
