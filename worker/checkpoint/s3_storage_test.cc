// S3Storage against a real S3-protocol server (s3rver on loopback): the
// CheckpointStorage contract, multipart uploads, and the errors users see.
// The checkpoint manager's own tests run against it too
// (checkpoint_manager_test.cc, "s3" instances).
#include "worker/checkpoint/s3_storage.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "worker/testing/fault_proxy.h"
#include "worker/testing/s3_server.h"
#include "worker/testing/status_testing.h"

namespace caravela {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

class S3StorageTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto s = S3Server::Start();
    ASSERT_TRUE(s.ok()) << s.status();
    server_ = s->release();
  }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
  }
  void SetUp() override { ASSERT_NE(server_, nullptr); }

  S3Config Config(const std::string& prefix) const {
    S3Config c;
    c.bucket = S3Server::kBucket;
    c.prefix = prefix;
    c.endpoint = server_->endpoint();
    c.access_key_id = S3Server::kAccessKeyId;
    c.secret_access_key = S3Server::kSecretAccessKey;
    c.retries = 1;
    c.backoff_ms = 10;
    return c;
  }
  std::unique_ptr<CheckpointStorage> Open(const std::string& prefix) const {
    auto s = OpenS3Storage(Config(prefix));
    EXPECT_TRUE(s.ok()) << s.status();
    return s.ok() ? std::move(*s) : nullptr;
  }

  static inline S3Server* server_ = nullptr;
};

TEST_F(S3StorageTest, WriteReadExistsSizeListDeleteUnderAPrefix) {
  S3Config paged = Config("jobs/p1");
  paged.list_page_size = 2;  // listings of 3 keys take two pages
  auto opened = OpenS3Storage(paged);
  ASSERT_TRUE(opened.ok()) << opened.status();
  std::unique_ptr<CheckpointStorage> s = std::move(*opened);
  auto other = Open("jobs/p10");  // a prefix of p1's text: must not see p1's keys
  ASSERT_TRUE(s && other);
  EXPECT_EQ(s->url(), absl::StrCat("s3://", S3Server::kBucket, "/jobs/p1"));
  ASSERT_OK(s->Write("job/task-0/chk-1.manifest", "manifest"));
  ASSERT_OK(s->Write("job/task-0/shared/ab-3.sst", "sst"));
  ASSERT_OK(s->Write("job/task-1/x", std::string(1000, '\0')));
  ASSERT_OK(other->Write("job/task-0/y", "other"));
  EXPECT_EQ(*s->Read("job/task-0/chk-1.manifest"), "manifest");
  EXPECT_EQ(*s->Read("job/task-1/x"), std::string(1000, '\0'));
  EXPECT_TRUE(*s->Exists("job/task-0/shared/ab-3.sst"));
  EXPECT_FALSE(*s->Exists("job/task-0/nope"));
  EXPECT_EQ(*s->Size("job/task-1/x"), 1000u);
  auto list = s->List("job/task-0/");
  ASSERT_TRUE(list.ok()) << list.status();
  ASSERT_EQ(list->size(), 2u);
  EXPECT_EQ((*list)[0].key, "job/task-0/chk-1.manifest");
  EXPECT_EQ((*list)[0].size, 8u);
  EXPECT_EQ((*list)[1].key, "job/task-0/shared/ab-3.sst");
  EXPECT_EQ(s->List("job/")->size(), 3u);
  EXPECT_EQ(other->List("")->size(), 1u);
  // Replace, delete, delete again.
  ASSERT_OK(s->Write("job/task-0/chk-1.manifest", "v2"));
  EXPECT_EQ(*s->Read("job/task-0/chk-1.manifest"), "v2");
  ASSERT_OK(s->Delete("job/task-0/chk-1.manifest"));
  ASSERT_OK(s->Delete("job/task-0/chk-1.manifest"));
  EXPECT_FALSE(*s->Exists("job/task-0/chk-1.manifest"));
  // Missing objects and bad keys.
  auto missing = s->Read("job/task-0/chk-1.manifest");
  EXPECT_TRUE(absl::IsNotFound(missing.status())) << missing.status();
  EXPECT_THAT(missing.status().message(),
              HasSubstr(absl::StrCat("s3://", S3Server::kBucket,
                                     "/jobs/p1: GET "
                                     "job/task-0/chk-1.manifest: HTTP 404 NoSuchKey")));
  EXPECT_TRUE(absl::IsNotFound(s->Size("nope").status()));
  EXPECT_TRUE(absl::IsInvalidArgument(s->Write("../x", "y")));
  EXPECT_TRUE(absl::IsInvalidArgument(s->Write("a/.tmp", "y")));
}

TEST_F(S3StorageTest, LargeObjectsGoUpAsParallelMultipartUploads) {
  S3Config c = Config("multipart");
  c.multipart_threshold = size_t{6} << 20;
  c.part_size = size_t{5} << 20;
  c.parallel_parts = 3;
  auto opened = OpenS3Storage(c);
  ASSERT_TRUE(opened.ok()) << opened.status();
  CheckpointStorage& s = **opened;
  std::string data(size_t{13} << 20, '\0');
  std::mt19937_64 rng(1);
  for (size_t i = 0; i < data.size(); i += 8) {
    const uint64_t v = rng();
    std::memcpy(&data[i], &v, 8);
  }
  const fs::path file = fs::temp_directory_path() / "caravela-s3-upload.bin";
  std::ofstream(file, std::ios::binary) << data;
  const S3Traffic before = S3TrafficSoFar();
  ASSERT_OK(s.Upload("job/big.sst", file.string()));
  ASSERT_OK(s.Write("job/big-from-memory", data));
  ASSERT_TRUE(s.Upload("job/small.sst", file.string() + ".missing").code() ==
              absl::StatusCode::kNotFound);
  const S3Traffic after = S3TrafficSoFar();
  EXPECT_EQ(after.multipart_uploads - before.multipart_uploads, 2);
  EXPECT_EQ(after.bytes_written - before.bytes_written, static_cast<int64_t>(2 * data.size()));
  fs::remove(file);
  EXPECT_EQ(*s.Size("job/big.sst"), data.size());
  // Streamed back in chunks of at most 4 MiB.
  std::string back;
  int chunks = 0;
  ASSERT_TRUE(s.ReadChunks("job/big.sst", [&](std::string_view chunk) {
                 EXPECT_LE(chunk.size(), size_t{8} << 20);
                 back.append(chunk);
                 ++chunks;
                 return absl::OkStatus();
               }).ok());
  EXPECT_GE(chunks, 2);
  EXPECT_TRUE(back == data);
  EXPECT_TRUE(*s.Read("job/big-from-memory") == data);
  // The reader's error stops the stream and comes back.
  absl::Status stop =
      s.ReadChunks("job/big.sst", [](std::string_view) { return absl::CancelledError("enough"); });
  EXPECT_TRUE(absl::IsCancelled(stop)) << stop;
  // Only whole objects are listed.
  EXPECT_EQ(s.List("job/")->size(), 2u);
  EXPECT_OK(s.DeleteStaleTemporaries("job/", 0));
}

TEST_F(S3StorageTest, WrongCredentialsMissingBucketAndUnreachableEndpointNameTheUrl) {
  S3Config c = Config("p");
  c.access_key_id = "NOT-A-KEY";
  auto denied = OpenS3Storage(c);
  EXPECT_TRUE(absl::IsPermissionDenied(denied.status())) << denied.status();
  EXPECT_THAT(denied.status().message(), HasSubstr(absl::StrCat("s3://", S3Server::kBucket,
                                                                "/p: GET (the bucket): HTTP 403 "
                                                                "InvalidAccessKeyId")));
  EXPECT_THAT(denied.status().message(), HasSubstr("AWS_ACCESS_KEY_ID"));

  c = Config("p");
  c.bucket = "no-such-bucket";
  auto missing = OpenS3Storage(c);
  EXPECT_TRUE(absl::IsNotFound(missing.status())) << missing.status();
  EXPECT_THAT(missing.status().message(), HasSubstr("s3://no-such-bucket/p"));
  EXPECT_THAT(missing.status().message(), HasSubstr("NoSuchBucket"));

  c = Config("p");
  c.endpoint = "http://127.0.0.1:1";
  auto unreachable = OpenS3Storage(c);
  EXPECT_TRUE(absl::IsUnavailable(unreachable.status())) << unreachable.status();
  EXPECT_THAT(unreachable.status().message(), HasSubstr(absl::StrCat("s3://", S3Server::kBucket,
                                                                     "/p: GET (the bucket) at "
                                                                     "http://127.0.0.1:1: ")));
  EXPECT_THAT(unreachable.status().message(), HasSubstr("(after 2 attempts)"));
}

// The fault campaign's S3 faults (tests/fault_campaign_test.cc), here on a
// server of its own: errors injected by the proxy fail a write and name the
// HTTP status; a killed server fails it as unreachable; started again on its
// data, the server still has what was written before.
TEST(S3FaultsTest, ProxyErrorsAndAKilledServerFailWritesAndTheDataSurvivesARestart) {
  auto started = S3Server::Start();
  ASSERT_OK(started.status());
  std::unique_ptr<S3Server> server = std::move(*started);
  FaultProxy proxy(server->port());
  ASSERT_GT(proxy.port(), 0);
  S3Config c;
  c.bucket = S3Server::kBucket;
  c.prefix = "faults";
  c.endpoint = absl::StrCat("http://127.0.0.1:", proxy.port());
  c.access_key_id = S3Server::kAccessKeyId;
  c.secret_access_key = S3Server::kSecretAccessKey;
  c.retries = 0;
  auto opened = OpenS3Storage(c);
  ASSERT_OK(opened.status());
  std::unique_ptr<CheckpointStorage> s = std::move(*opened);
  ASSERT_OK(s->Write("a", "before"));

  proxy.SetFailing(true);
  const absl::Status failed = s->Write("b", "during");
  EXPECT_FALSE(failed.ok());
  EXPECT_THAT(failed.message(), HasSubstr("InternalError")) << failed;
  EXPECT_GE(proxy.errors_answered(), 1);
  proxy.SetFailing(false);
  ASSERT_OK(s->Write("b", "after"));

  ASSERT_OK(s->Write("t", "torn"));

  server->Kill();
  const absl::Status down = s->Write("c", "down");
  EXPECT_TRUE(absl::IsUnavailable(down)) << down;
  // "t" as a kill between the object's bytes and its metadata leaves it
  // (s3rver writes them one after the other): every listing of the prefix
  // answered 500 after the start until StartAgain() learned to drop it.
  const fs::path metadata =
      fs::path(server->data_dir()) / S3Server::kBucket / "faults" / "t._S3rver_metadata.json";
  ASSERT_TRUE(fs::exists(metadata)) << metadata;
  fs::resize_file(metadata, 7);
  ASSERT_OK(server->StartAgain());
  auto a = s->Read("a");
  ASSERT_OK(a.status());
  EXPECT_EQ(*a, "before");
  auto b = s->Read("b");
  ASSERT_OK(b.status());
  EXPECT_EQ(*b, "after");
  auto listed = s->List("");
  ASSERT_OK(listed.status());
  std::vector<std::string> keys;
  for (const auto& o : *listed) keys.push_back(o.key);
  EXPECT_THAT(keys, ::testing::ElementsAre("a", "b"));
}

TEST(S3ConfigTest, FromTheUrlAndTheEnvironment) {
  for (const char* v : {"AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL", "AWS_REGION",
                        "AWS_DEFAULT_REGION", "CARAVELA_S3_PATH_STYLE", "AWS_ACCESS_KEY_ID",
                        "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"}) {
    unsetenv(v);
  }
  const fs::path creds = fs::temp_directory_path() / "caravela-s3-credentials";
  std::ofstream(creds) << "[default]\naws_access_key_id = AKDEFAULT\naws_secret_access_key = s1\n"
                          "\n[ci]\naws_access_key_id=AKCI\naws_secret_access_key=s2\n"
                          "aws_session_token = tok\n";
  setenv("AWS_SHARED_CREDENTIALS_FILE", creds.c_str(), 1);
  auto c = S3ConfigFromEnvironment("s3://my-bucket/checkpoints/prod/");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->bucket, "my-bucket");
  EXPECT_EQ(c->prefix, "checkpoints/prod");
  EXPECT_EQ(c->region, "us-east-1");
  EXPECT_EQ(c->endpoint, "https://s3.us-east-1.amazonaws.com");
  EXPECT_FALSE(c->path_style);
  EXPECT_EQ(c->access_key_id, "AKDEFAULT");
  EXPECT_EQ(c->secret_access_key, "s1");

  setenv("AWS_PROFILE", "ci", 1);
  setenv("AWS_REGION", "eu-west-3", 1);
  setenv("AWS_ENDPOINT_URL", "http://minio:9000", 1);
  c = S3ConfigFromEnvironment("s3://my-bucket");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->prefix, "");
  EXPECT_EQ(c->region, "eu-west-3");
  EXPECT_EQ(c->endpoint, "http://minio:9000");
  EXPECT_TRUE(c->path_style);
  EXPECT_EQ(c->access_key_id, "AKCI");
  EXPECT_EQ(c->session_token, "tok");
  setenv("CARAVELA_S3_PATH_STYLE", "false", 1);
  setenv("AWS_ACCESS_KEY_ID", "AKENV", 1);
  setenv("AWS_SECRET_ACCESS_KEY", "s3", 1);
  c = S3ConfigFromEnvironment("s3://my-bucket/p");
  ASSERT_OK(c);
  EXPECT_FALSE(c->path_style);
  EXPECT_EQ(c->access_key_id, "AKENV");

  EXPECT_THAT(S3ConfigFromEnvironment("s3:///p").status().message(), HasSubstr("names no bucket"));
  EXPECT_THAT(S3ConfigFromEnvironment("s3://Bad_Bucket/p").status().message(),
              HasSubstr("is not a bucket name"));
  unsetenv("AWS_ACCESS_KEY_ID");
  auto half = S3ConfigFromEnvironment("s3://my-bucket/p");
  EXPECT_THAT(half.status().message(),
              HasSubstr("set both AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (only the secret"));
  unsetenv("AWS_SECRET_ACCESS_KEY");
  setenv("AWS_PROFILE", "nobody", 1);
  auto none = S3ConfigFromEnvironment("s3://my-bucket/p");
  EXPECT_TRUE(absl::IsInvalidArgument(none.status()));
  EXPECT_THAT(none.status().message(), HasSubstr("no S3 credentials"));
  EXPECT_THAT(none.status().message(), HasSubstr("profile [nobody] of " + creds.string()));
  for (const char* v : {"AWS_ENDPOINT_URL", "AWS_REGION", "CARAVELA_S3_PATH_STYLE",
                        "AWS_SECRET_ACCESS_KEY", "AWS_PROFILE", "AWS_SHARED_CREDENTIALS_FILE"}) {
    unsetenv(v);
  }
  fs::remove(creds);
}

}  // namespace
}  // namespace caravela
