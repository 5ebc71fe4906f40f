// The cluster job fixture (tests/cluster_job_test.cc, tests/fault_campaign_test.cc):
// a broker, a coordinator and three worker processes on loopback, a real
// PostgreSQL, the revenue job plus an interval join over two Kafka streams,
// its single-process answer, and checks of a cluster run's results against
// it (files, Kafka changelog, PostgreSQL; each FINAL once; no revision back).
#pragma once

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <libpq-fe.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "bench/purchase_generator.h"
#include "common/job_plan.h"
#include "common/job_spec.h"
#include "common/json.h"
#include "common/time_util.h"
#include "coordinator/job_client.h"
#include "coordinator/job_state.h"
#include "tests/child_process.h"
#include "tests/http_test_util.h"
#include "tests/kill_loop_util.h"  // Differences
#include "tests/revenue_job.h"
#include "tests/test_util.h"
#include "worker/connectors/kafka_test_util.h"
#include "worker/registry/builtin_kinds.h"
#include "worker/runtime/pipeline.h"
#include "worker/testing/postgres_server.h"
#include "worker/testing/status_testing.h"

namespace caravela {

namespace fs = std::filesystem;
using milliseconds = std::chrono::milliseconds;

constexpr int kParallelism = 3;
constexpr int kSourcePartitions = 6;

class ClusterJobTest;
void RescaleSequence(ClusterJobTest& t);

class ClusterJobTest : public ::testing::Test {
  friend void RescaleSequence(ClusterJobTest& t);

 protected:
  void SetUp() override {
    tmp_ = std::make_unique<TempDir>("cluster-job", "CARAVELA_KEEP_TEST_DIRS", "cluster job test");
    dir_ = tmp_->path();
    ASSERT_NO_FATAL_FAILURE(PrepareDirs());
    auto pg = PostgresServer::Start();
    ASSERT_OK(pg.status());
    postgres_ = std::move(*pg);
    // The embedded broker serves no CreateTopics to other processes: the
    // input topic and the job's exchange topics are created at its start
    // (the exchange topics are named after the job, as `caravela plan`
    // prints them).
    std::vector<std::string> args = {
        CARAVELA_BINARY, "broker",
        "--topic",       absl::StrCat("purchases:", kSourcePartitions),
        "--topic",       absl::StrCat("shipments:", kSourcePartitions)};
    if (!topic_prefix_.empty()) {
      for (const char* t : {"purchases", "shipments"}) {
        args.push_back("--topic");
        args.push_back(absl::StrCat(topic_prefix_, t, ":", kSourcePartitions));
      }
    }
    ParseResult parsed = ParseJobSpec(Yaml());
    ASSERT_TRUE(parsed.ok()) << parsed.errors[0].ToString();
    auto plan = PlanJob(parsed.spec, kParallelism,
                        {{"purchases", kSourcePartitions}, {"shipments", kSourcePartitions}});
    ASSERT_OK(plan.status());
    ASSERT_EQ(plan->exchanges.size(), 3u) << plan->ToText();
    for (const ExchangePlan& ex : plan->exchanges) {
      args.push_back("--topic");
      args.push_back(absl::StrCat(ex.topic, ":", ex.partitions));
    }
    broker_ = std::make_unique<ChildProcess>(args, dir_ / "broker.log");
    bootstrap_ = broker_->WaitFor(R"(listening on (\S+))", milliseconds(20000));
    ASSERT_FALSE(bootstrap_.empty()) << broker_->Log();

    // ~3.5 MB per partition: within the broker's ~5 MiB.
    bench::PurchaseGenerator gen(RevenueStream(/*seed=*/11, /*purchases=*/100000));
    std::vector<KafkaTestRecord> records;
    std::string line;
    // Shipments: for 4 purchases in 5 (by event id), 0-50 minutes after the
    // purchase, in event-time order (never late). None for the late uploads:
    // whether a late purchase still meets its shipment depends on how the
    // two topics interleave (the join's bound), so the answer would too.
    std::map<int64_t, std::vector<KafkaTestRecord>> shipments;
    JsonDecoder decoder;
    std::set<std::string> shipped, first_copies;
    int64_t max_event_time = kMinTime;
    while (gen.Next(&line)) {
      KafkaTestRecord r;
      r.key = gen.last_key();
      r.value = line;
      records.push_back(r);
      Record rec;
      ASSERT_OK(decoder.Decode(line, &rec));
      const std::string id(rec.GetPath(FieldPath::Parse("event_id")).s);
      const uint64_t h = std::hash<std::string>()(id);
      const int64_t event_time =
          ParseIso8601(rec.GetPath(FieldPath::Parse("event_time")).s).value_or(0);
      const bool late = event_time < max_event_time - 5 * 60'000;
      max_event_time = std::max(max_event_time, event_time);
      if (first_copies.insert(id).second) {
        std::string amount;
        rec.GetPath(FieldPath::Parse("amount")).AppendJson(&amount);
        Expected& e =
            brute_force_[absl::StrCat(event_time - event_time % 3'600'000, "/",
                                      std::string(rec.GetPath(FieldPath::Parse("country")).s))];
        e.cents += Cents(amount);
        ++e.orders;
      }
      if (late || h % 5 == 0 || !shipped.insert(id).second) continue;
      const int64_t t = event_time + static_cast<int64_t>(h % 50) * 60'000;
      KafkaTestRecord sr;
      sr.key = id;
      sr.value = absl::StrCat(R"({"event_id":")", id, R"(","carrier":"c)", h % 7,
                              R"(","shipped_at":")", FormatIso8601(t), R"("})");
      shipments[t].push_back(std::move(sr));
      expected_shipped_ids_.push_back(id);
    }
    std::sort(expected_shipped_ids_.begin(), expected_shipped_ids_.end());
    ASSERT_OK(ProduceRecords(bootstrap_, "purchases", records, 60000));
    purchases_ = records;
    produced_["purchases"] = static_cast<int64_t>(records.size());
    std::vector<KafkaTestRecord> ordered;
    for (auto& [t, v] : shipments) {
      for (KafkaTestRecord& r : v) ordered.push_back(std::move(r));
    }
    ASSERT_OK(ProduceRecords(bootstrap_, "shipments", ordered, 60000));
    produced_["shipments"] = static_cast<int64_t>(ordered.size());
    shipments_ = std::move(ordered);

    // The single-process answer.
    ParseResult ref = ParseJobSpec(JobYaml("reference", dir_ / "reference", 0, false));
    ASSERT_TRUE(ref.ok()) << ref.errors[0].ToString();
    RunOptions options;
    options.data_dir = (dir_ / "reference-data").string();
    options.embedded_bootstrap = bootstrap_;
    options.parallelism = 1;
    auto pipeline = Pipeline::Create(ref.spec, options);
    ASSERT_OK(pipeline.status());
    ASSERT_OK((*pipeline)->Run());
    reference_ = FinalResults((dir_ / "reference/out").string());
    ASSERT_FALSE(reference_.empty());
    reference_shipped_ = ReadParts(dir_ / "reference/out", "shipped");
    std::sort(reference_shipped_.begin(), reference_shipped_.end());
    ASSERT_GT(reference_shipped_.size(), 50000u);
    {
      SCOPED_TRACE("the single-process answer against the brute force");
      ExpectTheBruteForceAnswer(reference_);
      ExpectTheShipmentsJoined(reference_shipped_);
    }

    StartCoordinator("127.0.0.1:0");
    ASSERT_FALSE(address_.empty()) << coordinator_->Log();
    for (int i = 0; i < 3; ++i) ASSERT_NO_FATAL_FAILURE(StartWorker(i));
  }

  // Called once dir_ exists, before anything is started in it (a test
  // mounts small file systems there).
  virtual void PrepareDirs() {}

  // A decimal amount's JSON text (45.98) in cents.
  static int64_t Cents(const std::string& json) {
    return std::llround(std::strtod(absl::StripAsciiWhitespace(json).data(), nullptr) * 100);
  }

  // The window results (key: window_start/country, text: revenue=R
  // orders=N, as FinalResults and HighestFinals give them) equal the brute
  // force computed from the produced input alone: no engine code but the
  // JSON decoder, so a mistake shared by the single-process run and the
  // cluster still shows.
  void ExpectTheBruteForceAnswer(const std::map<std::string, WindowResult>& got) {
    std::map<std::string, Expected> seen;
    for (const auto& [key, w] : got) {
      const size_t slash = key.rfind('/');
      const std::optional<int64_t> start = ParseIso8601(key.substr(0, slash));
      ASSERT_TRUE(start.has_value()) << key;
      const size_t revenue = w.text.find("revenue="), orders = w.text.find(" orders=");
      ASSERT_TRUE(revenue == 0 && orders != std::string::npos) << key << ": " << w.text;
      Expected& e = seen[absl::StrCat(*start, key.substr(slash))];
      e.cents = Cents(w.text.substr(8, orders - 8));
      e.orders = std::strtoll(w.text.c_str() + orders + 8, nullptr, 10);
    }
    ASSERT_EQ(seen.size(), brute_force_.size());
    int wrong = 0;
    for (const auto& [key, want] : brute_force_) {
      auto it = seen.find(key);
      ASSERT_NE(it, seen.end()) << "no FINAL for window " << key;
      if (it->second.cents == want.cents && it->second.orders == want.orders) continue;
      if (++wrong <= 10) {
        ADD_FAILURE() << "window " << key << ": " << it->second.cents << " cents in "
                      << it->second.orders << " orders, the input says " << want.cents
                      << " cents in " << want.orders;
      }
    }
    EXPECT_EQ(wrong, 0) << "windows off the brute force";
  }
  // The interval join's rows (JSON lines) are one per shipment, each for
  // its purchase's event id.
  void ExpectTheShipmentsJoined(const std::vector<std::string>& rows) {
    JsonDecoder decoder;
    const FieldPath event_id = FieldPath::Parse("right.event_id");
    std::vector<std::string> ids;
    for (const std::string& line : rows) {
      Record r;
      ASSERT_OK(decoder.Decode(line, &r));
      ids.emplace_back(r.GetPath(event_id).s);
    }
    std::sort(ids.begin(), ids.end());
    EXPECT_EQ(ids.size(), expected_shipped_ids_.size());
    EXPECT_TRUE(ids == expected_shipped_ids_) << Differences(ids, expected_shipped_ids_, "joined");
  }

  // Starts worker `i`, or starts it again after it was killed (the same
  // data dir and group; the log of the n-th restart is worker-<i>.r<n>.log).
  void StartWorker(int i) {
    const size_t at = static_cast<size_t>(i);
    const bool again = at < workers_.size();
    const fs::path log = again ? dir_ / absl::StrCat("worker-", i, ".r", ++worker_restarts_, ".log")
                               : dir_ / absl::StrCat("worker-", i, ".log");
    // 8 slots each: the 15 tasks fit on the two workers left after a kill.
    const std::vector<std::string> argv = {
        CARAVELA_BINARY, "worker",     "--coordinator", address_,
        "--slots",       "8",          "--data-dir",    (dir_ / absl::StrCat("w", i)).string(),
        "--bootstrap",   bootstrap_,   "--allow-path",  dir_.string(),
        "--http",        "127.0.0.1:0"};
    auto w = std::make_unique<ChildProcess>(argv, log, worker_gids_[at],
                                            ProcessEnv(absl::StrCat("worker-", i)));
    std::string id = w->WaitFor(R"(id=(\S+))", milliseconds(20000));
    ASSERT_FALSE(id.empty()) << w->Log();
    std::string http = w->WaitFor(R"(http=(\S+))", milliseconds(1000));
    std::string grpc = w->WaitFor(R"(grpc=(\S+))", milliseconds(1000));
    if (again) {
      workers_[at] = std::move(w);
      ids_[at] = id;
      http_[at] = http;
      grpc_[at] = grpc;
    } else {
      workers_.push_back(std::move(w));
      ids_.push_back(id);
      http_.push_back(http);
      grpc_.push_back(grpc);
    }
  }

  // (Re)starts the coordinator on `listen`; sets address_.
  void StartCoordinator(const std::string& listen) {
    std::vector<std::string> argv = {CARAVELA_BINARY,    "coordinator",
                                     "--listen",         listen,
                                     "--data-dir",       (dir_ / "coordinator").string(),
                                     "--allow-path",     dir_.string(),
                                     "--worker-timeout", worker_timeout_};
    argv.insert(argv.end(), coordinator_flags_.begin(), coordinator_flags_.end());
    coordinator_ = std::make_unique<ChildProcess>(
        argv, dir_ / absl::StrCat("coordinator-", ++coordinator_starts_, ".log"), 0,
        ProcessEnv("coordinator"));
    address_ = coordinator_->WaitFor(R"(grpc=(\S+))", milliseconds(20000));
  }

  // The revenue job, also writing its results to a Kafka changelog topic
  // and a PostgreSQL table.
  std::string Yaml() const {
    std::string yaml = JobYaml("cluster-revenue", dir_ / "cluster", 300, true);
    if (!topic_prefix_.empty()) {
      for (const std::string t : {"purchases", "shipments"}) {
        const std::string from = "topic: " + t + ",";
        yaml.replace(yaml.find(from), from.size(), "topic: " + topic_prefix_ + t + ",");
      }
    }
    if (!exchange_.empty())
      yaml.insert(yaml.find("spec:\n") + 6, "  exchange: " + exchange_ + "\n");
    return yaml;
  }
  // The exchanges this test asks for (empty: the cluster's default, network).
  std::string exchange_;

  // Messages in the job's exchange topics (none when they stream between
  // workers).
  int64_t ExchangeTopicMessages() const {
    ParseResult parsed = ParseJobSpec(Yaml());
    auto plan = PlanJob(parsed.spec, kParallelism,
                        {{"purchases", kSourcePartitions}, {"shipments", kSourcePartitions}});
    int64_t n = 0;
    for (const ExchangePlan& ex : plan->exchanges) {
      auto records = ConsumeAll(bootstrap_, ex.topic, 20000);
      n += records.ok() ? static_cast<int64_t>(records->size()) : 0;
    }
    return n;
  }

  // The revenue job plus an interval join of the unique purchases with the
  // shipments stream (shipped within an hour); `external`: the window
  // results also go to a Kafka changelog topic and a PostgreSQL table.
  std::string JobYaml(const std::string& name, const fs::path& dir, int64_t checkpoint_ms,
                      bool external) const {
    std::string yaml = RevenueJob(name, dir.string(), checkpoint_ms);
    yaml.insert(yaml.find("  operators:"), R"(    - name: shipments
      kafka: {topic: shipments, bounded: true}
      key: [event_id]
      event_time: {field: shipped_at, format: iso8601}
      watermark: {max_out_of_orderness: 1m, idle_timeout: 1m}
)");
    yaml.insert(yaml.find("  sinks:"), R"(    - name: shipped
      interval_join:
        left: unique
        right: shipments
        on: [event_id]
        between: {lower: 0m, upper: 1h}
        type: inner
)");
    std::string sinks = absl::StrCat("    - {from: shipped, file: {path: ", (dir / "out").string(),
                                     "/shipped.jsonl}}\n");
    if (external) {
      absl::StrAppend(&sinks,
                      "    - {from: revenue, kafka: {topic: revenue-changelog, mode: changelog}}\n"
                      "    - {from: revenue, postgres: {dsn: \"",
                      postgres_->Dsn(), "\", table: revenue}}\n", extra_sinks_);
    }
    yaml.insert(yaml.find("  dead_letter:"), sinks);
    return yaml;
  }

  // The single-process answer in the file sink, the changelog topic (the
  // highest revision per key) and the table (one row per key, FINAL, the
  // epoch fence at the job's last epoch).
  void ExpectTheAnswer(const v1::Job& job) {
    {
      SCOPED_TRACE("file sink");
      const auto finals = FinalResults((dir_ / "cluster/out").string());
      ExpectSameFinals(reference_, finals);
      ExpectTheBruteForceAnswer(finals);
    }
    {
      SCOPED_TRACE("interval join");
      std::vector<std::string> shipped = ReadParts(dir_ / "cluster/out", "shipped");
      std::sort(shipped.begin(), shipped.end());
      EXPECT_EQ(shipped.size(), reference_shipped_.size());
      EXPECT_TRUE(shipped == reference_shipped_)
          << Differences(shipped, reference_shipped_, "in the cluster");
      ExpectTheShipmentsJoined(shipped);
    }
    {
      SCOPED_TRACE("Kafka changelog");
      auto values = ConsumeAllValues(bootstrap_, "revenue-changelog", 30000);
      ASSERT_OK(values.status());
      const auto finals = HighestFinals(*values);
      ExpectSameFinals(reference_, finals);
      ExpectTheBruteForceAnswer(finals);
    }
    {
      SCOPED_TRACE("PostgreSQL");
      auto rows = postgres_->Query("SELECT value::text FROM revenue");
      ASSERT_OK(rows.status());
      std::vector<std::string> values;
      for (const auto& r : *rows) values.push_back(r[0]);
      EXPECT_EQ(values.size(), reference_.size());
      const auto finals = HighestFinals(values);
      ExpectSameFinals(reference_, finals);
      ExpectTheBruteForceAnswer(finals);
      auto fence = postgres_->Query(
          "SELECT epoch FROM caravela_fences WHERE job = 'cluster-revenue' AND target = 'revenue'");
      ASSERT_OK(fence.status());
      EXPECT_THAT(*fence,
                  ::testing::ElementsAre(::testing::ElementsAre(std::to_string(job.epoch()))));
    }
  }

  // Yaml() with sources read without an end (bounded: false; the same
  // graph).
  std::string UnboundedYaml() const {
    std::string unbounded = Yaml();
    for (size_t at = unbounded.find("bounded: true"); at != std::string::npos;
         at = unbounded.find("bounded: true")) {
      unbounded.replace(at, 13, "bounded: false");
    }
    return unbounded;
  }
  // The job id `caravela submit` printed: its output's last line.
  static std::string SubmittedId(const std::string& out) {
    const std::string trimmed(absl::StripTrailingAsciiWhitespace(out));
    const size_t nl = trimmed.rfind('\n');
    return trimmed.substr(nl == std::string::npos ? 0 : nl + 1);
  }

  // Submits the job with sources read without an end (bounded: false) at
  // `parallelism` and waits until it is RUNNING with a checkpoint; "" on
  // failure (reported).
  std::string SubmitUnbounded(int parallelism) {
    auto submitted = JobClient(address_, "").Submit(UnboundedYaml(), parallelism);
    EXPECT_OK(submitted.status());
    if (!submitted.ok()) return "";
    EXPECT_EQ(submitted->errors_size(), 0) << submitted->DebugString();
    const std::string id = submitted->job_id();
    const bool running = Eventually(
        [&] {
          const v1::Job j = Get(id);
          return j.state() == v1::RUNNING && j.last_checkpoint() >= 1;
        },
        milliseconds(60000));
    EXPECT_TRUE(running) << Get(id).DebugString() << Logs();
    return running ? id : "";
  }

  // Copies of purchases already produced (a producer's retries, which the
  // dedup drops, so the answer stays the offline one) stream into the
  // purchases topic, 200 every 200 ms, until Stop() or `limit` copies.
  class CopyStreamer {
   public:
    CopyStreamer(const ClusterJobTest& t, int64_t limit)
        : thread_([this, &t, limit] {
            size_t next = 0;
            while (!stop_ && streamed_ < limit) {
              std::vector<KafkaTestRecord> batch;
              for (int i = 0; i < 200; ++i) {
                batch.push_back(t.purchases_[next++ % t.purchases_.size()]);
              }
              if (!ProduceRecords(t.bootstrap_, "purchases", batch, 10000).ok()) return;
              streamed_ += static_cast<int64_t>(batch.size());
              std::this_thread::sleep_for(milliseconds(200));
            }
          }) {}
    ~CopyStreamer() { Stop(); }
    // Stops streaming; returns the copies streamed.
    int64_t Stop() {
      stop_ = true;
      if (thread_.joinable()) thread_.join();
      return streamed_;
    }

   private:
    std::atomic<bool> stop_{false};
    std::atomic<int64_t> streamed_{0};
    std::thread thread_;
  };

  // Takes a savepoint of the running job `id` (caravela savepoint) and
  // submits the bounded job from it (parallelism 2); returns the new job
  // once FINISHED (or as it is after 2 minutes, reported).
  v1::Job FinishFromASavepoint(const std::string& id, const std::string& name) {
    const std::string at = " --coordinator " + address_;
    const CliResult saved = Cli(absl::StrCat("savepoint ", id, " ", name, " --wait 2m", at), dir_);
    EXPECT_EQ(saved.code, 0) << saved.out << Logs();
    const fs::path job_file = dir_ / "job.yaml";
    std::ofstream(job_file) << Yaml();
    const CliResult resubmit = Cli(absl::StrCat("submit ", job_file.string(), " --from-savepoint ",
                                                name, " --parallelism 2", at),
                                   dir_);
    EXPECT_EQ(resubmit.code, 0) << resubmit.out;
    const std::string id2 = SubmittedId(resubmit.out);
    EXPECT_TRUE(Eventually([&] { return Get(id2).state() == v1::FINISHED; }, milliseconds(120000)))
        << Get(id2).DebugString() << Logs();
    return Get(id2);
  }

  std::string Submit() {
    auto r = JobClient(address_, "").Submit(Yaml(), kParallelism);
    EXPECT_OK(r.status());
    if (!r.ok()) return "";
    EXPECT_EQ(r->errors_size(), 0) << r->DebugString();
    return r->job_id();
  }

  // Submits the job and waits until it runs mid-stream: RUNNING, a
  // checkpoint complete, its input not all processed.
  void SubmitAndRunToACheckpoint(std::string* id) {
    *id = Submit();
    ASSERT_FALSE(id->empty());
    ASSERT_TRUE(Eventually(
        [&] {
          const v1::Job j = Get(*id);
          return j.state() == v1::RUNNING && j.last_checkpoint() >= 1;
        },
        milliseconds(60000)))
        << Get(*id).DebugString() << Logs();
    ASSERT_NE(Get(*id).state(), v1::FINISHED) << "the job ended too early: more input needed";
  }

  // Holds the PostgreSQL fence table locked (until UnlockFences): the job's
  // sink cannot write, nor a new epoch's sink open, so the job cannot end
  // meanwhile whatever the timing.
  void LockFences(PGconn** lock) {
    *lock = PQconnectdb(postgres_->Dsn().c_str());
    ASSERT_EQ(PQstatus(*lock), CONNECTION_OK) << PQerrorMessage(*lock);
    PGresult* r = PQexec(*lock, "BEGIN; LOCK TABLE caravela_fences IN ACCESS EXCLUSIVE MODE");
    ASSERT_EQ(PQresultStatus(r), PGRES_COMMAND_OK) << PQerrorMessage(*lock);
    PQclear(r);
  }
  // Submits the job and, as soon as it is RUNNING, LockFences: the job
  // holds mid-stream. (Not after its first checkpoint: on a loaded machine
  // that may complete when the input is nearly drained, and the final
  // checkpoint's fence rows could then go in before the lock.)
  void SubmitAndHoldMidStream(std::string* id, PGconn** lock) {
    *id = Submit();
    ASSERT_FALSE(id->empty());
    ASSERT_TRUE(Eventually([&] { return Get(*id).state() == v1::RUNNING; }, milliseconds(60000)))
        << Get(*id).DebugString() << Logs();
    ASSERT_NO_FATAL_FAILURE(LockFences(lock));
    std::this_thread::sleep_for(milliseconds(1000));  // > 3 checkpoint intervals
    ASSERT_NE(Get(*id).state(), v1::FINISHED)
        << "the job ended before the fences were locked: more input needed";
  }
  // Nothing produced twice: each window's FINAL once in the changelog.
  void ExpectEachFinalOnceInTheChangelog() {
    auto values = ConsumeAllValues(bootstrap_, "revenue-changelog", 30000);
    ASSERT_OK(values.status());
    size_t finals = 0;
    for (const std::string& v : *values) finals += v.find("\"FINAL\"") != std::string::npos;
    EXPECT_EQ(finals, reference_.size());
  }
  // The revision contract over the changelog: no window's FINAL is
  // published with two different values. The changelog sink is
  // at-least-once, so a replay after a failure may publish a FINAL again
  // (with the same value); returns how many were (-1: unreadable).
  int64_t ExpectNoFinalWithTwoValues() {
    auto values = ConsumeAllValues(bootstrap_, "revenue-changelog", 30000);
    EXPECT_OK(values.status());
    if (!values.ok()) return -1;
    JsonDecoder decoder;
    const FieldPath start = FieldPath::Parse("window_start"), country = FieldPath::Parse("country"),
                    state = FieldPath::Parse("state"), revenue = FieldPath::Parse("revenue"),
                    orders = FieldPath::Parse("orders");
    std::map<std::string, std::string> finals;
    int64_t again = 0;
    for (const std::string& v : *values) {
      Record r;
      if (!decoder.Decode(v, &r).ok() || r.GetPath(state).s != "FINAL") continue;
      std::string text;
      r.GetPath(revenue).AppendJson(&text);
      absl::StrAppend(&text, " orders=", r.GetPath(orders).i);
      auto [it, fresh] = finals.emplace(
          std::string(r.GetPath(start).s) + "/" + std::string(r.GetPath(country).s), text);
      if (fresh) continue;
      ++again;
      EXPECT_EQ(it->second, text) << "two FINAL values for window " << it->first;
    }
    return again;
  }
  // Each window's revisions rise in the changelog, and the table holds the
  // highest one published (never lowered by a later epoch's writes).
  void ExpectNoRevisionGoesBack() {
    auto values = ConsumeAllValues(bootstrap_, "revenue-changelog", 30000);
    ASSERT_OK(values.status());
    EXPECT_THAT(RevisionRegressions(*values), ::testing::IsEmpty());
    auto rows = postgres_->Query("SELECT value::text FROM revenue");
    ASSERT_OK(rows.status());
    std::vector<std::string> table;
    for (const auto& r : *rows) table.push_back(r[0]);
    auto highest = [](const std::vector<std::string>& vs) {
      JsonDecoder decoder;
      std::map<std::string, int64_t> out;
      for (const std::string& v : vs) {
        Record r;
        if (!decoder.Decode(v, &r).ok()) continue;
        const std::string key = std::string(r.GetPath(FieldPath::Parse("window_start")).s) + "/" +
                                std::string(r.GetPath(FieldPath::Parse("country")).s);
        int64_t& rev = out[key];
        rev = std::max(rev, r.GetPath(FieldPath::Parse("revision")).i);
      }
      return out;
    };
    EXPECT_EQ(highest(table), highest(*values));
  }
  // PostgreSQL's clock now (for ExpectNoRowOfAnEpochBefore); "" on error.
  std::string PostgresNow() {
    auto now = postgres_->Query("SELECT clock_timestamp()::text");
    EXPECT_OK(now.status());
    return now.ok() ? (*now)[0][0] : "";
  }
  // No row of the revenue table from an epoch before `epoch` was written
  // after `since` (PostgresNow()): a fenced-off worker's writes did not land.
  void ExpectNoRowOfAnEpochBefore(int64_t epoch, const std::string& since) {
    ASSERT_FALSE(since.empty());
    auto stale = postgres_->Query(absl::StrCat("SELECT count(*) FROM revenue WHERE epoch < ", epoch,
                                               " AND updated_at > '", since, "'::timestamptz"));
    ASSERT_OK(stale.status());
    EXPECT_EQ((*stale)[0][0], "0");
  }
  static void UnlockFences(PGconn* lock) {
    PQclear(PQexec(lock, "COMMIT"));
    PQfinish(lock);
  }

  v1::Job Get(const std::string& id) {
    auto j = JobClient(address_, "").Get(id);
    EXPECT_OK(j.status());
    return j.ok() ? *j : v1::Job();
  }

  std::string Logs() const {
    std::string out;
    for (int i = 1; i <= coordinator_starts_; ++i) {
      absl::StrAppend(&out, "--- coordinator ", i, "\n",
                      ReadFile(dir_ / absl::StrCat("coordinator-", i, ".log")));
    }
    for (size_t i = 0; i < workers_.size(); ++i) {
      absl::StrAppend(&out, "--- worker ", i, "\n", workers_[i]->Log());
    }
    return out;
  }

  std::unique_ptr<TempDir> tmp_;
  fs::path dir_;
  std::unique_ptr<ChildProcess> broker_, coordinator_;
  std::vector<std::unique_ptr<ChildProcess>> workers_;
  std::vector<std::string> ids_;
  std::vector<std::string> http_;  // each worker's /metrics address
  std::vector<std::string> grpc_;  // each worker's gRPC address (exchange streams)
  std::string bootstrap_, address_;
  int coordinator_starts_ = 0;
  int worker_restarts_ = 0;
  // The workers' lease: a worker stops its tasks when it cannot reach the
  // coordinator for this long.
  std::string worker_timeout_ = "2s";
  // More flags for `caravela coordinator` (e.g. --storage).
  std::vector<std::string> coordinator_flags_;
  // More sink lines for the job's external sinks (set in PrepareDirs).
  std::string extra_sinks_;
  // Each process started with CARAVELA_CLOCK_SKEW_FILE=ClockSkewFile(its
  // name): writing an offset there steps its wall clock.
  bool clock_skew_files_ = false;
  fs::path ClockSkewFile(const std::string& process) const {
    return dir_ / absl::StrCat("clock-skew-", process);
  }
  std::vector<std::string> ProcessEnv(const std::string& process) const {
    if (!clock_skew_files_) return {};
    return {"CARAVELA_CLOCK_SKEW_FILE=" + ClockSkewFile(process).string()};
  }
  // The group id each worker runs with (0: the test's), for iptables'
  // owner match.
  std::vector<gid_t> worker_gids_ = {0, 0, 0};
  std::map<std::string, WindowResult> reference_;
  std::vector<std::string> reference_shipped_;  // the join's output, sorted
  // The brute force: per window start (ms) "/" country, the first copy of
  // each event id summed.
  struct Expected {
    int64_t cents = 0;
    int64_t orders = 0;
  };
  std::map<std::string, Expected> brute_force_;
  std::vector<std::string> expected_shipped_ids_;  // one per shipment, sorted
  std::map<std::string, int64_t> produced_;        // records per input topic
  std::vector<KafkaTestRecord> purchases_;         // as produced
  std::vector<KafkaTestRecord> shipments_;         // as produced
  // Non-empty: the broker also has the topics <prefix>purchases and
  // <prefix>shipments (empty), and the cluster job reads those (a test
  // streams the input into them while the job runs).
  std::string topic_prefix_;
  std::unique_ptr<PostgresServer> postgres_;
};

class ClusterPartitionTest : public ClusterJobTest {
 protected:
  static constexpr gid_t kCutOff = 4242;
  ClusterPartitionTest() { worker_gids_[0] = kCutOff; }
  void SetUp() override {
    ASSERT_EQ(unshare(CLONE_NEWNET), 0)
        << "unshare(CLONE_NEWNET): " << strerror(errno) << " (the test needs root)";
    ASSERT_EQ(std::system("ip link set lo up"), 0) << "ip (iproute2) missing: scripts/install-deps";
    ASSERT_EQ(std::system("iptables -S OUTPUT > /dev/null"), 0)
        << "iptables missing: run scripts/install-deps";
    ClusterJobTest::SetUp();
  }
  // Adds (-I) or deletes (-D) the rule dropping worker 0's packets to
  // `address` (HOST:PORT; default: the coordinator's).
  void Cut(const char* op, std::string address = "") {
    if (address.empty()) address = address_;
    const std::string port = address.substr(address.rfind(':') + 1);
    const std::string cmd = absl::StrCat("iptables ", op, " OUTPUT -o lo -p tcp --dport ", port,
                                         " -m owner --gid-owner ", kCutOff, " -j DROP");
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  }
};

}  // namespace caravela
