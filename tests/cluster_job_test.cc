// Jobs on a cluster of processes (SPEC §8 "Services"): a broker, a
// coordinator and three worker processes on loopback, a real PostgreSQL; a
// job (dedup, hourly windows and an interval join with a second stream;
// three exchanges) submitted over gRPC runs as 15 tasks in 5 stages over the
// workers (exchanges streamed between workers over gRPC, or through Kafka
// topics with spec.exchange: kafka; checkpoints coordinated by the
// coordinator in shared storage) and writes files, a Kafka changelog topic
// and a PostgreSQL table. Its FINAL results equal the single-process answer
// in all three, also when a worker is SIGKILLed mid-stream (its tasks restart
// elsewhere from the last complete checkpoint with a new epoch) and when one
// is SIGSTOPped until its tasks moved and then SIGCONTed (it stops its tasks;
// the PostgreSQL epoch fence keeps its writes out).
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <libpq-fe.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "bench/purchase_generator.h"
#include "common/job_plan.h"
#include "common/job_spec.h"
#include "common/json.h"
#include "common/time_util.h"
#include "coordinator/job_client.h"
#include "coordinator/job_state.h"
#include "tests/child_process.h"
#include "tests/cluster_fixture.h"
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
namespace {

TEST_F(ClusterJobTest, ThreeWorkersGiveTheSingleProcessAnswer) {
  const std::string id = Submit();
  ASSERT_FALSE(id.empty());
  // The tasks report their consumer lag while they read.
  int64_t max_lag = 0;
  ASSERT_TRUE(Eventually(
      [&] {
        const v1::Job j = Get(id);
        int64_t lag = 0;
        for (const v1::TaskStatus& t : j.tasks()) lag += t.consumer_lag();
        max_lag = std::max(max_lag, lag);
        return j.state() == v1::FINISHED;
      },
      milliseconds(120000)))
      << Get(id).DebugString() << Logs();
  EXPECT_GT(max_lag, 0);
  const v1::Job job = Get(id);
  for (const v1::TaskStatus& t : job.tasks()) EXPECT_EQ(t.consumer_lag(), 0) << t.DebugString();
  // Per task its source partitions (p % 3 == index, in the stage reading
  // the source) and their final positions: together every record produced.
  std::map<std::string, int64_t> read;
  for (const v1::TaskStatus& t : job.tasks()) {
    for (const v1::SourcePartitionStatus& p : t.sources()) {
      EXPECT_EQ(p.partition() % kParallelism, t.index()) << t.DebugString();
      EXPECT_EQ(p.lag(), 0) << t.DebugString();
      read[p.source()] += p.offset();
    }
  }
  EXPECT_EQ(read, produced_);
  // The last checkpoint's source offsets are in the job's consumer group,
  // where lag tools look: everything read.
  for (const auto& [topic, n] : produced_) {
    auto committed =
        CommittedOffsets(bootstrap_, "caravela-cluster-revenue", topic, kSourcePartitions);
    ASSERT_OK(committed.status());
    int64_t total = 0;
    for (int64_t o : *committed) total += std::max<int64_t>(o, 0);
    EXPECT_EQ(total, n) << topic;
  }
  EXPECT_EQ(job.epoch(), 1);
  EXPECT_GT(job.last_checkpoint(), 0);
  // Every worker ran tasks of it.
  std::set<std::string> used;
  for (const v1::TaskStatus& t : job.tasks()) used.insert(t.worker());
  EXPECT_EQ(used.size(), 3u) << job.DebugString();
  for (const v1::TaskStatus& t : job.tasks())
    EXPECT_EQ(t.state(), v1::TASK_DONE) << t.DebugString();
  // A task fed only by an exchange counts what came in through it (its
  // records_in, from sources, is 0); every such stage got records (one of
  // its tasks may get none: few keys).
  std::map<int, int64_t> fed;  // stage -> records in through exchanges
  for (const v1::TaskStatus& t : job.tasks()) {
    if (!t.sources().empty()) continue;
    EXPECT_EQ(t.records_in(), 0) << t.DebugString();
    fed[t.stage()] += t.activity().exchange_records_in();
  }
  EXPECT_FALSE(fed.empty()) << job.DebugString();
  for (const auto& [stage, n] : fed) EXPECT_GT(n, 0) << "stage " << stage;
  // `caravela job ID`: one row per task with its worker.
  ChildProcess cli({CARAVELA_BINARY, "job", id, "--coordinator", address_}, dir_ / "job.out");
  EXPECT_EQ(cli.Stop(0, milliseconds(10000)), 0);
  const std::string table = cli.Log();
  EXPECT_THAT(table, ::testing::HasSubstr("FINISHED"));
  EXPECT_THAT(table, ::testing::HasSubstr("RECORDS_IN"));
  EXPECT_THAT(table, ::testing::HasSubstr("purchases:0,3"));
  EXPECT_THAT(table, ::testing::HasSubstr("shipments:1,4"));
  for (const std::string& w : ids_) EXPECT_THAT(table, ::testing::HasSubstr(w));
  ExpectTheAnswer(job);
  // The records crossed stages over gRPC streams, not through Kafka.
  EXPECT_EQ(ExchangeTopicMessages(), 0);
}

TEST_F(ClusterJobTest, KafkaExchangesGiveTheSameAnswer) {
  exchange_ = "kafka";  // durable shuffles through caravela.<job>.<operator> topics
  const std::string id = Submit();
  ASSERT_FALSE(id.empty());
  ASSERT_TRUE(Eventually([&] { return Get(id).state() == v1::FINISHED; }, milliseconds(120000)))
      << Get(id).DebugString() << Logs();
  ExpectTheAnswer(Get(id));
  EXPECT_GT(ExchangeTopicMessages(), 0);
}

// One writer per output (docs/semantics.md): a second job naming the
// outputs of a running one (the same YAML under another name: its files, its
// PostgreSQL table, its dead letter) is refused at submit, each output named
// with the job that writes it; the first job's output stays exact. Once the
// first has ended, the second may write them: it runs under a higher epoch
// and takes the files' fences over.
TEST_F(ClusterJobTest, ASecondJobWritingTheSameOutputsIsRefusedWhileTheFirstRuns) {
  const std::string id = Submit();
  ASSERT_FALSE(id.empty());
  const std::string other = absl::StrReplaceAll(Yaml(), {{"cluster-revenue", "other-revenue"}});
  auto refused = JobClient(address_, "").Submit(other, kParallelism);
  ASSERT_OK(refused.status());
  EXPECT_TRUE(refused->job_id().empty());
  std::string errors;
  for (const v1::ValidationError& e : refused->errors()) {
    absl::StrAppend(&errors, e.path(), ": ", e.message(), "\n");
  }
  const std::string revenue_path = (dir_ / "cluster/out/revenue.jsonl").string();
  EXPECT_THAT(errors, ::testing::HasSubstr(absl::StrCat("spec.sinks[0].file: file ", revenue_path,
                                                        " is written by job ", id)))
      << errors;
  EXPECT_THAT(errors, ::testing::HasSubstr("postgres table revenue")) << errors;
  EXPECT_THAT(errors, ::testing::HasSubstr("spec.dead_letter.path")) << errors;
  // The CLI says the same and exits 2.
  const fs::path other_file = dir_ / "other.yaml";
  std::ofstream(other_file) << other;
  const CliResult cli =
      Cli(absl::StrCat("submit ", other_file.string(), " --coordinator ", address_), dir_);
  EXPECT_EQ(cli.code, 2) << cli.out;
  EXPECT_THAT(cli.out, ::testing::HasSubstr(absl::StrCat(revenue_path, " is written by job ", id)));

  ASSERT_TRUE(Eventually([&] { return Get(id).state() == v1::FINISHED; }, milliseconds(120000)))
      << Get(id).DebugString() << Logs();
  ExpectTheAnswer(Get(id));

  // Ended: the output is free. The second job starts from nothing (its file
  // sinks truncate what the first committed) and gives the same answer.
  auto second = JobClient(address_, "").Submit(other, kParallelism);
  ASSERT_OK(second.status());
  ASSERT_EQ(second->errors_size(), 0) << second->DebugString();
  const std::string id2 = second->job_id();
  ASSERT_TRUE(Eventually([&] { return Get(id2).state() == v1::FINISHED; }, milliseconds(120000)))
      << Get(id2).DebugString() << Logs();
  EXPECT_GT(Get(id2).epoch(), Get(id).epoch());
  const auto finals = FinalResults((dir_ / "cluster/out").string());
  ExpectSameFinals(reference_, finals);
  ExpectTheBruteForceAnswer(finals);
}

TEST_F(ClusterJobTest, KilledWorkersTasksMoveAndTheAnswerStaysExact) {
  std::string id;
  ASSERT_NO_FATAL_FAILURE(SubmitAndRunToACheckpoint(&id));
  const auto killed_at = std::chrono::steady_clock::now();
  workers_[0]->Stop(SIGKILL);
  // A new epoch on the two live workers, running, writing again.
  ASSERT_TRUE(Eventually(
      [&] {
        const v1::Job j = Get(id);
        return j.epoch() >= 2 && j.state() == v1::RUNNING;
      },
      milliseconds(30000)))
      << Get(id).DebugString() << Logs();
  const int64_t running_ms = MsSince(killed_at);
  int64_t output_ms = -1;
  Eventually(
      [&] {
        const v1::Job j = Get(id);
        for (const v1::TaskStatus& t : j.tasks()) {
          if (t.records_out() > 0) return true;
        }
        return j.state() == v1::FINISHED;
      },
      milliseconds(30000));
  output_ms = MsSince(killed_at);
  std::printf(
      "cluster failover: worker SIGKILLed; new epoch running after %lld ms, first output of "
      "the new owners after %lld ms (worker timeout 2000 ms)\n",
      static_cast<long long>(running_ms), static_cast<long long>(output_ms));
  const v1::Job moved = Get(id);
  for (const v1::TaskStatus& t : moved.tasks()) EXPECT_NE(t.worker(), ids_[0]);
  ASSERT_TRUE(Eventually([&] { return Get(id).state() == v1::FINISHED; }, milliseconds(120000)))
      << Get(id).DebugString() << Logs();
  ExpectTheAnswer(Get(id));
}

TEST_F(ClusterJobTest, PausedWorkerStopsItsTasksAndItsWritesDoNotLand) {
  std::string id;
  ASSERT_NO_FATAL_FAILURE(SubmitAndRunToACheckpoint(&id));
  ::kill(workers_[0]->pid(), SIGSTOP);
  // Its tasks move: a new epoch is placed on the other two workers.
  ASSERT_TRUE(Eventually([&] { return Get(id).epoch() >= 2; }, milliseconds(30000)))
      << Get(id).DebugString() << Logs();
  const int64_t moved_epoch = Get(id).epoch();
  const v1::Job moved = Get(id);
  for (const v1::TaskStatus& t : moved.tasks()) EXPECT_NE(t.worker(), ids_[0]);
  // Let the new owners run a while (a file sink whose fence lock the paused
  // worker holds mid-commit waits for it: resuming releases it).
  Eventually([&] { return Get(id).state() == v1::RUNNING; }, milliseconds(3000));
  const std::string resumed_at = PostgresNow();
  ::kill(workers_[0]->pid(), SIGCONT);
  // It notices that its lease is gone and stops every task.
  EXPECT_FALSE(
      workers_[0]
          ->WaitFor(
              R"((stopping job cluster-revenue-1 epoch 1: (lease lost|the coordinator gave this worker up)))",
              milliseconds(10000))
          .empty())
      << workers_[0]->Log();
  ASSERT_TRUE(Eventually([&] { return Get(id).state() == v1::FINISHED; }, milliseconds(120000)))
      << Get(id).DebugString() << Logs();
  const v1::Job job = Get(id);
  for (const v1::TaskStatus& t : job.tasks()) EXPECT_NE(t.worker(), ids_[0]);
  // No row of the paused worker's epoch was written after it resumed (a
  // later epoch may have come on a loaded machine; its rows are fine).
  ExpectNoRowOfAnEpochBefore(moved_epoch, resumed_at);
  ExpectTheAnswer(job);
}

// The sum of a /metrics family's samples on worker i (its tasks only).
double MetricSum(const std::string& address, const std::string& family) {
  double sum = 0;
  std::istringstream in(HttpGet(address, "/metrics"));
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(family + "{", 0) != 0 && line.rfind(family + " ", 0) != 0) continue;
    sum += std::stod(line.substr(line.rfind(' ') + 1));
  }
  return sum;
}

// A process's resident memory (VmRSS) in KiB; 0 if unknown.
int64_t RssKib(pid_t pid) {
  std::istringstream in(ReadFile(absl::StrCat("/proc/", pid, "/status")));
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stoll(line.substr(6));
  }
  return 0;
}

// Back-pressure over the network exchange: a worker paused for 15 s (shorter
// than the lease, so its tasks stay) stops reading its streams. The producers
// on the other workers stop within their credit, their sources stop polling
// although input is left, and their memory stays flat. Resumed, the job ends
// with the single-process answer, each FINAL once.
class ClusterBackPressureTest : public ClusterJobTest {
 protected:
  ClusterBackPressureTest() { worker_timeout_ = "60s"; }
};

TEST_F(ClusterBackPressureTest, APausedConsumerHoldsItsProducersWithinTheirCredit) {
  auto sources = [&] {
    return MetricSum(http_[1], "caravela_source_partition_offset") +
           MetricSum(http_[2], "caravela_source_partition_offset");
  };
  // Paused as soon as the other workers' sources read: most input is left.
  const std::string id = Submit();
  ASSERT_FALSE(id.empty());
  ASSERT_TRUE(Eventually([&] { return sources() > 0; }, milliseconds(60000)))
      << Get(id).DebugString() << Logs();
  // A job's series carry its id and name (the assignment's job_name): the
  // agent's partition gauges and every series its tasks count.
  const std::string metrics = HttpGet(http_[1], "/metrics") + HttpGet(http_[2], "/metrics");
  const std::string job_labels = absl::StrCat("{job_id=\"", id, "\",job_name=\"cluster-revenue\",");
  for (const char* family : {"caravela_source_partition_offset", "caravela_records_in_total",
                             "caravela_operator_records_in_total"}) {
    EXPECT_THAT(metrics, ::testing::HasSubstr(family + job_labels)) << metrics;
  }
  ::kill(workers_[0]->pid(), SIGSTOP);
  std::this_thread::sleep_for(milliseconds(3000));  // credit spent, sources held
  const double held_at = sources();
  const double lag = MetricSum(http_[1], "caravela_source_partition_lag_records") +
                     MetricSum(http_[2], "caravela_source_partition_lag_records");
  const int64_t rss_held[2] = {RssKib(workers_[1]->pid()), RssKib(workers_[2]->pid())};
  int64_t rss_max[2] = {rss_held[0], rss_held[1]};
  for (int i = 0; i < 24; ++i) {  // 12 s more
    std::this_thread::sleep_for(milliseconds(500));
    for (int w = 0; w < 2; ++w) rss_max[w] = std::max(rss_max[w], RssKib(workers_[w + 1]->pid()));
  }
  const double held_until = sources();
  const v1::Job paused = Get(id);
  ::kill(workers_[0]->pid(), SIGCONT);
  std::printf(
      "back-pressure: sources of workers 1-2 at offset sum %.0f after 3 s paused, %.0f after 15 s "
      "(lag %.0f records left); RSS KiB w1 %lld -> max %lld, w2 %lld -> max %lld\n",
      held_at, held_until, lag, static_cast<long long>(rss_held[0]),
      static_cast<long long>(rss_max[0]), static_cast<long long>(rss_held[1]),
      static_cast<long long>(rss_max[1]));
  EXPECT_NE(paused.state(), v1::FINISHED);
  EXPECT_GT(lag, 0) << "the sources had read all their input before the pause: nothing to hold";
  EXPECT_EQ(held_until, held_at) << "sources kept polling while a consumer was paused";
  for (int w = 0; w < 2; ++w) {
    EXPECT_LT(rss_max[w] - rss_held[w], 16 * 1024) << "worker " << w + 1 << " grew while held";
  }
  ASSERT_TRUE(Eventually([&] { return Get(id).state() == v1::FINISHED; }, milliseconds(120000)))
      << Get(id).DebugString() << Logs();
  const v1::Job job = Get(id);
  ExpectTheAnswer(job);
  ExpectEachFinalOnceInTheChangelog();
  ExpectNoRevisionGoesBack();
  // The job's tasks are gone from the workers, and so are its series.
  const std::string job_id_label = absl::StrCat("job_id=\"", id, "\"");
  for (int w = 0; w < 3; ++w) {
    std::string left;
    EXPECT_TRUE(Eventually(
        [&] {
          left = HttpGet(http_[w], "/metrics");
          return left.find(job_id_label) == std::string::npos;
        },
        milliseconds(10000)))
        << "worker " << w << " still exports the finished job's series:\n"
        << left;
  }
}

// A network partition between a worker and the coordinator only: the worker
// still reaches Kafka and PostgreSQL (a zombie). The test process unshares
// its network namespace first, so the whole cluster runs on a loopback of
// its own and the iptables rule (drop worker 0's packets to the
// coordinator's port, matched by the group id worker 0 runs with) exists
// only there. The coordinator gives the worker up and places a new epoch on
// the other two; the worker stops its tasks once its lease ends (it fences
// itself), and none of its epoch's writes lands in PostgreSQL after that.
// Healed, the job ends with the single-process answer.
// Packet loss (the kernel has no netem here: iptables' statistic match drops
// a random 10 % of every packet worker 0 sends, to the coordinator, the other
// workers, Kafka and PostgreSQL) for 5 s, then healed: whether TCP's
// retransmissions carry it or the worker loses its lease and its tasks move,
// the job ends with the single-process answer.
TEST_F(ClusterPartitionTest, LossyLinksOfAWorkerGiveTheSingleProcessAnswer) {
  std::string id;
  ASSERT_NO_FATAL_FAILURE(SubmitAndRunToACheckpoint(&id));
  const std::string rule = absl::StrCat(" OUTPUT -o lo -m owner --gid-owner ", kCutOff,
                                        " -m statistic --mode random --probability 0.1 -j DROP");
  ASSERT_EQ(std::system(("iptables -I" + rule).c_str()), 0) << rule;
  std::this_thread::sleep_for(milliseconds(5000));
  const v1::Job lossy = Get(id);
  ASSERT_EQ(std::system(("iptables -D" + rule).c_str()), 0) << rule;
  ASSERT_TRUE(Eventually([&] { return Get(id).state() == v1::FINISHED; }, milliseconds(120000)))
      << Get(id).DebugString() << Logs();
  const v1::Job job = Get(id);
  std::printf("10 %% loss on worker 0 for 5 s: epoch %lld and %s after it, epoch %lld at the end\n",
              static_cast<long long>(lossy.epoch()), v1::JobState_Name(lossy.state()).c_str(),
              static_cast<long long>(job.epoch()));
  ExpectTheAnswer(job);
  ExpectNoRevisionGoesBack();
}

// A partition between two workers of the job's exchanges (worker 0's
// packets to worker 1's gRPC server dropped; both still reach the
// coordinator, Kafka and PostgreSQL) for 10 s, then healed: the job ends
// with the single-process answer, whether its streams resumed or it
// restored a checkpoint.
TEST_F(ClusterPartitionTest, TwoWorkersCutApartThenHealedGiveTheSingleProcessAnswer) {
  const std::string worker1 = workers_[1]->WaitFor(R"(grpc=(\S+))", milliseconds(1000));
  ASSERT_FALSE(worker1.empty()) << workers_[1]->Log();
  std::string id;
  ASSERT_NO_FATAL_FAILURE(SubmitAndRunToACheckpoint(&id));
  ASSERT_NO_FATAL_FAILURE(Cut("-I", worker1));
  std::this_thread::sleep_for(milliseconds(10000));
  const v1::Job cut = Get(id);
  ASSERT_NO_FATAL_FAILURE(Cut("-D", worker1));
  const auto healed = std::chrono::steady_clock::now();
  ASSERT_TRUE(Eventually([&] { return Get(id).state() == v1::FINISHED; }, milliseconds(120000)))
      << Get(id).DebugString() << Logs();
  const v1::Job job = Get(id);
  std::printf(
      "worker 0 cut from worker 1 for 10 s: epoch %lld at the heal, %lld at the end; "
      "finished %lld ms after the heal\n",
      static_cast<long long>(cut.epoch()), static_cast<long long>(job.epoch()),
      static_cast<long long>(
          std::chrono::duration_cast<milliseconds>(std::chrono::steady_clock::now() - healed)
              .count()));
  ExpectTheAnswer(job);
  ExpectNoRevisionGoesBack();
}

TEST_F(ClusterPartitionTest, AWorkerCutOffFromTheCoordinatorFencesItselfAndItsWritesStop) {
  std::string id;
  ASSERT_NO_FATAL_FAILURE(SubmitAndRunToACheckpoint(&id));
  ASSERT_NO_FATAL_FAILURE(Cut("-I"));
  ASSERT_TRUE(Eventually([&] { return Get(id).epoch() >= 2; }, milliseconds(30000)))
      << Get(id).DebugString() << Logs();
  const v1::Job moved = Get(id);
  const int64_t moved_epoch = moved.epoch();
  for (const v1::TaskStatus& t : moved.tasks()) EXPECT_NE(t.worker(), ids_[0]);
  // Still running and still reaching Kafka and PostgreSQL, it stops every
  // task when its lease ends.
  EXPECT_FALSE(
      workers_[0]
          ->WaitFor(R"((stopping job cluster-revenue-1 epoch 1: lease lost))", milliseconds(15000))
          .empty())
      << workers_[0]->Log();
  const std::string fenced_at = PostgresNow();
  EXPECT_FALSE(workers_[0]->WaitUntil(ChildProcess::Clock::now())) << "worker 0 exited";
  // The other workers run the job on; then the partition heals.
  std::this_thread::sleep_for(milliseconds(3000));
  ASSERT_NO_FATAL_FAILURE(Cut("-D"));
  ASSERT_TRUE(Eventually([&] { return Get(id).state() == v1::FINISHED; }, milliseconds(120000)))
      << Get(id).DebugString() << Logs();
  const v1::Job job = Get(id);
  ExpectNoRowOfAnEpochBefore(moved_epoch, fenced_at);
  ExpectTheAnswer(job);
  ExpectNoRevisionGoesBack();
}

// A fourth worker joins mid-stream: the tasks stop at a checkpoint and the
// job is placed again from it on all four workers, so nothing is produced
// twice (one FINAL per window in the changelog too). To join while the job
// surely runs, the test holds a lock on the PostgreSQL sink's fence table:
// no checkpoint (the final one included) completes until it lets go.
TEST_F(ClusterJobTest, AJoiningWorkerGetsTasksThroughACheckpointWithoutDuplicates) {
  std::string id;
  PGconn* lock = nullptr;
  ASSERT_NO_FATAL_FAILURE(SubmitAndHoldMidStream(&id, &lock));
  workers_.push_back(std::make_unique<ChildProcess>(
      std::vector<std::string>{CARAVELA_BINARY, "worker", "--coordinator", address_, "--slots", "8",
                               "--data-dir", (dir_ / "w3").string(), "--bootstrap", bootstrap_,
                               "--allow-path", dir_.string()},
      dir_ / "worker-3.log"));
  const std::string joined = workers_.back()->WaitFor(R"(id=(\S+))", milliseconds(20000));
  ASSERT_FALSE(joined.empty()) << workers_.back()->Log();
  std::this_thread::sleep_for(milliseconds(300));  // a few scheduler rounds
  UnlockFences(lock);
  ASSERT_TRUE(Eventually([&] { return Get(id).state() == v1::FINISHED; }, milliseconds(120000)))
      << Get(id).DebugString() << Logs();
  const v1::Job job = Get(id);
  EXPECT_EQ(job.epoch(), 2) << Logs();
  std::map<std::string, int> per;
  for (const v1::TaskStatus& t : job.tasks()) ++per[t.worker()];
  EXPECT_EQ(per.size(), 4u) << job.DebugString();
  // Even within one task.
  for (const auto& [w, n] : per) EXPECT_LE(n, (job.tasks_size() + 3) / 4) << w;
  EXPECT_GE(per[joined], job.tasks_size() / 4);
  EXPECT_THAT(coordinator_->Log(), ::testing::HasSubstr("rebalancing"));
  ExpectTheAnswer(job);
  ExpectEachFinalOnceInTheChangelog();
  ExpectNoRevisionGoesBack();
}

// A worker leaves (SIGTERM, as Kubernetes stops a pod): its tasks move to
// the other two through a stopping checkpoint and it exits 0 once it holds
// none. Nothing restarts from an older checkpoint, so nothing is produced
// twice: each window is FINAL once in the changelog. (The fence table is
// locked meanwhile, so the job cannot finish before the handover.)
TEST_F(ClusterJobTest, ALeavingWorkerHandsItsTasksOverWithoutDuplicates) {
  std::string id;
  PGconn* lock = nullptr;
  ASSERT_NO_FATAL_FAILURE(SubmitAndHoldMidStream(&id, &lock));
  ASSERT_EQ(::kill(workers_[2]->pid(), SIGTERM), 0);
  std::this_thread::sleep_for(milliseconds(300));
  UnlockFences(lock);
  ASSERT_TRUE(workers_[2]->WaitUntil(std::chrono::steady_clock::now() + milliseconds(60000)))
      << workers_[2]->Log();
  EXPECT_EQ(workers_[2]->ExitCode(), 0) << workers_[2]->Log();
  // It says where its job went, as the coordinator sees it then.
  EXPECT_THAT(workers_[2]->Log(),
              ::testing::HasSubstr("drained: no task left here; its jobs now:"));
  EXPECT_THAT(workers_[2]->Log(),
              ::testing::ContainsRegex(id + " (RUNNING|FINISHED|SCHEDULING|RECOVERING)"));
  ASSERT_TRUE(Eventually([&] { return Get(id).state() == v1::FINISHED; }, milliseconds(120000)))
      << Get(id).DebugString() << Logs();
  const v1::Job job = Get(id);
  EXPECT_EQ(job.epoch(), 2) << Logs();
  for (const v1::TaskStatus& t : job.tasks()) EXPECT_NE(t.worker(), ids_[2]) << t.DebugString();
  EXPECT_THAT(coordinator_->Log(), ::testing::HasSubstr("worker " + ids_[2] + " is leaving"));
  ExpectTheAnswer(job);
  ExpectEachFinalOnceInTheChangelog();
  ExpectNoRevisionGoesBack();
}

// `caravela rescale` (SPEC §8): the job stops at a checkpoint and runs on with
// 2 tasks per stage, each new task gathering its source partitions and keys
// from the 3 old ones; the answer stays exact in every sink and no window is
// FINAL twice. (The fence table is locked meanwhile, so the job cannot
// finish before the rescale.)
TEST_F(ClusterJobTest, RescaleFromThreeToTwoTasksGivesTheSameAnswer) {
  std::string id;
  PGconn* lock = nullptr;
  ASSERT_NO_FATAL_FAILURE(SubmitAndHoldMidStream(&id, &lock));
  const CliResult bad = Cli(absl::StrCat("rescale ", id, " 0 --coordinator ", address_), dir_);
  EXPECT_NE(bad.code, 0) << bad.out;
  const CliResult rescale = Cli(absl::StrCat("rescale ", id, " 2 --coordinator ", address_), dir_);
  EXPECT_EQ(rescale.code, 0) << rescale.out;
  EXPECT_THAT(rescale.out, ::testing::HasSubstr(id));
  std::this_thread::sleep_for(milliseconds(300));
  UnlockFences(lock);
  ASSERT_TRUE(Eventually([&] { return Get(id).state() == v1::FINISHED; }, milliseconds(120000)))
      << Get(id).DebugString() << Logs();
  const v1::Job job = Get(id);
  EXPECT_EQ(job.parallelism(), 2);
  EXPECT_EQ(job.epoch(), 2) << Logs();
  EXPECT_EQ(job.checkpoint_parallelism(), 2);
  EXPECT_EQ(job.tasks_size(), 10);  // 5 stages of 2 tasks
  EXPECT_THAT(coordinator_->Log(), ::testing::HasSubstr("rescale from 3 to 2"));
  EXPECT_THAT(Logs(), ::testing::HasSubstr("gathered its keys"));
  ExpectTheAnswer(job);
  ExpectEachFinalOnceInTheChangelog();
  ExpectNoRevisionGoesBack();
}

// Rescales through every size mid-stream (issue 29): submitted with 2 tasks
// per stage over topics read without an end (bounded: false, so no step can
// find the input all read and the job finished), the job is rescaled to 3,
// to 1 and back to 2 while purchases stream in; after each step it runs at
// the new size with a new epoch. Then it stops with a savepoint and is resubmitted bounded from it
// at 2 tasks, reads the rest and finishes. At the end every sink has the
// exact answer, each window FINAL once in the changelog, no revision of a key
// going backwards; the part files a rescale added carry new names, so no
// task truncated or fenced another's file.
}  // namespace

void RescaleSequence(ClusterJobTest& t) {
  const std::string id = t.SubmitUnbounded(2);
  ASSERT_FALSE(id.empty());
  const std::string at = " --coordinator " + t.address_;
  // Data streams in while the job rescales.
  ClusterJobTest::CopyStreamer streamer(t, 12000);
  int64_t epoch = t.Get(id).epoch();
  for (int to : {3, 1, 2}) {
    SCOPED_TRACE(absl::StrCat("rescale to ", to));
    const CliResult rescale = Cli(absl::StrCat("rescale ", id, " ", to, at), t.dir_);
    ASSERT_EQ(rescale.code, 0) << rescale.out;
    v1::Job j;
    ASSERT_TRUE(Eventually(
        [&] {
          j = t.Get(id);
          return (j.state() == v1::RUNNING && j.parallelism() == to && j.epoch() > epoch &&
                  j.last_checkpoint() > 0) ||
                 IsFinal(j.state());
        },
        milliseconds(60000)))
        << j.DebugString() << t.Logs();
    ASSERT_EQ(j.state(), v1::RUNNING) << j.DebugString();
    EXPECT_EQ(j.tasks_size(), 5 * to);  // 5 stages
    epoch = j.epoch();
  }
  const int64_t streamed = streamer.Stop();
  EXPECT_GT(streamed, 0);
  std::printf("%lld purchase copies streamed in during the rescales\n",
              static_cast<long long>(streamed));
  const v1::Job job = t.FinishFromASavepoint(id, "sp-rescale");
  ASSERT_EQ(job.state(), v1::FINISHED);
  EXPECT_EQ(job.parallelism(), 2);
  t.ExpectTheAnswer(job);
  t.ExpectEachFinalOnceInTheChangelog();
  t.ExpectNoRevisionGoesBack();
  // 2 -> 3 added task 2 and 1 -> 2 task 1 of each stage: their files are
  // new ones.
  std::set<std::string> parts;
  for (const auto& f : PartFiles(t.dir_ / "cluster/out", "revenue")) {
    parts.insert(f.filename().string());
  }
  EXPECT_THAT(parts,
              ::testing::Contains(::testing::MatchesRegex(R"(revenue\.part-1-c[0-9]+\.jsonl)")))
      << ::testing::PrintToString(parts);
  EXPECT_THAT(parts,
              ::testing::Contains(::testing::MatchesRegex(R"(revenue\.part-2-c[0-9]+\.jsonl)")))
      << ::testing::PrintToString(parts);
}

namespace {

TEST_F(ClusterJobTest, RescaleUpDownToOneAndBackGivesTheSameAnswer) { RescaleSequence(*this); }

TEST_F(ClusterJobTest, RescaleUpDownToOneAndBackOverKafkaExchanges) {
  exchange_ = "kafka";
  RescaleSequence(*this);
}

// `caravela savepoint` stops the job at a checkpoint and copies it out;
// `caravela submit --from-savepoint` starts the job again from the copy with
// 2 tasks per stage instead of 3. The first run reads its topics without an
// end (bounded: false, the same graph), so it stops mid-stream with windows
// still open; the second run, bounded, carries on from the savepoint's
// offsets and state. Together they give the exact answer in every sink, each
// window FINAL once.
TEST_F(ClusterJobTest, SavepointAndResubmissionFromItGiveTheSameAnswer) {
  auto submitted = JobClient(address_, "").Submit(UnboundedYaml(), kParallelism);
  ASSERT_OK(submitted.status());
  const std::string id = submitted->job_id();
  ASSERT_FALSE(id.empty()) << submitted->DebugString();
  ASSERT_TRUE(Eventually(
      [&] {
        const v1::Job j = Get(id);
        return j.state() == v1::RUNNING && j.last_checkpoint() >= 2;
      },
      milliseconds(60000)))
      << Get(id).DebugString() << Logs();
  const std::string at = absl::StrCat(" --coordinator ", address_);
  const CliResult outside = Cli(absl::StrCat("savepoint ", id, " /etc/caravela-sp", at), dir_);
  EXPECT_EQ(outside.code, 1) << outside.out;
  EXPECT_THAT(outside.out, ::testing::HasSubstr("outside the directories this coordinator allows"));
  // Asked while the job is between two epochs (here: rescaling, which the
  // coordinator refuses to combine with a savepoint), the command waits for
  // it to run again instead of failing.
  ASSERT_OK(JobClient(address_, "").Rescale(id, kParallelism + 1).status());
  const CliResult saved = Cli(absl::StrCat("savepoint ", id, " sp1 --wait 2m", at), dir_);
  const std::string sp_dir = (dir_ / "coordinator/savepoints/sp1").string();
  ASSERT_EQ(saved.code, 0) << saved.out << Logs();
  EXPECT_THAT(saved.out, ::testing::HasSubstr(sp_dir));
  const v1::Job first = Get(id);
  EXPECT_EQ(first.state(), v1::FINISHED);
  EXPECT_EQ(first.savepoint(), sp_dir);
  EXPECT_THAT(first.message(), ::testing::HasSubstr("stopped with a savepoint"));
  EXPECT_TRUE(fs::exists(sp_dir + "/job-savepoint.json"));
  // Mid-stream: the windows the watermark had not passed are not FINAL yet.
  const size_t finals_before = FinalResults((dir_ / "cluster/out").string()).size();
  EXPECT_LT(finals_before, reference_.size());
  std::printf("the first run published %zu of %zu FINAL windows before its savepoint\n",
              finals_before, reference_.size());

  // Another graph (no PostgreSQL and Kafka sinks) cannot take its state.
  const fs::path other = dir_ / "other.yaml";
  std::ofstream(other) << JobYaml("cluster-revenue", dir_ / "cluster", 300, false);
  const CliResult refused =
      Cli(absl::StrCat("submit ", other.string(), " --from-savepoint sp1", at), dir_);
  EXPECT_EQ(refused.code, 2) << refused.out;
  EXPECT_THAT(refused.out, ::testing::HasSubstr("another job graph"));

  const fs::path job_file = dir_ / "job.yaml";
  std::ofstream(job_file) << Yaml();
  const CliResult resubmit =
      Cli(absl::StrCat("submit ", job_file.string(), " --from-savepoint sp1 --parallelism 2", at),
          dir_);
  ASSERT_EQ(resubmit.code, 0) << resubmit.out;
  const std::string id2 = SubmittedId(resubmit.out);
  ASSERT_NE(id2, id);
  ASSERT_TRUE(Eventually([&] { return Get(id2).state() == v1::FINISHED; }, milliseconds(120000)))
      << Get(id2).DebugString() << Logs();
  const v1::Job job = Get(id2);
  EXPECT_EQ(job.savepoint(), sp_dir);
  EXPECT_EQ(job.parallelism(), 2);
  EXPECT_GT(job.epoch(), first.epoch());
  EXPECT_EQ(job.tasks_size(), 10);
  EXPECT_THAT(Logs(), ::testing::HasSubstr("gathered its keys"));
  ExpectTheAnswer(job);
  ExpectEachFinalOnceInTheChangelog();
  ExpectNoRevisionGoesBack();
}

// A lease long enough for a coordinator restart on a loaded 2-core machine.
class ClusterRestartTest : public ClusterJobTest {
 protected:
  ClusterRestartTest() { worker_timeout_ = "6s"; }
};

// The coordinator is SIGKILLed mid-stream and restarted on its address: the
// workers register again under their ids and the job goes on in the same
// epoch (its tasks are adopted, not restarted). A job cannot finish while
// its coordinator is down (its last checkpoint needs it), so this holds
// whatever the timing.
TEST_F(ClusterRestartTest, CoordinatorRestartAdoptsTheRunningJob) {
  std::string id;
  ASSERT_NO_FATAL_FAILURE(SubmitAndRunToACheckpoint(&id));
  const std::string address = address_;
  coordinator_->Stop(SIGKILL);
  std::this_thread::sleep_for(milliseconds(500));
  StartCoordinator(address);
  ASSERT_EQ(address_, address) << coordinator_->Log();
  auto jobs = JobClient(address_, "").List();
  ASSERT_OK(jobs.status());
  ASSERT_EQ(jobs->size(), 1u);
  EXPECT_EQ((*jobs)[0].id(), id);
  ASSERT_TRUE(Eventually([&] { return Get(id).state() == v1::FINISHED; }, milliseconds(120000)))
      << Get(id).DebugString() << Logs();
  const v1::Job job = Get(id);
  EXPECT_EQ(job.epoch(), 1) << "the restart restarted the job instead of adopting it\n" << Logs();
  EXPECT_THAT(coordinator_->Log(), ::testing::HasSubstr("adopted running on its workers"));
  ExpectTheAnswer(job);
}

// A worker dies while the coordinator is down: the restarted coordinator
// adopts the job, waits one lease for the lost worker's tasks, then restarts
// the job from its last complete checkpoint on the workers that came back.
TEST_F(ClusterJobTest, WorkerLostWhileTheCoordinatorIsDownIsHandledAfterItsRestart) {
  std::string id;
  ASSERT_NO_FATAL_FAILURE(SubmitAndRunToACheckpoint(&id));
  const std::string address = address_;
  coordinator_->Stop(SIGKILL);
  workers_[0]->Stop(SIGKILL);
  StartCoordinator(address);
  ASSERT_EQ(address_, address) << coordinator_->Log();
  ASSERT_TRUE(Eventually([&] { return Get(id).state() == v1::FINISHED; }, milliseconds(120000)))
      << Get(id).DebugString() << Logs();
  const v1::Job job = Get(id);
  EXPECT_EQ(job.epoch(), 2);
  for (const v1::TaskStatus& t : job.tasks()) EXPECT_NE(t.worker(), ids_[0]);
  // Whichever comes first: the adoption timeout, or a task whose exchange
  // stream to the dead worker ended.
  EXPECT_THAT(coordinator_->Log(),
              ::testing::AnyOf(::testing::HasSubstr("on " + ids_[0] +
                                                    " not back after the coordinator restarted"),
                               ::testing::HasSubstr("the stream ended")));
  ExpectTheAnswer(job);
}

}  // namespace
}  // namespace caravela
