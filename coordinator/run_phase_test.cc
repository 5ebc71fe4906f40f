#include "coordinator/run_phase.h"

#include <set>
#include <utility>

#include "gtest/gtest.h"
#include "worker/testing/status_testing.h"

namespace caravela {
namespace {

constexpr RunPhase kAll[] = {RunPhase::kAdopting, RunPhase::kStarting,  RunPhase::kRunning,
                             RunPhase::kStopping, RunPhase::kFinishing, RunPhase::kHandingOff};

TEST(RunPhaseTest, TheTableHasExactlyTheDeclaredArrows) {
  using P = RunPhase;
  const std::set<std::pair<P, P>> legal = {
      {P::kAdopting, P::kStarting},  {P::kAdopting, P::kRunning},   {P::kAdopting, P::kStopping},
      {P::kAdopting, P::kFinishing}, {P::kStarting, P::kRunning},   {P::kRunning, P::kStopping},
      {P::kRunning, P::kFinishing},  {P::kStopping, P::kFinishing}, {P::kStopping, P::kHandingOff},
  };
  for (P from : kAll) {
    for (P to : kAll) {
      EXPECT_EQ(CanEnter(from, to), legal.count({from, to}) > 0)
          << RunPhaseName(from) << " -> " << RunPhaseName(to);
    }
  }
}

TEST(RunPhaseTest, NoPhaseGoesBackOrToItself) {
  for (RunPhase from : kAll) {
    EXPECT_FALSE(CanEnter(from, from)) << RunPhaseName(from);
    EXPECT_FALSE(CanEnter(from, RunPhase::kAdopting)) << RunPhaseName(from);
  }
  for (RunPhase to : kAll) {
    EXPECT_FALSE(CanEnter(RunPhase::kFinishing, to)) << RunPhaseName(to);
    EXPECT_FALSE(CanEnter(RunPhase::kHandingOff, to)) << RunPhaseName(to);
  }
}

TEST(RunPhaseTest, EnterMovesAlongTheTableAndRefusesWithBothPhases) {
  RunPhaseMachine run;
  EXPECT_TRUE(run.Is(RunPhase::kStarting));
  EXPECT_FALSE(run.started());
  EXPECT_FALSE(run.stopping());
  // A run cannot stop before it started.
  absl::Status refused = run.Enter(RunPhase::kStopping);
  EXPECT_TRUE(absl::IsFailedPrecondition(refused)) << refused;
  EXPECT_EQ(refused.message(), "a run that is starting cannot go to stopping");
  EXPECT_TRUE(run.Is(RunPhase::kStarting));

  ASSERT_OK(run.Enter(RunPhase::kRunning));
  EXPECT_TRUE(run.started());
  EXPECT_FALSE(run.stopping());
  ASSERT_OK(run.Enter(RunPhase::kStopping));
  EXPECT_TRUE(run.started());
  EXPECT_TRUE(run.stopping());
  ASSERT_OK(run.Enter(RunPhase::kHandingOff));
  EXPECT_TRUE(run.stopping());
  refused = run.Enter(RunPhase::kRunning);
  EXPECT_EQ(refused.message(), "a run that is handing off cannot go to running");
  EXPECT_EQ(run.current(), RunPhase::kHandingOff);
}

TEST(RunPhaseTest, AnAdoptedRunResumesInAnyPhaseOfARunningEpoch) {
  for (RunPhase to :
       {RunPhase::kStarting, RunPhase::kRunning, RunPhase::kStopping, RunPhase::kFinishing}) {
    SCOPED_TRACE(RunPhaseName(to));
    RunPhaseMachine run(RunPhase::kAdopting);
    EXPECT_FALSE(run.started());
    EXPECT_OK(run.Enter(to));
    EXPECT_EQ(run.started(), to != RunPhase::kStarting);
  }
  RunPhaseMachine run(RunPhase::kAdopting);
  EXPECT_FALSE(run.Enter(RunPhase::kHandingOff).ok());  // nothing to hand off yet
}

}  // namespace
}  // namespace caravela
