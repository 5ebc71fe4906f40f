// Checkpoints and savepoints that older code wrote restore with today's
// (issue 28): tests/compat/ holds a job with every stateful operator kind,
// its inputs, and what the binary of commit 3c5e2ac (before the kind
// registries) left on disk (tests/compat/make_fixture.sh):
//   midstream/  killed by a failpoint after 500 arrival batches: committed
//               outputs and checkpoints 8-10;
//   savepoint/  run to the end with --savepoint-on-stop.
// Both carry the job graph hash of that code, which numbered kinds; today's
// hashes kind names, and a restore accepts either.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tests/test_util.h"
#include "worker/registry/builtin_kinds.h"

namespace fs = std::filesystem;

namespace caravela {
namespace {

using ::testing::HasSubstr;

const fs::path kFixture = fs::path(CARAVELA_SOURCE_DIR) / "tests/compat";
// The graph hash in the fixture's manifests (written by the old code).
constexpr char kOldGraphHash[] = "f31aacc9acf5109b";
const char* const kOutputs[] = {"revenue", "visits",   "paid",       "same_window",
                                "slim",    "too_late", "dead-letter"};

struct RunResult {
  int exit_code = -1;
  std::string log;
};

RunResult Caravela(const fs::path& dir, const std::string& args) {
  const fs::path log = dir / "run.log";
  const std::string cmd = absl::StrCat("cd ", dir.string(), " && ", CARAVELA_BINARY, " run ", args,
                                       " job.yaml > ", log.string(), " 2>&1");
  const int rc = std::system(cmd.c_str());
  return {WIFEXITED(rc) ? WEXITSTATUS(rc) : -1, ReadFile(log)};
}

// The job and its inputs in `dir`.
void CopyJob(const fs::path& dir) {
  for (const char* f :
       {"job.yaml", "purchases.jsonl", "payments.jsonl", "fx_rates.jsonl", "countries.jsonl"}) {
    fs::copy_file(kFixture / f, dir / f);
  }
}

// Revisions carry the run's epoch (epoch * 10^9 + n): compare n only.
std::vector<std::string> WithoutEpochs(std::vector<std::string> lines) {
  static const std::regex re("\"revision\":([0-9]+)");
  for (std::string& l : lines) {
    std::string out;
    auto begin = l.cbegin();
    std::smatch m;
    while (std::regex_search(begin, l.cend(), m, re)) {
      out.append(begin, m[0].first);
      absl::StrAppend(&out, "\"revision\":", std::stoll(m[1].str()) % 1'000'000'000);
      begin = m[0].second;
    }
    out.append(begin, l.cend());
    l = std::move(out);
  }
  return lines;
}

TEST(CompatTest, TheFixtureCarriesTheOldHashAndTheLegacyHashReproducesIt) {
  ParseResult job = LoadJobSpec((kFixture / "job.yaml").string());
  ASSERT_TRUE(job.ok()) << job.errors[0].ToString();
  EXPECT_EQ(LegacyJobGraphHash(job.spec), kOldGraphHash);
  EXPECT_NE(JobGraphHash(job.spec), kOldGraphHash);
  EXPECT_TRUE(JobGraphHashMatches(job.spec, kOldGraphHash));
  EXPECT_TRUE(JobGraphHashMatches(job.spec, JobGraphHash(job.spec)));
  EXPECT_FALSE(JobGraphHashMatches(job.spec, "0123456789abcdef"));
  // The hash really is in the checked-in manifests.
  EXPECT_THAT(ReadFile(kFixture / "savepoint/sp/savepoint.manifest"), HasSubstr(kOldGraphHash));
  EXPECT_THAT(ReadFile(kFixture / "midstream/data/checkpoints/compat/task-0/chk-10.manifest"),
              HasSubstr(kOldGraphHash));
}

// The run killed mid-stream resumes from the old checkpoint 10 and ends with
// exactly the outputs of an uninterrupted run of today's code.
TEST(CompatTest, AnOldMidStreamCheckpointRestoresAndTheRunEndsExact) {
  TempDir tmp("compat", "KEEP_COMPAT_DIR", "compat");
  ASSERT_FALSE(tmp.path().empty());
  const fs::path ref = tmp.path() / "reference", resumed = tmp.path() / "resumed";
  fs::create_directories(ref);
  fs::create_directories(resumed / "data");
  CopyJob(ref);
  CopyJob(resumed);
  fs::copy(kFixture / "midstream/out", resumed / "out", fs::copy_options::recursive);
  fs::copy(kFixture / "midstream/data/checkpoints", resumed / "data/checkpoints",
           fs::copy_options::recursive);

  const RunResult fresh = Caravela(ref, "--data-dir data");
  ASSERT_EQ(fresh.exit_code, 0) << fresh.log;
  const RunResult run = Caravela(resumed, "--data-dir data");
  ASSERT_EQ(run.exit_code, 0) << run.log;
  EXPECT_THAT(run.log, HasSubstr("restored checkpoint 10"));
  EXPECT_THAT(run.log, HasSubstr("this run is epoch 1"));
  for (const char* name : kOutputs) {
    const std::string file = absl::StrCat("out/", name, ".jsonl");
    const std::vector<std::string> want = ReadLines(ref / file);
    EXPECT_FALSE(want.empty() && std::string(name) != "too_late") << file;
    EXPECT_EQ(WithoutEpochs(ReadLines(resumed / file)), want) << file;
  }
}

// The old end-of-input savepoint restores into a fresh data dir: nothing is
// read or emitted again, and a record appended to an input afterwards is
// read from the saved offset and judged by the saved watermark (+inf: too
// late for the dedup, so it lands in the dead letter).
TEST(CompatTest, AnOldSavepointRestoresWithItsOffsetsAndWatermarks) {
  TempDir tmp("compat_sp", "KEEP_COMPAT_DIR", "compat");
  ASSERT_FALSE(tmp.path().empty());
  const fs::path dir = tmp.path();
  CopyJob(dir);
  fs::copy(kFixture / "savepoint/out", dir / "out", fs::copy_options::recursive);
  std::ofstream(dir / "purchases.jsonl", std::ios::app)
      << R"({"event_id":"appended","country":"PT","currency":"EUR","amount":5.5,)"
      << R"("ts":"2026-10-01T13:30:00.000Z","at":1790862000000})"
      << "\n";

  const RunResult run = Caravela(
      dir, absl::StrCat("--data-dir data --from-savepoint ", (kFixture / "savepoint/sp").string()));
  ASSERT_EQ(run.exit_code, 0) << run.log;
  EXPECT_THAT(run.log, HasSubstr("restored savepoint 34"));
  for (const char* name : kOutputs) {
    const std::string file = absl::StrCat("out/", name, ".jsonl");
    std::vector<std::string> want = ReadLines(kFixture / "savepoint" / file);
    std::vector<std::string> got = ReadLines(dir / file);
    if (std::string(name) == "dead-letter") {
      ASSERT_EQ(got.size(), want.size() + 1);
      EXPECT_THAT(got.back(), HasSubstr(R"("side_output":"unique.too_late")"));
      EXPECT_THAT(got.back(), HasSubstr(R"("reason":"beyond_retention")"));
      EXPECT_THAT(got.back(), HasSubstr(R"("event_id":"appended")"));
      got.pop_back();
    }
    EXPECT_EQ(got, want) << file;
  }
}

// A graph the old savepoint does not fit is still refused.
TEST(CompatTest, AnOldSavepointOfAnotherGraphIsRefused) {
  TempDir tmp("compat_other", "KEEP_COMPAT_DIR", "compat");
  ASSERT_FALSE(tmp.path().empty());
  const fs::path dir = tmp.path();
  CopyJob(dir);
  std::string job = ReadFile(dir / "job.yaml");
  job.replace(job.find("- name: positive"), 16, "- name: positive2");
  job.replace(job.find("from: positive,"), 15, "from: positive2,");
  std::ofstream(dir / "job.yaml", std::ios::trunc) << job;
  const RunResult run = Caravela(
      dir, absl::StrCat("--data-dir data --from-savepoint ", (kFixture / "savepoint/sp").string()));
  EXPECT_EQ(run.exit_code, 1) << run.log;
  EXPECT_THAT(run.log, HasSubstr("different job graph"));
}

// The parallel fixture's job and its input (kept gzipped) in `dir`.
void CopyParallelJob(const fs::path& dir) {
  const fs::path fixture = kFixture / "parallel";
  fs::copy_file(fixture / "job.yaml", dir / "job.yaml");
  const std::string gunzip = absl::StrCat("gzip -dc ", (fixture / "purchases.jsonl.gz").string(),
                                          " > ", (dir / "purchases.jsonl").string());
  ASSERT_EQ(std::system(gunzip.c_str()), 0);
}

// The FINAL window lines of every part file under `dir`/out, revisions
// removed (a resumed run numbers them in its own epoch), sorted.
std::vector<std::string> FinalLines(const fs::path& dir) {
  static const std::regex revision(",?\"revision\":[0-9]+");
  std::vector<std::string> out;
  for (const auto& entry : fs::directory_iterator(dir / "out")) {
    if (entry.path().extension() != ".jsonl") continue;
    for (const std::string& l : ReadLines(entry.path())) {
      if (l.find("\"state\":\"FINAL\"") != std::string::npos) {
        out.push_back(std::regex_replace(l, revision, ""));
      }
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

// A parallel checkpoint from before key groups (tests/compat/parallel/: its
// tasks owned keys by hash % tasks) restores at the same parallelism by
// gathering every key into the task of its key group, and the run ends with
// the FINAL results of an uninterrupted run: no key's dedup or window state is
// lost or split.
TEST(CompatTest, AParallelCheckpointFromBeforeKeyGroupsRegroupsItsKeys) {
  TempDir tmp("compat_parallel", "KEEP_COMPAT_DIR", "compat");
  ASSERT_FALSE(tmp.path().empty());
  const fs::path fixture = kFixture / "parallel";
  const fs::path ref = tmp.path() / "reference", resumed = tmp.path() / "resumed";
  for (const fs::path& dir : {ref, resumed}) {
    fs::create_directories(dir / "data");
    ASSERT_NO_FATAL_FAILURE(CopyParallelJob(dir));
  }
  fs::copy(fixture / "data/checkpoints", resumed / "data/checkpoints", fs::copy_options::recursive);

  const RunResult fresh = Caravela(ref, "--data-dir data");
  ASSERT_EQ(fresh.exit_code, 0) << fresh.log;
  const RunResult run = Caravela(resumed, "--data-dir data");
  ASSERT_EQ(run.exit_code, 0) << run.log;
  EXPECT_THAT(run.log, HasSubstr("checkpoint 1 predates key groups"));
  EXPECT_THAT(run.log, HasSubstr("of checkpoint 1 from 2 of 2 old tasks"));
  const std::vector<std::string> want = FinalLines(ref);
  EXPECT_GT(want.size(), 50u);
  EXPECT_EQ(FinalLines(resumed), want);
}

// A job with state keeps its max_parallelism: a checkpoint taken with 128
// key groups is refused under spec.max_parallelism 64, naming both and what
// to do.
TEST(CompatTest, ACheckpointWithOtherKeyGroupsIsRefused) {
  TempDir tmp("compat_keygroups", "KEEP_COMPAT_DIR", "compat");
  ASSERT_FALSE(tmp.path().empty());
  const fs::path dir = tmp.path();
  ASSERT_NO_FATAL_FAILURE(CopyParallelJob(dir));
  const std::string killed =
      absl::StrCat("cd ", dir.string(), " && CARAVELA_FAILPOINT=checkpoint.after_sink_commit:3 ",
                   CARAVELA_BINARY, " run -q --data-dir data job.yaml > first.log 2>&1");
  const int rc = std::system(killed.c_str());
  ASSERT_TRUE(WIFSIGNALED(rc) || (WIFEXITED(rc) && WEXITSTATUS(rc) == 128 + SIGKILL))
      << ReadFile(dir / "first.log");
  ASSERT_TRUE(fs::exists(dir / "data/checkpoints/legacy/job-checkpoint"));
  std::string job = ReadFile(dir / "job.yaml");
  job.replace(job.find("  parallelism: 2\n"), 17, "  parallelism: 2\n  max_parallelism: 64\n");
  std::ofstream(dir / "job.yaml", std::ios::trunc) << job;
  const RunResult run = Caravela(dir, "--data-dir data");
  EXPECT_NE(run.exit_code, 0) << run.log;
  EXPECT_THAT(run.log, HasSubstr("divides its state into 128 key groups, but "
                                 "spec.max_parallelism is 64"));
  EXPECT_THAT(run.log, HasSubstr("set it back to 128"));
}

}  // namespace
}  // namespace caravela
