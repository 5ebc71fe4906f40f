#include "common/failpoint.h"

#include <signal.h>
#include <stdlib.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "gtest/gtest.h"

namespace caravela {
namespace {

TEST(FailpointTest, UnconfiguredNameDoesNothing) {
  ConfigureFailpoints("other");
  Failpoint("name");
  Failpoint("name");
  ConfigureFailpoints("");
  Failpoint("other");
  SUCCEED();
}

TEST(FailpointDeathTest, KillsOnFirstHitByDefault) {
  EXPECT_EXIT(
      {
        ConfigureFailpoints("checkpoint.after_files");
        Failpoint("checkpoint.after_files");
        exit(0);
      },
      ::testing::KilledBySignal(SIGKILL), "failpoint checkpoint.after_files hit 1");
}

TEST(FailpointTest, StallBlocksOnlyTheHittingThreadOnItsNthHit) {
  ConfigureFailpoints("s:2=stall");
  std::atomic<int> passed{0};
  std::thread t([&] {
    for (int i = 0; i < 3; ++i) {
      Failpoint("s");
      passed.fetch_add(1);
    }
  });
  t.detach();  // blocked for good on the 2nd hit
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_EQ(passed.load(), 1);
  ConfigureFailpoints("");
}

TEST(FailpointDeathTest, KillsOnNthHit) {
  // Two hits survive, the third kills: exiting normally after 2 hits proves
  // the count, dying on the 3rd proves the kill.
  EXPECT_EXIT(
      {
        ConfigureFailpoints("a:3");
        Failpoint("a");
        Failpoint("a");
        exit(7);
      },
      ::testing::ExitedWithCode(7), "");
  EXPECT_EXIT(
      {
        ConfigureFailpoints("b, a:3");
        Failpoint("a");
        Failpoint("a");
        Failpoint("a");
        exit(0);
      },
      ::testing::KilledBySignal(SIGKILL), "failpoint a hit 3");
}

TEST(FailpointDeathTest, MalformedEntriesAreIgnored) {
  EXPECT_EXIT(
      {
        ConfigureFailpoints("x:0,:2,y:abc,z");
        Failpoint("x");
        Failpoint("y");
        Failpoint("z");
        exit(0);
      },
      ::testing::KilledBySignal(SIGKILL), "failpoint z hit 1");
}

// The real path: the variable is read during static initialization of a
// fresh process ("threadsafe" death tests re-execute the binary, which
// inherits the environment).
TEST(FailpointDeathTest, ReadsEnvironmentAtStartup) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  setenv("CARAVELA_FAILPOINT", "env.point:2", 1);
  EXPECT_EXIT(
      {
        Failpoint("env.point");
        Failpoint("env.point");
        exit(0);
      },
      ::testing::KilledBySignal(SIGKILL), "failpoint env.point hit 2");
  unsetenv("CARAVELA_FAILPOINT");
  GTEST_FLAG_SET(death_test_style, "fast");
}

}  // namespace
}  // namespace caravela
