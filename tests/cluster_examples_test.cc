// One answer (issue 29): every example job under config/examples/<name>/
// submitted to `caravela local` (a broker, a coordinator and two worker
// processes) writes its expected/ output in the workers' shared directory,
// byte for byte, as `caravela run` does (tests/golden_test.cc, suite
// Examples). The shared directory is a copy of the example's directory, so
// the job's relative paths resolve as they do beside its job file. The
// examples replay their input in arrival order (every source has an
// arrival_field): on a cluster such a job runs in one task, and a request
// for more is refused with the reason. A job missing an input file fails at
// once and, once the file is there, `caravela restart` runs it.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "coordinator/job_client.h"
#include "tests/child_process.h"
#include "tests/test_util.h"
#include "worker/testing/status_testing.h"

namespace caravela {
namespace {

namespace fs = std::filesystem;
using milliseconds = std::chrono::milliseconds;

std::vector<std::string> Examples() {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(fs::path(CARAVELA_SOURCE_DIR) / "config/examples")) {
    if (e.is_directory() && fs::exists(e.path() / "job.yaml") &&
        fs::is_directory(e.path() / "expected")) {
      names.push_back(e.path().filename().string());
    }
  }
  std::sort(names.begin(), names.end());
  return names;
}

// The files a reader of the results sees: not the sinks' fences and
// uncommitted pending files.
bool IsResult(const fs::path& p) {
  const std::string name = p.filename().string();
  return !absl::EndsWith(name, ".fence") && !absl::StrContains(name, ".pending");
}

class ClusterExamplesTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    tmp_ = std::make_unique<TempDir>("cluster-examples", "CARAVELA_KEEP_TEST_DIRS",
                                     "cluster examples test");
    example_ = fs::path(CARAVELA_SOURCE_DIR) / "config/examples" / GetParam();
    shared_ = tmp_->path() / "shared";
    fs::create_directories(shared_);
    for (const auto& e : fs::directory_iterator(example_)) {
      const std::string name = e.path().filename().string();
      if (name == "expected" || name == "out") continue;
      fs::copy(e.path(), shared_ / name, fs::copy_options::recursive);
    }
    local_ = std::make_unique<ChildProcess>(
        std::vector<std::string>{CARAVELA_BINARY, "local", "--workers", "2", "--listen",
                                 "127.0.0.1:0", "--data-dir", (tmp_->path() / "local").string(),
                                 "--shared-dir", shared_.string()},
        tmp_->path() / "local.log");
    address_ = local_->WaitFor(R"(coordinator=(\S+))", milliseconds(20000));
    ASSERT_FALSE(address_.empty()) << local_->Log();
    // Both workers registered: the job may land on either.
    ASSERT_TRUE(Eventually(
        [&] {
          auto w = JobClient(address_, "").Workers();
          return w.ok() && w->size() == 2;
        },
        milliseconds(20000)))
        << local_->Log();
  }

  std::unique_ptr<TempDir> tmp_;
  fs::path example_, shared_;
  std::unique_ptr<ChildProcess> local_;
  std::string address_;
};

TEST_P(ClusterExamplesTest, WritesItsExpectedOutputInTheSharedDirectory) {
  const std::string yaml = ReadFile(example_ / "job.yaml");
  JobClient client(address_, "");
  // More than one task is refused: a replay in arrival order runs in one.
  auto refused = client.Submit(yaml, 2);
  ASSERT_OK(refused.status());
  ASSERT_EQ(refused->errors_size(), 1) << refused->DebugString();
  EXPECT_EQ(refused->errors(0).path(), "spec.parallelism");
  EXPECT_THAT(refused->errors(0).message(), ::testing::HasSubstr("arrival order"));

  auto submitted = client.Submit(yaml, 0);
  ASSERT_OK(submitted.status());
  ASSERT_EQ(submitted->errors_size(), 0) << submitted->DebugString();
  const std::string id = submitted->job_id();
  v1::Job job;
  ASSERT_TRUE(Eventually(
      [&] {
        auto j = client.Get(id);
        if (j.ok()) job = *j;
        return j.ok() && (j->state() == v1::FINISHED || j->state() == v1::FAILED);
      },
      milliseconds(60000)))
      << job.DebugString() << local_->Log();
  ASSERT_EQ(job.state(), v1::FINISHED) << job.DebugString() << local_->Log();

  const fs::path expected = example_ / "expected";
  int compared = 0;
  for (const auto& e : fs::recursive_directory_iterator(expected)) {
    if (!e.is_regular_file()) continue;
    const fs::path rel = fs::relative(e.path(), expected);
    ++compared;
    ASSERT_TRUE(fs::exists(shared_ / rel)) << rel << " was not written in the shared directory";
    EXPECT_EQ(ReadFile(shared_ / rel), ReadFile(e.path())) << "differs from expected/: " << rel;
  }
  EXPECT_GT(compared, 0);
  for (const auto& e : fs::recursive_directory_iterator(shared_ / "out")) {
    if (!e.is_regular_file() || !IsResult(e.path())) continue;
    const fs::path rel = fs::relative(e.path(), shared_);
    EXPECT_TRUE(fs::exists(expected / rel)) << "unexpected output " << rel;
  }
  // Nothing went to a worker's own disk.
  for (const auto& e : fs::recursive_directory_iterator(tmp_->path() / "local")) {
    EXPECT_FALSE(e.is_regular_file() && e.path().extension() == ".jsonl")
        << "a job file on a worker's disk: " << e.path();
  }
}

// A job whose input file is missing fails at once (the reason, no
// restarts: it would fail the same way each time); once the file is there,
// `caravela restart` runs it again and it gives its expected output.
class ClusterRestartTest : public ClusterExamplesTest {};

TEST_P(ClusterRestartTest, AJobMissingAFileFailsAtOnceAndRunsOnceRestarted) {
  fs::rename(shared_ / "payments.jsonl", tmp_->path() / "payments.jsonl");
  JobClient client(address_, "");
  auto submitted = client.Submit(ReadFile(example_ / "job.yaml"), 0);
  ASSERT_OK(submitted.status());
  ASSERT_EQ(submitted->errors_size(), 0) << submitted->DebugString();
  const std::string id = submitted->job_id();
  v1::Job job;
  ASSERT_TRUE(Eventually(
      [&] {
        auto j = client.Get(id);
        if (j.ok()) job = *j;
        return j.ok() && job.state() == v1::FAILED;
      },
      milliseconds(30000)))
      << job.DebugString() << local_->Log();
  EXPECT_THAT(job.message(), ::testing::HasSubstr("payments.jsonl"));
  EXPECT_THAT(job.message(), ::testing::HasSubstr("caravela restart " + id));
  EXPECT_EQ(job.epoch(), 1) << "a permanent failure burns no epochs";
  const CliResult shown = Cli("job " + id + " --coordinator " + address_, tmp_->path());
  EXPECT_THAT(shown.out, ::testing::HasSubstr("caravela restart " + id)) << shown.out;

  fs::rename(tmp_->path() / "payments.jsonl", shared_ / "payments.jsonl");
  const CliResult restarted = Cli("restart " + id + " --coordinator " + address_, tmp_->path());
  ASSERT_EQ(restarted.code, 0) << restarted.out;
  EXPECT_THAT(restarted.out, ::testing::HasSubstr("SUBMITTED"));
  ASSERT_TRUE(Eventually(
      [&] {
        auto j = client.Get(id);
        if (j.ok()) job = *j;
        return j.ok() && (job.state() == v1::FINISHED || job.state() == v1::FAILED);
      },
      milliseconds(60000)))
      << job.DebugString() << local_->Log();
  ASSERT_EQ(job.state(), v1::FINISHED) << job.DebugString() << local_->Log();
  EXPECT_EQ(job.epoch(), 2);
  for (const auto& e : fs::recursive_directory_iterator(example_ / "expected")) {
    if (!e.is_regular_file()) continue;
    const fs::path rel = fs::relative(e.path(), example_ / "expected");
    EXPECT_EQ(ReadFile(shared_ / rel), ReadFile(e.path())) << "differs from expected/: " << rel;
  }
  // A finished job does not restart.
  const CliResult again = Cli("restart " + id + " --coordinator " + address_, tmp_->path());
  EXPECT_NE(again.code, 0);
  EXPECT_THAT(again.out, ::testing::HasSubstr("only a FAILED or CANCELED job can be restarted"));
}

// One example is enough.
INSTANTIATE_TEST_SUITE_P(Example, ClusterRestartTest, ::testing::Values("orders-payments"),
                         [](const auto&) { return std::string("orders_payments"); });
INSTANTIATE_TEST_SUITE_P(Examples, ClusterExamplesTest, ::testing::ValuesIn(Examples()),
                         [](const auto& info) {
                           std::string name = info.param;
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name;
                         });

}  // namespace
}  // namespace caravela
