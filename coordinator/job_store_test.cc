#include "coordinator/job_store.h"

#include <unistd.h>

#include <filesystem>
#include <string>

#include "gtest/gtest.h"
#include "worker/testing/status_testing.h"

namespace caravela {
namespace {

TEST(JobStoreTest, JobsAndIdsSurviveReopening) {
  const std::string dir = ::testing::TempDir() + "/job_store_" + std::to_string(::getpid());
  std::filesystem::remove_all(dir);
  {
    auto store = JobStore::Open(dir);
    ASSERT_OK(store.status());
    for (const char* name : {"revenue", "clicks", "revenue"}) {
      auto id = (*store)->NewId(name);
      ASSERT_OK(id.status());
      v1::Job job;
      job.set_id(*id);
      job.set_name(name);
      job.set_state(v1::SUBMITTED);
      ASSERT_OK((*store)->Put(job));
    }
    auto job = (*store)->Get("clicks-2");
    ASSERT_OK(job.status());
    job->set_state(v1::CANCELED);
    ASSERT_OK((*store)->Put(*job));  // an update keeps its place
    EXPECT_TRUE(absl::IsNotFound((*store)->Get("clicks-9").status()));
  }
  auto store = JobStore::Open(dir);
  ASSERT_OK(store.status());
  auto jobs = (*store)->List();
  ASSERT_OK(jobs.status());
  ASSERT_EQ(jobs->size(), 3u);
  EXPECT_EQ((*jobs)[0].id(), "revenue-1");
  EXPECT_EQ((*jobs)[1].id(), "clicks-2");
  EXPECT_EQ((*jobs)[1].state(), v1::CANCELED);
  EXPECT_EQ((*jobs)[2].id(), "revenue-3");
  auto next = (*store)->NewId("x");
  ASSERT_OK(next.status());
  EXPECT_EQ(*next, "x-4");  // ids are never reused
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace caravela
