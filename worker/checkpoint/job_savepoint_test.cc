// Job savepoints against the real RocksDB backend and FileStorage: the
// checkpoint of a two-task job is copied out, checked, imported into a fresh
// storage and restored there with the same state.
#include "worker/checkpoint/job_savepoint.h"

#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/checkpoint/checkpoint_manager.h"
#include "worker/state/state_backend.h"
#include "worker/testing/operator_harness.h"
#include "worker/testing/status_testing.h"

namespace caravela {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

using Table = std::map<std::string, std::string>;

class JobSavepointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::path(::testing::TempDir()) / "caravela_jobsp_XXXXXX").string();
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    root_ = tmpl;
    url_ = "file://" + root_ + "/store";
  }
  void TearDown() override { RemoveTree(root_); }

  // Task `task` stores checkpoints 1..`id` of `rows` rows (values by id).
  void StoreTask(int task, int64_t id, int rows) {
    auto backend = OpenRocksDbBackend(absl::StrCat(root_, "/db-", task));
    ASSERT_OK(backend.status());
    auto mgr =
        CheckpointManager::Open(url_, "orders", task, absl::StrCat(root_, "/scratch-", task), 2);
    ASSERT_OK(mgr.status());
    for (int64_t c = 1; c <= id; ++c) {
      auto t = (*backend)->OpenTable("sums");
      ASSERT_OK(t.status());
      for (int i = 0; i < rows; ++i) {
        (*t)->Put(absl::StrCat("t", task, "-k", i), absl::StrCat("v", c * 1000 + i));
      }
      ASSERT_OK((*backend)->Commit());
      CheckpointManifest m;
      m.set_checkpoint_id(c);
      m.set_epoch(3 + task);
      m.set_spec_hash("graph-1");
      ASSERT_OK((*mgr)->Write(**backend, std::move(m)).status());
    }
  }

  // The state of `task`'s checkpoint `id` in the storage at `url`.
  Table Restored(const std::string& url, int task, int64_t id) {
    auto mgr =
        CheckpointManager::Open(url, "orders", task, absl::StrCat(root_, "/rs-scratch-", task), 2);
    EXPECT_OK(mgr.status());
    auto m = (*mgr)->LatestUpTo(id);
    EXPECT_OK(m.status());
    EXPECT_TRUE(m->has_value());
    if (!m.ok() || !m->has_value()) return {};
    EXPECT_EQ((**m).checkpoint_id(), id);
    const std::string dir = absl::StrCat(root_, "/restored-", task, "-", counter_++);
    auto backend = OpenRocksDbBackend(dir);
    EXPECT_OK(backend.status());
    EXPECT_OK((*mgr)->RestoreState(**m, **backend).status());
    auto t = (*backend)->OpenTable("sums");
    EXPECT_OK(t.status());
    Table out;
    EXPECT_OK((*t)->Scan("", "", [&](std::string_view k, std::string_view v) {
      out.emplace(k, v);
      return true;
    }));
    return out;
  }

  JobCheckpointRef Ref(int64_t id) {
    JobCheckpointRef ref;
    ref.storage_url = url_;
    ref.job_name = "orders";
    ref.job_id = "orders-1";
    ref.tasks = 2;
    ref.parallelism = 1;
    ref.checkpoint_id = id;
    return ref;
  }

  std::string root_, url_;
  int counter_ = 0;
};

TEST_F(JobSavepointTest, CopiesEveryTasksCheckpointAndRestoresItElsewhere) {
  StoreTask(0, 3, 500);
  StoreTask(1, 3, 300);
  const std::string dir = root_ + "/sp";
  absl::StatusOr<JobSavepoint> written = WriteJobSavepoint(Ref(3), dir);
  ASSERT_OK(written.status());
  const JobSavepoint& sp = *written;
  EXPECT_EQ(sp.job_name(), "orders");
  EXPECT_EQ(sp.checkpoint_id(), 3);
  EXPECT_EQ(sp.tasks(), 2);
  EXPECT_EQ(sp.epoch(), 4);  // the highest of the tasks' epochs
  EXPECT_EQ(sp.spec_hash(), "graph-1");
  EXPECT_GT(sp.files(), 0);
  EXPECT_TRUE(fs::exists(dir + "/job-savepoint.json"));

  absl::StatusOr<JobSavepoint> loaded = ReadJobSavepoint(dir);
  ASSERT_OK(loaded.status());
  const JobSavepoint& read = *loaded;
  EXPECT_EQ(read.SerializeAsString(), sp.SerializeAsString());

  // A storage that never saw the job restores checkpoint 3 of both tasks.
  const std::string other = "file://" + root_ + "/other-store";
  ASSERT_OK(ImportJobSavepoint(dir, read, other));
  for (int task = 0; task < 2; ++task) {
    const Table want = Restored(url_, task, 3);
    EXPECT_EQ(want.size(), task == 0 ? 500u : 300u);
    EXPECT_EQ(want.at(absl::StrCat("t", task, "-k7")), "v3007");
    EXPECT_EQ(Restored(other, task, 3), want) << "task " << task;
  }
  // Importing again (files already there) is harmless.
  ASSERT_OK(ImportJobSavepoint(dir, read, other));
  EXPECT_EQ(Restored(other, 1, 3).size(), 300u);
}

TEST_F(JobSavepointTest, RefusesAnExistingSavepointAndMissingParts) {
  StoreTask(0, 2, 50);
  StoreTask(1, 2, 50);
  const std::string dir = root_ + "/sp";
  ASSERT_OK(WriteJobSavepoint(Ref(2), dir).status());
  EXPECT_THAT(WriteJobSavepoint(Ref(2), dir).status().message(), HasSubstr("exists already"));

  // A checkpoint one task does not have.
  auto missing = WriteJobSavepoint(Ref(9), root_ + "/sp9");
  EXPECT_TRUE(absl::IsDataLoss(missing.status())) << missing.status();
  EXPECT_THAT(missing.status().message(), HasSubstr("task 0 of job orders: checkpoint 9"));
  EXPECT_FALSE(fs::exists(root_ + "/sp9/job-savepoint.json"));

  // No savepoint at all, and one whose state file was truncated.
  EXPECT_TRUE(absl::IsNotFound(ReadJobSavepoint(root_ + "/nothing").status()));
  std::string victim;
  for (const auto& e : fs::recursive_directory_iterator(dir + "/state/orders/task-1")) {
    if (e.is_regular_file() && e.path().extension() == ".sst") victim = e.path().string();
  }
  ASSERT_FALSE(victim.empty());
  fs::resize_file(victim, 10);
  auto torn = ReadJobSavepoint(dir);
  EXPECT_TRUE(absl::IsDataLoss(torn.status())) << torn.status();
  EXPECT_THAT(torn.status().message(), HasSubstr("incomplete"));
  EXPECT_THAT(torn.status().message(), HasSubstr("task-1"));
}

TEST_F(JobSavepointTest, RefusesANewerLayout) {
  fs::create_directories(root_ + "/future");
  std::ofstream(root_ + "/future/job-savepoint.json")
      << R"({"layout_version": 9, "job_name": "orders", "checkpoint_id": 1, "tasks": 1})";
  auto sp = ReadJobSavepoint(root_ + "/future");
  EXPECT_TRUE(absl::IsFailedPrecondition(sp.status())) << sp.status();
  EXPECT_THAT(sp.status().message(), HasSubstr("layout version 9"));
}

}  // namespace
}  // namespace caravela
