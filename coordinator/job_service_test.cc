// The JobService through a real gRPC channel to an in-process Coordinator on
// a loopback port.
#include "coordinator/job_service.h"

#include <unistd.h>

#include <filesystem>
#include <memory>
#include <string>

#include "common/job_spec.h"
#include "coordinator/auth.h"
#include "coordinator/coordinator.h"
#include "coordinator/job_client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/testing/status_testing.h"

namespace caravela {
namespace {

using ::testing::HasSubstr;

constexpr char kJob[] = R"(apiVersion: caravela/v1
kind: Job
metadata: {name: revenue}
spec:
  parallelism: 2
  sources:
    - name: purchases
      kafka: {topic: purchases}
      key: [user_id]
      event_time: {field: ts, format: iso8601}
  operators:
    - name: unique
      dedup: {from: purchases, id: event_id, retention: 1h}
  sinks:
    - {from: unique, stdout: {}}
)";

class JobServiceTest : public ::testing::Test {
 protected:
  void Start(const std::string& token) {
    dir_ = ::testing::TempDir() + "/job_service_" + std::to_string(::getpid());
    std::filesystem::remove_all(dir_);
    CoordinatorOptions o;
    o.data_dir = dir_;
    o.token = token;
    auto c = Coordinator::Start(o);
    ASSERT_OK(c.status());
    coordinator_ = std::move(*c);
  }
  void TearDown() override {
    coordinator_.reset();
    std::filesystem::remove_all(dir_);
  }
  std::string dir_;
  std::unique_ptr<Coordinator> coordinator_;
};

TEST_F(JobServiceTest, SubmitGetListCancel) {
  Start("");
  JobClient client(coordinator_->grpc_address(), "");
  auto health = client.Health();
  ASSERT_OK(health.status());
  EXPECT_EQ(*health, "SERVING");

  auto submitted = client.Submit(kJob, 0);
  ASSERT_OK(submitted.status());
  EXPECT_EQ(submitted->job_id(), "revenue-1");
  EXPECT_EQ(submitted->errors_size(), 0);
  auto job = client.Get("revenue-1");
  ASSERT_OK(job.status());
  EXPECT_EQ(job->state(), v1::SUBMITTED);
  EXPECT_EQ(job->parallelism(), 2);
  EXPECT_EQ(job->stages(), 2);  // the source's stage, then dedup by event_id
  EXPECT_EQ(job->exchanges(), 1);
  EXPECT_EQ(job->yaml(), kJob);
  // One active job per name (they would share exchange topics).
  auto twin = client.Submit(kJob, 4);
  ASSERT_OK(twin.status());
  EXPECT_TRUE(twin->job_id().empty());
  ASSERT_EQ(twin->errors_size(), 1);
  EXPECT_EQ(twin->errors(0).path(), "metadata.name");
  EXPECT_THAT(twin->errors(0).message(), HasSubstr("revenue-1"));

  auto canceled = client.Cancel("revenue-1");
  ASSERT_OK(canceled.status());
  EXPECT_EQ(canceled->state(), v1::CANCELED);
  absl::Status again = client.Cancel("revenue-1").status();
  EXPECT_TRUE(absl::IsFailedPrecondition(again)) << again;

  auto rescaled = client.Submit(kJob, 4);
  ASSERT_OK(rescaled.status());
  EXPECT_EQ(rescaled->job_id(), "revenue-2");
  EXPECT_EQ(client.Get("revenue-2")->parallelism(), 4);
  auto jobs = client.List();
  ASSERT_OK(jobs.status());
  ASSERT_EQ(jobs->size(), 2u);
  EXPECT_TRUE((*jobs)[0].yaml().empty());  // listings leave the YAML out
  EXPECT_TRUE(absl::IsNotFound(client.Get("revenue-9").status()));
}

TEST_F(JobServiceTest, InvalidJobsGetEveryErrorWithItsPath) {
  Start("");
  JobClient client(coordinator_->grpc_address(), "");
  std::string bad = kJob;
  bad.replace(bad.find("retention: 1h"), 13, "retention: soon");
  bad.replace(bad.find("parallelism: 2"), 14, "parallelism: 0");
  auto r = client.Submit(bad, 0);
  ASSERT_OK(r.status());
  EXPECT_TRUE(r->job_id().empty());
  ASSERT_EQ(r->errors_size(), 2);
  EXPECT_EQ(r->errors(0).path(), "spec.parallelism");
  EXPECT_EQ(r->errors(1).path(), "spec.operators[0].dedup.retention");
  EXPECT_TRUE(client.List()->empty());  // nothing stored
  auto garbage = client.Submit("{{{", 0);
  ASSERT_OK(garbage.status());
  EXPECT_EQ(garbage->errors_size(), 1);
}

TEST_F(JobServiceTest, TokenIsRequiredWhenSet) {
  Start("s3cret");
  for (const std::string& token : {std::string(), std::string("wrong"), std::string("s3cre")}) {
    JobClient client(coordinator_->grpc_address(), token);
    absl::Status st = client.Submit(kJob, 0).status();
    EXPECT_TRUE(absl::IsUnauthenticated(st)) << token << ": " << st;
    EXPECT_TRUE(absl::IsUnauthenticated(client.List().status()));
  }
  JobClient client(coordinator_->grpc_address(), "s3cret");
  auto r = client.Submit(kJob, 0);
  ASSERT_OK(r.status());
  EXPECT_FALSE(r->job_id().empty());
  EXPECT_EQ(*client.Health(), "SERVING");  // probes need no token
}

TEST_F(JobServiceTest, FilesOutsideTheAllowedPathsAreRefused) {
  Start("");
  JobClient client(coordinator_->grpc_address(), "");
  std::string job = kJob;
  job.replace(job.find("{from: unique, stdout: {}}"), 26,
              "{from: unique, file: {path: /etc/cron.d/x}}");
  auto r = client.Submit(job, 0);
  ASSERT_OK(r.status());
  EXPECT_TRUE(r->job_id().empty());
  ASSERT_EQ(r->errors_size(), 1);
  EXPECT_EQ(r->errors(0).path(), "spec.sinks[0].file.path");
  EXPECT_THAT(r->errors(0).message(), HasSubstr("--allow-path"));
  EXPECT_TRUE(client.List()->empty());
}

// What a client generated from proto/ can send that the CLI never does:
// parallelism out of range, empty job ids, jobs beyond the limits.
TEST_F(JobServiceTest, MalformedCallsAreInvalidArguments) {
  Start("");
  JobClient client(coordinator_->grpc_address(), "");
  for (int parallelism : {-1, 129}) {
    auto r = client.Submit(kJob, parallelism);
    ASSERT_OK(r.status());
    EXPECT_TRUE(r->job_id().empty()) << parallelism;
    ASSERT_EQ(r->errors_size(), 1) << parallelism;
    EXPECT_EQ(r->errors(0).path(), "parallelism");
    EXPECT_THAT(r->errors(0).message(), HasSubstr("spec.max_parallelism"));
  }
  EXPECT_TRUE(client.List()->empty());
  for (const absl::Status& st :
       {client.Get("").status(), client.Cancel("").status(), client.Rescale("", 2).status(),
        client.Restart("", 0).status(), client.StopWithSavepoint("", "sp").status()}) {
    EXPECT_TRUE(absl::IsInvalidArgument(st)) << st;
    EXPECT_THAT(st.message(), HasSubstr("job_id is empty"));
  }
  EXPECT_TRUE(absl::IsNotFound(client.Get("revenue-9").status()));

  // 1,001 operators: refused before any of them is validated, naming the limit.
  std::string many = kJob;
  std::string ops;
  for (int i = 0; i < kMaxJobSteps - 2; ++i) {  // besides its source, dedup and sink
    ops += "    - {name: f" + std::to_string(i) + ", filter: {from: purchases, where: \"true\"}}\n";
  }
  many.insert(many.find("  sinks:"), ops);
  auto big = client.Submit(many, 0);
  ASSERT_OK(big.status());
  ASSERT_EQ(big->errors_size(), 1);
  EXPECT_EQ(big->errors(0).path(), "spec");
  EXPECT_THAT(big->errors(0).message(), HasSubstr("1001 sources, operators and sinks"));
  EXPECT_THAT(big->errors(0).message(), HasSubstr("at most 1000"));
}

// The health service answers for the server and for each of its services.
TEST_F(JobServiceTest, HealthAnswersPerService) {
  Start("");
  JobClient client(coordinator_->grpc_address(), "");
  EXPECT_EQ(*client.Health("caravela.v1.JobService"), "SERVING");
  EXPECT_EQ(*client.Health("caravela.v1.WorkerService"), "SERVING");
  EXPECT_TRUE(absl::IsNotFound(client.Health("caravela.v1.NoSuchService").status()));
}

TEST(BearerTest, MatchesOnlyTheExactToken) {
  EXPECT_TRUE(BearerMatches("Bearer abc", "abc"));
  EXPECT_FALSE(BearerMatches("Bearer abd", "abc"));
  EXPECT_FALSE(BearerMatches("Bearer abcd", "abc"));
  EXPECT_FALSE(BearerMatches("bearer abc", "abc"));
  EXPECT_FALSE(BearerMatches("Bearer ", ""));
}

TEST(CoordinatorTest, BadListenAddressIsAClearError) {
  CoordinatorOptions o;
  o.listen = "nowhere";
  o.data_dir = ::testing::TempDir() + "/coordinator_bad_" + std::to_string(::getpid());
  absl::Status st = Coordinator::Start(o).status();
  EXPECT_TRUE(absl::IsInvalidArgument(st));
  EXPECT_THAT(st.message(), HasSubstr("expected HOST:PORT"));
}

}  // namespace
}  // namespace caravela
