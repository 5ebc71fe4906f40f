// RowPool: storage for the packed rows (Record::PackTo) a join buffers.
//
// Buffered rows are small, many (10^5-10^7) and freed roughly in the order
// they came, the worst pattern for a general-purpose allocator (malloc spent
// ~20% of the interval join in the benchmark). The pool carves blocks of
// 64-byte size classes out of 1 MiB chunks and keeps a free list per class;
// a freed block is reused by the next row of its class. Memory goes back to
// the system only when the pool is cleared or destroyed, so it holds the
// peak working set. Rows over kMaxPooled bytes use operator new.
//
// Threading: one task thread, like its operator.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "common/record.h"

namespace caravela {

class RowPool {
 public:
  // A packed copy of `rec` (8-byte aligned, rec.PackedSize() bytes); give
  // it back with Free().
  char* Pack(const Record& rec) {
    char* p = Allocate(rec.PackedSize());
    rec.PackTo(p);
    return p;
  }
  // Returns a block from Pack() of `bytes` (its PackedSize(), which callers
  // keep so that freeing does not touch the block); `packed` must not be
  // used afterwards.
  void Free(char* packed, size_t bytes) {
    if (bytes > kMaxPooled) {
      delete[] reinterpret_cast<uint64_t*>(packed);
      return;
    }
    free_[Class(bytes)].push_back(packed);
  }
  // Drops every block at once (blocks from Pack() become invalid).
  void Clear() {
    chunks_.clear();
    for (auto& f : free_) f.clear();
    next_ = end_ = nullptr;
  }
  // Bytes held from the system (chunks), for memory metrics and tests.
  size_t ReservedBytes() const { return chunks_.size() * kChunkBytes; }

 private:
  static constexpr size_t kClassBytes = 64;
  static constexpr size_t kMaxPooled = 4096;
  static constexpr size_t kChunkBytes = 1 << 20;
  static size_t Class(size_t bytes) { return (bytes + kClassBytes - 1) / kClassBytes; }

  char* Allocate(size_t bytes) {
    if (bytes > kMaxPooled) return reinterpret_cast<char*>(new uint64_t[(bytes + 7) / 8]);
    std::vector<char*>& free = free_[Class(bytes)];
    if (!free.empty()) {
      char* p = free.back();
      free.pop_back();
      return p;
    }
    const size_t size = Class(bytes) * kClassBytes;
    if (next_ == nullptr || static_cast<size_t>(end_ - next_) < size) {
      // The tail of the previous chunk (< kMaxPooled) is left unused.
      chunks_.push_back(std::unique_ptr<uint64_t[]>(new uint64_t[kChunkBytes / 8]));
      next_ = reinterpret_cast<char*>(chunks_.back().get());
      end_ = next_ + kChunkBytes;
    }
    char* p = next_;
    next_ += size;
    return p;
  }

  std::vector<std::unique_ptr<uint64_t[]>> chunks_;
  char* next_ = nullptr;  // unused part of the last chunk
  char* end_ = nullptr;
  std::vector<char*> free_[kMaxPooled / kClassBytes + 1];
};

}  // namespace caravela
