#include "common/key_groups.h"

#include <gtest/gtest.h>

#include <vector>

namespace caravela {
namespace {

TEST(KeyGroupsTest, RangesCoverEveryKeyGroupOnceContiguouslyAndEvenly) {
  for (int m : {1, 2, 3, 7, 128, 1000, kMaxMaxParallelism}) {
    for (int p = 1; p <= m && p <= 300; p += (p < 20 ? 1 : 37)) {
      int next = 0, smallest = m, largest = 0;
      for (int t = 0; t < p; ++t) {
        const KeyGroupRange r = KeyGroupRangeOfTask(m, p, t);
        ASSERT_EQ(r.first, next) << "m=" << m << " p=" << p << " t=" << t;
        ASSERT_FALSE(r.empty()) << "m=" << m << " p=" << p << " t=" << t;
        smallest = std::min(smallest, r.size());
        largest = std::max(largest, r.size());
        // The owner of each of its key groups is this task.
        for (int g : {r.first, r.last, (r.first + r.last) / 2}) {
          ASSERT_EQ(TaskOfKeyGroup(m, p, g), t) << "m=" << m << " p=" << p << " g=" << g;
        }
        next = r.last + 1;
      }
      EXPECT_EQ(next, m) << "m=" << m << " p=" << p;
      EXPECT_LE(largest - smallest, 1) << "m=" << m << " p=" << p;
    }
  }
}

TEST(KeyGroupsTest, EveryKeyGroupsOwnerHoldsItInItsRange) {
  const int m = 128;
  for (int p : {1, 2, 3, 5, 64, 127, 128}) {
    for (int g = 0; g < m; ++g) {
      const int t = TaskOfKeyGroup(m, p, g);
      ASSERT_GE(t, 0);
      ASSERT_LT(t, p);
      EXPECT_TRUE(KeyGroupRangeOfTask(m, p, t).Contains(g)) << "p=" << p << " g=" << g;
    }
  }
}

TEST(KeyGroupsTest, AKeysGroupDoesNotDependOnParallelism) {
  // Rescaling moves ranges, never keys between groups: the group of a hash
  // is the same whatever the task count, and its owner follows the range.
  const uint64_t hashes[] = {0, 1, 127, 128, 0x9e3779b97f4a7c15ULL, ~0ULL};
  for (uint64_t h : hashes) {
    const int g = KeyGroupOf(h, 128);
    EXPECT_EQ(g, static_cast<int>(h % 128));
    for (int p : {1, 2, 3}) {
      EXPECT_EQ(TaskOfKeyHash(h, 128, p), TaskOfKeyGroup(128, p, g));
    }
  }
  EXPECT_EQ(KeyGroupRangeOfTask(128, 1, 0), (KeyGroupRange{0, 127}));
  EXPECT_EQ(KeyGroupRangeOfTask(128, 3, 0).ToString(), "0-42");
  EXPECT_EQ(KeyGroupRangeOfTask(128, 3, 1).ToString(), "43-85");
  EXPECT_EQ(KeyGroupRangeOfTask(128, 3, 2).ToString(), "86-127");
  EXPECT_EQ(KeyGroupRange{}.ToString(), "none");
}

TEST(KeyGroupsTest, MaxParallelismIsValidatedWithItsRangeInTheMessage) {
  EXPECT_TRUE(ValidateMaxParallelism(1).ok());
  EXPECT_TRUE(ValidateMaxParallelism(kMaxMaxParallelism).ok());
  for (int bad : {0, -1, kMaxMaxParallelism + 1}) {
    const absl::Status st = ValidateMaxParallelism(bad);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(st.message().find("1..32768"), std::string::npos) << st;
  }
}

}  // namespace
}  // namespace caravela
