// FileStorage: CheckpointStorage on a POSIX directory (local disk, NFS, PVC).
//
// Key "a/b/c" is the file <root>/a/b/c. A write goes to a temporary
// "<dir>/.<name>.tmp.<pid>.<n>" in the same directory, which is written,
// fsync'ed, renamed over the final name, and then the directory is fsync'ed
// (as is the parent of every directory the write created), so a crash at any
// point leaves either the old object or the new one, plus at most an
// invisible temporary. Deleting the last object of a directory removes the
// empty directories up to the root.
//
// Threading: as CheckpointStorage.
#pragma once

#include <memory>
#include <string>

#include "worker/checkpoint/checkpoint_storage.h"

namespace caravela {

// `root` is an absolute directory path; it is created if missing.
absl::StatusOr<std::unique_ptr<CheckpointStorage>> OpenFileStorage(const std::string& root);

}  // namespace caravela
