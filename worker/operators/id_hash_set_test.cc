#include "worker/operators/id_hash_set.h"

#include <cstdint>
#include <random>
#include <unordered_set>

#include "gtest/gtest.h"

namespace caravela {
namespace {

// Random hashes with repeats, through several doublings (past 2 MiB, where
// the array is huge-page backed): Insert says "new" exactly when a reference
// set does, and Contains agrees afterwards.
TEST(IdHashSetTest, AgreesWithAReferenceSetThroughGrowth) {
  IdHashSet set;
  std::unordered_set<uint64_t> ref;
  std::mt19937_64 rng(7);
  std::vector<uint64_t> seen;
  for (int i = 0; i < 400'000; ++i) {
    // One in four is a repeat of an earlier hash.
    const uint64_t h = !seen.empty() && rng() % 4 == 0 ? seen[rng() % seen.size()] : rng();
    if (i % 1000 == 0) set.Prefetch(h);
    ASSERT_EQ(set.Insert(h), ref.insert(h).second) << "insert " << i;
    seen.push_back(h);
  }
  EXPECT_EQ(set.size(), ref.size());
  EXPECT_GE(set.capacity() * 7, set.size() * 10) << "load stays at or below 0.7";
  EXPECT_GT(set.capacity() * sizeof(uint64_t), size_t{2} << 20);
  for (uint64_t h : seen) ASSERT_TRUE(set.Contains(h));
  EXPECT_FALSE(set.Contains(rng()));
}

// Hashes that share their low bits collide on one slot and probe linearly,
// wrapping at the end of the array.
TEST(IdHashSetTest, CollidingHashesAndWrapAround) {
  IdHashSet set;
  const uint64_t cap = 1 << 16;  // the first capacity
  for (uint64_t k = 1; k <= 100; ++k) {
    ASSERT_TRUE(set.Insert((k << 32) | (cap - 3)));
  }
  for (uint64_t k = 1; k <= 100; ++k) {
    EXPECT_FALSE(set.Insert((k << 32) | (cap - 3)));
  }
  EXPECT_EQ(set.size(), 100u);
  EXPECT_EQ(set.capacity(), cap);
}

// 0 marks an empty slot: hash 0 is stored as 1.
TEST(IdHashSetTest, ZeroIsAnId) {
  IdHashSet set;
  EXPECT_FALSE(set.Contains(0));
  EXPECT_TRUE(set.Insert(0));
  EXPECT_TRUE(set.Contains(0));
  EXPECT_FALSE(set.Insert(0));
  EXPECT_FALSE(set.Insert(1)) << "0 and 1 are one id";
  set.Clear();
  EXPECT_EQ(set.size(), 0u);
  EXPECT_FALSE(set.Contains(0));
  EXPECT_TRUE(set.Insert(2));
}

}  // namespace
}  // namespace caravela
