#include "worker/runtime/job_checkpoints.h"

#include "gtest/gtest.h"

namespace caravela {
namespace {

// A checkpoint is triggered once, by whichever word comes first: the
// coordinator's, or a barrier from a producing task that heard it first.
TEST(JobCheckpointsTest, ABarrierTriggersTheCheckpointItBelongsTo) {
  JobCheckpoints job(2);
  EXPECT_EQ(job.triggered(), 0);
  job.SawBarrier(1, /*stop=*/false);
  EXPECT_EQ(job.triggered(), 1);
  EXPECT_FALSE(job.stops_at(1));
  job.Trigger(1, false);  // the coordinator's word, later: nothing changes
  EXPECT_EQ(job.triggered(), 1);

  job.Trigger(2, /*stop=*/true);
  job.SawBarrier(2, /*stop=*/true);
  EXPECT_TRUE(job.stops_at(2));
  EXPECT_EQ(job.stop_at(), 2);

  // Older words never take the trigger back.
  job.SawBarrier(1, false);
  job.Trigger(1, false);
  EXPECT_EQ(job.triggered(), 2);
  EXPECT_TRUE(job.stops_at(2));

  job.SawBarrier(3, /*stop=*/true);  // a stopping checkpoint heard of first from a barrier
  EXPECT_EQ(job.triggered(), 3);
  EXPECT_TRUE(job.stops_at(3));
  EXPECT_FALSE(job.stops_at(2));
}

}  // namespace
}  // namespace caravela
