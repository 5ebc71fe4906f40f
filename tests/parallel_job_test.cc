// Parallel jobs end to end (SPEC §8): a job cut into stages by the planner
// runs as N tasks per stage on threads of one process, records cross stages
// through exchange topics on a real Kafka-protocol broker (the embedded
// one), checkpoints are job-wide. The contract: FINAL results do not depend
// on N and equal the offline answer; revisions per key only increase.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "bench/purchase_generator.h"
#include "common/job_spec.h"
#include "common/json.h"
#include "common/time_util.h"
#include "tests/child_process.h"
#include "tests/revenue_job.h"
#include "tests/test_util.h"
#include "worker/connectors/embedded_broker.h"
#include "worker/connectors/kafka_test_util.h"
#include "worker/registry/builtin_kinds.h"
#include "worker/runtime/pipeline.h"
#include "worker/testing/status_testing.h"

namespace caravela {
namespace {

class ParallelJobTest : public ::testing::Test {
 protected:
  // Removed at the end (CARAVELA_KEEP_TEST_DIRS=1 keeps it).
  TempDir tmp_{"parallel-job", "CARAVELA_KEEP_TEST_DIRS", "parallel job test"};
  std::string TestDir() const { return tmp_.path().string(); }
  void SetUp() override {
    auto b = EmbeddedBroker::Start(0, 4);
    ASSERT_OK(b.status());
    broker_ = std::move(*b);
    ASSERT_OK(broker_->CreateTopic("purchases", 4));
    bench::PurchaseGenerator gen(RevenueStream(/*seed=*/7, /*purchases=*/20000));
    std::vector<KafkaTestRecord> records;
    std::string line;
    while (gen.Next(&line)) {
      KafkaTestRecord r;
      r.key = gen.last_key();
      r.value = line;
      records.push_back(r);
      lines_.push_back(line);
    }
    ASSERT_OK(ProduceRecords(broker_->bootstrap(), "purchases", records, 60000));
    records_ = std::move(records);
  }

  // Runs the job with `parallelism`; returns its output directory.
  std::string RunJob(int parallelism, int64_t checkpoint_ms,
                     RunOptions::Exchange exchange = RunOptions::Exchange::kMemory) {
    const char* via = exchange == RunOptions::Exchange::kKafka ? "kafka" : "memory";
    std::string dir = absl::StrCat(TestDir(), "/parallel_", ::getpid(), "_", parallelism, "_",
                                   checkpoint_ms, "_", via);
    std::filesystem::remove_all(dir);
    // One job name per run: exchange topics are per job and their partition
    // count follows the parallelism.
    ParseResult parsed = ParseJobSpec(RevenueJob(
        absl::StrCat("revenue-", parallelism, "-", checkpoint_ms, "-", via), dir, checkpoint_ms));
    EXPECT_TRUE(parsed.ok()) << parsed.errors[0].ToString();
    RunOptions options;
    options.data_dir = dir + "/data";
    options.embedded_bootstrap = broker_->bootstrap();
    options.parallelism = parallelism;
    options.exchange = exchange;
    auto pipeline = Pipeline::Create(parsed.spec, options);
    EXPECT_OK(pipeline.status());
    if (!pipeline.ok()) return dir;
    // Three stages (source, dedup, window), each with `parallelism` tasks.
    EXPECT_EQ((*pipeline)->task_count(), parallelism == 1 ? 1 : 3 * parallelism);
    absl::Status st = (*pipeline)->Run();
    EXPECT_OK(st);
    EXPECT_EQ((*pipeline)->metrics().Value("records_in_total", "source=\"purchases\""),
              static_cast<int64_t>(lines_.size()));
    return dir;
  }

  // The offline answer: per (hour, country) the sum and count of the first
  // copy of every event id.
  std::map<std::string, WindowResult> Offline() {
    JsonDecoder decoder;
    std::set<std::string> seen;
    std::map<std::string, std::pair<int64_t, int64_t>> sums;  // cents, orders
    for (size_t i = 0; i < lines_.size(); ++i) {
      Record r;
      EXPECT_OK(decoder.Decode(lines_[i], &r));
      std::string id(r.GetPath(FieldPath::Parse("event_id")).s);
      if (!seen.insert(id).second) continue;
      const std::optional<int64_t> parsed =
          ParseIso8601(r.GetPath(FieldPath::Parse("event_time")).s);
      EXPECT_TRUE(parsed.has_value());
      const int64_t t = parsed.value_or(0);
      const int64_t hour = t - (t % 3600'000);
      std::string key =
          FormatIso8601(hour) + "/" + std::string(r.GetPath(FieldPath::Parse("country")).s);
      std::string amount;
      r.GetPath(FieldPath::Parse("amount")).AppendJson(&amount);
      auto& s = sums[key];
      s.first += static_cast<int64_t>(std::llround(std::stod(amount) * 100));
      s.second += 1;
    }
    std::map<std::string, WindowResult> out;
    for (const auto& [key, s] : sums) {
      out[key].text = absl::StrCat(s.first, "/", s.second);
    }
    return out;
  }

  std::unique_ptr<EmbeddedBroker> broker_;
  std::vector<std::string> lines_;
  std::vector<KafkaTestRecord> records_;  // lines_ with their keys
};

// FINAL results as "cents/orders" for comparison with the offline answer.
std::map<std::string, WindowResult> AsCents(const std::map<std::string, WindowResult>& in) {
  std::map<std::string, WindowResult> out;
  for (const auto& [key, w] : in) {
    const size_t a = w.text.find('=') + 1, b = w.text.find(' ');
    const double revenue = std::stod(w.text.substr(a, b - a));
    const std::string orders = w.text.substr(w.text.rfind('=') + 1);
    out[key].text = absl::StrCat(std::llround(revenue * 100), "/", orders);
  }
  return out;
}

TEST_F(ParallelJobTest, ExchangeJobGivesTheSameFinalResultsForEveryParallelism) {
  const std::string one = RunJob(1, 0);
  const auto reference = FinalResults(one + "/out");
  ASSERT_FALSE(reference.empty());
  for (const auto& [key, w] : reference) EXPECT_EQ(w.finals, 1) << key;
  const auto offline = Offline();
  const auto cents = AsCents(reference);
  ASSERT_EQ(cents.size(), offline.size());
  for (const auto& [key, w] : offline) {
    auto it = cents.find(key);
    ASSERT_NE(it, cents.end()) << key;
    EXPECT_EQ(it->second.text, w.text) << key;
  }
  const auto conflicts = ReadParts(one + "/out", "conflicts");
  EXPECT_FALSE(conflicts.empty());
  const auto late = ReadParts(one + "/out", "revenue");
  EXPECT_TRUE(std::any_of(late.begin(), late.end(), [](const std::string& l) {
    return l.find("\"LATE\"") != std::string::npos;
  })) << "the input has late corrections";

  // In memory (caravela run's default) and through Kafka topics (as tasks
  // in different processes exchange).
  for (const auto& [n, exchange] :
       std::vector<std::pair<int, RunOptions::Exchange>>{{2, RunOptions::Exchange::kMemory},
                                                         {3, RunOptions::Exchange::kMemory},
                                                         {3, RunOptions::Exchange::kKafka}}) {
    SCOPED_TRACE(
        absl::StrCat("parallelism ", n,
                     exchange == RunOptions::Exchange::kKafka ? " through Kafka" : " in memory"));
    const std::string dir = RunJob(n, 0, exchange);
    ExpectSameFinals(reference, FinalResults(dir + "/out"));
    EXPECT_EQ(ReadParts(dir + "/out", "conflicts").size(), conflicts.size());
    EXPECT_TRUE(ReadParts(dir + "/out", "too_late").empty());
    // One part file per task of the window's stage.
    EXPECT_TRUE(std::filesystem::exists(dir + "/out/revenue.part-0.jsonl"));
    EXPECT_TRUE(std::filesystem::exists(absl::StrCat(dir, "/out/revenue.part-", n - 1, ".jsonl")));
  }
}

// Too-late records (SPEC §4) through two exchanges: they are produced only
// once the job showed that its watermark passed them (the marker's window
// went FINAL), so they are too late whatever the interleaving of partitions.
// With parallelism 1 and 3 exactly they go to revenue.too_late, and the
// FINAL results still equal the offline answer.
TEST_F(ParallelJobTest, TooLateRecordsGoToTheSideOutputForEveryParallelism) {
  const auto offline = Offline();
  JsonDecoder decoder;
  int64_t first = kMaxTime, last = kMinTime;
  for (const std::string& l : lines_) {
    Record r;
    ASSERT_OK(decoder.Decode(l, &r));
    const int64_t t = ParseIso8601(r.GetPath(FieldPath::Parse("event_time")).s).value_or(0);
    first = std::min(first, t);
    last = std::max(last, t);
  }
  constexpr int64_t kHour = 3600'000;
  const int64_t marker = (last / kHour + 2) * kHour;  // an hour of its own
  auto purchase = [](const std::string& id, const std::string& user, const std::string& country,
                     int64_t t) {
    return absl::StrCat(R"({"event_id":")", id, R"(","user_id":")", user, R"(","country":")",
                        country, R"(","amount":1.00,"currency":"EUR","event_time":")",
                        FormatIso8601(t), R"("})");
  };
  std::vector<KafkaTestRecord> late;
  std::set<std::string> late_ids;
  for (int i = 0; i < 30; ++i) {
    const std::string id = absl::StrCat("too-late-", i), user = absl::StrCat("u-late-", i);
    late.push_back({-1, user, purchase(id, user, "PT", first + i * 60'000)});
    late_ids.insert(id);
  }
  for (int n : {1, 3}) {
    SCOPED_TRACE(absl::StrCat("parallelism ", n));
    const std::string topic = absl::StrCat("purchases-late-", n);
    ASSERT_OK(broker_->CreateTopic(topic, 4));
    std::vector<KafkaTestRecord> records = records_;
    records.push_back({-1, "u-marker", purchase("marker", "u-marker", "ZZ", marker)});
    for (int p = 0; p < 4; ++p) {  // every partition's watermark passes the marker's window
      records.push_back(
          {p, "u-sentinel",
           purchase(absl::StrCat("sentinel-", p), "u-sentinel", "ZZ", marker + 3 * kHour)});
    }
    ASSERT_OK(ProduceRecords(broker_->bootstrap(), topic, records, 60000));
    const std::string dir = absl::StrCat(TestDir(), "/parallel_late_", ::getpid(), "_", n);
    std::filesystem::remove_all(dir);
    std::string yaml = RevenueJob(absl::StrCat("late-", n), dir, 0);
    const std::string from = "kafka: {topic: purchases, bounded: true}";
    yaml.replace(yaml.find(from), from.size(), "kafka: {topic: " + topic + "}");
    ParseResult parsed = ParseJobSpec(yaml);
    ASSERT_TRUE(parsed.ok()) << parsed.errors[0].ToString();
    std::atomic<bool> end_of_input{false};
    RunOptions options;
    options.data_dir = dir + "/data";
    options.embedded_bootstrap = broker_->bootstrap();
    options.parallelism = n;
    options.end_of_input = &end_of_input;
    auto pipeline = Pipeline::Create(parsed.spec, options);
    ASSERT_OK(pipeline.status());
    absl::Status status;
    std::thread runner([&] { status = (*pipeline)->Run(); });
    const std::string marker_window = "\"window_start\":\"" + FormatIso8601(marker) + "\"";
    bool final_seen = false;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (!final_seen && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      for (const std::string& l : ReadParts(dir + "/out", "revenue")) {
        final_seen = final_seen || (l.find(marker_window) != std::string::npos &&
                                    l.find("\"FINAL\"") != std::string::npos);
      }
    }
    EXPECT_TRUE(final_seen) << "the marker's window never went FINAL";
    ASSERT_OK(ProduceRecords(broker_->bootstrap(), topic, late, 60000));
    MetricsRegistry& m = (*pipeline)->metrics();
    const int64_t total = static_cast<int64_t>(records.size() + late.size());
    while (m.Value("records_in_total", "source=\"purchases\"") < total &&
           std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    end_of_input = true;
    runner.join();
    ASSERT_OK(status);
    EXPECT_EQ(m.Value("records_in_total", "source=\"purchases\""), total);

    std::set<std::string> too_late;
    for (const std::string& l : ReadParts(dir + "/out", "too_late")) {
      Record r;
      SCOPED_TRACE(l);
      ASSERT_OK(decoder.Decode(l, &r));
      too_late.insert(std::string(r.GetPath(FieldPath::Parse("record.event_id")).s));
    }
    EXPECT_EQ(too_late, late_ids);
    // FINAL results of the stream's windows (not the marker's) = offline.
    auto finals = FinalResults(dir + "/out");
    for (auto it = finals.begin(); it != finals.end();) {
      it = it->first.ends_with("/ZZ") ? finals.erase(it) : std::next(it);
    }
    for (const auto& [key, w] : finals) EXPECT_EQ(w.finals, 1) << key;
    const auto cents = AsCents(finals);
    ASSERT_EQ(cents.size(), offline.size());
    for (const auto& [key, w] : offline) {
      auto it = cents.find(key);
      ASSERT_NE(it, cents.end()) << key;
      EXPECT_EQ(it->second.text, w.text) << key;
    }
  }
}

TEST_F(ParallelJobTest, JobWideCheckpointsCommitEveryTasksOutput) {
  const auto reference = FinalResults(RunJob(1, 0) + "/out");
  const std::string dir = RunJob(3, 50);
  ExpectSameFinals(reference, FinalResults(dir + "/out"));
  // The job's commit record names the last checkpoint every task stored.
  const std::string text = ReadFile(dir + "/data/checkpoints/revenue-3-50-memory/job-checkpoint");
  EXPECT_THAT(text, ::testing::HasSubstr("tasks=9"));
  EXPECT_THAT(text, ::testing::HasSubstr("parallelism=3"));
}

// Idle producers (SPEC §8): a source task whose partitions are empty marks
// its exchange channels idle once `idle_timeout` passed, so the downstream
// watermark follows the other producers and windows close while the job
// runs; without idle_timeout the empty producer holds the watermark back.
// (That a partition with backlog never turns idle is SourceWatermarkTest.
// BacklogPreventsIdleness; the exchange reader's min over non-idle producers
// is ExchangeTest.WatermarkIsTheMinOverActiveProducers.)
class IdleProducerTest : public ::testing::TestWithParam<bool> {};

TEST_P(IdleProducerTest, EmptyProducerTaskStallsTheWatermarkOnlyWithoutIdleTimeout) {
  const bool idle_timeout = GetParam();
  auto broker = EmbeddedBroker::Start(0, 4);
  ASSERT_OK(broker.status());
  ASSERT_OK((*broker)->CreateTopic("sparse", 4));
  // Three hours of events, all in partitions 0 and 2: with parallelism 2 the
  // source task owning partitions 1 and 3 reads nothing.
  std::vector<KafkaTestRecord> records;
  for (int i = 0; i < 180; ++i) {
    KafkaTestRecord r;
    r.partition = (i % 2) * 2;
    r.key = absl::StrCat("u", i % 7);
    r.value = absl::StrCat(R"({"event_id":"e)", i, R"(","user_id":"u)", i % 7,
                           R"(","country":"PT","amount":1,"event_time":")",
                           FormatIso8601(int64_t{i} * 60'000), R"("})");
    records.push_back(r);
  }
  ASSERT_OK(ProduceRecords((*broker)->bootstrap(), "sparse", records, 30000));

  TempDir tmp("idle", "CARAVELA_KEEP_TEST_DIRS", "idle producer test");
  const std::string dir = absl::StrCat(tmp.path().string(), "/idle_", ::getpid(), "_",
                                       idle_timeout ? "timeout" : "none");
  std::filesystem::remove_all(dir);
  const std::string yaml = absl::StrCat(R"(
apiVersion: caravela/v1
kind: Job
metadata: {name: sparse}
spec:
  sources:
    - name: purchases
      kafka: {topic: sparse}
      key: [user_id]
      event_time: {field: event_time, format: iso8601}
      watermark: {max_out_of_orderness: 1m)",
                                        idle_timeout ? ", idle_timeout: 300ms" : "", R"(}
  operators:
    - name: unique
      dedup: {from: purchases, id: event_id, retention: 24h}
    - name: revenue
      window:
        from: unique
        tumbling: 1h
        group_by: [country]
        aggregates: [{as: orders, count: "*"}]
  sinks:
    - {from: revenue, file: {path: )",
                                        dir, R"(/out/revenue.jsonl}}
)");
  ParseResult parsed = ParseJobSpec(yaml);
  ASSERT_TRUE(parsed.ok()) << parsed.errors[0].ToString();
  std::atomic<bool> stop{false};
  RunOptions options;
  options.data_dir = dir + "/data";
  options.embedded_bootstrap = (*broker)->bootstrap();
  options.parallelism = 2;
  options.stop = &stop;
  auto pipeline = Pipeline::Create(parsed.spec, options);
  ASSERT_OK(pipeline.status());
  absl::Status run_status;
  std::thread runner([&] { run_status = (*pipeline)->Run(); });
  // Hours 0 and 1 close once the watermark passes 02:00 (the input reaches 02:59).
  auto closed = [&] {
    int n = 0;
    for (const std::string& l : ReadParts(dir + "/out", "revenue")) {
      n += l.find("\"ON_TIME\"") != std::string::npos || l.find("\"FINAL\"") != std::string::npos;
    }
    return n;
  };
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::seconds(idle_timeout ? 20 : 3);
  while (closed() < 2 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  const int got = closed();
  stop = true;
  runner.join();
  EXPECT_OK(run_status);
  EXPECT_EQ((*pipeline)->metrics().Value("records_in_total", "source=\"purchases\""), 180);
  if (idle_timeout) {
    EXPECT_GE(got, 2) << "the idle producer task held the watermark back";
  } else {
    EXPECT_EQ(got, 0) << "a window closed although a producer task had sent no watermark";
  }
}

INSTANTIATE_TEST_SUITE_P(IdleTimeout, IdleProducerTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? std::string("Set") : std::string("Unset");
                         });

// The crash matrix of a parallel job (SPEC §8): `caravela run --parallelism 3`
// is killed by a failpoint at each dangerous place, then run again to the
// end on the same data dir; every sink converges to the uninterrupted run's
// FINAL results and no revision of a key goes backwards. The broker lives in
// this process (it outlives the job's); the job's exchange topics are created
// up front (the mock cluster has no CreateTopics for another process).
// (failpoint, exchange: "memory" or "kafka")
using CrashCase = std::tuple<const char*, const char*>;

class ParallelCrashTest : public ParallelJobTest, public ::testing::WithParamInterface<CrashCase> {
 protected:
  // Runs the binary; returns its exit code (128 + signal when killed).
  int RunBinary(const std::string& dir, const std::string& failpoint, int parallelism = 3) {
    std::string cmd = absl::StrCat(failpoint.empty() ? "" : "CARAVELA_FAILPOINT=" + failpoint + " ",
                                   CARAVELA_BINARY, " run -q --parallelism ", parallelism,
                                   " --exchange ", std::get<1>(GetParam()), " --data-dir ", dir,
                                   "/data ", dir, "/job.yaml >> ", dir, "/run.log 2>&1");
    const int rc = std::system(cmd.c_str());
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : 128 + WTERMSIG(rc);
  }
  std::string Prepare(const std::string& name, const std::string& dir) {
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
    std::string yaml = RevenueJob(name, dir, 20);
    // The job names the broker: it runs in another process.
    const std::string from = "kafka: {topic: purchases, bounded: true}";
    yaml.replace(
        yaml.find(from), from.size(),
        "kafka: {topic: purchases, bounded: true, bootstrap: \"" + broker_->bootstrap() + "\"}");
    std::ofstream(dir + "/job.yaml") << yaml;
    // (4 partitions: a rescaled run may have up to 4 tasks per stage; the
    // first `tasks` partitions are used.)
    for (const char* op : {"unique", "revenue"}) {
      EXPECT_OK(broker_->CreateTopic(absl::StrCat("caravela.", name, ".", op), 4));
    }
    return dir;
  }
  static std::string Log(const std::string& dir) { return ReadFile(dir + "/run.log"); }
};

TEST_P(ParallelCrashTest, KilledRunConvergesToTheUninterruptedResult) {
  const std::string failpoint = std::get<0>(GetParam());
  std::string tag = absl::StrCat(failpoint, "-", std::get<1>(GetParam()));
  std::replace_if(
      tag.begin(), tag.end(), [](char c) { return !std::isalnum(c); }, '-');
  const std::string base = absl::StrCat(TestDir(), "/parallel_crash_", ::getpid());
  const std::string ref = Prepare("crash-ref-" + tag, base + "/ref-" + tag);
  ASSERT_EQ(RunBinary(ref, ""), 0) << Log(ref);
  const auto want = FinalResults(ref + "/out");
  ASSERT_FALSE(want.empty());

  const std::string dir = Prepare("crash-" + tag, base + "/" + tag);
  ASSERT_EQ(RunBinary(dir, failpoint), 128 + SIGKILL)
      << "the failpoint " << failpoint << " did not kill the run:\n"
      << Log(dir);
  ASSERT_EQ(RunBinary(dir, ""), 0) << Log(dir);
  if (failpoint.rfind("checkpoint.after_job_record", 0) == 0 ||
      failpoint.rfind("checkpoint.after_sink_commit", 0) == 0) {
    // A checkpoint was complete job-wide before the kill: the rerun restores it.
    EXPECT_THAT(Log(dir), ::testing::HasSubstr("restored checkpoint")) << Log(dir);
  }
  // Also checks that revisions only increase per key within each file.
  ExpectSameFinals(want, FinalResults(dir + "/out"));
  EXPECT_EQ(ReadParts(dir + "/out", "conflicts").size(),
            ReadParts(ref + "/out", "conflicts").size());
}

// Rescaling (SPEC §8): a run at parallelism 3 is killed after checkpoints
// completed; the next run has parallelism 2 (or 4), restores the checkpoint
// taken with 3 tasks (each new task gathering its source partitions and keys
// from the old tasks) and converges to the uninterrupted run's FINAL
// results, with no window FINAL twice and no revision going backwards.
class RescaleTest : public ParallelCrashTest {};

TEST_P(RescaleTest, KilledRunResumesWithAnotherParallelism) {
  const int to = std::atoi(std::get<0>(GetParam()));
  const std::string via = std::get<1>(GetParam());
  const std::string base = absl::StrCat(TestDir(), "/rescale_", ::getpid());
  const std::string ref = Prepare(absl::StrCat("rescale-ref-", to, "-", via),
                                  absl::StrCat(base, "/ref-", to, "-", via));
  ASSERT_EQ(RunBinary(ref, ""), 0) << Log(ref);
  const auto want = FinalResults(ref + "/out");
  ASSERT_FALSE(want.empty());

  const std::string dir =
      Prepare(absl::StrCat("rescale-", to, "-", via), absl::StrCat(base, "/", to, "-", via));
  ASSERT_EQ(RunBinary(dir, "checkpoint.after_sink_commit:12"), 128 + SIGKILL) << Log(dir);
  ASSERT_EQ(RunBinary(dir, "", to), 0) << Log(dir);
  EXPECT_THAT(Log(dir), ::testing::HasSubstr(absl::StrCat("rescaling to ", to))) << Log(dir);
  EXPECT_THAT(Log(dir), ::testing::HasSubstr("gathered its keys")) << Log(dir);
  if (to == 2) {
    // 3 -> 2: each new task owns an old task's whole key-group range, whose
    // part (dedup ids and windows) it restores as it is.
    EXPECT_THAT(Log(dir), ::testing::HasSubstr("part restored as it is")) << Log(dir);
  }
  ExpectSameFinals(want, FinalResults(dir + "/out"));
  EXPECT_EQ(ReadParts(dir + "/out", "conflicts").size(),
            ReadParts(ref + "/out", "conflicts").size());
}

INSTANTIATE_TEST_SUITE_P(Tasks, RescaleTest,
                         ::testing::Combine(::testing::Values("2", "4"),
                                            ::testing::Values("memory", "kafka")),
                         [](const ::testing::TestParamInfo<CrashCase>& info) {
                           return absl::StrCat("To", std::get<0>(info.param), "_",
                                               std::get<1>(info.param));
                         });

// Rescaling through every size (issue 29): runs at parallelism 2, 1, 3 and
// 2 on one data dir, each but the last killed after a few checkpoints, the
// next restoring the last one with another task count. No task reopens
// another's part file or fence: each part name stays the files of one line
// of tasks (a task a rescale added writes "<index>-c<checkpoint>" files),
// so nothing committed is truncated, and the results converge to the
// uninterrupted run's, each FINAL once.
class RescaleSequenceTest : public ParallelCrashTest {};

TEST_P(RescaleSequenceTest, TwoThenOneThenThreeThenTwoTasksGiveTheSameAnswer) {
  const std::string via = std::get<1>(GetParam());
  const std::string base = absl::StrCat(TestDir(), "/rescale_seq_", ::getpid());
  const std::string ref =
      Prepare(absl::StrCat("rescale-seq-ref-", via), absl::StrCat(base, "/ref-", via));
  ASSERT_EQ(RunBinary(ref, ""), 0) << Log(ref);
  const auto want = FinalResults(ref + "/out");
  ASSERT_FALSE(want.empty());

  const std::string dir = Prepare(absl::StrCat("rescale-seq-", via), absl::StrCat(base, "/", via));
  const std::string kill = std::get<0>(GetParam());
  ASSERT_EQ(RunBinary(dir, kill, 2), 128 + SIGKILL) << Log(dir);
  for (int tasks : {1, 3}) {
    ASSERT_EQ(RunBinary(dir, kill, tasks), 128 + SIGKILL) << Log(dir);
    EXPECT_THAT(Log(dir), ::testing::HasSubstr(absl::StrCat("rescaling to ", tasks))) << Log(dir);
  }
  ASSERT_EQ(RunBinary(dir, "", 2), 0) << Log(dir);
  ExpectSameFinals(want, FinalResults(dir + "/out"));
  EXPECT_EQ(ReadParts(dir + "/out", "conflicts").size(),
            ReadParts(ref + "/out", "conflicts").size());
  // 2 -> 1 -> 3 added tasks 1 and 2 under new part names.
  std::set<std::string> parts;
  for (const auto& f : PartFiles(dir + "/out", "revenue")) parts.insert(f.filename().string());
  EXPECT_THAT(parts,
              ::testing::Contains(::testing::MatchesRegex(R"(revenue\.part-1-c[0-9]+\.jsonl)")))
      << ::testing::PrintToString(parts);
}

// (Killed at the second sink commit: early enough that a run at one task,
// which restores fast, is still reading when it dies.)
INSTANTIATE_TEST_SUITE_P(Exchanges, RescaleSequenceTest,
                         ::testing::Combine(::testing::Values("checkpoint.after_sink_commit:2"),
                                            ::testing::Values("memory", "kafka")),
                         [](const ::testing::TestParamInfo<CrashCase>& info) {
                           return std::string(std::get<1>(info.param));
                         });

// Job savepoints in one process: a run at parallelism 3 over a topic read
// without an end is stopped (SIGINT) mid-stream and writes a savepoint of
// its last checkpoint; a run in a fresh data dir starts from it with 2 tasks
// per stage, reads the topic to its end and converges to the uninterrupted
// run's FINAL results.
class SavepointTest : public ParallelCrashTest {};

TEST_P(SavepointTest, StoppedRunResumesFromItsSavepointWithAnotherParallelism) {
  const std::string via = std::get<1>(GetParam());
  const std::string base = absl::StrCat(TestDir(), "/savepoint_", ::getpid());
  const std::string ref = Prepare("savepoint-ref-" + via, base + "/ref-" + via);
  ASSERT_EQ(RunBinary(ref, ""), 0) << Log(ref);
  const auto want = FinalResults(ref + "/out");
  ASSERT_FALSE(want.empty());

  const std::string dir = Prepare("savepoint-" + via, base + "/" + via);
  std::string unbounded = ReadFile(dir + "/job.yaml");
  unbounded.replace(unbounded.find("bounded: true"), 13, "bounded: false");
  std::ofstream(dir + "/unbounded.yaml") << unbounded;
  ChildProcess first(
      {CARAVELA_BINARY, "run", "-q", "--parallelism", "3", "--exchange", via, "--data-dir",
       dir + "/data", "--savepoint-on-stop", dir + "/sp", dir + "/unbounded.yaml"},
      dir + "/first.log");
  // A checkpoint complete job-wide, then the stop.
  const std::string record =
      absl::StrCat(dir, "/data/checkpoints/savepoint-", via, "/job-checkpoint");
  ASSERT_TRUE(
      Eventually([&] { return std::filesystem::exists(record); }, std::chrono::milliseconds(60000)))
      << first.Log();
  ASSERT_EQ(first.Stop(SIGINT), 0) << first.Log();
  EXPECT_THAT(first.Log(), ::testing::HasSubstr("savepoint of checkpoint")) << first.Log();
  ASSERT_TRUE(std::filesystem::exists(dir + "/sp/job-savepoint.json")) << first.Log();
  const size_t finals_before = FinalResults(dir + "/out").size();
  EXPECT_LT(finals_before, want.size()) << "the first run was not stopped mid-stream";

  // Another data dir: the savepoint is all the second run has.
  const std::string cmd = absl::StrCat(CARAVELA_BINARY, " run -q --parallelism 2 --exchange ", via,
                                       " --data-dir ", dir, "/data2 --from-savepoint ", dir, "/sp ",
                                       dir, "/job.yaml >> ", dir, "/run.log 2>&1");
  ASSERT_EQ(std::system(cmd.c_str()), 0) << Log(dir);
  EXPECT_THAT(Log(dir), ::testing::HasSubstr("starting from the savepoint")) << Log(dir);
  EXPECT_THAT(Log(dir), ::testing::HasSubstr("gathered its keys")) << Log(dir);
  // 3 -> 2: each new task restores an old task's part as it is.
  EXPECT_THAT(Log(dir), ::testing::HasSubstr("part restored as it is")) << Log(dir);
  ExpectSameFinals(want, FinalResults(dir + "/out"));
  EXPECT_EQ(ReadParts(dir + "/out", "conflicts").size(),
            ReadParts(ref + "/out", "conflicts").size());
}

INSTANTIATE_TEST_SUITE_P(Tasks, SavepointTest,
                         ::testing::Combine(::testing::Values("3to2"),
                                            ::testing::Values("memory", "kafka")),
                         [](const ::testing::TestParamInfo<CrashCase>& info) {
                           return std::string(std::get<1>(info.param));
                         });

std::string CrashCaseName(const ::testing::TestParamInfo<CrashCase>& info) {
  std::string name = absl::StrCat(std::get<0>(info.param), "_", std::get<1>(info.param));
  std::replace_if(
      name.begin(), name.end(), [](char c) { return !std::isalnum(c); }, '_');
  return name;
}

INSTANTIATE_TEST_SUITE_P(
    Memory, ParallelCrashTest,
    ::testing::Combine(::testing::Values(
                           // Mid-stream, before the first checkpoint completes.
                           "source.after_batch:3",
                           // Some tasks stored checkpoint n, not all.
                           "checkpoint.after_task_stored:4",
                           // Checkpoint n complete job-wide (record written), sinks not committed.
                           "checkpoint.after_job_record:2",
                           // After a sink committed a later checkpoint.
                           "checkpoint.after_sink_commit:12",
                           // In the middle of writing an exchange (hits count messages).
                           "exchange.after_write:60"),
                       ::testing::Values("memory")),
    CrashCaseName);

// Through Kafka topics: records of the killed epoch stay in the topics and
// must be ignored by the next run.
INSTANTIATE_TEST_SUITE_P(Kafka, ParallelCrashTest,
                         ::testing::Combine(::testing::Values("checkpoint.after_task_stored:4",
                                                              "exchange.after_write:60"),
                                            ::testing::Values("kafka")),
                         CrashCaseName);

// Over gRPC streams on loopback (as between workers): a killed run's frames
// in flight are simply gone; the next run's readers open at a new epoch.
INSTANTIATE_TEST_SUITE_P(Network, ParallelCrashTest,
                         ::testing::Combine(::testing::Values("checkpoint.after_task_stored:4",
                                                              "exchange.after_write:60"),
                                            ::testing::Values("network")),
                         CrashCaseName);

}  // namespace
}  // namespace caravela
