// UnsyncedEnv: the RocksDB environment of a task's local state, in which
// fsync, fdatasync and range syncs do nothing.
//
// A task's local RocksDB is never recovered from its own files: every run
// starts from an empty directory and restores its last checkpoint (task.cc),
// and a checkpoint is durable once its files are in checkpoint storage,
// which syncs them itself. So a sync of the local files buys no durability,
// and it stood in the pipeline: a checkpoint's flush and snapshot synced the
// new SST, the MANIFEST and the snapshot's copies while the task's inputs
// waited (10-30 ms per checkpoint on this machine; docs/benchmarks.md).
#pragma once

#include "rocksdb/env.h"

namespace caravela {

// Process-wide, never freed (RocksDB holds raw Env pointers).
rocksdb::Env* UnsyncedEnv();

}  // namespace caravela
