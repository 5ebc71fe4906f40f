// FileSink's checkpoint protocol with epoch fencing (cluster jobs) and
// local files of a task that moved, on a real temp directory.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "worker/connectors/file_connectors.h"
#include "worker/testing/status_testing.h"

namespace caravela {
namespace {

using ::testing::HasSubstr;

class FileSinkTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::path(::testing::TempDir()) /
           absl::StrCat("file_sink_test_", ::getpid(), "_",
                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    path_ = (dir_ / "out.jsonl").string();
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string Content() const {
    std::ifstream in(path_);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }
  static absl::Status Write(FileSink& sink, const std::string& line) {
    SinkRecord r;
    r.value = line;
    return sink.WriteRecord(r);
  }

  std::filesystem::path dir_;
  std::string path_;
};

// A paused worker's sink (epoch 1) resumes after epoch 2 opened the same
// file: it can neither publish a checkpoint nor prepare one; epoch 2 goes on.
TEST_F(FileSinkTest, ANewerEpochFencesTheOldWriter) {
  FileSink old_sink(path_, /*checkpointed=*/true, /*local=*/false, /*fence_epoch=*/1);
  ASSERT_OK(old_sink.Open());
  ASSERT_OK(old_sink.Recover(0, ""));
  ASSERT_OK(Write(old_sink, "a1"));
  auto state = old_sink.PreCommit(1);
  ASSERT_TRUE(state.ok()) << state.status();
  ASSERT_OK(old_sink.Commit(1));
  ASSERT_OK(Write(old_sink, "a2"));
  auto state2 = old_sink.PreCommit(2);  // stored, never completed job-wide
  ASSERT_OK(state2);
  ASSERT_OK(Write(old_sink, "a3"));
  EXPECT_EQ(Content(), "a1\n");

  // Epoch 2 restores checkpoint 1 of the task.
  FileSink new_sink(path_, true, false, /*fence_epoch=*/2);
  ASSERT_OK(new_sink.Open());
  ASSERT_OK(new_sink.Recover(1, *state));
  ASSERT_OK(Write(new_sink, "b2"));

  // The old writer resumes: fenced everywhere.
  absl::Status committed = old_sink.Commit(2);
  EXPECT_TRUE(absl::IsFailedPrecondition(committed)) << committed;
  EXPECT_THAT(committed.message(), HasSubstr("epoch 2"));
  EXPECT_TRUE(absl::IsFailedPrecondition(old_sink.PreCommit(3).status()));
  EXPECT_EQ(Content(), "a1\n");

  auto s = new_sink.PreCommit(2);
  ASSERT_TRUE(s.ok()) << s.status();
  ASSERT_OK(new_sink.Commit(2));
  EXPECT_EQ(Content(), "a1\nb2\n");
  // A late opener of the old epoch is refused.
  FileSink late(path_, true, false, 1);
  EXPECT_TRUE(absl::IsFailedPrecondition(late.Open()));
}

// A checkpoint with nothing written publishes nothing (no pending file, no
// fsync); restoring it keeps what was committed before it.
TEST_F(FileSinkTest, ACheckpointWithNothingWrittenPublishesNothing) {
  FileSink sink(path_, /*checkpointed=*/true, /*local=*/false, /*fence_epoch=*/1);
  ASSERT_OK(sink.Open());
  ASSERT_OK(sink.Recover(0, ""));
  ASSERT_OK(Write(sink, "a1"));
  ASSERT_OK(sink.PreCommit(1).status());
  ASSERT_OK(sink.Commit(1));
  auto empty = sink.PreCommit(2);
  ASSERT_OK(empty.status());
  EXPECT_EQ(*empty, "3 3");
  EXPECT_FALSE(std::filesystem::exists(path_ + ".pending-2"));
  ASSERT_OK(sink.Commit(2));
  ASSERT_OK(Write(sink, "a3"));
  ASSERT_OK(sink.PreCommit(3).status());
  ASSERT_OK(sink.Commit(3));
  EXPECT_EQ(Content(), "a1\na3\n");
  ASSERT_OK(sink.Close());
  // Restored at checkpoint 2 (a3 came after it): a3 goes.
  FileSink restored(path_, true, false, /*fence_epoch=*/2);
  ASSERT_OK(restored.Open());
  ASSERT_OK(restored.Recover(2, *empty));
  EXPECT_EQ(Content(), "a1\n");
}

// One writer per output: a job's fence refuses a writer of another job at
// its epoch or below for good (PermissionDenied, naming the path and the
// job); a later job (a higher epoch: the coordinator numbers epochs above
// every job that wrote the output) takes it over.
TEST_F(FileSinkTest, AnotherJobsFenceRefusesForGoodUntilAHigherEpochTakesItOver) {
  FileSink first(path_, true, false, /*fence_epoch=*/3, "revenue-1");
  ASSERT_OK(first.Open());
  ASSERT_OK(first.Recover(0, ""));
  ASSERT_OK(Write(first, "r1"));
  ASSERT_OK(first.PreCommit(1));
  ASSERT_OK(first.Commit(1));

  for (int64_t epoch : {1, 3}) {
    FileSink other(path_, true, false, epoch, "copy-2");
    const absl::Status st = other.Open();
    EXPECT_TRUE(absl::IsPermissionDenied(st)) << st;
    EXPECT_THAT(st.message(), HasSubstr(absl::StrCat("file sink ", path_,
                                                     ": job revenue-1 writes "
                                                     "this output (epoch 3); this is job copy-2")));
  }
  // The first job goes on, untouched.
  ASSERT_OK(Write(first, "r2"));
  ASSERT_OK(first.PreCommit(2));
  ASSERT_OK(first.Commit(2));
  EXPECT_EQ(Content(), "r1\nr2\n");

  FileSink later(path_, true, false, /*fence_epoch=*/4, "copy-2");
  ASSERT_OK(later.Open());
  ASSERT_OK(later.Recover(0, ""));
  EXPECT_EQ(Content(), "");
  // Now the first job's writer is the fenced one (of another job, below).
  EXPECT_TRUE(absl::IsPermissionDenied(first.PreCommit(3).status()));
  // A fence written before fences named jobs counts as this job's.
  std::ofstream(path_ + ".fence", std::ios::trunc) << "5";
  FileSink same(path_, true, false, 5, "copy-2");
  EXPECT_OK(same.Open());
}

// Output of a task that ran on another worker's disk before: the file here
// holds less than the checkpoint committed. A local sink goes on; a shared
// one (or a single process) says the file was modified.
TEST_F(FileSinkTest, ALocalFileOfAMovedTaskGoesOnFromWhatIsHere) {
  FileSink local(path_, true, /*local=*/true, 2);
  ASSERT_OK(local.Open());
  EXPECT_OK(local.Recover(5, "100 120"));
  ASSERT_OK(Write(local, "x"));
  ASSERT_OK(local.PreCommit(6));
  ASSERT_OK(local.Commit(6));
  EXPECT_EQ(Content(), "x\n");

  std::filesystem::remove(path_);
  FileSink shared(path_, true, /*local=*/false, 3);
  ASSERT_OK(shared.Open());
  absl::Status st = shared.Recover(6, "0 120");
  EXPECT_TRUE(absl::IsDataLoss(st)) << st;
  EXPECT_THAT(st.message(), HasSubstr("was it modified"));
}

}  // namespace
}  // namespace caravela
