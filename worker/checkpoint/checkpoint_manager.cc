#include "worker/checkpoint/checkpoint_manager.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/failpoint.h"
#include "common/logging.h"
#include "common/time_util.h"
#include "spdlog/spdlog.h"
#define XXH_STATIC_LINKING_ONLY
#include "xxhash.h"

namespace caravela {
namespace {

namespace fs = std::filesystem;

// absl::string_view is not std::string_view in this abseil build.
absl::string_view AV(std::string_view s) { return absl::string_view(s.data(), s.size()); }

constexpr std::string_view kManifestMagic = "CVCKMAN1";
constexpr size_t kManifestHeader = 16;
constexpr std::string_view kSavepointManifest = "savepoint.manifest";
constexpr size_t kHashChunk = 4 << 20;

std::shared_ptr<spdlog::logger> Log() {
  static const std::shared_ptr<spdlog::logger> logger = SubsystemLogger("checkpoint");
  return logger;
}

class Timer {
 public:
  Timer() : start_(std::chrono::steady_clock::now()) {}
  explicit Timer(std::chrono::steady_clock::time_point start) : start_(start) {}
  int64_t Ms() const {
    return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() -
                                                                 start_)
        .count();
  }

 private:
  std::chrono::steady_clock::time_point start_;
};

std::string Hex128(XXH128_hash_t h) { return absl::StrFormat("%016x%016x", h.high64, h.low64); }

// Streams `path` through XXH3-128.
absl::StatusOr<std::string> HashFile(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return absl::InternalError(absl::StrCat("open ", path, ": ", strerror(errno)));
  XXH3_state_t state;
  XXH3_128bits_reset(&state);
  std::string buf(kHashChunk, '\0');
  while (true) {
    ssize_t n = ::read(fd, buf.data(), buf.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int err = errno;
      ::close(fd);
      return absl::InternalError(absl::StrCat("read ", path, ": ", strerror(err)));
    }
    if (n == 0) break;
    XXH3_128bits_update(&state, buf.data(), static_cast<size_t>(n));
  }
  ::close(fd);
  return Hex128(XXH3_128bits_digest(&state));
}

// A plain file name (what a manifest may name inside a snapshot dir).
bool IsPlainFileName(std::string_view name) {
  return !name.empty() && name.find('/') == std::string_view::npos && name[0] != '.' &&
         name.find('\0') == std::string_view::npos;
}

bool IsSafeComponent(std::string_view s) {
  if (s.empty() || s[0] == '.') return false;
  for (char c : s) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '_' && c != '-') {
      return false;
    }
  }
  return true;
}

// "chk-12.manifest" -> 12; "chk-12/..." -> 12 (with `*in_dir`); -1 otherwise.
int64_t ParseCheckpointKey(std::string_view rel, bool* in_dir) {
  if (!rel.starts_with("chk-")) return -1;
  rel.remove_prefix(4);
  size_t digits = 0;
  while (digits < rel.size() && rel[digits] >= '0' && rel[digits] <= '9') ++digits;
  int64_t id = 0;
  if (digits == 0 || digits > 18 || !absl::SimpleAtoi(absl::string_view(rel.data(), digits), &id)) {
    return -1;
  }
  std::string_view rest = rel.substr(digits);
  if (rest == ".manifest") {
    *in_dir = false;
    return id;
  }
  if (rest.starts_with("/")) {
    *in_dir = true;
    return id;
  }
  return -1;
}

std::string ManifestKey(int64_t id) { return absl::StrCat("chk-", id, ".manifest"); }

void RemoveDir(const std::string& dir) {
  std::error_code ec;
  fs::remove_all(dir, ec);
  if (ec) Log()->warn("could not remove scratch dir {}: {}", dir, ec.message());
}

// Checks that every file of `m` is in `sizes` (key -> size, keys relative to
// the same root as the manifest's keys) with its size. Returns the first
// problem, empty if none.
bool IsImmutableFile(std::string_view name) {
  return name.ends_with(".sst") || name.ends_with(".blob");
}

// Downloads the files of `m` (keys relative to `key_prefix` in `storage`)
// into the new directory `dir`, verifying size and checksum of each. With
// `hard_links`, immutable files of a storage on the same filesystem are
// hard-linked instead of copied (and still read once to verify them).
absl::Status Download(CheckpointStorage& storage, const std::string& key_prefix,
                      const CheckpointManifest& m, const std::string& dir, bool hard_links,
                      RestoreStats* stats) {
  std::error_code ec;
  fs::remove_all(dir, ec);
  fs::create_directories(dir, ec);
  if (ec) return absl::InternalError(absl::StrCat("create restore dir ", dir, ": ", ec.message()));
  for (const auto& f : m.files()) {
    std::string key = key_prefix + f.key();
    std::string where = absl::StrCat(storage.url(), "/", key);
    if (!IsPlainFileName(f.name())) {
      return absl::DataLossError(
          absl::StrCat("checkpoint file ", where, ": invalid file name '", f.name(), "'"));
    }
    std::string path = absl::StrCat(dir, "/", f.name());
    std::string local = hard_links && IsImmutableFile(f.name()) ? storage.LocalPath(key) : "";
    if (!local.empty() && ::link(local.c_str(), path.c_str()) == 0) {
      // Same filesystem: no copy. Verify what was linked.
      std::error_code size_ec;
      uint64_t size = fs::file_size(path, size_ec);
      ASSIGN_OR_RETURN(std::string sum, HashFile(path));
      if (size_ec || size != f.size() || sum != f.xxh3_128()) {
        return absl::DataLossError(absl::StrCat("checkpoint file ", where, " is corrupt: expected ",
                                                f.size(), " bytes with xxh3-128 ", f.xxh3_128(),
                                                ", got ", size, " bytes with ", sum));
      }
      ++stats->files;
      stats->bytes += size;
      continue;
    }
    int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) return absl::InternalError(absl::StrCat("create ", path, ": ", strerror(errno)));
    XXH3_state_t state;
    XXH3_128bits_reset(&state);
    uint64_t size = 0;
    absl::Status st = storage.ReadChunks(key, [&](std::string_view chunk) -> absl::Status {
      XXH3_128bits_update(&state, chunk.data(), chunk.size());
      size += chunk.size();
      const char* p = chunk.data();
      size_t left = chunk.size();
      while (left > 0) {
        ssize_t w = ::write(fd, p, left);
        if (w < 0 && errno == EINTR) continue;
        if (w < 0) return absl::InternalError(absl::StrCat("write ", path, ": ", strerror(errno)));
        p += w;
        left -= static_cast<size_t>(w);
      }
      return absl::OkStatus();
    });
    if (::close(fd) != 0 && st.ok()) {
      st = absl::InternalError(absl::StrCat("close ", path, ": ", strerror(errno)));
    }
    RETURN_IF_ERROR(st);
    std::string sum = Hex128(XXH3_128bits_digest(&state));
    if (size != f.size() || sum != f.xxh3_128()) {
      return absl::DataLossError(absl::StrCat("checkpoint file ", where, " is corrupt: expected ",
                                              f.size(), " bytes with xxh3-128 ", f.xxh3_128(),
                                              ", got ", size, " bytes with ", sum));
    }
    ++stats->files;
    stats->bytes += size;
  }
  return absl::OkStatus();
}

}  // namespace

std::string StorageUrl(const std::string& path_or_url) {
  if (path_or_url.find("://") != std::string::npos) return path_or_url;
  std::error_code ec;
  fs::path p = fs::absolute(path_or_url, ec);
  return absl::StrCat("file://", (ec ? fs::path(path_or_url) : p).lexically_normal().string());
}

std::string MissingFile(const CheckpointManifest& m, const std::map<std::string, uint64_t>& sizes,
                        const std::string& prefix) {
  if (m.files().empty()) return "the manifest lists no state files";
  for (const auto& f : m.files()) {
    const std::string key = prefix + f.key();
    auto it = sizes.find(key);
    if (it == sizes.end()) return absl::StrCat("file ", key, " is missing");
    if (it->second != f.size()) {
      return absl::StrCat("file ", key, " has ", it->second, " bytes, manifest says ", f.size());
    }
  }
  return "";
}

std::string EncodeManifest(const CheckpointManifest& m) {
  std::string payload = m.SerializeAsString();
  uint64_t sum = XXH3_64bits(payload.data(), payload.size());
  std::string out(kManifestMagic);
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((sum >> (8 * i)) & 0xff));
  out += payload;
  return out;
}

absl::StatusOr<CheckpointManifest> DecodeManifest(std::string_view bytes, std::string_view name) {
  auto corrupt = [&](absl::string_view why) {
    return absl::DataLossError(
        absl::StrCat("checkpoint manifest ", AV(name), " is corrupt: ", why));
  };
  if (bytes.size() < kManifestHeader || bytes.substr(0, kManifestMagic.size()) != kManifestMagic) {
    return corrupt("bad magic (not a Caravela checkpoint manifest)");
  }
  uint64_t sum = 0;
  for (int i = 0; i < 8; ++i) {
    sum |= static_cast<uint64_t>(static_cast<unsigned char>(bytes[8 + i])) << (8 * i);
  }
  std::string_view payload = bytes.substr(kManifestHeader);
  if (XXH3_64bits(payload.data(), payload.size()) != sum) {
    return corrupt("checksum mismatch (truncated or damaged)");
  }
  CheckpointManifest m;
  if (!m.ParseFromArray(payload.data(), static_cast<int>(payload.size()))) {
    return corrupt("not a valid CheckpointManifest protobuf");
  }
  if (m.layout_version() == 0) return corrupt("layout_version is not set");
  if (m.layout_version() > kCheckpointLayoutVersion) {
    return absl::FailedPreconditionError(
        absl::StrCat("checkpoint ", AV(name), " was written by a newer layout version ",
                     m.layout_version(), "; this binary reads ≤", kCheckpointLayoutVersion));
  }
  return m;
}

CheckpointManager::CheckpointManager(std::unique_ptr<CheckpointStorage> storage,
                                     std::string job_name, int task_id, std::string scratch,
                                     int retain)
    : storage_(std::move(storage)),
      job_name_(std::move(job_name)),
      task_id_(task_id),
      scratch_(std::move(scratch)),
      retain_(retain),
      prefix_(absl::StrCat(job_name_, "/task-", task_id_, "/")) {}

absl::StatusOr<std::unique_ptr<CheckpointManager>> CheckpointManager::Open(
    const std::string& url, const std::string& job_name, int task_id,
    const std::string& local_scratch_dir, int retain) {
  ASSIGN_OR_RETURN(auto storage, OpenCheckpointStorage(url));
  return Open(std::move(storage), job_name, task_id, local_scratch_dir, retain);
}

absl::StatusOr<std::unique_ptr<CheckpointManager>> CheckpointManager::Open(
    std::unique_ptr<CheckpointStorage> storage, const std::string& job_name, int task_id,
    const std::string& local_scratch_dir, int retain) {
  if (!IsSafeComponent(job_name)) {
    return absl::InvalidArgumentError(
        absl::StrCat("checkpoints: job name '", job_name,
                     "' must be non-empty, use only [A-Za-z0-9._-] and not start with '.'"));
  }
  if (task_id < 0) {
    return absl::InvalidArgumentError(absl::StrCat("checkpoints: task id ", task_id, " < 0"));
  }
  if (retain < 1) {
    return absl::InvalidArgumentError(absl::StrCat("checkpoints: retain ", retain, " < 1"));
  }
  if (local_scratch_dir.empty()) {
    return absl::InvalidArgumentError("checkpoints: local scratch dir is empty");
  }
  std::unique_ptr<CheckpointManager> mgr(
      new CheckpointManager(std::move(storage), job_name, task_id, local_scratch_dir, retain));
  RETURN_IF_ERROR(mgr->Init());
  return mgr;
}

absl::Status CheckpointManager::Init() {
  std::error_code ec;
  fs::create_directories(scratch_, ec);
  if (ec) {
    return absl::InternalError(
        absl::StrCat("checkpoints: create scratch dir ", scratch_, ": ", ec.message()));
  }
  // Leftovers of a previous run (snapshots, restores) are useless now.
  for (auto it = fs::directory_iterator(scratch_, ec); !ec && it != fs::directory_iterator();
       it.increment(ec)) {
    std::string name = it->path().filename().string();
    if (absl::StartsWith(name, "snap-") || absl::StartsWith(name, "restore-") ||
        absl::StartsWith(name, "savepoint-")) {
      RemoveDir(it->path().string());
    }
  }
  ASSIGN_OR_RETURN(auto objects, storage_->List(prefix_));
  int64_t max_id = 0;
  for (const auto& o : objects) {
    std::string_view rel = std::string_view(o.key).substr(prefix_.size());
    if (rel.starts_with("shared/")) {
      known_shared_.emplace(rel);
      continue;
    }
    bool in_dir = false;
    max_id = std::max(max_id, ParseCheckpointKey(rel, &in_dir));
  }
  next_id_ = max_id + 1;
  Log()->debug("checkpoints of {} task {} at {}/{}: {} shared files, next checkpoint {}", job_name_,
               task_id_, storage_->url(), prefix_, known_shared_.size(), next_id_);
  return absl::OkStatus();
}

absl::Status CheckpointManager::PrepareManifest(CheckpointManifest* m, int64_t* id) {
  if (m->checkpoint_id() != 0 && m->checkpoint_id() < next_id_) {
    return absl::InvalidArgumentError(
        absl::StrCat("checkpoints of ", prefix_, ": checkpoint id ", m->checkpoint_id(),
                     " is not above the last one used (", next_id_ - 1, ")"));
  }
  if (!m->job_name().empty() && m->job_name() != job_name_) {
    return absl::InvalidArgumentError(
        absl::StrCat("checkpoints of ", prefix_, ": manifest is for job '", m->job_name(), "'"));
  }
  *id = m->checkpoint_id() != 0 ? m->checkpoint_id() : next_id_;
  next_id_ = *id + 1;  // consumed even if the write fails
  m->set_layout_version(kCheckpointLayoutVersion);
  m->set_checkpoint_id(*id);
  m->set_job_name(job_name_);
  m->set_task_id(task_id_);
  m->clear_files();
  return absl::OkStatus();
}

absl::StatusOr<std::string> CheckpointManager::Checksum(
    const std::string& path, const std::string& name,
    std::unordered_map<std::string, std::string>* seen) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) {
    return absl::InternalError(absl::StrCat("stat ", path, ": ", strerror(errno)));
  }
  std::string id = absl::StrCat(name, "|", st.st_size, "|", st.st_dev, "|", st.st_ino, "|",
                                st.st_mtim.tv_sec, ".", st.st_mtim.tv_nsec);
  auto it = checksum_cache_.find(id);
  std::string sum;
  if (it != checksum_cache_.end()) {
    sum = it->second;
  } else {
    ASSIGN_OR_RETURN(sum, HashFile(path));
  }
  (*seen)[std::move(id)] = sum;
  return sum;
}

absl::Status CheckpointManager::UploadSnapshot(CheckpointStorage& storage, const std::string& dir,
                                               const std::string& key_prefix,
                                               const std::string& own_dir, bool shared,
                                               CheckpointManifest* m, CheckpointStats* stats) {
  std::vector<fs::path> files;
  std::error_code ec;
  for (auto it = fs::directory_iterator(dir, ec); !ec && it != fs::directory_iterator();
       it.increment(ec)) {
    if (!it->is_regular_file(ec)) {
      return absl::InternalError(absl::StrCat("checkpoints: snapshot ", dir,
                                              " contains a non-file: ", it->path().string()));
    }
    files.push_back(it->path());
  }
  if (ec) return absl::InternalError(absl::StrCat("list snapshot ", dir, ": ", ec.message()));
  std::sort(files.begin(), files.end());
  std::unordered_map<std::string, std::string> seen;  // the next checksum_cache_
  for (const auto& path : files) {
    std::string name = path.filename().string();
    if (!IsPlainFileName(name)) {
      return absl::InternalError(absl::StrCat("checkpoints: unexpected file name ", path.string()));
    }
    uint64_t size = fs::file_size(path, ec);
    if (ec) return absl::InternalError(absl::StrCat("stat ", path.string(), ": ", ec.message()));
    std::string ext = path.extension().string();
    bool immutable = IsImmutableFile(name);
    ASSIGN_OR_RETURN(std::string sum,
                     immutable ? Checksum(path.string(), name, &seen) : HashFile(path.string()));
    std::string key;
    bool upload = true;
    if (shared && immutable) {
      key = absl::StrCat("shared/", sum, "-", size, ext);
      upload = known_shared_.count(key) == 0;
    } else {
      key = own_dir + name;
    }
    if (upload) {
      RETURN_IF_ERROR(storage.Upload(key_prefix + key, path.string()));
      if (shared && immutable) known_shared_.insert(key);
      ++stats->files_uploaded;
      stats->bytes_uploaded += size;
    }
    ++stats->files_total;
    stats->bytes_total += size;
    auto* f = m->add_files();
    f->set_name(name);
    f->set_key(key);
    f->set_size(size);
    f->set_xxh3_128(sum);
  }
  checksum_cache_.swap(seen);
  return absl::OkStatus();
}

absl::StatusOr<CheckpointStats> CheckpointManager::Write(StateBackend& backend,
                                                         CheckpointManifest m) {
  ASSIGN_OR_RETURN(CheckpointSnapshot snap, Snapshot(backend, std::move(m)));
  return Upload(std::move(snap));
}

absl::StatusOr<CheckpointSnapshot> CheckpointManager::Snapshot(StateBackend& backend,
                                                               CheckpointManifest m) {
  CheckpointSnapshot snap;
  snap.started = std::chrono::steady_clock::now();
  int64_t id = 0;
  RETURN_IF_ERROR(PrepareManifest(&m, &id));
  snap.stats.checkpoint_id = id;
  snap.dir = absl::StrCat(scratch_, "/snap-", id);
  RemoveDir(snap.dir);
  Timer snap_timer;
  if (absl::Status st = backend.Snapshot(snap.dir); !st.ok()) {
    RemoveDir(snap.dir);
    Log()->error("checkpoint {} of {} failed: {}", id, prefix_, st.ToString());
    return st;
  }
  snap.stats.snapshot_ms = snap_timer.Ms();
  snap.manifest = std::move(m);
  return snap;
}

absl::StatusOr<CheckpointStats> CheckpointManager::Upload(CheckpointSnapshot snap) {
  CheckpointStats stats = snap.stats;
  CheckpointManifest& m = snap.manifest;
  const int64_t id = stats.checkpoint_id;
  absl::Status st =
      UploadSnapshot(*storage_, snap.dir, prefix_, absl::StrCat("chk-", id, "/"), true, &m, &stats);
  if (st.ok()) {
    Failpoint("checkpoint.after_files");
    m.set_created_at_ms(WallClockMs());
    std::string bytes = EncodeManifest(m);
    st = storage_->Write(prefix_ + ManifestKey(id), bytes);
    stats.bytes_uploaded += bytes.size();
  }
  RemoveDir(snap.dir);
  if (!st.ok()) {
    Log()->error("checkpoint {} of {} failed: {}", id, prefix_, st.ToString());
    return st;
  }
  Failpoint("checkpoint.after_manifest");

  auto gc = CollectGarbage();
  if (gc.ok()) {
    stats.gc_deleted = *gc;
  } else {
    Log()->warn("checkpoint {} of {}: garbage collection failed (will retry next time): {}", id,
                prefix_, gc.status().ToString());
  }
  stats.duration_ms = Timer(snap.started).Ms();
  Log()->debug(
      "checkpoint {} of {} written: {} files ({} bytes), uploaded {} files ({} bytes), "
      "snapshot {} ms, total {} ms, gc deleted {}",
      id, prefix_, stats.files_total, stats.bytes_total, stats.files_uploaded, stats.bytes_uploaded,
      stats.snapshot_ms, stats.duration_ms, stats.gc_deleted);
  return stats;
}

absl::StatusOr<std::optional<CheckpointManifest>> CheckpointManager::Latest() {
  return LatestUpTo(std::numeric_limits<int64_t>::max());
}

absl::StatusOr<std::optional<CheckpointManifest>> CheckpointManager::LatestUpTo(int64_t max_id) {
  ASSIGN_OR_RETURN(auto objects, storage_->List(prefix_));
  std::map<std::string, uint64_t> sizes;
  std::vector<int64_t> ids;
  for (const auto& o : objects) {
    std::string rel = o.key.substr(prefix_.size());
    bool in_dir = false;
    int64_t id = ParseCheckpointKey(rel, &in_dir);
    if (id > 0 && !in_dir && id <= max_id) ids.push_back(id);
    sizes.emplace(std::move(rel), o.size);
  }
  std::sort(ids.rbegin(), ids.rend());
  for (int64_t id : ids) {
    std::string key = prefix_ + ManifestKey(id);
    std::string where = absl::StrCat(storage_->url(), "/", key);
    auto bytes = storage_->Read(key);
    if (absl::IsNotFound(bytes.status())) continue;  // deleted since the listing
    RETURN_IF_ERROR(bytes.status());
    ASSIGN_OR_RETURN(CheckpointManifest m, DecodeManifest(*bytes, where));
    if (m.checkpoint_id() != id) {
      return absl::DataLossError(absl::StrCat(
          "checkpoint manifest ", where, " is corrupt: it says checkpoint ", m.checkpoint_id()));
    }
    std::string missing = MissingFile(m, sizes);
    if (!missing.empty()) {
      Log()->warn("skipping torn checkpoint {}: {}", where, missing);
      continue;
    }
    return std::optional<CheckpointManifest>(std::move(m));
  }
  return std::optional<CheckpointManifest>();
}

absl::StatusOr<RestoreStats> CheckpointManager::RestoreState(const CheckpointManifest& m,
                                                             StateBackend& backend) {
  Timer timer;
  RestoreStats stats;
  std::string dir = absl::StrCat(scratch_, "/restore-", m.checkpoint_id());
  absl::Status st = Download(*storage_, prefix_, m, dir, restore_hard_links_, &stats);
  stats.download_ms = timer.Ms();
  if (st.ok()) st = backend.Restore(dir);
  RemoveDir(dir);
  checksum_cache_.clear();  // the backend's files are new inodes now
  RETURN_IF_ERROR(st);
  stats.duration_ms = timer.Ms();
  Log()->info("restored checkpoint {} of {}: {} files, {} bytes in {} ms", m.checkpoint_id(),
              prefix_, stats.files, stats.bytes, stats.duration_ms);
  return stats;
}

absl::StatusOr<int64_t> CheckpointManager::CollectGarbage() {
  const int64_t pinned = pinned_.load();  // Pin() may come from the task thread meanwhile
  ASSIGN_OR_RETURN(auto objects, storage_->List(prefix_));
  std::map<std::string, uint64_t> sizes;
  std::map<int64_t, std::string, std::greater<>> manifests;  // newest first
  for (const auto& o : objects) {
    std::string rel = o.key.substr(prefix_.size());
    bool in_dir = false;
    int64_t id = ParseCheckpointKey(rel, &in_dir);
    if (id > 0 && !in_dir) manifests.emplace(id, rel);
    sizes.emplace(std::move(rel), o.size);
  }
  // Resynchronize the known shared files with what the storage really holds:
  // a file lost or removed behind our back is uploaded again by the next
  // checkpoint instead of being referenced by every checkpoint from now on.
  std::set<std::string> listed_shared;
  for (const auto& [rel, size] : sizes) {
    if (rel.starts_with("shared/")) listed_shared.insert(rel);
  }
  for (const auto& key : known_shared_) {
    if (!listed_shared.count(key)) {
      Log()->warn("shared file {}{} vanished from {}; it will be uploaded again", prefix_, key,
                  storage_->url());
    }
  }
  known_shared_ = std::move(listed_shared);
  if (manifests.empty()) return 0;
  const int64_t newest_id = manifests.begin()->first;

  // Walk newest first: keep `retain_` complete checkpoints. Newer incomplete
  // or undecodable manifests are left alone (evidence), and whatever they
  // reference is protected too.
  std::set<std::string> referenced;
  int kept = 0;
  int64_t cutoff = -1;  // manifests below this id are deleted
  int64_t newest_created_ms = -1;
  for (const auto& [id, rel] : manifests) {
    auto bytes = storage_->Read(prefix_ + rel);
    if (!bytes.ok()) return bytes.status();
    auto m = DecodeManifest(*bytes, absl::StrCat(storage_->url(), "/", prefix_, rel));
    if (!m.ok()) {
      Log()->warn("gc: keeping undecodable manifest: {}", m.status().ToString());
      continue;
    }
    for (const auto& f : m->files()) referenced.insert(f.key());
    if (!MissingFile(*m, sizes).empty()) continue;
    if (newest_created_ms < 0) newest_created_ms = m->created_at_ms();
    if (++kept == retain_) {
      cutoff = id;
      break;
    }
  }
  if (kept == 0) return 0;     // nothing complete: delete nothing
  if (cutoff < 0) cutoff = 0;  // fewer than retain_: keep every manifest
  // The pinned checkpoint survives with everything it references.
  if (pinned > 0 && pinned < cutoff) {
    if (auto it = manifests.find(pinned); it != manifests.end()) {
      ASSIGN_OR_RETURN(std::string bytes, storage_->Read(prefix_ + it->second));
      auto m = DecodeManifest(bytes, absl::StrCat(storage_->url(), "/", prefix_, it->second));
      if (!m.ok()) return m.status();
      for (const auto& f : m->files()) referenced.insert(f.key());
    }
  }

  int64_t deleted = 0;
  auto remove = [&](const std::string& rel) -> absl::Status {
    RETURN_IF_ERROR(storage_->Delete(prefix_ + rel));
    ++deleted;
    return absl::OkStatus();
  };
  // Manifests first: a crash in the middle leaves at worst torn checkpoints
  // older than the kept ones, which Latest() skips.
  for (const auto& [id, rel] : manifests) {
    if (id < cutoff && id != pinned) RETURN_IF_ERROR(remove(rel));
  }
  for (const auto& [rel, size] : sizes) {
    if (referenced.count(rel)) continue;
    if (absl::StartsWith(rel, "shared/")) {
      RETURN_IF_ERROR(remove(rel));
      known_shared_.erase(rel);
      continue;
    }
    bool in_dir = false;
    int64_t id = ParseCheckpointKey(rel, &in_dir);
    if (id <= 0 || !in_dir) continue;  // manifests handled above; unknown keys left alone
    bool has_manifest = manifests.count(id) > 0;
    // A checkpoint without a manifest newer than every manifest may be in
    // progress (in theory); anything else unreferenced in chk-<n>/ is garbage.
    if (!has_manifest && id > newest_id) continue;
    RETURN_IF_ERROR(remove(rel));
  }
  if (newest_created_ms > 0) {
    RETURN_IF_ERROR(storage_->DeleteStaleTemporaries(prefix_, newest_created_ms));
  }
  if (deleted > 0) {
    Log()->debug("gc of {}: deleted {} objects, kept {} checkpoints from {}", prefix_, deleted,
                 kept, cutoff);
  }
  return deleted;
}

absl::StatusOr<CheckpointStats> CheckpointManager::WriteSavepoint(StateBackend& backend,
                                                                  CheckpointManifest m,
                                                                  const std::string& dest) {
  Timer timer;
  ASSIGN_OR_RETURN(auto storage, OpenCheckpointStorage(StorageUrl(dest)));
  ASSIGN_OR_RETURN(bool exists, storage->Exists(kSavepointManifest));
  if (exists) {
    return absl::AlreadyExistsError(absl::StrCat("savepoint ", storage->url(), " exists already (",
                                                 AV(kSavepointManifest), ")"));
  }
  CheckpointStats stats;
  int64_t id = 0;
  RETURN_IF_ERROR(PrepareManifest(&m, &id));
  stats.checkpoint_id = id;
  m.set_savepoint(true);
  std::string snap = absl::StrCat(scratch_, "/savepoint-", id);
  RemoveDir(snap);
  Timer snap_timer;
  RETURN_IF_ERROR(backend.Snapshot(snap));
  stats.snapshot_ms = snap_timer.Ms();
  absl::Status st = UploadSnapshot(*storage, snap, "", "state/", false, &m, &stats);
  if (st.ok()) {
    m.set_created_at_ms(WallClockMs());
    std::string bytes = EncodeManifest(m);
    st = storage->Write(kSavepointManifest, bytes);
    stats.bytes_uploaded += bytes.size();
  }
  RemoveDir(snap);
  RETURN_IF_ERROR(st);
  stats.duration_ms = timer.Ms();
  Log()->info("savepoint {} written to {}: {} files, {} bytes in {} ms", id, storage->url(),
              stats.files_total, stats.bytes_total, stats.duration_ms);
  return stats;
}

absl::StatusOr<CheckpointManifest> CheckpointManager::LoadSavepoint(const std::string& path) {
  ASSIGN_OR_RETURN(auto storage, OpenCheckpointStorage(StorageUrl(path)));
  std::string where = absl::StrCat(storage->url(), "/", AV(kSavepointManifest));
  auto bytes = storage->Read(kSavepointManifest);
  if (absl::IsNotFound(bytes.status())) {
    return absl::NotFoundError(
        absl::StrCat("no savepoint at ", storage->url(), " (", where, " does not exist)"));
  }
  RETURN_IF_ERROR(bytes.status());
  ASSIGN_OR_RETURN(CheckpointManifest m, DecodeManifest(*bytes, where));
  ASSIGN_OR_RETURN(auto objects, storage->List("state/"));
  std::map<std::string, uint64_t> sizes;
  for (const auto& o : objects) sizes.emplace(o.key, o.size);
  std::string missing = MissingFile(m, sizes);
  if (!missing.empty()) {
    return absl::DataLossError(
        absl::StrCat("savepoint ", storage->url(), " is incomplete: ", missing));
  }
  return m;
}

absl::StatusOr<CheckpointManifest> CheckpointManager::RestoreSavepoint(const std::string& path,
                                                                       StateBackend& backend) {
  ASSIGN_OR_RETURN(CheckpointManifest m, LoadSavepoint(path));
  ASSIGN_OR_RETURN(auto storage, OpenCheckpointStorage(StorageUrl(path)));
  RestoreStats stats;
  std::string dir = absl::StrCat(scratch_, "/restore-savepoint-", m.checkpoint_id());
  absl::Status st = Download(*storage, "", m, dir, restore_hard_links_, &stats);
  if (st.ok()) st = backend.Restore(dir);
  RemoveDir(dir);
  checksum_cache_.clear();
  RETURN_IF_ERROR(st);
  Log()->info("restored savepoint {} from {}: {} files, {} bytes", m.checkpoint_id(),
              storage->url(), stats.files, stats.bytes);
  return m;
}

}  // namespace caravela
