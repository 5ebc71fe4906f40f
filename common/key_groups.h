// Key groups (SPEC §8 "Rescaling"; Flink's KeyGroupRangeAssignment): the unit
// in which keyed state and exchanged records are divided among the tasks of
// a keyed stage.
//
// A job has a maximum parallelism M (spec.max_parallelism, default 128). A
// key belongs to key group g = ExchangeKeyHash(key) mod M, for good: M never
// changes while the job has state. A stage of P tasks (1 <= P <= M) gives
// task t the contiguous range of key groups
//   [ceil(t * M / P), ceil((t + 1) * M / P) - 1],
// so every key group has exactly one owner, ranges differ in size by at most
// one, and key group g is owned by task floor(g * P / M). A rescale from P
// to P' only reassigns ranges: the key groups themselves, and so the layout
// of state and of exchange partitions, stay the same.
#pragma once

#include <cstdint>
#include <string>

#include "common/status.h"

namespace caravela {

inline constexpr int kDefaultMaxParallelism = 128;
inline constexpr int kMaxMaxParallelism = 32768;

// Checks a maximum parallelism: 1..kMaxMaxParallelism.
absl::Status ValidateMaxParallelism(int max_parallelism);

// The key group of a key hash (ExchangeKeyHash, common/job_plan.h).
inline int KeyGroupOf(uint64_t key_hash, int max_parallelism) {
  return static_cast<int>(key_hash % static_cast<uint64_t>(max_parallelism));
}

// A contiguous, inclusive range of key groups [first, last]; empty when
// last < first.
struct KeyGroupRange {
  int first = 0;
  int last = -1;

  int size() const { return last >= first ? last - first + 1 : 0; }
  bool empty() const { return size() == 0; }
  bool Contains(int key_group) const { return key_group >= first && key_group <= last; }
  bool operator==(const KeyGroupRange& o) const {
    return (empty() && o.empty()) || (first == o.first && last == o.last);
  }
  // "0-63", or "none".
  std::string ToString() const;
};

// The key groups task `task` of `parallelism` owns (0 <= task < parallelism
// <= max_parallelism).
KeyGroupRange KeyGroupRangeOfTask(int max_parallelism, int parallelism, int task);

// The task of `parallelism` that owns `key_group`.
inline int TaskOfKeyGroup(int max_parallelism, int parallelism, int key_group) {
  return static_cast<int>(static_cast<int64_t>(key_group) * parallelism / max_parallelism);
}

// The task of `parallelism` that owns the key with hash `key_hash`.
inline int TaskOfKeyHash(uint64_t key_hash, int max_parallelism, int parallelism) {
  return TaskOfKeyGroup(max_parallelism, parallelism, KeyGroupOf(key_hash, max_parallelism));
}

}  // namespace caravela
