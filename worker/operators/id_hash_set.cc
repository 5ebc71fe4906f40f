#include "worker/operators/id_hash_set.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstdint>
#include <new>

namespace caravela {
namespace {

constexpr size_t kHugePage = size_t{2} << 20;

// Zeroed memory for `slots` hashes, 2 MiB-aligned and marked for transparent
// huge pages when it spans at least one. Returns the mapping (to unmap) and
// sets *bytes to its length.
uint64_t* MapSlots(size_t slots, void** mapping, size_t* bytes) {
  const size_t want = slots * sizeof(uint64_t);
  *bytes = want < kHugePage ? want : want + kHugePage;
  void* p = mmap(nullptr, *bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) throw std::bad_alloc();
  *mapping = p;
  if (want < kHugePage) return static_cast<uint64_t*>(p);
  const uintptr_t aligned =
      (reinterpret_cast<uintptr_t>(p) + kHugePage - 1) & ~static_cast<uintptr_t>(kHugePage - 1);
  // Advice only: without THP the set works the same, with more TLB misses.
  (void)madvise(reinterpret_cast<void*>(aligned), want, MADV_HUGEPAGE);
  return reinterpret_cast<uint64_t*>(aligned);
}

}  // namespace

IdHashSet::~IdHashSet() { Clear(); }

void IdHashSet::Clear() {
  if (mapping_ != nullptr) munmap(mapping_, bytes_);
  slots_ = nullptr;
  mapping_ = nullptr;
  mask_ = 0;
  shift_ = 63;
  size_ = 0;
  bytes_ = 0;
}

bool IdHashSet::Insert(uint64_t h) {
  if (Overloaded(size_ + 1, capacity())) Grow();
  const uint64_t v = Stored(h);
  for (size_t s = Slot(v);; s = (s + 1) & mask_) {
    if (slots_[s] == v) return false;
    if (slots_[s] == 0) {
      slots_[s] = v;
      ++size_;
      return true;
    }
  }
}

bool IdHashSet::Contains(uint64_t h) const {
  if (slots_ == nullptr) return false;
  const uint64_t v = Stored(h);
  for (size_t s = Slot(v);; s = (s + 1) & mask_) {
    if (slots_[s] == v) return true;
    if (slots_[s] == 0) return false;
  }
}

void IdHashSet::Reserve(size_t n) {
  size_t capacity = std::max(this->capacity(), kFirstCapacity);
  while (Overloaded(n, capacity)) capacity *= 2;
  if (capacity > this->capacity()) Rehash(capacity);
}

void IdHashSet::Rehash(size_t capacity) {
  void* mapping = nullptr;
  size_t bytes = 0;
  uint64_t* slots = MapSlots(capacity, &mapping, &bytes);
  uint64_t* const old_slots = slots_;
  void* const old_mapping = mapping_;
  const size_t old_capacity = this->capacity(), old_bytes = bytes_;
  slots_ = slots;
  mapping_ = mapping;
  bytes_ = bytes;
  mask_ = capacity - 1;
  shift_ = static_cast<unsigned>(64 - __builtin_ctzll(capacity));
  for (size_t i = 0; i < old_capacity; ++i) {
    const uint64_t v = old_slots[i];
    if (v == 0) continue;
    size_t s = Slot(v);
    while (slots_[s] != 0) s = (s + 1) & mask_;
    slots_[s] = v;
  }
  if (old_mapping != nullptr) munmap(old_mapping, old_bytes);
}

}  // namespace caravela
