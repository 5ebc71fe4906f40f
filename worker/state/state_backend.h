// State backend: key-value state owned by the runtime, declared by operators.
//
// An operator opens named tables (one key space each: a RocksDB column family,
// or a key prefix). Writes are buffered in a batch that reads see immediately
// (read-your-writes) and are applied atomically by Commit(), which the runtime
// calls after each processed batch; RocksDB writes go through a WriteBatch
// with the WAL disabled, because checkpoints, not the WAL, give durability.
//
// Threading: a backend and its tables belong to one task thread.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace caravela {

class StateTable {
 public:
  virtual ~StateTable() = default;
  // Returns true and fills `value` if `key` exists (including uncommitted writes).
  // `value` may be null to test existence only.
  virtual absl::StatusOr<bool> Get(std::string_view key, std::string* value) = 0;
  virtual void Put(std::string_view key, std::string_view value) = 0;
  virtual void Delete(std::string_view key) = 0;
  // Visits keys in [begin, end) in bytewise order (end empty = to the end of the
  // table), including uncommitted writes. `f` returns false to stop early.
  // The views passed to `f` are valid only during the call. `f` must not write
  // to the table being scanned; it may read it and write to other tables.
  virtual absl::Status Scan(
      std::string_view begin, std::string_view end,
      const std::function<bool(std::string_view key, std::string_view value)>& f) = 0;
  // Deletes every key in [begin, end) (end empty = to the end of the table).
  virtual absl::Status DeleteRange(std::string_view begin, std::string_view end) = 0;
  // Exact number of live keys, including uncommitted writes (tests, metrics).
  virtual absl::StatusOr<uint64_t> CountKeys() = 0;
};

class StateBackend {
 public:
  virtual ~StateBackend() = default;
  // Opens (creating if needed) the table `name`. The backend owns the table;
  // the pointer stays valid until the backend is destroyed or Restore()d.
  virtual absl::StatusOr<StateTable*> OpenTable(std::string_view name) = 0;
  // Opens `name` for an operator that keeps its working set in memory and
  // writes it behind (Flush): Put/Delete skip the read-your-writes index
  // (RocksDB: a plain WriteBatch instead of the indexed one). Reads still see
  // every write (a read first applies the table's pending writes to the
  // store), but they are slow: read such a table in Open(), not per record.
  // Default: OpenTable.
  virtual absl::StatusOr<StateTable*> OpenWriteBehindTable(std::string_view name) {
    return OpenTable(name);
  }
  // Applies all buffered writes of all tables atomically. On error the writes
  // stay buffered. Destroying the backend discards uncommitted writes.
  virtual absl::Status Commit() = 0;
  // Writes a self-contained, consistent copy of the committed state into the
  // new directory `dir` (a RocksDB checkpoint for RocksDB); missing parent
  // directories are created. Commit first: returns FailedPrecondition if there
  // are uncommitted writes, AlreadyExists if `dir` exists.
  virtual absl::Status Snapshot(const std::string& dir) = 0;
  // Replaces the whole state with the snapshot in `dir` (taken by the same
  // kind of backend; the snapshot stays usable) and discards uncommitted
  // writes. Table pointers handed out before are invalidated; reopen tables
  // afterwards. If `dir` is missing or unreadable the state is unchanged; a
  // RocksDB backend that fails after closing its DB returns FailedPrecondition
  // from every later call until a Restore() succeeds.
  virtual absl::Status Restore(const std::string& dir) = 0;
  // Approximate bytes of state (memory or on disk), for metrics.
  virtual uint64_t ApproximateBytes() = 0;
  // Per table: estimated keys and bytes (RocksDB: its estimate-num-keys
  // property, SST files plus memtables), for metrics. Committed state only
  // (RocksDB); call on the owning thread.
  struct TableStats {
    std::string table;
    uint64_t keys = 0;
    uint64_t bytes = 0;
  };
  virtual std::vector<TableStats> Stats() = 0;
  // Forces physical cleanup of deleted data (RocksDB: full compaction).
  virtual absl::Status Compact() { return absl::OkStatus(); }
};

std::unique_ptr<StateBackend> NewMemoryBackend();
// Memory the RocksDB instances of one process share (SPEC §6: one instance
// per task, one budget per process): one LRU block cache, and one budget
// for the memtables of every instance (charged to that cache, so the two
// together stay within block_cache_bytes + write_buffer_bytes however many
// tasks run). Backends keep a reference; thread-safe.
struct StateMemoryBudget;
std::shared_ptr<StateMemoryBudget> NewStateMemoryBudget(size_t block_cache_bytes,
                                                        size_t write_buffer_bytes);
struct StateMemoryUsage {
  size_t block_cache_capacity = 0, block_cache_usage = 0;  // usage includes memtables
  size_t write_buffer_limit = 0, write_buffer_usage = 0;
};
StateMemoryUsage GetStateMemoryUsage(const StateMemoryBudget& budget);

// Opens or creates a RocksDB instance at `path` (one per task). Without a
// budget it has its own 32 MiB block cache and 64 MiB of memtables.
// `flush_on_close`: destroying the backend flushes its memtables, so that a
// later open of `path` sees every committed write. A task's state is never
// opened again (every run of a task starts from empty local state or a
// checkpoint), so tasks close without it (the flush of a run's last
// memtables took the last ~0.1 s of a 2 s file job).
absl::StatusOr<std::unique_ptr<StateBackend>> OpenRocksDbBackend(
    const std::string& path, std::shared_ptr<StateMemoryBudget> budget = nullptr,
    bool flush_on_close = true);

}  // namespace caravela
