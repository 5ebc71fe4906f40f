// The job-wide checkpoint protocol on its own: tasks played by TaskStored /
// TaskDrained calls, time passed in by hand.
#include "worker/checkpoint/checkpoint_coordinator.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <vector>

namespace caravela {
namespace {

using ::testing::HasSubstr;

constexpr int64_t kT0 = 1'000'000;

CheckpointCoordinator Make(int tasks, int64_t interval_ms, int64_t timeout_ms = 0) {
  CheckpointCoordinatorOptions o;
  o.tasks = tasks;
  o.interval_ms = interval_ms;
  o.timeout_ms = timeout_ms;
  return CheckpointCoordinator(o);
}

void StoreAll(CheckpointCoordinator& c, int64_t id) {
  for (int t = 0; t < c.options().tasks; ++t) c.TaskStored(t, id);
}

void ExpectAction(const CheckpointAction& a, CheckpointAction::Kind kind, int64_t id,
                  bool stop = false) {
  EXPECT_EQ(CheckpointActionName(a.kind), std::string(CheckpointActionName(kind)));
  EXPECT_EQ(a.id, id);
  EXPECT_EQ(a.stop, stop);
}

TEST(CheckpointCoordinatorTest, NothingBeforeStart) {
  CheckpointCoordinator c = Make(2, 100);
  StoreAll(c, 5);
  c.TaskDrained(0);
  c.TaskDrained(1);
  c.RequestStop();
  EXPECT_EQ(c.Poll(kT0 + 10'000).kind, CheckpointAction::kNone);
  EXPECT_FALSE(c.started());
  EXPECT_EQ(c.in_flight(), 0);
}

TEST(CheckpointCoordinatorTest, TriggersEveryIntervalAfterTheLastTrigger) {
  CheckpointCoordinator c = Make(2, 100);
  c.Start(kT0, 1);
  EXPECT_EQ(c.Poll(kT0).kind, CheckpointAction::kNone);
  EXPECT_EQ(c.Poll(kT0 + 99).kind, CheckpointAction::kNone);
  ExpectAction(c.Poll(kT0 + 100), CheckpointAction::kTrigger, 1);
  EXPECT_EQ(c.in_flight(), 1);
  EXPECT_FALSE(c.in_flight_stops());
  EXPECT_EQ(c.next_id(), 2);
  StoreAll(c, 1);
  const CheckpointAction done = c.Poll(kT0 + 130);
  ExpectAction(done, CheckpointAction::kComplete, 1);
  EXPECT_EQ(done.duration_ms, 30);
  EXPECT_EQ(c.completed(), 1);
  EXPECT_EQ(c.in_flight(), 0);
  // The next one `interval` after the previous trigger, not its completion.
  EXPECT_EQ(c.Poll(kT0 + 199).kind, CheckpointAction::kNone);
  ExpectAction(c.Poll(kT0 + 200), CheckpointAction::kTrigger, 2);
  StoreAll(c, 2);
  ExpectAction(c.Poll(kT0 + 250), CheckpointAction::kComplete, 2);
  EXPECT_EQ(c.Poll(kT0 + 250).kind, CheckpointAction::kNone);
  EXPECT_FALSE(c.finishing());
}

TEST(CheckpointCoordinatorTest, CompletesOnlyWhenEveryTaskStored) {
  CheckpointCoordinator c = Make(3, 100);
  c.Start(kT0, 1);
  ExpectAction(c.Poll(kT0 + 100), CheckpointAction::kTrigger, 1);
  c.TaskStored(0, 1);
  c.TaskStored(2, 1);
  EXPECT_EQ(c.Poll(kT0 + 150).kind, CheckpointAction::kNone);
  // One checkpoint at a time: the interval passing triggers nothing more.
  EXPECT_EQ(c.Poll(kT0 + 1'000).kind, CheckpointAction::kNone);
  EXPECT_EQ(c.in_flight(), 1);
  c.TaskStored(1, 1);
  ExpectAction(c.Poll(kT0 + 1'000), CheckpointAction::kComplete, 1);
  // Overdue: triggered at once.
  ExpectAction(c.Poll(kT0 + 1'000), CheckpointAction::kTrigger, 2);
  // A task that stored a later id stored this one too; an earlier does not count.
  c.TaskStored(0, 3);
  c.TaskStored(1, 2);
  c.TaskStored(2, 1);
  EXPECT_EQ(c.Poll(kT0 + 1'010).kind, CheckpointAction::kNone);
  c.TaskStored(2, 2);
  ExpectAction(c.Poll(kT0 + 1'010), CheckpointAction::kComplete, 2);
}

TEST(CheckpointCoordinatorTest, StopTriggersAStoppingCheckpointThenFinishes) {
  CheckpointCoordinator c = Make(2, 10'000);
  c.Start(kT0, 1);
  EXPECT_EQ(c.Poll(kT0 + 5).kind, CheckpointAction::kNone);
  c.RequestStop();
  // At once, not at the interval.
  ExpectAction(c.Poll(kT0 + 6), CheckpointAction::kTrigger, 1, /*stop=*/true);
  EXPECT_TRUE(c.finishing());
  EXPECT_TRUE(c.in_flight_stops());
  EXPECT_FALSE(c.finished());
  StoreAll(c, 1);
  ExpectAction(c.Poll(kT0 + 20), CheckpointAction::kComplete, 1, /*stop=*/true);
  ExpectAction(c.Poll(kT0 + 20), CheckpointAction::kFinish, 1);
  EXPECT_TRUE(c.finished());
  // Nothing after the end.
  EXPECT_EQ(c.Poll(kT0 + 100'000).kind, CheckpointAction::kNone);
  EXPECT_EQ(c.next_id(), 2);
}

TEST(CheckpointCoordinatorTest, StopWaitsForTheCheckpointInFlight) {
  CheckpointCoordinator c = Make(2, 100);
  c.Start(kT0, 1);
  ExpectAction(c.Poll(kT0 + 100), CheckpointAction::kTrigger, 1);
  c.RequestStop();
  EXPECT_EQ(c.Poll(kT0 + 110).kind, CheckpointAction::kNone);
  StoreAll(c, 1);
  // The periodic one completes (not stopping), then the stopping one.
  ExpectAction(c.Poll(kT0 + 120), CheckpointAction::kComplete, 1, /*stop=*/false);
  ExpectAction(c.Poll(kT0 + 120), CheckpointAction::kTrigger, 2, /*stop=*/true);
  StoreAll(c, 2);
  ExpectAction(c.Poll(kT0 + 130), CheckpointAction::kComplete, 2, /*stop=*/true);
  ExpectAction(c.Poll(kT0 + 130), CheckpointAction::kFinish, 2);
}

TEST(CheckpointCoordinatorTest, DrainedInputTakesTheFinalCheckpointThenFinishes) {
  CheckpointCoordinator c = Make(3, 10'000);
  c.Start(kT0, 4);
  c.TaskDrained(0);
  c.TaskDrained(2);
  EXPECT_EQ(c.Poll(kT0 + 1).kind, CheckpointAction::kNone);
  c.TaskDrained(1);
  ExpectAction(c.Poll(kT0 + 2), CheckpointAction::kTrigger, 4, /*stop=*/true);
  StoreAll(c, 4);
  ExpectAction(c.Poll(kT0 + 3), CheckpointAction::kComplete, 4, /*stop=*/true);
  ExpectAction(c.Poll(kT0 + 3), CheckpointAction::kFinish, 4);
  EXPECT_EQ(c.Poll(kT0 + 4).kind, CheckpointAction::kNone);
}

TEST(CheckpointCoordinatorTest, APeriodicCheckpointInFlightIsNotTheLast) {
  // Triggered before the input drained: it does not hold what came after.
  CheckpointCoordinator c = Make(1, 100);
  c.Start(kT0, 1);
  ExpectAction(c.Poll(kT0 + 100), CheckpointAction::kTrigger, 1);
  c.TaskDrained(0);
  c.TaskStored(0, 1);
  ExpectAction(c.Poll(kT0 + 101), CheckpointAction::kComplete, 1, /*stop=*/false);
  ExpectAction(c.Poll(kT0 + 101), CheckpointAction::kTrigger, 2, /*stop=*/true);
}

TEST(CheckpointCoordinatorTest, WithoutCheckpointsFinishesWhenDrainedOrStopped) {
  for (const bool stop : {false, true}) {
    SCOPED_TRACE(stop ? "stop" : "drained");
    CheckpointCoordinator c = Make(2, 0);
    c.Start(kT0, 1);
    EXPECT_FALSE(c.checkpoints());
    EXPECT_EQ(c.Poll(kT0 + 1'000'000).kind, CheckpointAction::kNone);
    if (stop) {
      c.RequestStop();
    } else {
      c.TaskDrained(0);
      EXPECT_EQ(c.Poll(kT0 + 1'000'001).kind, CheckpointAction::kNone);
      c.TaskDrained(1);
    }
    ExpectAction(c.Poll(kT0 + 1'000'002), CheckpointAction::kFinish, 0);
    EXPECT_TRUE(c.finishing());
    EXPECT_EQ(c.Poll(kT0 + 1'000'003).kind, CheckpointAction::kNone);
    EXPECT_EQ(c.in_flight(), 0);
  }
}

TEST(CheckpointCoordinatorTest, ACheckpointInFlightTooLongFails) {
  CheckpointCoordinator c = Make(3, 100, /*timeout_ms=*/1'000);
  c.Start(kT0, 1);
  ExpectAction(c.Poll(kT0 + 100), CheckpointAction::kTrigger, 1);
  c.TaskStored(0, 1);
  EXPECT_EQ(c.Poll(kT0 + 1'100).kind, CheckpointAction::kNone);  // exactly the timeout
  const CheckpointAction a = c.Poll(kT0 + 1'101);
  ExpectAction(a, CheckpointAction::kFail, 1);
  EXPECT_EQ(a.duration_ms, 1'001);
  EXPECT_THAT(a.why, HasSubstr("checkpoint 1 did not complete in 1000 ms (1 of 3 tasks"));
  EXPECT_TRUE(c.failed());
  // Nothing after a failure, even if the tasks catch up.
  StoreAll(c, 1);
  EXPECT_EQ(c.Poll(kT0 + 1'200).kind, CheckpointAction::kNone);
}

TEST(CheckpointCoordinatorTest, CompletionWinsOverTheTimeout) {
  CheckpointCoordinator c = Make(1, 100, /*timeout_ms=*/1'000);
  c.Start(kT0, 1);
  ExpectAction(c.Poll(kT0 + 100), CheckpointAction::kTrigger, 1);
  c.TaskStored(0, 1);
  ExpectAction(c.Poll(kT0 + 5'000), CheckpointAction::kComplete, 1);
  EXPECT_FALSE(c.failed());
}

TEST(CheckpointCoordinatorTest, NoTimeoutWaitsForever) {
  CheckpointCoordinator c = Make(2, 100);
  c.Start(kT0, 1);
  ExpectAction(c.Poll(kT0 + 100), CheckpointAction::kTrigger, 1);
  EXPECT_EQ(c.Poll(kT0 + 1'000'000'000).kind, CheckpointAction::kNone);
}

TEST(CheckpointCoordinatorTest, ResumesACheckpointInFlight) {
  // A driver taking over a run (the scheduler after its restart): the tasks
  // know checkpoint 6 complete, some stored 7.
  CheckpointCoordinatorOptions o;
  o.tasks = 2;
  o.interval_ms = 100;
  o.timeout_ms = 1'000;
  CheckpointCoordinator c(o, /*completed=*/6);
  EXPECT_EQ(c.completed(), 6);
  c.Start(kT0, 8);
  c.ResumeInFlight(7, /*stop=*/false, kT0);
  EXPECT_EQ(c.in_flight(), 7);
  c.TaskStored(0, 7);
  c.TaskStored(1, 6);
  EXPECT_EQ(c.Poll(kT0 + 500).kind, CheckpointAction::kNone);
  c.TaskStored(1, 7);
  const CheckpointAction a = c.Poll(kT0 + 500);
  ExpectAction(a, CheckpointAction::kComplete, 7);
  EXPECT_EQ(a.duration_ms, 500);
  ExpectAction(c.Poll(kT0 + 500), CheckpointAction::kTrigger, 8);
}

TEST(CheckpointCoordinatorTest, ResumesAStoppingCheckpointInFlight) {
  CheckpointCoordinator c = Make(1, 100);
  c.Start(kT0, 4);
  c.ResumeInFlight(3, /*stop=*/true, kT0);
  EXPECT_TRUE(c.finishing());
  EXPECT_TRUE(c.in_flight_stops());
  c.TaskStored(0, 3);
  ExpectAction(c.Poll(kT0 + 1), CheckpointAction::kComplete, 3, /*stop=*/true);
  ExpectAction(c.Poll(kT0 + 1), CheckpointAction::kFinish, 3);
}

TEST(CheckpointCoordinatorTest, ResumedFinishedTriggersNothing) {
  CheckpointCoordinatorOptions o;
  o.tasks = 1;
  o.interval_ms = 100;
  CheckpointCoordinator c(o, /*completed=*/5);
  c.Start(kT0, 6);
  c.ResumeFinished();
  c.TaskDrained(0);
  EXPECT_TRUE(c.finished());
  EXPECT_EQ(c.Poll(kT0 + 10'000).kind, CheckpointAction::kNone);
  EXPECT_EQ(c.completed(), 5);
}

TEST(CheckpointCoordinatorTest, IdsNeverReused) {
  // Start above every id any task used; a resumed id moves the next above it.
  CheckpointCoordinator c = Make(1, 100);
  c.Start(kT0, 10);
  std::vector<int64_t> ids;
  int64_t now = kT0;
  for (int i = 0; i < 3; ++i) {
    now += 100;
    CheckpointAction a = c.Poll(now);
    ASSERT_EQ(a.kind, CheckpointAction::kTrigger);
    ids.push_back(a.id);
    c.TaskStored(0, a.id);
    ASSERT_EQ(c.Poll(now).kind, CheckpointAction::kComplete);
  }
  EXPECT_EQ(ids, (std::vector<int64_t>{10, 11, 12}));

  CheckpointCoordinator d = Make(1, 100);
  d.Start(kT0, 3);
  d.ResumeInFlight(9, /*stop=*/false, kT0);
  EXPECT_EQ(d.next_id(), 10);
  d.TaskStored(0, 9);
  ASSERT_EQ(d.Poll(kT0 + 1).kind, CheckpointAction::kComplete);
  ExpectAction(d.Poll(kT0 + 100), CheckpointAction::kTrigger, 10);
}

}  // namespace
}  // namespace caravela
