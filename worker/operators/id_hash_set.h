// IdHashSet: a set of 64-bit id hashes for the dedup's batch mode (the
// recomputation of `caravela reconcile`, which remembers every id of the
// input: 10 M and more).
//
// At that size every insert is a cache miss and, with 4 KiB pages, a TLB
// miss too; on a VM each TLB miss is a two-level page walk. So the layout is
// chosen for memory, not generality:
//  * open addressing with linear probing over one array of hashes: a probe
//    touches one cache line (absl's swiss tables touch two, the control
//    bytes and the slot, on two pages);
//  * the array is mapped with MADV_HUGEPAGE and aligned to 2 MiB, so 10 M
//    ids (128 MiB) need 64 TLB entries, not 32 K;
//  * Prefetch(h) lets a caller overlap the misses of the next few ids.
// Measured in docs/benchmarks.md "Reconciliation".
//
// Hash 0 marks an empty slot, so ids hashing to 0 and 1 are one id
// (negligible next to the 2^-64 of any two ids colliding). A hash's slot
// comes from its high bits after a multiplication (Fibonacci hashing): ids
// routed to a task by `hash % tasks` share their low bits, which would pile
// them up in a table indexed by those bits.
#pragma once

#include <cstddef>
#include <cstdint>

namespace caravela {

class IdHashSet {
 public:
  IdHashSet() = default;
  ~IdHashSet();
  IdHashSet(const IdHashSet&) = delete;
  IdHashSet& operator=(const IdHashSet&) = delete;

  // Starts the load of h's slot (no effect on an empty set).
  void Prefetch(uint64_t h) const {
    if (slots_ != nullptr) __builtin_prefetch(&slots_[Slot(h)], 1, 3);
  }
  // Adds h; true if it was not there yet.
  bool Insert(uint64_t h);
  // Makes room for n hashes at once, so that inserting them never grows the
  // set (each growth zeroes a new array and rehashes the old one).
  void Reserve(size_t n);
  bool Contains(uint64_t h) const;
  size_t size() const { return size_; }
  // Capacity in slots (a power of two, or 0).
  size_t capacity() const { return mask_ == 0 ? 0 : mask_ + 1; }
  void Clear();

 private:
  static uint64_t Stored(uint64_t h) { return h == 0 ? 1 : h; }
  // Doubling the capacity maps slot s to 2s or 2s + 1, so a rehash writes
  // nearly in order.
  size_t Slot(uint64_t h) const {
    return static_cast<size_t>((Stored(h) * 0x9e3779b97f4a7c15ULL) >> shift_);
  }
  // Moves every hash into a zeroed array of `capacity` slots.
  void Rehash(size_t capacity);
  // Doubles the array (first: 2^16 slots).
  void Grow() { Rehash(mask_ == 0 ? kFirstCapacity : 2 * (mask_ + 1)); }
  // A load above 7/10 grows the set: linear probing stays within a line or two.
  static bool Overloaded(size_t size, size_t capacity) { return 10 * size > 7 * capacity; }

  static constexpr size_t kFirstCapacity = size_t{1} << 16;

  uint64_t* slots_ = nullptr;
  size_t mask_ = 0;
  unsigned shift_ = 63;  // 64 - log2(capacity)
  size_t size_ = 0;
  size_t bytes_ = 0;  // of the mapping behind slots_
  void* mapping_ = nullptr;
};

}  // namespace caravela
