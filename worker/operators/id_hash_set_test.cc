#include "worker/operators/id_hash_set.h"

#include <cstdint>
#include <random>
#include <unordered_set>
#include <vector>

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

// A set reserved for n hashes holds them without growing; a reserve on a
// filled set keeps what it holds; one for fewer than it has room for is a
// no-op.
TEST(IdHashSetTest, ReserveMakesRoomOnceAndKeepsTheHashes) {
  IdHashSet set;
  set.Reserve(300'000);
  const size_t reserved = set.capacity();
  EXPECT_GE(reserved * 7, size_t{300'000} * 10);
  EXPECT_LT(reserved * 7, size_t{300'000} * 20) << "the smallest power of two that fits";
  std::mt19937_64 rng(11);
  std::vector<uint64_t> added;
  for (int i = 0; i < 300'000; ++i) {
    added.push_back(rng());
    ASSERT_TRUE(set.Insert(added.back()));
  }
  EXPECT_EQ(set.capacity(), reserved) << "no growth up to the reserved count";
  set.Reserve(1000);
  EXPECT_EQ(set.capacity(), reserved);
  set.Reserve(2'000'000);
  EXPECT_GT(set.capacity(), reserved);
  EXPECT_EQ(set.size(), added.size());
  for (uint64_t h : added) ASSERT_TRUE(set.Contains(h));
  for (uint64_t h : added) ASSERT_FALSE(set.Insert(h));
}

// Hashes that all share their low bits, as the ids one task of a parallel
// job owns do (routed by hash % tasks), spread over the table.
TEST(IdHashSetTest, HashesSharingTheirLowBits) {
  IdHashSet set;
  std::unordered_set<uint64_t> ref;
  std::mt19937_64 rng(5);
  for (int i = 0; i < 300'000; ++i) {
    const uint64_t h = rng() << 16;  // low 16 bits all zero
    ASSERT_EQ(set.Insert(h), ref.insert(h).second);
  }
  for (uint64_t h : ref) ASSERT_FALSE(set.Insert(h));
  EXPECT_EQ(set.size(), ref.size());
}

// Hashes whose slot is the last one probe past the end of the array and
// wrap to its start. (The slot is the top 16 bits of h * K for the first
// capacity; h = target * K^-1 mod 2^64 lands where wanted.)
TEST(IdHashSetTest, ProbesWrapAroundTheEnd) {
  const uint64_t k = 0x9e3779b97f4a7c15ULL;
  uint64_t inv = k;  // Newton's iteration for the inverse of an odd number mod 2^64
  for (int i = 0; i < 6; ++i) inv *= 2 - k * inv;
  ASSERT_EQ(k * inv, 1u);
  IdHashSet set;
  for (uint64_t j = 1; j <= 100; ++j) {
    ASSERT_TRUE(set.Insert(((uint64_t{0xffff} << 48) | j) * inv));
  }
  ASSERT_EQ(set.capacity(), uint64_t{1} << 16) << "still the first capacity";
  for (uint64_t j = 1; j <= 100; ++j) {
    EXPECT_FALSE(set.Insert(((uint64_t{0xffff} << 48) | j) * inv));
    EXPECT_TRUE(set.Contains(((uint64_t{0xffff} << 48) | j) * inv));
  }
  EXPECT_EQ(set.size(), 100u);
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
