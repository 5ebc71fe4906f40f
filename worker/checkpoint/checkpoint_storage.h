// Checkpoint storage: a flat namespace of immutable-ish objects addressed by
// keys, the small subset of an object store that checkpoints need (SPEC §6).
//
// Keys are relative '/'-separated paths ("job/task-0/shared/ab12-4096.sst").
// Each component is non-empty, not "." or "..", and does not start with '.'
// (names starting with '.' are reserved for the storage's temporaries). Keys
// are case-sensitive; there are no directories as objects.
//
// Contract of every implementation:
//   * Write/Upload are atomic and durable: once they return OK the object is
//     complete and survives a crash; a concurrent or later reader sees either
//     the previous object (or none) or the whole new one, never a prefix.
//   * Temporaries of writes cut short by a crash are invisible to
//     Read/Exists/Size/List; DeleteStaleTemporaries removes them.
//   * Delete of a missing key is OK.
//   * Errors are absl::Status whose message names the URL and key.
//
// Threading: an instance may be used from several threads as long as no two
// threads write or delete the same key at the same time.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace caravela {

struct ObjectInfo {
  std::string key;
  uint64_t size = 0;
};

class CheckpointStorage {
 public:
  virtual ~CheckpointStorage() = default;

  // The URL this storage was opened with (for messages).
  virtual const std::string& url() const = 0;

  // Atomically creates or replaces `key` with `data`.
  virtual absl::Status Write(std::string_view key, std::string_view data) = 0;
  // Atomically creates or replaces `key` with the content of the local file
  // `local_path` (streamed; for large files).
  virtual absl::Status Upload(std::string_view key, const std::string& local_path) = 0;

  // Whole object. NotFound if missing.
  virtual absl::StatusOr<std::string> Read(std::string_view key) = 0;
  // Streams the object in chunks (at most a few MiB each) to `f`; stops at the
  // first error `f` returns. NotFound if missing.
  virtual absl::Status ReadChunks(std::string_view key,
                                  const std::function<absl::Status(std::string_view)>& f) = 0;

  virtual absl::StatusOr<bool> Exists(std::string_view key) = 0;
  // NotFound if missing.
  virtual absl::StatusOr<uint64_t> Size(std::string_view key) = 0;
  // Every object whose key starts with `prefix` (plain string prefix, any
  // depth), sorted by key.
  virtual absl::StatusOr<std::vector<ObjectInfo>> List(std::string_view prefix) = 0;
  virtual absl::Status Delete(std::string_view key) = 0;

  // If the object is a plain file on a local (or mounted) filesystem, its
  // path; "" otherwise. Callers may hard-link it but must never modify it.
  virtual std::string LocalPath(std::string_view key) const { return ""; }

  // Removes temporaries of interrupted writes under `prefix` that were last
  // modified before `older_than_unix_ms` (and, for directory-based stores,
  // empty directories). Default: nothing to do (stores whose interrupted
  // uploads vanish by themselves).
  virtual absl::Status DeleteStaleTemporaries(std::string_view prefix, int64_t older_than_unix_ms) {
    return absl::OkStatus();
  }
};

// Opens the storage named by `url` through its scheme (common/storage_scheme.h,
// the builtin schemes listed in worker/registry/builtin_kinds.cc, which
// defines this function):
//   file:///absolute/dir  -> FileStorage rooted at /absolute/dir (created if
//                            missing), e.g. a local disk, NFS or PVC mount.
//   s3://bucket/prefix    -> S3Storage (s3_storage.h; endpoint, region and
//                            credentials from the environment).
// Anything else is InvalidArgument naming the URL and the expected forms.
absl::StatusOr<std::unique_ptr<CheckpointStorage>> OpenCheckpointStorage(const std::string& url);

// The job's epoch counter stored at `key` (a decimal integer, see
// docs/semantics.md): nullopt if the object does not exist, DataLoss naming
// the URL and key if it is not a number.
absl::StatusOr<std::optional<int64_t>> ReadEpoch(CheckpointStorage& storage, std::string_view key);

// Checks the key rules above; InvalidArgument naming the key otherwise.
absl::Status ValidateStorageKey(std::string_view key);

}  // namespace caravela
