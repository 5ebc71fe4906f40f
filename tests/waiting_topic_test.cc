// Waiting for input (issue 29): a job submitted before its input topic
// exists runs (RUNNING within 5 s, no epoch burnt), reports "waiting for
// topic T on B" per task (`caravela job`), and reads the topic once a
// producer creates it; its FINAL results are then `caravela run`'s. The
// same in one process: `caravela run` waits, reads the topic when it
// appears, and Ctrl-C (SIGINT) still ends it.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "bench/purchase_generator.h"
#include "coordinator/job_client.h"
#include "tests/child_process.h"
#include "tests/http_test_util.h"
#include "tests/revenue_job.h"
#include "tests/test_util.h"
#include "worker/connectors/kafka_test_util.h"
#include "worker/registry/builtin_kinds.h"
#include "worker/runtime/pipeline.h"
#include "worker/testing/status_testing.h"

namespace caravela {
namespace {

namespace fs = std::filesystem;
using milliseconds = std::chrono::milliseconds;

// The revenue job over `topic`, read without an end, its files relative.
std::string WaitingJob(const std::string& name, const std::string& topic, bool bounded,
                       const std::string& dir) {
  std::string yaml = RevenueJob(name, dir, 200);
  const std::string from = "kafka: {topic: purchases, bounded: true}";
  yaml.replace(
      yaml.find(from), from.size(),
      absl::StrCat("kafka: {topic: ", topic, ", bounded: ", bounded ? "true" : "false", "}"));
  return yaml;
}

std::vector<KafkaTestRecord> Purchases(int64_t n) {
  bench::PurchaseGenerator gen(RevenueStream(/*seed=*/7, n));
  std::vector<KafkaTestRecord> records;
  std::string line;
  while (gen.Next(&line)) {
    KafkaTestRecord r;
    r.key = gen.last_key();
    r.value = line;
    records.push_back(std::move(r));
  }
  return records;
}

TEST(WaitingTopicTest, AClusterJobWaitsForItsTopicWithoutBurningEpochs) {
  TempDir tmp("waiting-topic", "CARAVELA_KEEP_TEST_DIRS", "waiting topic test");
  const fs::path shared = tmp.path() / "shared";
  ChildProcess local(
      {CARAVELA_BINARY, "local", "--workers", "2", "--listen", "127.0.0.1:0", "--data-dir",
       (tmp.path() / "local").string(), "--shared-dir", shared.string()},
      tmp.path() / "local.log");
  const std::vector<std::string> addr =
      local.WaitForMatch(R"(broker=(\S+) coordinator=(\S+))", milliseconds(20000));
  ASSERT_EQ(addr.size(), 3u) << local.Log();
  const std::string bootstrap = addr[1], address = addr[2];
  JobClient client(address, "");
  ASSERT_TRUE(Eventually(
      [&] {
        auto w = client.Workers();
        return w.ok() && w->size() == 2;
      },
      milliseconds(20000)))
      << local.Log();

  const auto submitted_at = std::chrono::steady_clock::now();
  auto submitted = client.Submit(WaitingJob("waits", "purchases-later", false, "."), 2);
  ASSERT_OK(submitted.status());
  ASSERT_EQ(submitted->errors_size(), 0) << submitted->DebugString();
  const std::string id = submitted->job_id();
  v1::Job job;
  ASSERT_TRUE(Eventually(
      [&] {
        auto j = client.Get(id);
        if (j.ok()) job = *j;
        return j.ok() && job.state() == v1::RUNNING;
      },
      milliseconds(5000)))
      << "not RUNNING within 5 s of its submission\n"
      << job.DebugString() << local.Log();
  EXPECT_LE(MsSince(submitted_at), 5000);
  // It says what it waits for, and waits without new epochs.
  ASSERT_TRUE(Eventually(
      [&] {
        const CliResult shown = Cli("job " + id + " --coordinator " + address, tmp.path());
        return shown.out.find("waiting for topic purchases-later on " + bootstrap) !=
               std::string::npos;
      },
      milliseconds(5000)))
      << Cli("job " + id + " --coordinator " + address, tmp.path()).out;
  std::this_thread::sleep_for(milliseconds(3000));
  job = *client.Get(id);
  EXPECT_EQ(job.state(), v1::RUNNING) << job.DebugString();
  EXPECT_EQ(job.epoch(), 1) << "waiting burnt an epoch\n" << local.Log();

  // The producer creates the topic (4 partitions, auto-created).
  const std::vector<KafkaTestRecord> records = Purchases(20000);
  ASSERT_OK(ProduceRecords(bootstrap, "purchases-later", records, 60000));
  // The same records, read to their end in one process: the answer.
  {
    ParseResult ref = ParseJobSpec(
        WaitingJob("waits-reference", "purchases-later", true, (tmp.path() / "ref").string()));
    ASSERT_TRUE(ref.ok()) << ref.errors[0].ToString();
    RunOptions options;
    options.data_dir = (tmp.path() / "ref-data").string();
    options.embedded_bootstrap = bootstrap;
    auto pipeline = Pipeline::Create(ref.spec, options);
    ASSERT_OK(pipeline.status());
    ASSERT_OK((*pipeline)->Run());
  }
  const auto want = FinalResults((tmp.path() / "ref/out").string());
  ASSERT_GT(want.size(), 16u);
  // Unbounded input: the windows within the watermark's reach close (the
  // last ones stay open); each FINAL is the reference's, once.
  std::map<std::string, WindowResult> got;
  ASSERT_TRUE(Eventually(
      [&] {
        got = FinalResults((shared / "out").string());
        return got.size() >= want.size() - 16;  // 8 countries x the last 2 hours
      },
      milliseconds(60000)))
      << got.size() << " FINAL windows of " << want.size() << "\n"
      << local.Log();
  for (const auto& [key, w] : got) {
    auto it = want.find(key);
    ASSERT_NE(it, want.end()) << key;
    EXPECT_EQ(w.text, it->second.text) << key;
    EXPECT_EQ(w.finals, 1) << key;
  }
  job = *client.Get(id);
  EXPECT_EQ(job.state(), v1::RUNNING);
  EXPECT_EQ(job.epoch(), 1) << local.Log();
  for (const v1::TaskStatus& t : job.tasks()) EXPECT_EQ(t.activity().waiting_size(), 0);

  // Canceled, its series leave the workers' /metrics (within 30 s; the
  // next heartbeat stops its tasks).
  std::vector<std::string> worker_http;
  const std::string log = local.Log();
  const std::regex line(R"(caravela worker: grpc=\S+ http=(\S+))");
  for (auto it = std::sregex_iterator(log.begin(), log.end(), line); it != std::sregex_iterator();
       ++it) {
    worker_http.push_back((*it)[1]);
  }
  ASSERT_EQ(worker_http.size(), 2u) << log;
  const std::string job_label = absl::StrCat("job_id=\"", id, "\"");
  EXPECT_NE((HttpGet(worker_http[0], "/metrics") + HttpGet(worker_http[1], "/metrics"))
                .find(job_label + ",job_name=\"waits\",source=\"purchases\""),
            std::string::npos);
  ASSERT_OK(client.Cancel(id).status());
  const auto canceled_at = std::chrono::steady_clock::now();
  std::string left;
  EXPECT_TRUE(Eventually(
      [&] {
        left = HttpGet(worker_http[0], "/metrics") + HttpGet(worker_http[1], "/metrics");
        return left.find(job_label) == std::string::npos;
      },
      milliseconds(30000)))
      << left;
  std::printf("the canceled job's series left the workers after %lld ms\n",
              static_cast<long long>(MsSince(canceled_at)));
}

// `caravela run` of the revenue job over `topic` (not created) on an
// embedded broker of its own process (`caravela broker`), once it says it
// waits for the topic.
struct WaitingRun {
  std::unique_ptr<ChildProcess> broker;
  std::string bootstrap;
  std::unique_ptr<ChildProcess> run;
};

void StartWaitingRun(const fs::path& dir, const std::string& name, const std::string& topic,
                     WaitingRun* w) {
  w->broker = std::make_unique<ChildProcess>(std::vector<std::string>{CARAVELA_BINARY, "broker"},
                                             dir / "broker.log");
  w->bootstrap = w->broker->WaitFor(R"(listening on (\S+))", milliseconds(20000));
  ASSERT_FALSE(w->bootstrap.empty()) << w->broker->Log();
  std::string yaml = WaitingJob(name, topic, false, ".");
  const std::string from = absl::StrCat("kafka: {topic: ", topic, ", bounded: false}");
  yaml.replace(yaml.find(from), from.size(),
               absl::StrCat("kafka: {topic: ", topic, ", bounded: false, bootstrap: \"",
                            w->bootstrap, "\"}"));
  std::ofstream(dir / "job.yaml") << yaml;
  w->run = std::make_unique<ChildProcess>(
      std::vector<std::string>{CARAVELA_BINARY, "run", (dir / "job.yaml").string(), "--data-dir",
                               (dir / "data").string()},
      dir / "run.log");
  ASSERT_FALSE(
      w->run->WaitFor(absl::StrCat("(waiting for topic ", topic, ")"), milliseconds(10000)).empty())
      << w->run->Log();
}

// Ctrl-C while `caravela run` still waits for its topic ends it at once.
TEST(WaitingTopicTest, CtrlCWhileWaitingForTheTopicEndsTheRun) {
  TempDir tmp("waiting-topic-ctrlc", "CARAVELA_KEEP_TEST_DIRS", "waiting topic test");
  WaitingRun w;
  ASSERT_NO_FATAL_FAILURE(StartWaitingRun(tmp.path(), "waits-ctrlc", "never-created", &w));
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(w.run->Stop(SIGINT, milliseconds(5000)), 0) << w.run->Log();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, milliseconds(5000));
}

TEST(WaitingTopicTest, CaravelaRunWaitsReadsTheTopicOnceCreatedAndStopsOnCtrlC) {
  TempDir tmp("waiting-topic-run", "CARAVELA_KEEP_TEST_DIRS", "waiting topic test");
  WaitingRun w;
  ASSERT_NO_FATAL_FAILURE(StartWaitingRun(tmp.path(), "waits-run", "purchases-run", &w));
  ChildProcess& run = *w.run;
  std::this_thread::sleep_for(milliseconds(1500));
  ASSERT_TRUE(run.running()) << "it ended instead of waiting:\n" << run.Log();
  ASSERT_OK(ProduceRecords(w.bootstrap, "purchases-run", Purchases(5000), 60000));
  ASSERT_FALSE(run.WaitFor(R"((exists now: reading it))", milliseconds(10000)).empty())
      << run.Log();
  // Windows close as the records come in.
  ASSERT_TRUE(Eventually([&] { return !FinalResults((tmp.path() / "out").string()).empty(); },
                         milliseconds(30000)))
      << run.Log();
  EXPECT_EQ(run.Stop(SIGINT), 0) << run.Log();
}

}  // namespace
}  // namespace caravela
