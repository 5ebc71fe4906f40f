#include "coordinator/placement_policy.h"

#include <map>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/testing/status_testing.h"

namespace caravela {
namespace {

using ::testing::HasSubstr;

ClusterSlots Slots(const std::map<std::string, int>& free) {
  ClusterSlots slots;
  for (const auto& [w, n] : free) slots.alive.insert(w);
  slots.free = free;
  return slots;
}

std::map<std::string, int> PerWorker(const std::vector<std::string>& placement) {
  std::map<std::string, int> per;
  for (const std::string& w : placement) ++per[w];
  return per;
}

// Places with `policy`, checks the placement and scores it against the
// slots it leaves: what the Scheduler does at a placement and then at every
// round until the cluster changes.
ImbalanceScore PlaceAndJudge(const PlacementPolicy& policy, int tasks,
                             const std::vector<std::string>& previous, ClusterSlots slots,
                             std::vector<std::string>* placed) {
  *placed = policy.Place(tasks, previous, slots);
  EXPECT_OK(CheckPlacement(*placed, tasks, slots));
  slots.Take(*placed);
  return policy.Imbalance(*placed, slots);
}

TEST(SpreadPolicyTest, SpreadsAFreshJobEvenlyAndScoresItBalanced) {
  SpreadPolicy spread;
  std::vector<std::string> placed;
  const ImbalanceScore score =
      PlaceAndJudge(spread, 6, {}, Slots({{"a", 2}, {"b", 2}, {"c", 2}}), &placed);
  EXPECT_EQ(placed, (std::vector<std::string>{"a", "b", "c", "a", "b", "c"}));
  EXPECT_EQ(PerWorker(placed), (std::map<std::string, int>{{"a", 2}, {"b", 2}, {"c", 2}}));
  EXPECT_TRUE(score.balanced());
  EXPECT_EQ(score.score, 0);
  EXPECT_EQ(score.reason, "");
}

TEST(SpreadPolicyTest, TasksStayOnTheirWorkersUpToAnEvenShare) {
  SpreadPolicy spread;
  // Six tasks on a and b; c joined: a and b keep two each, c takes the rest.
  const std::vector<std::string> previous = {"a", "b", "a", "b", "a", "b"};
  std::vector<std::string> placed;
  const ImbalanceScore score =
      PlaceAndJudge(spread, 6, previous, Slots({{"a", 5}, {"b", 5}, {"c", 5}}), &placed);
  EXPECT_EQ(placed, (std::vector<std::string>{"a", "b", "a", "b", "c", "c"}));
  EXPECT_TRUE(score.balanced());
  // A lost worker's tasks go to the others; the rest stay.
  const std::vector<std::string> before = {"a", "b", "c", "a", "b", "c"};
  PlaceAndJudge(spread, 6, before, Slots({{"a", 3}, {"b", 3}}), &placed);
  EXPECT_EQ(placed, (std::vector<std::string>{"a", "b", "a", "a", "b", "b"}));
}

TEST(SpreadPolicyTest, AWorkerWithRoomTwoTasksBehindIsImbalance) {
  SpreadPolicy spread;
  ClusterSlots slots = Slots({{"a", 2}, {"b", 2}, {"c", 5}});  // after the job's tasks
  const ImbalanceScore score = spread.Imbalance({"a", "b", "a", "b", "a", "b"}, slots);
  EXPECT_FALSE(score.balanced());
  EXPECT_EQ(score.score, 2);
  EXPECT_EQ(score.reason, "rebalancing: a runs 3 tasks, c 0");
  // One task apart is within the spread.
  EXPECT_TRUE(spread.Imbalance({"a", "b", "a", "b", "c"}, slots).balanced());
  // A worker without room, or draining (alive, taking no tasks), does not
  // count as the one behind.
  slots.free["c"] = 0;
  EXPECT_TRUE(spread.Imbalance({"a", "b", "a", "b", "a", "b"}, slots).balanced());
  slots.free.erase("c");
  EXPECT_TRUE(spread.Imbalance({"a", "b", "a", "b", "a", "b"}, slots).balanced());
}

// The property that keeps placement and rebalancing from fighting: whatever
// the cluster and the job's last placement, the policy scores its own
// placement 0. Workers with equal free slots, and jobs that fill them partly
// or wholly, sticky or fresh.
TEST(SpreadPolicyTest, ScoresItsOwnPlacementBalancedWithEqualWorkers) {
  SpreadPolicy spread;
  for (int workers = 1; workers <= 5; ++workers) {
    for (int slots_each = 1; slots_each <= 6; ++slots_each) {
      std::map<std::string, int> free;
      for (int w = 0; w < workers; ++w) free[absl::StrCat("w", w)] = slots_each;
      for (int tasks = 1; tasks <= workers * slots_each; ++tasks) {
        // Fresh, then from every worker holding all it can, then from one
        // worker that is gone.
        std::vector<std::vector<std::string>> previous = {{}};
        std::vector<std::string> packed, gone;
        for (int g = 0; g < tasks; ++g) {
          packed.push_back(absl::StrCat("w", g / slots_each));
          gone.push_back(g % 2 == 0 ? "lost" : absl::StrCat("w", g % workers));
        }
        previous.push_back(packed);
        previous.push_back(gone);
        for (const std::vector<std::string>& p : previous) {
          SCOPED_TRACE(absl::StrCat(workers, " workers of ", slots_each, " slots, ", tasks,
                                    " tasks, previous ", p.size()));
          std::vector<std::string> placed;
          const ImbalanceScore score = PlaceAndJudge(spread, tasks, p, Slots(free), &placed);
          EXPECT_TRUE(score.balanced()) << score.reason;
        }
      }
    }
  }
}

// Workers of unequal size, partly taken by other jobs. Sending each task to
// the worker with the most free slots piled a job onto the biggest worker,
// which the spread rule then judged off: the job would be moved for ever.
TEST(SpreadPolicyTest, SpreadsOverUnequalWorkers) {
  SpreadPolicy spread;
  std::vector<std::string> placed;
  const ImbalanceScore score = PlaceAndJudge(spread, 6, {}, Slots({{"a", 10}, {"b", 2}}), &placed);
  EXPECT_EQ(PerWorker(placed), (std::map<std::string, int>{{"a", 4}, {"b", 2}}));
  EXPECT_TRUE(score.balanced()) << score.reason;
}

TEST(SpreadPolicyTest, ScoresItsOwnPlacementBalancedWithUnequalWorkers) {
  SpreadPolicy spread;
  std::mt19937 rng(28);
  for (int round = 0; round < 5000; ++round) {
    const int workers = 1 + static_cast<int>(rng() % 6);
    std::map<std::string, int> free;
    int total = 0;
    for (int w = 0; w < workers; ++w) {
      const int n = static_cast<int>(rng() % 9);
      free[absl::StrCat("w", w)] = n;
      total += n;
    }
    if (total == 0) continue;
    const int tasks = 1 + static_cast<int>(rng() % total);
    std::vector<std::string> previous(rng() % (tasks + 1));
    for (std::string& p : previous) {
      const int w = static_cast<int>(rng() % (workers + 1));
      p = w == workers ? "lost" : absl::StrCat("w", w);
    }
    std::vector<std::string> placed;
    const ImbalanceScore score = PlaceAndJudge(spread, tasks, previous, Slots(free), &placed);
    EXPECT_TRUE(score.balanced()) << "round " << round << ": " << tasks
                                  << " tasks: " << score.reason;
  }
}

TEST(PlacementTest, CheckPlacementRefusesWhatTheSlotsCannotTake) {
  ClusterSlots slots = Slots({{"a", 2}, {"b", 1}});
  slots.alive.insert("leaving");  // alive, draining: takes no tasks
  EXPECT_OK(CheckPlacement({"a", "b", "a"}, 3, slots));
  absl::Status st = CheckPlacement({"a", "b"}, 3, slots);
  EXPECT_TRUE(absl::IsInternal(st)) << st;
  EXPECT_EQ(st.message(), "it placed 2 tasks of 3");
  st = CheckPlacement({"a", "b", "b"}, 3, slots);
  EXPECT_EQ(st.message(), "it placed 2 tasks on b, which has room for 1");
  st = CheckPlacement({"a", "leaving"}, 2, slots);
  EXPECT_THAT(st.message(), HasSubstr("on leaving, which takes no new tasks"));
  st = CheckPlacement({"a", ""}, 2, slots);
  EXPECT_THAT(st.message(), HasSubstr("on no worker"));
}

TEST(PlacementTest, DescribePlacementCountsTasksPerWorker) {
  EXPECT_EQ(DescribePlacement({"a", "a"}), "1 worker (a:2)");
  EXPECT_EQ(DescribePlacement({"b", "a", "b"}), "2 workers (a:1, b:2)");
  std::vector<std::string> ten;
  for (int w = 0; w < 10; ++w) ten.push_back(absl::StrCat("w", w));
  EXPECT_EQ(DescribePlacement(ten),
            "10 workers (w0:1, w1:1, w2:1, w3:1, w4:1, w5:1, w6:1, w7:1, ...)");
}

TEST(PlacementTest, SlotsAreTakenAndReleasedPerTask) {
  ClusterSlots slots = Slots({{"a", 2}, {"b", 1}});
  EXPECT_EQ(slots.TotalFree(), 3);
  slots.Take({"a", "a", "gone"});
  EXPECT_EQ(slots.free["a"], 0);
  EXPECT_EQ(slots.TotalFree(), 1);
  slots.Release({"a", "gone"});
  EXPECT_EQ(slots.free["a"], 1);
  EXPECT_EQ(slots.free.count("gone"), 0u);
}

}  // namespace
}  // namespace caravela
