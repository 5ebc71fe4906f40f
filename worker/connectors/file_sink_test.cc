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
  ASSERT_TRUE(old_sink.Open().ok());
  ASSERT_TRUE(old_sink.Recover(0, "").ok());
  ASSERT_TRUE(Write(old_sink, "a1").ok());
  auto state = old_sink.PreCommit(1);
  ASSERT_TRUE(state.ok()) << state.status();
  ASSERT_TRUE(old_sink.Commit(1).ok());
  ASSERT_TRUE(Write(old_sink, "a2").ok());
  auto state2 = old_sink.PreCommit(2);  // stored, never completed job-wide
  ASSERT_TRUE(state2.ok());
  ASSERT_TRUE(Write(old_sink, "a3").ok());
  EXPECT_EQ(Content(), "a1\n");

  // Epoch 2 restores checkpoint 1 of the task.
  FileSink new_sink(path_, true, false, /*fence_epoch=*/2);
  ASSERT_TRUE(new_sink.Open().ok());
  ASSERT_TRUE(new_sink.Recover(1, *state).ok());
  ASSERT_TRUE(Write(new_sink, "b2").ok());

  // The old writer resumes: fenced everywhere.
  absl::Status committed = old_sink.Commit(2);
  EXPECT_TRUE(absl::IsFailedPrecondition(committed)) << committed;
  EXPECT_THAT(committed.message(), HasSubstr("epoch 2"));
  EXPECT_TRUE(absl::IsFailedPrecondition(old_sink.PreCommit(3).status()));
  EXPECT_EQ(Content(), "a1\n");

  auto s = new_sink.PreCommit(2);
  ASSERT_TRUE(s.ok()) << s.status();
  ASSERT_TRUE(new_sink.Commit(2).ok());
  EXPECT_EQ(Content(), "a1\nb2\n");
  // A late opener of the old epoch is refused.
  FileSink late(path_, true, false, 1);
  EXPECT_TRUE(absl::IsFailedPrecondition(late.Open()));
}

// Output of a task that ran on another worker's disk before: the file here
// holds less than the checkpoint committed. A local sink goes on; a shared
// one (or a single process) says the file was modified.
TEST_F(FileSinkTest, ALocalFileOfAMovedTaskGoesOnFromWhatIsHere) {
  FileSink local(path_, true, /*local=*/true, 2);
  ASSERT_TRUE(local.Open().ok());
  EXPECT_TRUE(local.Recover(5, "100 120").ok());
  ASSERT_TRUE(Write(local, "x").ok());
  ASSERT_TRUE(local.PreCommit(6).ok());
  ASSERT_TRUE(local.Commit(6).ok());
  EXPECT_EQ(Content(), "x\n");

  std::filesystem::remove(path_);
  FileSink shared(path_, true, /*local=*/false, 3);
  ASSERT_TRUE(shared.Open().ok());
  absl::Status st = shared.Recover(6, "0 120");
  EXPECT_TRUE(absl::IsDataLoss(st)) << st;
  EXPECT_THAT(st.message(), HasSubstr("was it modified"));
}

}  // namespace
}  // namespace caravela
