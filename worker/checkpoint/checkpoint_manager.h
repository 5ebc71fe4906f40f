// CheckpointManager: incremental checkpoints of one task's state to a
// CheckpointStorage, restore, garbage collection and savepoints (SPEC §6).
//
// Storage layout under the storage root (one prefix per task):
//
//   <job_name>/task-<id>/shared/<xxh3-128 hex>-<size>.sst   immutable SSTs,
//                                  content-addressed, shared by checkpoints
//   <job_name>/task-<id>/chk-<n>/<name>     the small files of checkpoint n
//                                  (MANIFEST-*, CURRENT, OPTIONS-*, ...)
//   <job_name>/task-<id>/chk-<n>.manifest   the manifest: the commit point,
//                                  written last and atomically
//
// Because shared files are named by content hash and size, two different
// files never share a key, even when a restarted RocksDB reuses file numbers;
// an SST is uploaded once and referenced by every checkpoint that contains it.
//
// A checkpoint exists iff its manifest exists, decodes, and every file it
// lists exists with the listed size (checksums are verified on restore). A
// crash before the manifest leaves only garbage that GC removes.
//
// Decisions (see README.md):
//   * Latest() skips torn checkpoints (manifest present but files missing)
//     with a warning, but FAILS on a manifest that does not decode or has a
//     newer layout_version: silently falling back to an older checkpoint
//     would replay from older offsets with older state, and a corrupt commit
//     point needs a human.
//   * Single writer per task prefix (the runtime's epoch fencing guarantees
//     it); nothing here locks the storage.
//
// Threading: one manager per task, used by the task thread, except that
// Upload() may run on another thread (one at a time): until it returns, the
// task thread calls only next_checkpoint_id(), prefix() and Pin().
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>

#include "caravela/v1/checkpoint.pb.h"
#include "common/status.h"
#include "worker/checkpoint/checkpoint_storage.h"
#include "worker/state/state_backend.h"

namespace caravela {

using CheckpointManifest = ::caravela::v1::CheckpointManifest;

// The manifest layout this binary writes and the newest it reads.
inline constexpr uint32_t kCheckpointLayoutVersion = 1;

// Manifest bytes on storage: "CVCKMAN1" | xxh3-64 of payload (8 bytes,
// little endian) | CheckpointManifest serialized.
std::string EncodeManifest(const CheckpointManifest& m);
// DataLoss naming `name` if the bytes are not a manifest (bad magic, checksum,
// protobuf, layout_version 0); FailedPrecondition "checkpoint <name> was
// written by a newer layout version N; this binary reads ≤1".
absl::StatusOr<CheckpointManifest> DecodeManifest(std::string_view bytes, std::string_view name);

// `path_or_url` as a storage URL: a URL unchanged, a local path as
// file://<its absolute path> (savepoint directories given either way).
std::string StorageUrl(const std::string& path_or_url);

// Why the checkpoint `m` is not complete in storage: the first file it lists
// that `sizes` (storage keys: `prefix` + the file's key -> size) lacks or
// holds with another size, or that it lists none; "" if complete.
std::string MissingFile(const CheckpointManifest& m, const std::map<std::string, uint64_t>& sizes,
                        const std::string& prefix = "");

struct CheckpointStats {
  int64_t checkpoint_id = 0;
  int64_t files_total = 0;
  int64_t files_uploaded = 0;
  uint64_t bytes_total = 0;     // size of the whole snapshot
  uint64_t bytes_uploaded = 0;  // bytes written to storage (files + manifest)
  int64_t snapshot_ms = 0;      // backend Snapshot()
  int64_t duration_ms = 0;      // the whole Write(), GC included
  int64_t gc_deleted = 0;       // objects deleted by the GC after this write
};

// A checkpoint whose state is snapshotted into a local directory but not
// uploaded yet: Write()'s first half (CheckpointManager::Snapshot).
struct CheckpointSnapshot {
  std::string dir;              // the scratch snapshot, removed by Upload()
  CheckpointManifest manifest;  // id, job, the runtime's fields; files filled by Upload()
  CheckpointStats stats;        // checkpoint_id and snapshot_ms so far
  std::chrono::steady_clock::time_point started;
};

struct RestoreStats {
  int64_t files = 0;
  uint64_t bytes = 0;
  int64_t download_ms = 0;  // download + verify
  int64_t duration_ms = 0;  // download + verify + backend Restore()
};

class CheckpointManager {
 public:
  // Opens the storage at `url` (see OpenCheckpointStorage), lists the task's
  // prefix to learn the shared files it holds and the highest checkpoint id
  // used so far (the next Write uses a higher one), and clears leftovers of a
  // previous run in `local_scratch_dir` (created if missing; a directory on
  // the same filesystem as the state, used for snapshots and restores).
  // `job_name` must be a safe path component ([A-Za-z0-9._-], not starting
  // with '.'); `task_id` >= 0; `retain` >= 1 checkpoints are kept by GC.
  static absl::StatusOr<std::unique_ptr<CheckpointManager>> Open(
      const std::string& url, const std::string& job_name, int task_id,
      const std::string& local_scratch_dir, int retain);
  // Same with a storage given by the caller (tests, other stores).
  static absl::StatusOr<std::unique_ptr<CheckpointManager>> Open(
      std::unique_ptr<CheckpointStorage> storage, const std::string& job_name, int task_id,
      const std::string& local_scratch_dir, int retain);

  // The id the next Write() or WriteSavepoint() will use unless the manifest
  // names one (the runtime passes it to Sink::PreCommit first).
  int64_t next_checkpoint_id() const { return next_id_; }
  // "<job_name>/task-<id>/"
  const std::string& prefix() const { return prefix_; }
  CheckpointStorage& storage() { return *storage_; }

  // Takes checkpoint: backend.Snapshot() into the scratch dir (the backend
  // must have no uncommitted writes), uploads the SSTs storage does not hold
  // yet and the small files, writes the manifest (commit point), removes the
  // scratch dir and runs GC (GC errors are logged, not returned: the
  // checkpoint is already committed). `m` carries the runtime's fields;
  // checkpoint_id 0 means next_checkpoint_id(), otherwise it must be >= it.
  // job_name must be empty (filled in) or equal to the manager's. Fills
  // layout_version, task_id, created_at_ms and files. On error nothing is
  // committed (the id is still consumed). Failpoints:
  // "checkpoint.after_files" (files written, manifest not) and
  // "checkpoint.after_manifest".
  absl::StatusOr<CheckpointStats> Write(StateBackend& backend, CheckpointManifest m);
  // Write() in two halves, so that a task goes on processing while its
  // checkpoint uploads (Flink's synchronous and asynchronous snapshot
  // phases). Snapshot(): the manifest's id and backend.Snapshot() into the
  // scratch dir, on the task thread; afterwards the backend may take writes
  // again. Upload(): the files, the manifest (commit point) and GC; it may
  // run on another thread (see Threading above). An error of either commits
  // nothing.
  absl::StatusOr<CheckpointSnapshot> Snapshot(StateBackend& backend, CheckpointManifest m);
  absl::StatusOr<CheckpointStats> Upload(CheckpointSnapshot snap);

  // The newest complete checkpoint, nullopt if there is none. See the class
  // comment for what is skipped and what fails.
  absl::StatusOr<std::optional<CheckpointManifest>> Latest();
  // The same among checkpoints with id <= `max_id` (manifests above it are
  // not read): for sinks that committed only an older checkpoint's output.
  absl::StatusOr<std::optional<CheckpointManifest>> LatestUpTo(int64_t max_id);

  // Downloads the manifest's files into a fresh scratch dir, verifies sizes
  // and checksums (DataLoss naming the key on mismatch), then
  // backend.Restore()s from it. Reopen tables afterwards. SSTs of a storage
  // on the same filesystem as the scratch dir are hard-linked rather than
  // copied (see set_restore_hard_links); a restored RocksDB then shares
  // those immutable files with the storage.
  absl::StatusOr<RestoreStats> RestoreState(const CheckpointManifest& m, StateBackend& backend);
  // false: always copy on restore (default true: hard-link when possible).
  void set_restore_hard_links(bool on) { restore_hard_links_ = on; }

  // Keeps the newest `retain` complete checkpoints; deletes older manifests,
  // chk-<n>/ files not belonging to a kept manifest (and, older than the
  // newest manifest, those of checkpoints that never got one), shared files
  // no kept manifest references, and stale temporaries. Returns the number of
  // objects deleted. Write() calls it.
  absl::StatusOr<int64_t> CollectGarbage();
  // A checkpoint GC keeps whatever its age (0: none): a task of a parallel
  // job pins the job's last complete checkpoint, which newer checkpoints
  // stored by this task alone (runs that died before the job completed
  // them) must not push out.
  void Pin(int64_t checkpoint_id) { pinned_.store(checkpoint_id); }

  // Writes a self-contained savepoint to `dest` (file:// URL or local path):
  // <dest>/state/<name> for every snapshot file and <dest>/savepoint.manifest
  // (written last). Refuses (AlreadyExists) if the manifest exists. Uses an
  // id like Write() and never touches the checkpoint storage.
  absl::StatusOr<CheckpointStats> WriteSavepoint(StateBackend& backend, CheckpointManifest m,
                                                 const std::string& dest);
  // Reads and checks a savepoint's manifest (layout version, files present
  // with their sizes).
  static absl::StatusOr<CheckpointManifest> LoadSavepoint(const std::string& path);
  // LoadSavepoint + restore its state into `backend`; returns the manifest.
  absl::StatusOr<CheckpointManifest> RestoreSavepoint(const std::string& path,
                                                      StateBackend& backend);

 private:
  CheckpointManager(std::unique_ptr<CheckpointStorage> storage, std::string job_name, int task_id,
                    std::string scratch, int retain);

  absl::Status Init();
  // Uploads the snapshot in `dir`; fills m->files. `shared` picks the
  // checkpoint layout (content-addressed SSTs) vs the savepoint one.
  absl::Status UploadSnapshot(CheckpointStorage& storage, const std::string& dir,
                              const std::string& key_prefix, const std::string& own_dir,
                              bool shared, CheckpointManifest* m, CheckpointStats* stats);
  // XXH3-128 of an immutable local file, from checksum_cache_ if known;
  // records it in `*seen`.
  absl::StatusOr<std::string> Checksum(const std::string& path, const std::string& name,
                                       std::unordered_map<std::string, std::string>* seen);
  absl::Status PrepareManifest(CheckpointManifest* m, int64_t* id);

  std::unique_ptr<CheckpointStorage> storage_;
  const std::string job_name_;
  const int task_id_;
  const std::string scratch_;
  const int retain_;
  std::atomic<int64_t> pinned_{0};
  const std::string prefix_;
  int64_t next_id_ = 1;
  bool restore_hard_links_ = true;
  // Keys (relative to prefix_) of the shared files known to be in storage.
  std::set<std::string> known_shared_;
  // Checksums of local files already hashed, by (name, size, dev, inode,
  // mtime): RocksDB snapshots hard-link the live SSTs, so an unchanged SST is
  // the same inode checkpoint after checkpoint and is hashed once. Entries
  // not seen in a snapshot are dropped; cleared on restore.
  std::unordered_map<std::string, std::string> checksum_cache_;
};

}  // namespace caravela
