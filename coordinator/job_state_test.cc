#include "coordinator/job_state.h"

#include "gtest/gtest.h"
#include "worker/testing/status_testing.h"

namespace caravela {
namespace {

TEST(JobStateTest, TransitionsFollowTheStateMachine) {
  using namespace v1;  // NOLINT(google-build-using-namespace): the enum values
  EXPECT_TRUE(CanTransition(SUBMITTED, SCHEDULING));
  EXPECT_TRUE(CanTransition(SCHEDULING, RUNNING));
  EXPECT_TRUE(CanTransition(RUNNING, RECOVERING));
  EXPECT_TRUE(CanTransition(RECOVERING, RUNNING));
  EXPECT_TRUE(CanTransition(RUNNING, SCHEDULING));  // rebalance
  for (JobState from : {SUBMITTED, SCHEDULING, RUNNING, RECOVERING}) {
    for (JobState to : {FINISHED, CANCELED, FAILED}) EXPECT_TRUE(CanTransition(from, to));
  }
  EXPECT_FALSE(CanTransition(SUBMITTED, RUNNING));
  EXPECT_FALSE(CanTransition(RUNNING, RUNNING));
  EXPECT_FALSE(CanTransition(RECOVERING, SUBMITTED));
  for (JobState from : {FINISHED, CANCELED, FAILED}) {
    EXPECT_TRUE(IsFinal(from));
    for (JobState to : {SUBMITTED, SCHEDULING, RUNNING, RECOVERING, FINISHED, CANCELED, FAILED}) {
      EXPECT_FALSE(CanTransition(from, to)) << JobStateName(from) << " -> " << JobStateName(to);
    }
  }
}

TEST(JobStateTest, TransitionStampsAndRefusesWithBothStates) {
  v1::Job job;
  job.set_id("j-1");
  job.set_state(v1::SUBMITTED);
  ASSERT_OK(Transition(job, v1::CANCELED, 1234, "by a user"));
  EXPECT_EQ(job.state(), v1::CANCELED);
  EXPECT_EQ(job.updated_at_ms(), 1234);
  EXPECT_EQ(job.message(), "by a user");
  absl::Status again = Transition(job, v1::CANCELED, 1300);
  EXPECT_TRUE(absl::IsFailedPrecondition(again));
  EXPECT_EQ(again.message(), "job j-1 is CANCELED: it cannot go to CANCELED");
  EXPECT_EQ(job.updated_at_ms(), 1234);
}

}  // namespace
}  // namespace caravela
