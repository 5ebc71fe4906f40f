#include "worker/checkpoint/file_storage.h"

#include <signal.h>
#include <stdlib.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "common/failpoint.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/testing/operator_harness.h"
#include "worker/testing/status_testing.h"

namespace caravela {
namespace {

namespace fs = std::filesystem;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

std::string MakeTempDir(const std::string& tag) {
  std::string tmpl = (fs::path(::testing::TempDir()) / ("caravela_" + tag + "_XXXXXX")).string();
  char* made = mkdtemp(tmpl.data());
  EXPECT_NE(made, nullptr) << "mkdtemp " << tmpl;
  return tmpl;
}

std::vector<std::string> Keys(CheckpointStorage& s, std::string_view prefix) {
  auto list = s.List(prefix);
  EXPECT_TRUE(list.ok()) << list.status();
  std::vector<std::string> keys;
  if (list.ok()) {
    for (const auto& o : *list) keys.push_back(o.key);
  }
  return keys;
}

// Every regular file under `root`, temporaries included (what is really on disk).
std::vector<std::string> FilesOnDisk(const std::string& root) {
  std::vector<std::string> out;
  for (const auto& e : fs::recursive_directory_iterator(root)) {
    if (e.is_regular_file()) out.push_back(e.path().lexically_relative(root).generic_string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

class FileStorageTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = MakeTempDir("file_storage");
    auto s = OpenCheckpointStorage("file://" + root_ + "/store");
    ASSERT_TRUE(s.ok()) << s.status();
    storage_ = std::move(*s);
  }
  void TearDown() override { RemoveTree(root_); }

  std::string root_;
  std::unique_ptr<CheckpointStorage> storage_;
};

TEST_F(FileStorageTest, WriteReadExistsSizeListDelete) {
  ASSERT_OK(storage_->Write("job/task-0/chk-1.manifest", "hello"));
  ASSERT_OK(storage_->Write("job/task-0/shared/a.sst", std::string(10000, 'x')));
  ASSERT_OK(storage_->Write("job/task-1/x", "y"));

  auto data = storage_->Read("job/task-0/chk-1.manifest");
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(*data, "hello");
  EXPECT_EQ(*storage_->Exists("job/task-0/shared/a.sst"), true);
  EXPECT_EQ(*storage_->Exists("job/task-0/shared/b.sst"), false);
  EXPECT_EQ(*storage_->Exists("job/task-0/shared"), false);  // directories are not objects
  EXPECT_EQ(*storage_->Size("job/task-0/shared/a.sst"), 10000u);
  EXPECT_TRUE(absl::IsNotFound(storage_->Size("nope").status()));
  EXPECT_TRUE(absl::IsNotFound(storage_->Read("nope").status()));

  EXPECT_THAT(Keys(*storage_, "job/task-0/"),
              ElementsAre("job/task-0/chk-1.manifest", "job/task-0/shared/a.sst"));
  EXPECT_THAT(Keys(*storage_, "job/task-0/chk-"), ElementsAre("job/task-0/chk-1.manifest"));
  EXPECT_THAT(Keys(*storage_, "job/"),
              ElementsAre("job/task-0/chk-1.manifest", "job/task-0/shared/a.sst", "job/task-1/x"));
  EXPECT_THAT(Keys(*storage_, "other/"), IsEmpty());

  // Overwrite replaces the whole object.
  ASSERT_OK(storage_->Write("job/task-0/chk-1.manifest", "hi"));
  EXPECT_EQ(*storage_->Read("job/task-0/chk-1.manifest"), "hi");

  ASSERT_OK(storage_->Delete("job/task-0/shared/a.sst"));
  ASSERT_OK(storage_->Delete("job/task-0/shared/a.sst"));        // missing is fine
  EXPECT_FALSE(fs::exists(root_ + "/store/job/task-0/shared"));  // empty dirs go too
  EXPECT_THAT(Keys(*storage_, "job/task-0/"), ElementsAre("job/task-0/chk-1.manifest"));
}

TEST_F(FileStorageTest, UploadAndReadChunksStreamLargeFiles) {
  std::string big;
  for (int i = 0; i < (9 << 20) / 8; ++i) big += "abcdefg" + std::to_string(i % 10);
  std::string local = root_ + "/local.bin";
  std::ofstream(local, std::ios::binary) << big;
  ASSERT_OK(storage_->Upload("k/big.sst", local));
  EXPECT_EQ(*storage_->Size("k/big.sst"), big.size());
  std::string back;
  int chunks = 0;
  ASSERT_TRUE(storage_
                  ->ReadChunks("k/big.sst",
                               [&](std::string_view c) {
                                 back.append(c);
                                 ++chunks;
                                 return absl::OkStatus();
                               })
                  .ok());
  EXPECT_EQ(back, big);
  EXPECT_GT(chunks, 1);
  // An error from the callback stops the read and is returned.
  absl::Status st = storage_->ReadChunks(
      "k/big.sst", [](std::string_view) { return absl::AbortedError("stop"); });
  EXPECT_TRUE(absl::IsAborted(st)) << st;
  absl::Status up = storage_->Upload("k/x", root_ + "/missing");
  EXPECT_FALSE(up.ok());
  EXPECT_THAT(up.message(), HasSubstr(root_ + "/missing"));
  EXPECT_FALSE(*storage_->Exists("k/x"));  // a failed upload leaves nothing visible
  EXPECT_THAT(FilesOnDisk(root_ + "/store"), ElementsAre("k/big.sst"));
}

TEST_F(FileStorageTest, RejectsBadKeys) {
  for (const char* key : {"", "/abs", "a//b", "a/", "../x", "a/./b", ".hidden", "a/.tmp"}) {
    absl::Status st = storage_->Write(key, "x");
    EXPECT_TRUE(absl::IsInvalidArgument(st)) << key << ": " << st;
    EXPECT_THAT(st.message(), HasSubstr("invalid checkpoint storage key")) << key;
  }
}

TEST_F(FileStorageTest, TemporariesAreInvisibleAndStaleOnesAreRemoved) {
  ASSERT_OK(storage_->Write("job/shared/a.sst", "a"));
  // What a write cut short by a crash leaves behind.
  std::string tmp = root_ + "/store/job/shared/.b.sst.tmp.123.0";
  std::ofstream(tmp) << "partial";
  fs::create_directories(root_ + "/store/job/chk-9");  // an empty dir of a crashed checkpoint
  EXPECT_THAT(Keys(*storage_, "job/"), ElementsAre("job/shared/a.sst"));
  EXPECT_FALSE(*storage_->Exists("job/shared/b.sst"));

  auto now_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                    std::chrono::system_clock::now().time_since_epoch())
                    .count();
  // Younger than the cutoff: kept.
  fs::last_write_time(tmp, fs::file_time_type::clock::now());
  ASSERT_OK(storage_->DeleteStaleTemporaries("job/", now_ms - 3600'000));
  EXPECT_TRUE(fs::exists(tmp));
  // Older: removed, with the empty directory.
  ASSERT_OK(storage_->DeleteStaleTemporaries("job/", now_ms + 3600'000));
  EXPECT_FALSE(fs::exists(tmp));
  EXPECT_FALSE(fs::exists(root_ + "/store/job/chk-9"));
  EXPECT_THAT(FilesOnDisk(root_ + "/store"), ElementsAre("job/shared/a.sst"));
}

// A real crash between writing the temporary and renaming it: the object
// keeps its old content and the temporary is invisible.
TEST_F(FileStorageTest, CrashBeforeRenameLeavesOldObject) {
  ASSERT_OK(storage_->Write("job/chk-1.manifest", "old"));
  EXPECT_EXIT(
      {
        ConfigureFailpoints("file_storage.before_rename");
        (void)storage_->Write("job/chk-1.manifest", "new content");
        exit(0);
      },
      ::testing::KilledBySignal(SIGKILL), "failpoint file_storage.before_rename hit 1");
  EXPECT_EQ(*storage_->Read("job/chk-1.manifest"), "old");
  EXPECT_THAT(Keys(*storage_, ""), ElementsAre("job/chk-1.manifest"));
  std::vector<std::string> on_disk = FilesOnDisk(root_ + "/store");
  // The object and the crashed write's temporary.
  EXPECT_THAT(on_disk, ElementsAre(HasSubstr("job/.chk-1.manifest.tmp."), "job/chk-1.manifest"));
}

TEST(OpenCheckpointStorageTest, UrlErrors) {
  // s3:// without credentials in the environment or a credentials file.
  for (const char* v : {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_PROFILE"}) unsetenv(v);
  setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent/credentials", 1);
  auto s3 = OpenCheckpointStorage("s3://bucket/prefix");
  unsetenv("AWS_SHARED_CREDENTIALS_FILE");
  EXPECT_TRUE(absl::IsInvalidArgument(s3.status())) << s3.status();
  EXPECT_THAT(s3.status().message(), HasSubstr("s3://bucket/prefix: no S3 credentials"));
  EXPECT_THAT(s3.status().message(), HasSubstr("/nonexistent/credentials"));
  auto no_bucket = OpenCheckpointStorage("s3:///prefix");
  EXPECT_THAT(no_bucket.status().message(), HasSubstr("names no bucket"));

  auto other = OpenCheckpointStorage("/plain/path");
  EXPECT_TRUE(absl::IsInvalidArgument(other.status())) << other.status();
  EXPECT_THAT(other.status().message(), HasSubstr("'/plain/path'"));
  EXPECT_THAT(other.status().message(), HasSubstr("file:///absolute/dir"));

  auto relative = OpenCheckpointStorage("file://relative/dir");
  EXPECT_TRUE(absl::IsInvalidArgument(relative.status())) << relative.status();
  EXPECT_THAT(relative.status().message(), HasSubstr("file:///absolute/dir"));
}

}  // namespace
}  // namespace caravela
