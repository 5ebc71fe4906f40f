// Workers and the coordinator as processes (SPEC §8 "Services"): workers
// register and heartbeat; a SIGKILLed worker is declared dead after
// --worker-timeout; a SIGSTOPped one too, and after SIGCONT it learns it was
// given up and registers again under a new id (it never resumes the old
// one); coordinator and workers answer the gRPC health check with SERVING.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <sys/wait.h>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "coordinator/job_client.h"
#include "tests/child_process.h"
#include "tests/test_util.h"
#include "worker/connectors/kafka_test_util.h"
#include "worker/testing/apache_kafka.h"
#include "worker/testing/status_testing.h"

namespace caravela {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;
using milliseconds = std::chrono::milliseconds;

// Worker `i` (2 slots) of the coordinator at `address`, its data and log
// under `dir`.
std::unique_ptr<ChildProcess> StartWorker(const std::string& address, const fs::path& dir, int i) {
  return std::make_unique<ChildProcess>(
      std::vector<std::string>{CARAVELA_BINARY, "worker", "--coordinator", address, "--slots", "2",
                               "--data-dir", (dir / absl::StrCat("w", i)).string()},
      dir / absl::StrCat("worker-", i, ".log"));
}

// Worker id -> state, from the coordinator.
std::map<std::string, v1::WorkerState> States(const std::string& coordinator) {
  std::map<std::string, v1::WorkerState> out;
  auto workers = JobClient(coordinator, "").Workers();
  EXPECT_OK(workers.status());
  if (!workers.ok()) return out;
  for (const v1::WorkerInfo& w : *workers) out[w.id()] = w.state();
  return out;
}

TEST(ClusterMembershipTest, DeadWorkersAreDetectedAndPausedOnesRegisterAgain) {
  TempDir tmp("cluster", "CARAVELA_KEEP_TEST_DIRS", "cluster membership test");
  const fs::path& dir = tmp.path();
  ChildProcess coordinator({CARAVELA_BINARY, "coordinator", "--listen", "127.0.0.1:0", "--data-dir",
                            (dir / "coord").string(), "--worker-timeout", "1s"},
                           dir / "coordinator.log");
  const std::string address = coordinator.WaitFor(R"(grpc=(\S+))", milliseconds(20000));
  ASSERT_FALSE(address.empty()) << coordinator.Log();
  std::vector<std::unique_ptr<ChildProcess>> workers;
  std::vector<std::string> ids, addresses;
  for (int i = 0; i < 2; ++i) {
    workers.push_back(StartWorker(address, dir, i));
    ids.push_back(workers[i]->WaitFor(R"(id=(\S+))", milliseconds(20000)));
    addresses.push_back(workers[i]->WaitFor(R"(grpc=(\S+))", milliseconds(20000)));
    ASSERT_FALSE(ids[i].empty() || addresses[i].empty()) << workers[i]->Log();
  }
  EXPECT_NE(ids[0], ids[1]);
  auto states = States(address);
  EXPECT_EQ(states[ids[0]], v1::ALIVE);
  EXPECT_EQ(states[ids[1]], v1::ALIVE);
  // Both kinds of process serve the standard health check.
  for (const std::string& a : {address, addresses[0], addresses[1]}) {
    auto health = JobClient(a, "").Health();
    ASSERT_TRUE(health.ok()) << a << ": " << health.status();
    EXPECT_EQ(*health, "SERVING") << a;
  }
  // Alive while heartbeating, well past the timeout.
  std::this_thread::sleep_for(milliseconds(1500));
  EXPECT_EQ(States(address)[ids[0]], v1::ALIVE);

  const auto killed_at = std::chrono::steady_clock::now();
  workers[0]->Stop(SIGKILL);
  ASSERT_TRUE(Eventually([&] { return States(address)[ids[0]] == v1::DEAD; }, milliseconds(5000)));
  const int64_t detected_ms = MsSince(killed_at);
  std::printf("cluster membership: SIGKILLed worker declared dead after %lld ms\n",
              static_cast<long long>(detected_ms));
  // Not before its lease ran out: 1 s after its last heartbeat, which came
  // at most a quarter lease (250 ms) before the kill.
  EXPECT_GE(detected_ms, 700);

  ::kill(workers[1]->pid(), SIGSTOP);
  ASSERT_TRUE(Eventually([&] { return States(address)[ids[1]] == v1::DEAD; }, milliseconds(5000)));
  ::kill(workers[1]->pid(), SIGCONT);
  const std::string again = workers[1]->WaitFor(
      R"(registering again[\s\S]*id=(worker-[0-9]+)\s+coordinator)", milliseconds(10000));
  ASSERT_FALSE(again.empty()) << workers[1]->Log();
  EXPECT_NE(again, ids[1]);
  states = States(address);
  EXPECT_EQ(states[again], v1::ALIVE);
  EXPECT_EQ(states[ids[1]], v1::DEAD);  // the old id stays given up
  EXPECT_THAT(workers[1]->Log(), ::testing::HasSubstr("lease of " + ids[1] + " lost"));
}

// The coordinator's wall clock stepped (NTP, `date -s`; here
// CARAVELA_CLOCK_SKEW_FILE) does not move its worker timeouts: 2 h back, it
// still declares a SIGKILLed worker dead after the timeout; then 2 h ahead of
// the true time, it declares no heartbeating worker dead. (Measured on the
// wall clock, the step back had kept the killed worker alive for two hours,
// and the step ahead declared every worker dead at once.)
TEST(ClusterMembershipTest, ClockStepsNeitherHideDeadWorkersNorKillLiveOnes) {
  TempDir tmp("cluster", "CARAVELA_KEEP_TEST_DIRS", "cluster membership test");
  const fs::path& dir = tmp.path();
  const fs::path skew = dir / "coordinator-clock-skew";
  std::ofstream(skew) << 0;
  ChildProcess coordinator({CARAVELA_BINARY, "coordinator", "--listen", "127.0.0.1:0", "--data-dir",
                            (dir / "coord").string(), "--worker-timeout", "1s"},
                           dir / "coordinator.log", 0,
                           {"CARAVELA_CLOCK_SKEW_FILE=" + skew.string()});
  const std::string address = coordinator.WaitFor(R"(grpc=(\S+))", milliseconds(20000));
  ASSERT_FALSE(address.empty()) << coordinator.Log();
  std::vector<std::unique_ptr<ChildProcess>> workers;
  std::vector<std::string> ids;
  for (int i = 0; i < 2; ++i) {
    workers.push_back(StartWorker(address, dir, i));
    ids.push_back(workers[i]->WaitFor(R"(id=(\S+))", milliseconds(20000)));
    ASSERT_FALSE(ids[i].empty()) << workers[i]->Log();
  }
  constexpr int64_t kTwoHours = 2 * 3'600'000;
  // The kill, then at once the step back: the last heartbeat was on the
  // true time.
  const auto killed_at = std::chrono::steady_clock::now();
  workers[0]->Stop(SIGKILL);
  std::ofstream(skew) << -kTwoHours;
  EXPECT_TRUE(Eventually([&] { return States(address)[ids[0]] == v1::DEAD; }, milliseconds(5000)))
      << "a killed worker stayed alive after the clock stepped back";
  std::printf(
      "cluster membership: with the clock 2 h back, the killed worker declared dead "
      "after %lld ms\n",
      static_cast<long long>(MsSince(killed_at)));

  std::ofstream(skew) << kTwoHours;
  std::this_thread::sleep_for(milliseconds(2500));  // 2.5 worker timeouts
  EXPECT_EQ(States(address)[ids[1]], v1::ALIVE) << "declared dead when the clock stepped ahead";
  EXPECT_THAT(coordinator.Log(), Not(HasSubstr("worker " + ids[1] + " is dead")));
}

// A coordinator of another cluster (another data directory) takes the
// address of the one a worker was in: the worker does not pass for one of
// its workers (its heartbeats carry the old session, its registration the
// old cluster id); it stops and exits naming both clusters. The same
// coordinator restarted on its own data directory takes the worker back.
// (Seen in the suite: a worker of an ended test kept heartbeating to its
// coordinator's port, which another test's coordinator had got, and failed
// that test's job with its own --allow-path.)
TEST(ClusterMembershipTest, AWorkerOfAnotherClusterIsRefusedAndExits) {
  TempDir tmp("cluster-id", "CARAVELA_KEEP_TEST_DIRS", "cluster id test");
  const fs::path& dir = tmp.path();
  std::unique_ptr<ChildProcess> coordinator;
  int starts = 0;
  // Starts a coordinator on `listen` with data directory `data`; its address.
  auto start = [&](const std::string& listen, const std::string& data) {
    coordinator = std::make_unique<ChildProcess>(
        std::vector<std::string>{CARAVELA_BINARY, "coordinator", "--listen", listen, "--data-dir",
                                 (dir / data).string(), "--worker-timeout", "1s"},
        dir / absl::StrCat("coordinator-", ++starts, ".log"));
    return coordinator->WaitFor(R"(grpc=(\S+))", milliseconds(20000));
  };
  const std::string address = start("127.0.0.1:0", "a");
  ASSERT_FALSE(address.empty()) << coordinator->Log();
  ChildProcess worker({CARAVELA_BINARY, "worker", "--coordinator", address, "--slots", "2",
                       "--data-dir", (dir / "w").string()},
                      dir / "worker.log");
  const std::string id = worker.WaitFor(R"(id=(\S+))", milliseconds(20000));
  ASSERT_FALSE(id.empty()) << worker.Log();

  // Restarted on its own data directory: the same cluster, the worker stays.
  coordinator->Stop(SIGKILL);
  ASSERT_FALSE(start(address, "a").empty()) << coordinator->Log();
  ASSERT_TRUE(Eventually([&] { return States(address)[id] == v1::ALIVE; }, milliseconds(10000)))
      << worker.Log();

  // Another cluster at the same address: refused, and the worker exits.
  coordinator->Stop(SIGKILL);
  ASSERT_FALSE(start(address, "b").empty()) << coordinator->Log();
  ASSERT_TRUE(worker.WaitUntil(std::chrono::steady_clock::now() + milliseconds(15000)))
      << worker.Log();
  EXPECT_EQ(worker.ExitCode(), 1) << worker.Log();
  EXPECT_THAT(worker.Log(), ::testing::AllOf(::testing::HasSubstr("refused this worker"),
                                             ::testing::HasSubstr("restart the worker")));
  EXPECT_TRUE(States(address).empty());
  EXPECT_THAT(coordinator->Log(), ::testing::HasSubstr("refused"));
}

}  // namespace
}  // namespace caravela

namespace caravela {
namespace {

// `caravela local`: broker and coordinator in one process, N workers as
// children with ids worker-1..N, their data in worker-1..N and their own
// /metrics, all behind the token of --token-file; a worker killed is logged
// and started again; all gone after SIGTERM.
std::map<std::string, v1::WorkerState> States(const std::string& coordinator,
                                              const std::string& token) {
  std::map<std::string, v1::WorkerState> out;
  auto workers = JobClient(coordinator, token).Workers();
  if (!workers.ok()) return out;
  for (const v1::WorkerInfo& w : *workers) out[w.id()] = w.state();
  return out;
}

int Alive(const std::map<std::string, v1::WorkerState>& states) {
  int n = 0;
  for (const auto& [id, state] : states) n += state == v1::ALIVE ? 1 : 0;
  return n;
}

// The pids of the processes whose parent is `parent`.
std::vector<pid_t> Children(pid_t parent) {
  std::vector<pid_t> out;
  for (const auto& e : fs::directory_iterator("/proc")) {
    pid_t pid = 0;
    if (!absl::SimpleAtoi(e.path().filename().string(), &pid)) continue;
    const std::string stat = ReadFile(e.path() / "stat");
    // pid (comm) state ppid ...: comm may hold spaces, so after the last ')'.
    const size_t close = stat.rfind(')');
    if (close == std::string::npos) continue;
    std::vector<std::string> fields = absl::StrSplit(stat.substr(close + 2), ' ');
    pid_t ppid = 0;
    if (fields.size() > 1 && absl::SimpleAtoi(fields[1], &ppid) && ppid == parent) {
      out.push_back(pid);
    }
  }
  return out;
}

TEST(ClusterMembershipTest, LocalStartsACoordinatorAndItsWorkers) {
  TempDir tmp("local", "CARAVELA_KEEP_TEST_DIRS", "caravela local test");
  const fs::path& dir = tmp.path();
  std::ofstream(dir / "token") << "l0cal\n";
  const std::string token = "l0cal";
  ChildProcess local({CARAVELA_BINARY, "local", "--workers", "2", "--data-dir",
                      (dir / "cluster").string(), "--token-file", (dir / "token").string()},
                     dir / "local.log");
  const std::vector<std::string> got = local.WaitForMatch(
      R"(caravela local: broker=(\S+) coordinator=(\S+) http=\S+ workers=2)", milliseconds(20000));
  ASSERT_EQ(got.size(), 3u) << local.Log();
  const std::string& coordinator = got[2];
  ASSERT_TRUE(
      Eventually([&] { return Alive(States(coordinator, token)) == 2; }, milliseconds(10000)))
      << local.Log();
  EXPECT_THAT(States(coordinator, token),
              ::testing::ElementsAre(::testing::Key("worker-1"), ::testing::Key("worker-2")));
  EXPECT_TRUE(fs::is_directory(dir / "cluster" / "worker-1"));
  EXPECT_TRUE(fs::is_directory(dir / "cluster" / "worker-2"));
  EXPECT_EQ(JobClient(coordinator, "").Workers().status().code(),
            absl::StatusCode::kUnauthenticated);

  // Each worker serves its /metrics, behind the same token.
  const std::vector<std::string> http = local.WaitForMatch(
      R"(caravela worker: grpc=\S+ http=(127\.0\.0\.1:\d+))", milliseconds(5000));
  ASSERT_EQ(http.size(), 2u) << local.Log();
  httplib::Client metrics("http://" + http[1]);
  auto anonymous = metrics.Get("/metrics");
  ASSERT_TRUE(anonymous);
  EXPECT_EQ(anonymous->status, 401);
  auto scraped = metrics.Get("/metrics", {{"Authorization", "Bearer " + token}});
  ASSERT_TRUE(scraped);
  EXPECT_EQ(scraped->status, 200);
  EXPECT_THAT(scraped->body, HasSubstr("caravela_"));

  // A worker killed is started again: it registers anew (worker-3), the
  // killed id goes DEAD once its lease ends.
  const std::vector<pid_t> children = Children(local.pid());
  ASSERT_EQ(children.size(), 2u);
  ASSERT_EQ(::kill(children[0], SIGKILL), 0);
  ASSERT_TRUE(Eventually(
      [&] {
        auto states = States(coordinator, token);
        return states.count("worker-3") > 0 && states["worker-3"] == v1::ALIVE;
      },
      milliseconds(20000)))
      << local.Log();
  EXPECT_THAT(local.Log(), ::testing::ContainsRegex(
                               absl::StrCat(R"(worker-[0-9] \(pid )", children[0],
                                            R"(\) was killed by signal 9; starting it again)")));
  EXPECT_EQ(Children(local.pid()).size(), 2u);

  std::vector<std::string> workers;
  auto listed = JobClient(coordinator, token).Workers();
  ASSERT_OK(listed.status());
  for (const v1::WorkerInfo& w : *listed) workers.push_back(w.address());
  EXPECT_EQ(local.Stop(SIGTERM), 0) << local.Log();
  for (const std::string& a : workers) {
    EXPECT_FALSE(JobClient(a, "", 500).Health().ok()) << "worker " << a << " outlived local";
  }
}

// True once process `pid` is gone or a zombie (an orphan's zombie waits for
// whatever reaps it here).
bool Gone(pid_t pid) {
  std::ifstream stat(absl::StrCat("/proc/", pid, "/stat"));
  std::string line;
  if (!std::getline(stat, line)) return true;
  const size_t paren = line.rfind(')');
  return paren == std::string::npos || line.substr(paren + 2, 1) == "Z";
}

// `caravela local` SIGKILLed (no chance to stop its workers): its workers
// leave by themselves instead of staying behind, looking for the coordinator.
TEST(ClusterMembershipTest, LocalKilledTakesItsWorkersWithIt) {
  TempDir tmp("local-killed", "CARAVELA_KEEP_TEST_DIRS", "caravela local test");
  const fs::path& dir = tmp.path();
  ChildProcess local(
      {CARAVELA_BINARY, "local", "--workers", "2", "--data-dir", (dir / "cluster").string()},
      dir / "local.log");
  ASSERT_EQ(
      local.WaitForMatch(R"(caravela local: broker=\S+ coordinator=(\S+))", milliseconds(20000))
          .size(),
      2u)
      << local.Log();
  std::vector<pid_t> children;
  ASSERT_TRUE(Eventually(
      [&] {
        children = Children(local.pid());
        return children.size() == 2;
      },
      milliseconds(10000)))
      << local.Log();
  ASSERT_EQ(::kill(local.pid(), SIGKILL), 0);
  for (pid_t child : children) {
    EXPECT_TRUE(Eventually([&] { return Gone(child); }, milliseconds(10000)))
        << "worker pid " << child << " outlived caravela local (SIGKILL)";
  }
}

}  // namespace
}  // namespace caravela

namespace caravela {
namespace {

// `caravela local` runs a submitted job end to end: its embedded broker
// carries the input and the exchanges (the coordinator creates the exchange
// topics there, since that broker serves no CreateTopics to the workers),
// two worker processes run the 6 tasks.
// Submits `yaml` and waits (up to a minute) until the job FINISHED or
// FAILED; the job then, or why not.
absl::StatusOr<v1::Job> SubmitAndWaitForTheEnd(JobClient& client, const std::string& yaml) {
  absl::StatusOr<v1::SubmitJobResponse> submitted = client.Submit(yaml, 0);
  if (!submitted.ok()) return submitted.status();
  if (submitted->job_id().empty()) return absl::InvalidArgumentError(submitted->DebugString());
  const std::string id = submitted->job_id();
  absl::StatusOr<v1::Job> job;
  Eventually(
      [&] {
        job = client.Get(id);
        return job.ok() && (job->state() == v1::FINISHED || job->state() == v1::FAILED);
      },
      milliseconds(60000));
  if (job.ok() && job->state() != v1::FINISHED && job->state() != v1::FAILED) {
    return absl::DeadlineExceededError(
        absl::StrCat("job ", id, " did not end in a minute: ", job->DebugString()));
  }
  return job;
}

TEST(ClusterMembershipTest, LocalRunsASubmittedJob) {
  TempDir tmp("local-job", "CARAVELA_KEEP_TEST_DIRS", "caravela local job test");
  const fs::path& dir = tmp.path();
  ChildProcess local(
      {CARAVELA_BINARY, "local", "--workers", "2", "--data-dir", (dir / "cluster").string(),
       "--allow-path", dir.string(), "--http", "127.0.0.1:0"},
      dir / "local.log");
  const std::vector<std::string> got =
      local.WaitForMatch(R"(caravela local: broker=(\S+) coordinator=(\S+) http=(\S+) workers=2)",
                         milliseconds(20000));
  ASSERT_EQ(got.size(), 4u) << local.Log();
  const std::string &broker = got[1], &coordinator = got[2];
  EXPECT_NE(got[3], "off");
  // Input on a topic the broker auto-creates (4 partitions).
  std::vector<std::pair<int32_t, std::string>> lines;
  lines.reserve(2000);
  for (int i = 0; i < 2000; ++i) {
    lines.emplace_back(i % 4,
                       absl::StrCat(R"({"event_id":"e)", i % 1900, R"(","user_id":"u)", i % 37,
                                    R"(","country":"c)", i % 5, R"(","amount":1,"ts":)",
                                    1'700'000'000'000LL + i * 1000, "}"));
    // (partition i % 4 of the auto-created topic)
  }
  ASSERT_OK(ProduceLines(broker, "purchases", lines, 30000));
  const std::string yaml = absl::StrCat(R"(apiVersion: caravela/v1
kind: Job
metadata: {name: local-revenue}
spec:
  parallelism: 2
  checkpoint: {interval: 200ms}
  sources:
    - name: purchases
      kafka: {topic: purchases, bounded: true}
      event_time: {field: ts, format: epoch_ms}
  operators:
    - name: unique
      dedup: {from: purchases, id: event_id, retention: 1h}
    - name: revenue
      window: {from: unique, tumbling: 1h, group_by: [country], aggregates: [{as: orders, count: "*"}]}
  sinks:
    - {from: revenue, file: {path: )",
                                        (dir / "out/revenue.jsonl").string(), R"(}}
)");
  JobClient client(coordinator, "");
  absl::StatusOr<v1::Job> job = SubmitAndWaitForTheEnd(client, yaml);
  ASSERT_TRUE(job.ok()) << job.status() << local.Log();
  ASSERT_EQ(job->state(), v1::FINISHED) << job->DebugString() << local.Log();
  // 1900 distinct events, every FINAL count summed.
  int64_t orders = 0;
  int finals = 0;
  for (const std::string& line : ReadParts(dir / "out", "revenue")) {
    if (line.find(R"("state":"FINAL")") == std::string::npos) continue;
    ++finals;
    const size_t at = line.find(R"("orders":)");
    ASSERT_NE(at, std::string::npos) << line;
    orders += std::stoll(line.substr(at + 9));
  }
  EXPECT_EQ(orders, 1900);
  EXPECT_GT(finals, 0);
  EXPECT_EQ(local.Stop(SIGTERM), 0) << local.Log();
}

// `caravela local --bootstrap` against a real Apache Kafka (the ApacheKafka
// fixture): no embedded broker; the workers read, exchange through topics
// (spec.exchange: kafka, created on that Kafka when the job is submitted,
// with room for its max_parallelism) and write to it.
TEST(ClusterMembershipTest, LocalRunsASubmittedJobOnAnExistingKafka) {
  TempDir tmp("local-kafka", "CARAVELA_KEEP_TEST_DIRS", "caravela local --bootstrap test");
  const fs::path& dir = tmp.path();
  absl::StatusOr<std::unique_ptr<ApacheKafka>> kafka = ApacheKafka::Start(1, 4);
  ASSERT_OK(kafka.status());
  const std::string bootstrap = (*kafka)->bootstrap();
  ASSERT_OK((*kafka)->CreateTopic("purchases", 4));
  std::vector<std::pair<int32_t, std::string>> lines;
  lines.reserve(2000);
  for (int i = 0; i < 2000; ++i) {
    lines.emplace_back(i % 4,
                       absl::StrCat(R"({"event_id":"e)", i % 1900, R"(","user_id":"u)", i % 37,
                                    R"(","country":"c)", i % 5, R"(","amount":1,"ts":)",
                                    1'700'000'000'000LL + i * 1000, "}"));
  }
  ASSERT_OK(ProduceLines(bootstrap, "purchases", lines, 30000));

  ChildProcess local({CARAVELA_BINARY, "local", "--workers", "2", "--bootstrap", bootstrap,
                      "--data-dir", (dir / "cluster").string(), "--allow-path", dir.string()},
                     dir / "local.log");
  const std::vector<std::string> got = local.WaitForMatch(
      R"(caravela local: broker=(\S+) coordinator=(\S+) http=\S+ workers=2 .* kafka=existing)",
      milliseconds(20000));
  ASSERT_EQ(got.size(), 3u) << local.Log();
  EXPECT_EQ(got[1], bootstrap);
  const std::string yaml = absl::StrCat(R"(apiVersion: caravela/v1
kind: Job
metadata: {name: local-kafka}
spec:
  parallelism: 2
  max_parallelism: 8
  exchange: kafka
  checkpoint: {interval: 200ms}
  sources:
    - name: purchases
      kafka: {topic: purchases, bounded: true}
      event_time: {field: ts, format: epoch_ms}
  operators:
    - name: unique
      dedup: {from: purchases, id: event_id, retention: 1h}
    - name: revenue
      window: {from: unique, tumbling: 1h, group_by: [country], aggregates: [{as: orders, count: "*"}]}
  sinks:
    - {from: revenue, file: {path: )",
                                        (dir / "out/revenue.jsonl").string(), R"(}}
    - {from: revenue, kafka: {topic: revenue}}
)");
  JobClient client(got[2], "");
  absl::StatusOr<v1::Job> job = SubmitAndWaitForTheEnd(client, yaml);
  ASSERT_TRUE(job.ok()) << job.status() << local.Log();
  ASSERT_EQ(job->state(), v1::FINISHED) << job->DebugString() << local.Log();
  EXPECT_EQ(job->epoch(), 1) << "the job restarted:\n" << local.Log();
  // 1900 distinct events in the FINAL counts of the file sink and of the
  // Kafka sink's topic.
  int64_t orders = 0;
  for (const std::string& line : ReadParts(dir / "out", "revenue")) {
    if (line.find(R"("state":"FINAL")") == std::string::npos) continue;
    const size_t at = line.find(R"("orders":)");
    ASSERT_NE(at, std::string::npos) << line;
    orders += std::stoll(line.substr(at + 9));
  }
  EXPECT_EQ(orders, 1900);
  absl::StatusOr<std::vector<KafkaConsumedRecord>> topic = ConsumeAll(bootstrap, "revenue", 10000);
  ASSERT_OK(topic.status());
  int64_t topic_orders = 0;
  for (const KafkaConsumedRecord& r : *topic) {
    if (r.value.find(R"("state":"FINAL")") == std::string::npos) continue;
    topic_orders += std::stoll(r.value.substr(r.value.find(R"("orders":)") + 9));
  }
  EXPECT_EQ(topic_orders, 1900);
  // The exchange topics live on that Kafka, with max_parallelism partitions.
  EXPECT_OK((*kafka)->WaitForLeaders("caravela.local-kafka.unique", 8, std::chrono::seconds(5)));
  EXPECT_OK((*kafka)->WaitForLeaders("caravela.local-kafka.revenue", 8, std::chrono::seconds(5)));
  // (EmbeddedBroker::Start logs "embedded broker: bootstrap ...".)
  EXPECT_THAT(local.Log(), ::testing::Not(::testing::HasSubstr("embedded broker: bootstrap")));
  EXPECT_EQ(local.Stop(SIGTERM), 0) << local.Log();
}

// Job YAML from the network is untrusted on every worker, not only at the
// coordinator: a coordinator allowing all of the test dir admits a job
// whose file sink lies outside the one directory its worker allows; the
// worker refuses to prepare it, the job FAILS saying why, and nothing is
// written there.
TEST(ClusterMembershipTest, AWorkerRefusesFilesOutsideItsAllowedPaths) {
  TempDir tmp("worker-paths", "CARAVELA_KEEP_TEST_DIRS", "worker allowed paths test");
  const fs::path& dir = tmp.path();
  fs::create_directories(dir / "worker-files");
  std::ofstream(dir / "worker-files/in.jsonl") << R"({"id":"a","ts":1700000000000})"
                                               << "\n";
  ChildProcess coordinator({CARAVELA_BINARY, "coordinator", "--listen", "127.0.0.1:0", "--data-dir",
                            (dir / "coordinator").string(), "--allow-path", dir.string()},
                           dir / "coordinator.log");
  const std::string address = coordinator.WaitFor(R"(grpc=(\S+))", milliseconds(20000));
  ASSERT_FALSE(address.empty()) << coordinator.Log();
  ChildProcess worker(
      {CARAVELA_BINARY, "worker", "--coordinator", address, "--slots", "4", "--data-dir",
       (dir / "worker").string(), "--allow-path", (dir / "worker-files").string()},
      dir / "worker.log");
  ASSERT_FALSE(worker.WaitFor(R"(id=(\S+))", milliseconds(20000)).empty()) << worker.Log();
  const std::string yaml = absl::StrCat(R"(apiVersion: caravela/v1
kind: Job
metadata: {name: escape}
spec:
  sources:
    - name: events
      file: {path: )",
                                        (dir / "worker-files/in.jsonl").string(), R"(}
      event_time: {field: ts, format: epoch_ms}
  operators:
    - name: unique
      dedup: {from: events, id: id, retention: 1h}
  sinks:
    - {from: unique, file: {path: )",
                                        (dir / "elsewhere/out.jsonl").string(), R"(}}
)");
  JobClient client(address, "");
  absl::StatusOr<v1::Job> job = SubmitAndWaitForTheEnd(client, yaml);
  ASSERT_TRUE(job.ok()) << job.status() << coordinator.Log() << worker.Log();
  EXPECT_EQ(job->state(), v1::FAILED) << job->DebugString();
  EXPECT_THAT(job->message(), ::testing::HasSubstr("refused by this worker"));
  EXPECT_THAT(job->message(), ::testing::HasSubstr("spec.sinks[0].file.path"));
  EXPECT_FALSE(fs::exists(dir / "elsewhere")) << "the refused job wrote outside the allowed path";
}

}  // namespace
}  // namespace caravela
