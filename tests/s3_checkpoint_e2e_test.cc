// `caravela run` with `checkpoint.storage: s3://...` against a real
// S3-protocol server (s3rver on loopback, issue 14): a run SIGKILLed after a
// checkpoint's files went up but before its manifest, then restarted,
// publishes the same results as an uninterrupted run with file://
// checkpoints; the bucket holds the job's checkpoints; a wrong credential or
// an unreachable endpoint fails the run with a message naming the URL.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "tests/purchases_input.h"
#include "tests/test_util.h"
#include "worker/checkpoint/checkpoint_storage.h"
#include "worker/testing/s3_server.h"
#include "worker/testing/status_testing.h"

namespace caravela {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

std::string Job(const std::string& storage) { return PurchasesRevenueJob("s3-e2e", storage); }

class S3CheckpointE2ETest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto s = S3Server::Start();
    ASSERT_OK(s.status());
    server_ = std::move(*s);
    server_->ExportEnvironment();  // for the caravela processes this test starts
    dir_ = std::make_unique<TempDir>("s3_e2e", "CARAVELA_KEEP_TEST_DIRS", "s3 checkpoint test");
    WritePurchases(Dir() / "input.jsonl", 3000);
  }
  fs::path Dir() const { return dir_->path(); }
  int Run(const std::string& storage, const std::string& data, const std::string& env = "") {
    std::ofstream(Dir() / "job.yaml", std::ios::trunc) << Job(storage);
    const std::string cmd = absl::StrCat("cd '", Dir().string(), "' && ", env, " ", CARAVELA_BINARY,
                                         " run -q job.yaml --data-dir ", data, " > run.log 2>&1");
    const int rc = std::system(cmd.c_str());
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
  }
  // The FINAL results of the file sink, sorted (revisions' epochs differ
  // between runs; the values must not).
  std::vector<std::string> Finals() {
    std::vector<std::string> out;
    for (const std::string& line : ReadLines(Dir() / "out/revenue.jsonl")) {
      if (line.find(R"("state":"FINAL")") == std::string::npos) continue;
      out.push_back(line.substr(0, line.find(R"(,"revision")")));
    }
    std::sort(out.begin(), out.end());
    return out;
  }

  std::unique_ptr<S3Server> server_;
  std::unique_ptr<TempDir> dir_;
};

TEST_F(S3CheckpointE2ETest, CrashBetweenUploadAndManifestRecoversFromTheBucket) {
  ASSERT_EQ(Run("file://" + (Dir() / "ckpt").string(), "data0"), 0) << ReadFile(Dir() / "run.log");
  const std::vector<std::string> expected = Finals();
  ASSERT_GE(expected.size(), 18u);

  const std::string url = absl::StrCat("s3://", S3Server::kBucket, "/jobs");
  fs::remove_all(Dir() / "out");
  const int killed = Run(url, "data1", "CARAVELA_FAILPOINT=checkpoint.after_files:4");
  ASSERT_NE(killed, 0) << ReadFile(Dir() / "run.log");
  EXPECT_THAT(ReadFile(Dir() / "run.log"), HasSubstr("failpoint checkpoint.after_files hit 4"));
  auto storage = OpenCheckpointStorage(url);
  ASSERT_OK(storage.status());
  auto objects = (*storage)->List("s3-e2e/");
  ASSERT_OK(objects.status());
  int manifests = 0;
  for (const ObjectInfo& o : *objects) manifests += o.key.ends_with(".manifest") ? 1 : 0;
  EXPECT_GE(manifests, 1);  // checkpoints before the crash are in the bucket

  ASSERT_EQ(Run(url, "data1"), 0) << ReadFile(Dir() / "run.log");
  EXPECT_EQ(Finals(), expected);
}

TEST_F(S3CheckpointE2ETest, WrongCredentialAndUnreachableEndpointFailNamingTheUrl) {
  const std::string url = absl::StrCat("s3://", S3Server::kBucket, "/jobs");
  EXPECT_EQ(Run(url, "data1", "AWS_ACCESS_KEY_ID=NOT-A-KEY"), 1);
  const std::string denied = ReadFile(Dir() / "run.log");
  EXPECT_THAT(denied, HasSubstr(url));
  EXPECT_THAT(denied, HasSubstr("InvalidAccessKeyId"));
  EXPECT_EQ(Run(url, "data2", "AWS_ENDPOINT_URL_S3=http://127.0.0.1:1"), 1);
  const std::string unreachable = ReadFile(Dir() / "run.log");
  EXPECT_THAT(unreachable, HasSubstr(url));
  EXPECT_THAT(unreachable, HasSubstr("http://127.0.0.1:1"));
}

}  // namespace
}  // namespace caravela
