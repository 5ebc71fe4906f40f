// A seeded fault campaign (issue 31): the cluster job of
// tests/cluster_fixture.h runs over topics read without an end while copies
// of its input stream in, and a schedule drawn from a seed applies faults
// one after another, each healed after a random time: a worker SIGKILLed
// (then started again), SIGSTOPped (past its 2 s lease or not), cut off from
// the coordinator, cut off from another worker's exchange server (one way or
// both), losing 10 % of its packets, and the coordinator SIGKILLed (then
// started again on its address). The test process runs in a network
// namespace of its own; each worker runs with a group id of its own, which
// iptables' owner match uses to drop that worker's packets. After every
// heal it measures the recovery (the job RUNNING with a new checkpoint
// complete); after the campaign the job is finished through a savepoint and
// its FINAL results must equal the single-process answer in files, the Kafka
// changelog and PostgreSQL, no FINAL published with two values, no revision
// going back.
//
// CARAVELA_FAULTS_SEED (default 1) and CARAVELA_FAULTS_SECONDS (default 40)
// choose the schedule and its length; the same seed draws the same faults.
// With CARAVELA_FAULTS_REPORT the run writes its JSON report there
// (scripts/faults runs many schedules and sums them up).
#include <sys/types.h>

#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <random>

#include "tests/cluster_fixture.h"

namespace caravela {
namespace {

int64_t EnvInt(const char* name, int64_t fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? std::strtoll(v, nullptr, 10) : fallback;
}

int64_t Percentile(std::vector<int64_t> v, double p) {
  if (v.empty()) return -1;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())))];
}

// ClusterPartitionTest's network namespace, with every worker in a group of
// its own.
class FaultCampaignTest : public ClusterPartitionTest {
 protected:
  FaultCampaignTest() { worker_gids_ = {kCutOff, kCutOff + 1, kCutOff + 2}; }

  static std::string Port(const std::string& address) {
    return address.substr(address.rfind(':') + 1);
  }
  // iptables -I/-D OUTPUT for worker `w`'s packets, with `match`.
  void Rule(const char* op, int w, const std::string& match) {
    const std::string cmd =
        absl::StrCat("iptables ", op, " OUTPUT -o lo -m owner --gid-owner ",
                     worker_gids_[static_cast<size_t>(w)], " ", match, " -j DROP");
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  }

  // One fault of the schedule: what it is, and how to heal it.
  struct Fault {
    std::string kind;
    std::string what;
    std::function<void()> heal;
  };

  Fault Draw(std::mt19937_64& rng) {
    const int w = static_cast<int>(rng() % 3);
    const int other = (w + 1 + static_cast<int>(rng() % 2)) % 3;
    ChildProcess& p = *workers_[static_cast<size_t>(w)];
    switch (rng() % 6) {
      case 0:
        kill(p.pid(), SIGKILL);
        return {"worker_kill", absl::StrCat("SIGKILL worker ", w),
                [this, w] { ASSERT_NO_FATAL_FAILURE(StartWorker(w)); }};
      case 1:
        kill(p.pid(), SIGSTOP);
        return {"worker_pause", absl::StrCat("SIGSTOP worker ", w),
                [&p] { kill(p.pid(), SIGCONT); }};
      case 2: {
        const std::string m = "-p tcp --dport " + Port(address_);
        Rule("-I", w, m);
        return {"partition_coordinator",
                absl::StrCat("worker ", w, " cut off from the coordinator"),
                [this, w, m] { Rule("-D", w, m); }};
      }
      case 3: {
        const bool both = rng() % 2 == 0;
        const std::string to_other = "-p tcp --dport " + Port(grpc_[static_cast<size_t>(other)]);
        const std::string to_w = "-p tcp --dport " + Port(grpc_[static_cast<size_t>(w)]);
        Rule("-I", w, to_other);
        if (both) Rule("-I", other, to_w);
        return {both ? "partition_workers" : "partition_workers_one_way",
                absl::StrCat("worker ", w, both ? " <-/-> " : " -/-> ", "worker ", other),
                [this, w, other, both, to_other, to_w] {
                  Rule("-D", w, to_other);
                  if (both) Rule("-D", other, to_w);
                }};
      }
      case 4: {
        const std::string m = "-m statistic --mode random --probability 0.1";
        Rule("-I", w, m);
        return {"packet_loss", absl::StrCat("worker ", w, " loses 10 % of its packets"),
                [this, w, m] { Rule("-D", w, m); }};
      }
      default:
        kill(coordinator_->pid(), SIGKILL);
        return {"coordinator_kill", "SIGKILL the coordinator", [this] {
                  const std::string listen = address_;
                  StartCoordinator(listen);
                  ASSERT_FALSE(address_.empty()) << "the coordinator did not start again";
                }};
    }
  }
};

TEST_F(FaultCampaignTest, ASeededScheduleOfFaultsLeavesEveryFinalExact) {
  const uint64_t seed = static_cast<uint64_t>(EnvInt("CARAVELA_FAULTS_SEED", 1));
  const int64_t seconds = EnvInt("CARAVELA_FAULTS_SECONDS", 40);
  std::printf("fault campaign: seed %" PRIu64 ", %" PRId64 " s of faults\n", seed, seconds);
  std::mt19937_64 rng(seed);
  const std::string id = SubmitUnbounded(2);
  ASSERT_FALSE(id.empty());
  CopyStreamer streamer(*this, std::numeric_limits<int64_t>::max());

  std::map<std::string, int> by_kind;
  std::vector<int64_t> recovery_ms;
  int unrecovered = 0;
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  while (std::chrono::steady_clock::now() < end) {
    const int64_t hold_ms = 500 + static_cast<int64_t>(rng() % 7500);
    const int64_t gap_ms = 500 + static_cast<int64_t>(rng() % 2500);
    Fault f = Draw(rng);
    ++by_kind[f.kind];
    std::printf("fault: %s for %" PRId64 " ms\n", f.what.c_str(), hold_ms);
    std::fflush(stdout);
    std::this_thread::sleep_for(milliseconds(hold_ms));
    ASSERT_NO_FATAL_FAILURE(f.heal());
    // Recovered: RUNNING with a checkpoint complete after the heal.
    const auto healed = std::chrono::steady_clock::now();
    const int64_t before = Get(id).last_checkpoint();
    v1::Job j;
    const bool ok = Eventually(
        [&] {
          j = Get(id);
          return j.state() == v1::RUNNING && j.last_checkpoint() > before;
        },
        milliseconds(60000));
    ASSERT_NE(j.state(), v1::FAILED) << j.DebugString() << Logs();
    if (ok) {
      recovery_ms.push_back(
          std::chrono::duration_cast<milliseconds>(std::chrono::steady_clock::now() - healed)
              .count());
    } else {
      ++unrecovered;
      ADD_FAILURE() << "not recovered 60 s after: " << f.what << "\n" << j.DebugString();
    }
    std::this_thread::sleep_for(milliseconds(gap_ms));
  }
  const int64_t streamed = streamer.Stop();
  const v1::Job job = FinishFromASavepoint(id, "sp-campaign");
  ASSERT_EQ(job.state(), v1::FINISHED);
  ExpectTheAnswer(job);
  // Not each FINAL once: the changelog sink is at-least-once, and output
  // after the last complete checkpoint is published again by the replay
  // (e.g. while the coordinator is down no checkpoint completes, and the
  // workers go on until their lease ends). The contract is that a FINAL
  // never comes with another value.
  const int64_t finals_again = ExpectNoFinalWithTwoValues();
  ExpectNoRevisionGoesBack();

  int faults = 0;
  std::string kinds;
  for (const auto& [kind, n] : by_kind) {
    faults += n;
    absl::StrAppend(&kinds, kinds.empty() ? "" : ",", "\"", kind, "\":", n);
  }
  const std::string report = absl::StrCat(
      "{\"seed\":", seed, ",\"seconds\":", seconds, ",\"faults\":", faults, ",\"by_kind\":{", kinds,
      "},\"windows_checked\":", reference_.size(), ",\"copies_streamed\":", streamed,
      ",\"finals_published_again\":", finals_again, ",\"unrecovered\":", unrecovered,
      ",\"recovery_ms_p50\":", Percentile(recovery_ms, 0.5),
      ",\"recovery_ms_p99\":", Percentile(recovery_ms, 0.99),
      ",\"recovery_ms_max\":", Percentile(recovery_ms, 1.0),
      ",\"passed\":", HasFailure() ? "false" : "true", "}");
  std::printf("fault campaign report: %s\n", report.c_str());
  if (const char* path = std::getenv("CARAVELA_FAULTS_REPORT"); path != nullptr && *path) {
    std::ofstream(path) << report << "\n";
  }
}

}  // namespace
}  // namespace caravela
