// Benches (b) and (c): the hourly-revenue job reading from the embedded Kafka
// broker and writing its results to Kafka, and a bare librdkafka consumer
// reading the same topic (the physical limit for (b)).
//
//   kafka_bench [--purchases 2000000] [--seed 42] [--span-hours 24]
//               [--partitions 4] [--round 80000] [--work-dir DIR] [--only consume|job]
//               [--parallelism N] [--exchange memory|kafka] [--key user_id|event_id]
//
// --key: what the topic is partitioned by (and the source declares as its
// key): user_id (default) or event_id.
// --parallelism N runs (b) as N tasks per stage: keyed by user_id, three
// stages (source, dedup by event_id, window by country) with two exchanges;
// keyed by event_id, the dedup runs in the source's stage and only the
// exchange by country remains (two stages). Exchanges are in memory (the
// default, as `caravela run`), or with --exchange kafka topics on the same
// broker (created by the parent since the mock cluster has no CreateTopics);
// the reader then also reports its process CPU seconds (all task threads).
//
// The embedded broker is librdkafka's mock cluster, the one `caravela run`
// embeds. It keeps at most 5 MiB (or 100k message sets) per partition and
// silently drops older data (rdkafka_mock.c; not configurable), so the stream
// cannot be produced up front. Instead the parent process produces it in
// rounds of `--round` records (~3 MiB per partition) and lets the reader
// drain each round before producing the next:
//
//   parent: start broker; create topics; spawn reader; for each round:
//           produce + flush the round, send "round <cumulative count>" to the
//           reader, wait for "drained".
//   reader: a child process (own peak RSS and CPU; the broker stays in the
//           parent, as its threads would inside `caravela run`), either
//     (c) `consume`: assign all partitions from the log start and
//         rd_kafka_consume_batch_queue() until each round is seen, or
//     (b) `job`: the job of file_job_bench with a Kafka source (unbounded;
//         told to end after the last round) and a Kafka sink.
//
// Reported seconds are the reader's busy time: the sum over rounds of
// (round announced -> round drained: every record of it went through every
// operator), plus for (b) the end-of-input flush; time spent waiting for the
// producer is excluded.
#include <librdkafka/rdkafka.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "bench/bench_util.h"
#include "bench/purchase_generator.h"
#include "common/job_spec.h"
#include "spdlog/spdlog.h"
#include "worker/connectors/embedded_broker.h"
#include "worker/connectors/kafka_sink.h"
#include "worker/registry/builtin_kinds.h"
#include "worker/runtime/pipeline.h"

extern char** environ;

namespace {

using caravela::bench::Flags;

constexpr const char* kInputTopic = "purchases";
constexpr const char* kOutputTopic = "hourly-revenue";

int Fail(const std::string& what, const absl::Status& st) {
  std::fprintf(stderr, "kafka_bench: %s: %s\n", what.c_str(), std::string(st.message()).c_str());
  return 1;
}

// Reader side of the round protocol: a thread reads "round <n>" lines from
// stdin; the reader reports each drained round on stdout.
class Rounds {
 public:
  Rounds() {
    thread_ = std::thread([this] {
      char line[128];
      while (std::fgets(line, sizeof line, stdin) != nullptr) {
        long long n = 0;
        if (std::sscanf(line, "round %lld", &n) == 1) {
          std::lock_guard<std::mutex> lock(mu_);
          started_ = caravela::bench::NowSeconds();
          target_.store(n);
        } else if (std::strncmp(line, "end", 3) == 0) {
          end_.store(true);
        }
      }
      end_.store(true);
    });
  }
  ~Rounds() { thread_.detach(); }

  // Target of the current round (0 before the first).
  long long target() const { return target_.load(); }
  bool end() const { return end_.load(); }
  // Called once `seen` reached target(): adds the round's busy time and
  // tells the parent.
  void Drained(long long seen) {
    double now = caravela::bench::NowSeconds();
    {
      std::lock_guard<std::mutex> lock(mu_);
      busy_ += now - started_;
    }
    reported_ = target_.load();
    std::printf("drained %lld\n", seen);
    std::fflush(stdout);
  }
  bool pending() const { return target_.load() > reported_; }
  double busy() const { return busy_; }

 private:
  std::thread thread_;
  std::mutex mu_;
  double started_ = 0;
  double busy_ = 0;
  std::atomic<long long> target_{0};
  long long reported_ = 0;
  std::atomic<bool> end_{false};
};

// (c): a bare consumer, configured like KafkaSource (explicit assignment from
// concrete offsets, no group, batch reads from the consumer queue).
int Consume(const Flags& flags) {
  const std::string bootstrap = flags.Str("bootstrap");
  const int partitions = static_cast<int>(flags.Int("partitions", 4));
  char err[512];
  rd_kafka_conf_t* conf = rd_kafka_conf_new();
  for (auto [k, v] :
       std::vector<std::pair<const char*, std::string>>{{"bootstrap.servers", bootstrap},
                                                        {"group.id", "kafka-bench-bare"},
                                                        {"enable.auto.commit", "false"},
                                                        {"enable.auto.offset.store", "false"},
                                                        {"enable.partition.eof", "false"},
                                                        {"fetch.wait.max.ms", "100"}}) {
    if (rd_kafka_conf_set(conf, k, v.c_str(), err, sizeof err) != RD_KAFKA_CONF_OK) {
      std::fprintf(stderr, "kafka_bench consume: %s: %s\n", k, err);
      return 1;
    }
  }
  rd_kafka_t* rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, err, sizeof err);
  if (rk == nullptr) {
    std::fprintf(stderr, "kafka_bench consume: %s\n", err);
    return 1;
  }
  rd_kafka_poll_set_consumer(rk);
  rd_kafka_topic_partition_list_t* parts = rd_kafka_topic_partition_list_new(partitions);
  for (int p = 0; p < partitions; ++p) {
    int64_t low = 0, high = 0;
    rd_kafka_resp_err_t qerr =
        rd_kafka_query_watermark_offsets(rk, kInputTopic, p, &low, &high, 10000);
    if (qerr != RD_KAFKA_RESP_ERR_NO_ERROR) {
      std::fprintf(stderr, "kafka_bench consume: watermarks: %s\n", rd_kafka_err2str(qerr));
      return 1;
    }
    rd_kafka_topic_partition_list_add(parts, kInputTopic, p)->offset = low;
  }
  rd_kafka_assign(rk, parts);
  rd_kafka_topic_partition_list_destroy(parts);
  rd_kafka_queue_t* queue = rd_kafka_queue_get_consumer(rk);
  std::printf("ready\n");
  std::fflush(stdout);

  Rounds rounds;
  std::vector<rd_kafka_message_t*> batch(4096);
  long long seen = 0, bytes = 0;
  uint64_t checksum = 0;
  double c0 = caravela::bench::ThreadCpuSeconds();
  while (!(rounds.end() && !rounds.pending())) {
    ssize_t n = rd_kafka_consume_batch_queue(queue, 20, batch.data(), batch.size());
    for (ssize_t i = 0; i < n; ++i) {
      rd_kafka_message_t* m = batch[i];
      if (m->err == RD_KAFKA_RESP_ERR_NO_ERROR) {
        ++seen;
        bytes += static_cast<long long>(m->len);
        // Touch the payload, as a real consumer would.
        if (m->len > 0) checksum += static_cast<const unsigned char*>(m->payload)[m->len - 1];
      } else {
        std::fprintf(stderr, "kafka_bench consume: %s\n", rd_kafka_message_errstr(m));
      }
      rd_kafka_message_destroy(m);
    }
    if (rounds.pending() && seen >= rounds.target()) rounds.Drained(seen);
  }
  double thread_cpu = caravela::bench::ThreadCpuSeconds() - c0;
  rd_kafka_queue_destroy(queue);
  rd_kafka_consumer_close(rk);
  rd_kafka_destroy(rk);
  caravela::bench::PrintResult("kafka_bare_consumer", seen, rounds.busy(),
                               absl::StrCat("mib=", bytes / 1048576, " checksum=", checksum),
                               thread_cpu);
  return 0;
}

std::string JobYaml(const std::string& out_dir, const std::string& key) {
  return absl::StrCat(R"(
apiVersion: caravela/v1
kind: Job
metadata: {name: bench-hourly-revenue-kafka}
spec:
  sources:
    - name: purchases
      kafka: {topic: )",
                      kInputTopic, R"(}
      format: json
      key: [)",
                      key, R"(]
      event_time: {field: event_time, format: iso8601}
      watermark: {max_out_of_orderness: 5m}
)",
                      caravela::bench::kHourlyRevenueOperators, R"(  sinks:
    - {from: revenue, kafka: {topic: )",
                      kOutputTopic, R"(}}
)",
                      caravela::bench::HourlyRevenueSideSinks(out_dir));
}

// (b): the job, in-process, against the parent's broker.
int Job(const Flags& flags) {
  const std::string work = flags.Str("work-dir");
  caravela::ParseResult parsed =
      caravela::ParseJobSpec(JobYaml(work + "/out", flags.Str("key", "user_id")));
  if (!parsed.ok()) {
    std::fprintf(stderr, "job spec: %s\n", parsed.errors[0].ToString().c_str());
    return 1;
  }
  std::atomic<bool> end_of_input{false};
  caravela::RunOptions options;
  options.data_dir = work + "/data";
  options.embedded_bootstrap = flags.Str("bootstrap");
  options.progress_interval_ms = 0;
  options.end_of_input = &end_of_input;
  options.parallelism = static_cast<int>(flags.Int("parallelism", 1));
  options.exchange = flags.Str("exchange", "memory") == "kafka"
                         ? caravela::RunOptions::Exchange::kKafka
                         : caravela::RunOptions::Exchange::kMemory;
  auto pipeline = caravela::Pipeline::Create(parsed.spec, options);
  if (!pipeline.ok()) return Fail("create", pipeline.status());
  caravela::MetricsRegistry& m = (*pipeline)->metrics();
  caravela::Counter* in = m.Get("records_in_total", "source=\"purchases\"");
  std::printf("ready\n");
  std::fflush(stdout);

  // The pipeline runs on this thread; a watcher reports drained rounds and
  // ends the input after the last one.
  // A round is drained once its records went through every operator: with
  // parallelism, later stages lag behind the source stage by what the
  // exchanges hold.
  caravela::Counter* unique_in = m.Get("operator_records_in_total", "op=\"unique\"");
  caravela::Counter* revenue_in = m.Get("operator_records_in_total", "op=\"revenue\"");
  caravela::Counter* passed = m.Get("dedup_passed_total", "op=\"unique\"");
  auto through = [&] {
    const int64_t n = in->value();
    return unique_in->value() == n && revenue_in->value() == passed->value() ? n : -1;
  };
  Rounds rounds;
  double end_started = 0;
  std::thread watcher([&] {
    while (!(rounds.end() && !rounds.pending())) {
      if (rounds.pending() && through() >= rounds.target()) rounds.Drained(in->value());
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    end_started = caravela::bench::NowSeconds();
    end_of_input.store(true);
  });
  double c0 = caravela::bench::ThreadCpuSeconds();
  double p0 = caravela::bench::ProcessCpuSeconds();
  absl::Status st = (*pipeline)->Run();
  double end_secs = caravela::bench::NowSeconds() - end_started;
  double thread_cpu = caravela::bench::ThreadCpuSeconds() - c0;
  double process_cpu = caravela::bench::ProcessCpuSeconds() - p0;
  watcher.join();
  if (!st.ok()) return Fail("run", st);
  std::fprintf(stderr, "%s\n", (*pipeline)->Summary().c_str());
  caravela::bench::PrintResult(
      "kafka_job_rocksdb", in->value(), rounds.busy() + end_secs,
      absl::StrCat("passed=", m.Value("dedup_passed_total", "op=\"unique\""),
                   " duplicates=", m.Value("dedup_duplicates_total", "op=\"unique\""), " results=",
                   m.Value("sink_records_total", "from=\"revenue\""), " end_flush_s=", end_secs,
                   " tasks=", (*pipeline)->task_count(), " process_cpu_s=", process_cpu),
      (*pipeline)->task_count() > 1 ? process_cpu : thread_cpu);
  return 0;
}

// Parent side: a child reader with pipes to its stdin and from its stdout.
class Reader {
 public:
  bool Start(const std::vector<std::string>& args) {
    int to_child[2], from_child[2];
    if (pipe(to_child) != 0 || pipe(from_child) != 0) return false;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, to_child[0], 0);
    posix_spawn_file_actions_adddup2(&fa, from_child[1], 1);
    posix_spawn_file_actions_addclose(&fa, to_child[1]);
    posix_spawn_file_actions_addclose(&fa, from_child[0]);
    std::vector<char*> argv;
    argv.reserve(args.size() + 1);
    for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    int rc = posix_spawn(&pid_, "/proc/self/exe", &fa, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&fa);
    close(to_child[0]);
    close(from_child[1]);
    if (rc != 0) return false;
    in_ = fdopen(to_child[1], "w");
    out_ = fdopen(from_child[0], "r");
    return true;
  }
  void Send(const std::string& line) {
    std::fputs((line + "\n").c_str(), in_);
    std::fflush(in_);
  }
  // Next line from the child; RESULT lines are echoed to our stdout.
  std::string ReadLine() {
    char buf[1024];
    while (std::fgets(buf, sizeof buf, out_) != nullptr) {
      std::string line(buf);
      if (line.rfind("RESULT", 0) == 0) {
        std::fputs(line.c_str(), stdout);
        std::fflush(stdout);
        continue;
      }
      return line;
    }
    return "";
  }
  int Finish() {
    std::fclose(in_);
    while (!ReadLine().empty()) {
    }
    std::fclose(out_);
    int status = 0;
    waitpid(pid_, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
  }

 private:
  pid_t pid_ = -1;
  std::FILE* in_ = nullptr;
  std::FILE* out_ = nullptr;
};

int RunReader(const std::string& mode, const Flags& flags, const std::string& bootstrap,
              const std::string& work, int partitions) {
  caravela::bench::PurchaseStreamOptions o;
  o.purchases = flags.Int("purchases", o.purchases);
  o.seed = static_cast<uint64_t>(flags.Int("seed", static_cast<long long>(o.seed)));
  o.span_ms = flags.Int("span-hours", 24) * 3600'000;
  const long long round = flags.Int("round", 80000);

  caravela::KafkaSinkOptions so;
  so.bootstrap = bootstrap;
  so.topic = kInputTopic;
  so.linger_ms = 20;
  so.config = {{"queue.buffering.max.messages", "1000000"},
               {"queue.buffering.max.kbytes", "1048576"}};
  caravela::KafkaSink producer(so);
  if (auto st = producer.Open(); !st.ok()) return Fail("producer", st);

  Reader reader;
  if (!reader.Start({"kafka_bench", mode, "--bootstrap", bootstrap, "--partitions",
                     std::to_string(partitions), "--work-dir", work + "/" + mode, "--parallelism",
                     std::to_string(flags.Int("parallelism", 1)), "--exchange",
                     flags.Str("exchange", "memory"), "--key", flags.Str("key", "user_id")})) {
    std::perror("kafka_bench: spawn");
    return 1;
  }
  if (reader.ReadLine().rfind("ready", 0) != 0) {
    std::fprintf(stderr, "kafka_bench: %s reader did not start\n", mode.c_str());
    return 1;
  }
  caravela::bench::PurchaseGenerator gen(o);
  const bool by_event_id = flags.Str("key", "user_id") == "event_id";
  std::string line;
  double produce_secs = 0;
  for (bool more = true; more;) {
    double t0 = caravela::bench::NowSeconds();
    long long n = 0;
    while (n < round && (more = gen.Next(&line))) {
      std::string key = gen.last_key();
      if (by_event_id) {
        // "event_id":"<id>" (the generator writes it first, unescaped).
        const size_t at = line.find("\"event_id\":\"") + 12;
        key = line.substr(at, line.find('"', at) - at);
      }
      if (auto st = producer.Write(key, line); !st.ok()) return Fail("produce", st);
      ++n;
    }
    if (auto st = producer.Flush(); !st.ok()) return Fail("produce flush", st);
    produce_secs += caravela::bench::NowSeconds() - t0;
    if (n == 0) break;
    reader.Send("round " + std::to_string(gen.stats().lines));
    if (reader.ReadLine().rfind("drained", 0) != 0) {
      std::fprintf(stderr, "kafka_bench: %s reader failed\n", mode.c_str());
      reader.Finish();  // reap the reader; the bench fails either way
      return 1;
    }
  }
  (void)producer.Close();
  reader.Send("end");
  std::printf(
      "kafka_bench: %s: produced %lld records (%.1f MiB) in rounds of %lld, "
      "producer busy %.2f s\n",
      mode.c_str(), static_cast<long long>(gen.stats().lines), gen.stats().bytes / 1048576.0, round,
      produce_secs);
  return reader.Finish();
}

int Main(const Flags& flags) {
  const std::string work = flags.Str("work-dir", "/tmp/caravela-kafka-bench");
  const int partitions = static_cast<int>(flags.Int("partitions", 4));
  const std::string only = flags.Str("only");
  std::filesystem::remove_all(work);
  std::filesystem::create_directories(work);
  for (const std::string mode : {"consume", "job"}) {
    if (!only.empty() && only != mode) continue;
    // A fresh broker per reader: both read the same stream from offset 0.
    auto broker = caravela::EmbeddedBroker::Start(0, partitions);
    if (!broker.ok()) return Fail("broker", broker.status());
    const std::string bootstrap = (*broker)->bootstrap();
    if (auto st = (*broker)->CreateTopic(kInputTopic, partitions); !st.ok()) {
      return Fail("create topic", st);
    }
    if (auto st = (*broker)->CreateTopic(kOutputTopic, 1); !st.ok()) {
      return Fail("create topic", st);
    }
    if (const int n = static_cast<int>(flags.Int("parallelism", 1)); n > 1) {
      for (const char* op : {"unique", "revenue"}) {
        const std::string topic = absl::StrCat("caravela.bench-hourly-revenue-kafka.", op);
        if (auto st = (*broker)->CreateTopic(topic, n); !st.ok()) return Fail("create topic", st);
      }
    }
    if (int rc = RunReader(mode, flags, bootstrap, work, partitions); rc != 0) return rc;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  spdlog::set_level(spdlog::level::warn);
  std::string mode = argc > 1 && argv[1][0] != '-' ? argv[1] : "";
  Flags flags(argc - (mode.empty() ? 0 : 1), argv + (mode.empty() ? 0 : 1));
  if (mode == "consume") return Consume(flags);
  if (mode == "job") return Job(flags);
  if (!mode.empty()) {
    std::fprintf(stderr, "usage: kafka_bench [--purchases N] [--only consume|job] ...\n");
    return 2;
  }
  return Main(flags);
}
