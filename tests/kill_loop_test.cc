// Random kill loop (issue 4, SPEC §4 and §6): a job with dedup and hourly
// windows reads a generated purchase stream (retries, conflicting copies,
// disorder across partitions, late events within the lateness) from a
// standalone `caravela broker`, with checkpoints every 100 ms. `caravela run`
// is killed with SIGKILL at a random moment and restarted with the same data
// dir, at least 20 times, then runs to completion. Its FINAL window results
// and dedup conflicts must equal those of an uninterrupted run, and per window
// key the published revisions must only ever increase (across epochs too),
// with no (key, revision) published twice and one FINAL per window.
//
// What is compared does not depend on timing: every copy of an event goes to
// one partition (so "the first copy" is the same in every run), and no event
// is delayed within its partition by more than the lateness or the dedup
// retention (so nothing is too late, whatever the read interleaving of the
// partitions). How many EARLY/LATE revisions a window gets depends on
// batching, so revisions are checked for order only.
//
// Kill timing: a kill 100-600 ms after the process starts would almost always
// land before the run's first checkpoint completes (startup takes ~250 ms,
// then the first checkpoint starts 100 ms after the source opens and takes
// ~150 ms), and the loop would only ever restart from scratch. So a fifth of
// the kills come 0-300 ms after the start (startup, restore), the others
// 100-600 ms after the run is ready (source opened and checkpoint restored,
// seen in its log). The delays are capped from the processing rate (of the
// reference run, or of a faster run of the loop) and the progress of the
// latest checkpoint (read from its manifest) so that the job cannot finish
// before the 20th kill on a fast (release) build either: once 70% of the input
// is checkpointed, runs are killed within 150 ms of being ready.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <regex>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "tests/child_process.h"
#include "tests/kill_loop_util.h"
#include "tests/test_util.h"
#include "worker/checkpoint/checkpoint_manager.h"
#include "worker/connectors/kafka_test_util.h"
#include "worker/testing/status_testing.h"

namespace fs = std::filesystem;

namespace caravela {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr int kPartitions = 4;
constexpr int kEvents = 180000;
constexpr int kKills = 20;
// Once this share of the input is checkpointed, runs are killed early (no
// more progress), so that the job cannot finish before the last kill.
constexpr double kPhase = 0.7;

// kEvents purchases over ~40 h of event time, each event's partition drawn
// at random (see GeneratePurchases).
PurchaseStream Generate() {
  return GeneratePurchases(
      {.seed = 20261101, .events = kEvents, .step_ms = 800, .partitions = kPartitions});
}

std::vector<std::string> RunArgs(const fs::path& dir, bool metrics) {
  const std::string binary = KillLoopBinary();
  std::vector<std::string> args = {
      binary, "run", "-q", "--data-dir", (dir / "data").string(), (dir / "job.yaml").string()};
  if (metrics) args.push_back("--print-metrics");
  return args;
}

// The newest checkpoint manifest of the job in `data` (-1: none) and the
// number of input records before its source offsets.
CheckpointProgress ReadProgress(const fs::path& data) {
  CheckpointProgress p;
  const fs::path task = data / "checkpoints/kill-loop/task-0";
  std::error_code ec;
  if (!fs::is_directory(task, ec)) return p;
  static const std::regex name_re(R"(chk-([0-9]+)\.manifest)");
  for (const auto& e : fs::directory_iterator(task, ec)) {
    std::smatch m;
    const std::string name = e.path().filename().string();
    if (!std::regex_match(name, m, name_re)) continue;
    const int64_t id = std::stoll(m[1].str());
    if (id <= p.checkpoint) continue;
    auto manifest = DecodeManifest(ReadFile(e.path()), name);
    if (!manifest.ok()) continue;
    p.checkpoint = id;
    p.records = 0;
    for (const auto& sc : manifest->sources()) {
      for (const auto& pc : sc.partitions()) p.records += std::max<int64_t>(pc.next_offset(), 0);
    }
  }
  return p;
}

struct WindowOutput {
  std::vector<std::string> finals;  // FINAL lines without revision, sorted
  std::map<std::string, int> finals_per_key;
  int lines = 0;
  int64_t max_epoch = 0;
  std::vector<std::string> errors;  // unparseable lines, revision order violations
};

// Reads a window output file: its FINAL lines, and checks the revision
// contract per key in file order (strictly increasing revisions, at most one
// ON_TIME, nothing after FINAL).
WindowOutput ReadWindowOutput(const fs::path& p) {
  WindowOutput out;
  RevisionContract contract;
  for (const std::string& line : ReadLines(p)) {
    ++out.lines;
    const std::string where = absl::StrCat("line ", out.lines);
    WindowLine w;
    if (!ParseWindowLine(line, &w)) {
      out.errors.push_back(absl::StrCat(where, " unparseable: ", line));
      continue;
    }
    out.max_epoch = std::max(out.max_epoch, w.revision / 1'000'000'000);
    contract.Check(w, where, line, &out.errors);
    if (w.state == "FINAL") {
      out.finals.push_back(w.normalized);
      ++out.finals_per_key[w.key];
    }
  }
  std::sort(out.finals.begin(), out.finals.end());
  return out;
}

std::vector<std::string> SortedLines(const fs::path& p) {
  std::vector<std::string> lines = ReadLines(p);
  std::sort(lines.begin(), lines.end());
  return lines;
}

// A metric's value in Prometheus text (`name{labels} value`); -1 if absent.
int64_t Metric(const std::string& text, const std::string& name) {
  const std::regex re("(^|\n)" + name + R"((\{[^}]*\})? ([0-9]+))");
  std::smatch m;
  if (!std::regex_search(text, m, re)) return -1;
  return std::stoll(m[3].str());
}

constexpr char kSourceReady[] = "stopping at end offsets";
// The runtime's line at the end of a restore (sources reopened, sinks recovered).
constexpr char kRestored[] = R"(restored checkpoint ([0-9]+) \(epoch)";

TEST(KillLoopTest, RandomKillsConvergeToTheUninterruptedResult) {
  const auto test_start = Clock::now();
  TempDir tmp("kill_loop", "KEEP_KILL_LOOP_DIR", "kill loop");
  ASSERT_FALSE(tmp.path().empty());
  const fs::path& dir = tmp.path();

  // 1. The broker outlives every job process.
  ChildProcess broker({KillLoopBinary(), "broker", "--port", "0", "--topic", "purchases",
                       "--partitions", std::to_string(kPartitions)},
                      dir / "broker.log");
  ASSERT_TRUE(broker.started());
  const std::string bootstrap = broker.WaitFor(R"(listening on (\S+))", milliseconds(20000));
  ASSERT_FALSE(bootstrap.empty()) << "broker did not start:\n" << broker.Log();

  // 2. The stream.
  const PurchaseStream stream = Generate();
  const int64_t total = static_cast<int64_t>(stream.records.size());
  {
    std::vector<std::pair<int32_t, std::string>> messages;  // (partition, JSON)
    for (const KafkaTestRecord& r : stream.records) messages.emplace_back(r.partition, r.value);
    absl::Status st = ProduceLines(bootstrap, "purchases", messages, 60000);
    ASSERT_OK(st);
  }
  std::printf(
      "kill loop: %lld messages (%d events, %d retries, %d conflicting copies, %d late) "
      "produced after %lld ms\n",
      static_cast<long long>(total), stream.events, stream.duplicates, stream.conflicts,
      stream.late, static_cast<long long>(MsSince(test_start)));

  // 3. The same job in two directories (outputs resolve against the job file).
  const fs::path ref = dir / "reference", loop = dir / "loop";
  for (const fs::path& d : {ref, loop}) {
    fs::create_directories(d);
    std::ofstream(d / "job.yaml") << KillLoopJobYaml("kill-loop", "2", bootstrap, false);
  }

  // 4. The reference: one uninterrupted run. How long it takes from the
  // source being ready to its end bounds the kill delays below.
  int64_t ref_ms = 0;
  {
    ChildProcess run(RunArgs(ref, true), ref / "run.log");
    ASSERT_TRUE(run.started());
    ASSERT_FALSE(run.WaitFor(kSourceReady, milliseconds(30000)).empty()) << run.Log();
    const auto ready = Clock::now();
    ASSERT_TRUE(run.WaitUntil(Clock::now() + milliseconds(60000)))
        << "reference run did not finish in 60 s:\n"
        << run.Log();
    ref_ms = MsSince(ready);
    ASSERT_EQ(run.ExitCode(), 0) << run.Log();
    const std::string metrics = run.Log();
    EXPECT_EQ(Metric(metrics, "dedup_passed_total"), stream.events) << metrics;
    EXPECT_EQ(Metric(metrics, "dedup_duplicates_total"), stream.duplicates) << metrics;
    EXPECT_EQ(Metric(metrics, "dedup_conflicts_total"), stream.conflicts) << metrics;
    EXPECT_EQ(Metric(metrics, "records_in_total"), total) << metrics;
  }
  const WindowOutput want = ReadWindowOutput(ref / "out/revenue.jsonl");
  EXPECT_THAT(want.errors, ::testing::IsEmpty());
  ASSERT_GT(want.finals.size(), 200u);
  const std::vector<std::string> want_conflicts = SortedLines(ref / "out/conflicts.jsonl");
  EXPECT_EQ(want_conflicts.size(), static_cast<size_t>(stream.conflicts));
  // Nothing may be too late in this stream, else results would depend on timing.
  EXPECT_THAT(ReadLines(ref / "out/too_late.jsonl"), ::testing::IsEmpty());
  EXPECT_THAT(ReadLines(ref / "out/dedup_too_late.jsonl"), ::testing::IsEmpty());
  EXPECT_THAT(ReadLines(ref / "out/invalid.jsonl"), ::testing::IsEmpty());
  EXPECT_EQ(SumField(want.finals, "orders"), stream.events)
      << "the FINAL results do not count every event once";
  ASSERT_FALSE(::testing::Test::HasFailure());

  // 5. The kill loop: same data dir, SIGKILL at a random moment, kKills times.
  KillTiming timing(4);
  int kills = 0, runs = 0, startup_kills = 0, restores = 0;
  bool finished_early = false;
  std::set<int64_t> restored_ids;
  std::string delays;
  // Input records per ms: the reference's, or faster if a run of the loop was.
  double rate = static_cast<double>(total) / std::max<int64_t>(1, ref_ms);
  const auto loop_start = Clock::now();
  while (kills < kKills) {
    const CheckpointProgress before = ReadProgress(loop / "data");
    const double done = static_cast<double>(before.records) / static_cast<double>(total);
    const fs::path log = loop / absl::StrFormat("run-%02d.log", runs++);
    ChildProcess run(RunArgs(loop, false), log);
    ASSERT_TRUE(run.started());
    Clock::time_point kill_at;
    std::optional<Clock::time_point> ready_at;
    if (done < kPhase && timing.DuringStartup()) {
      // During startup (process start, state open, Kafka metadata, restore).
      const int64_t d = timing.Uniform(0, 300);
      kill_at = run.started_at() + milliseconds(d);
      ++startup_kills;
      absl::StrAppend(&delays, " s", d);
    } else {
      // After the run is ready: source opened, and the newest checkpoint
      // restored if there is one.
      const std::string got =
          run.WaitFor(before.checkpoint >= 0 ? kRestored : kSourceReady, milliseconds(30000));
      ASSERT_FALSE(got.empty()) << "run " << runs - 1 << " not ready after 30 s (exit code "
                                << run.ExitCode() << ", newest checkpoint " << before.checkpoint
                                << "):\n"
                                << run.Log();
      const auto ready = Clock::now();
      if (before.checkpoint >= 0) {
        EXPECT_EQ(std::stoll(got), before.checkpoint)
            << "run " << runs - 1 << " did not restore the newest checkpoint";
      }
      // Never long enough to finish the rest of the input at the fastest
      // rate seen so far, and short once kPhase of it is checkpointed.
      const double remaining_ms = static_cast<double>(total - before.records) / rate;
      const int64_t d = timing.AfterReady(remaining_ms, done >= kPhase);
      kill_at = ready + milliseconds(d);
      ready_at = ready;
      absl::StrAppend(&delays, " ", d);
    }
    if (run.WaitUntil(kill_at)) {
      ASSERT_EQ(run.ExitCode(), 0) << "run " << runs - 1 << " failed:\n" << run.Log();
      finished_early = true;
      break;
    }
    ASSERT_EQ(run.Stop(SIGKILL), 128 + SIGKILL) << run.Log();
    ++kills;
    if (ready_at.has_value()) {  // records per ms, a lower bound of this run's rate
      const CheckpointProgress after = ReadProgress(loop / "data");
      const int64_t ms = std::max<int64_t>(1, MsSince(*ready_at));
      rate = std::max(rate, static_cast<double>(after.records - before.records) / ms);
    }
    std::smatch m;
    const std::string text = run.Log();
    if (std::regex_search(text, m, std::regex(kRestored))) {
      ++restores;
      restored_ids.insert(std::stoll(m[1].str()));
    }
  }
  const CheckpointProgress before_last = ReadProgress(loop / "data");
  // Then to completion.
  {
    const fs::path log = loop / absl::StrFormat("run-%02d.log", runs++);
    ChildProcess run(RunArgs(loop, false), log);
    ASSERT_TRUE(run.started());
    ASSERT_TRUE(run.WaitUntil(Clock::now() + milliseconds(60000)))
        << "the last run did not finish in 60 s:\n"
        << run.Log();
    ASSERT_EQ(run.ExitCode(), 0) << run.Log();
    std::smatch m;
    const std::string text = run.Log();
    if (std::regex_search(text, m, std::regex(kRestored))) {
      ++restores;
      restored_ids.insert(std::stoll(m[1].str()));
    }
  }
  std::printf(
      "kill loop: %d restarts (%d SIGKILLs, %d of them during startup; %d runs restored a "
      "checkpoint, %zu distinct checkpoints; the last run resumed at %lld of %lld records); "
      "reference run %lld ms after ready, fastest rate %.0f records/s, kill loop %lld ms\n"
      "kill loop: delays (ms after ready; sN: after start):%s\n",
      runs - 1, kills, startup_kills, restores, restored_ids.size(),
      static_cast<long long>(before_last.records), static_cast<long long>(total),
      static_cast<long long>(ref_ms), rate * 1000, static_cast<long long>(MsSince(loop_start)),
      delays.c_str());
  ::testing::Test::RecordProperty("restarts", runs - 1);
  ::testing::Test::RecordProperty("kills", kills);
  EXPECT_FALSE(finished_early) << "the job finished after " << kills << " kills";
  EXPECT_GE(kills, kKills);
  // Runs made progress and later runs resumed from it (else the loop only
  // tested restarts from scratch). Typically 5-8 distinct checkpoints are
  // restored on a debug build, 2-3 on a release build (faster runs checkpoint
  // more of the input at once, so fewer steps stay below kPhase).
  EXPECT_GE(restored_ids.size(), 1u);

  // 6. Same FINAL results and conflicts; the revision contract held throughout.
  const WindowOutput got = ReadWindowOutput(loop / "out/revenue.jsonl");
  EXPECT_THAT(got.errors, ::testing::IsEmpty());
  EXPECT_GE(got.max_epoch, 1) << "no revision carries the epoch of a restarted run";
  for (const auto& [key, n] : got.finals_per_key) {
    EXPECT_EQ(n, 1) << "window " << key << " has " << n << " FINAL results";
  }
  EXPECT_TRUE(got.finals == want.finals)
      << "FINAL results differ from the uninterrupted run (" << got.finals.size() << " vs "
      << want.finals.size() << " lines)" << Differences(got.finals, want.finals, "after the kills");
  const std::vector<std::string> got_conflicts = SortedLines(loop / "out/conflicts.jsonl");
  EXPECT_TRUE(got_conflicts == want_conflicts)
      << "conflicts differ from the uninterrupted run"
      << Differences(got_conflicts, want_conflicts, "after the kills");
  EXPECT_THAT(ReadLines(loop / "out/too_late.jsonl"), ::testing::IsEmpty());
  EXPECT_THAT(ReadLines(loop / "out/dedup_too_late.jsonl"), ::testing::IsEmpty());
  EXPECT_THAT(ReadLines(loop / "out/invalid.jsonl"), ::testing::IsEmpty());

  EXPECT_EQ(broker.Stop(SIGTERM), 0) << broker.Log();
  std::printf("kill loop: %d restarts, total %lld ms\n", runs - 1,
              static_cast<long long>(MsSince(test_start)));
}

}  // namespace
}  // namespace caravela
