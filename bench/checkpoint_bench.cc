// Bench (e): incremental checkpoints and restore (SPEC §6).
//
//   checkpoint_bench [--gb 1] [--work-dir DIR] [--change-fraction 0.01] [--no-compact]
//                    [--warm] [--copy-restore] [--keep] [--s3]
//
// Fills a RocksDB backend with --gb GB of ~100-byte entries (16-byte hashed
// keys in random order, 84-byte xxhash-random values, so nothing compresses
// away), compacts it fully (the state a long-running task settles into;
// --no-compact skips this), takes a full checkpoint into a file:// store in
// the work dir, updates --change-fraction of the keys (spread over the key
// space), takes a second checkpoint, then restores the second one into a
// fresh backend and checks the key count. By default the store's files are
// evicted from the page cache before the restore (posix_fadvise DONTNEED on
// fsync'ed files), so the restore reads from disk; --warm keeps them cached.
// The store being on the same filesystem, restore hard-links the SSTs (still
// reading each once to verify its checksum); --copy-restore copies them, as
// for a store on another filesystem.
// --s3: the store is s3://caravela/bench on a real S3-protocol server on
// loopback (s3rver, worker/testing/s3_server.h; its objects on the same
// disk), so uploads and the restore go through S3Storage (HTTP, multipart
// above 16 MiB); compare with the file:// run.
// Refuses to start if the work dir's filesystem has less than 3x the state
// size free (state + store + restored copy).
//
// Prints RESULT lines (see bench/README.md) for checkpoint_full,
// checkpoint_incremental and restore, with uploaded bytes, the
// uploaded/state ratio (target <= 5%) and restore MB/s (target >= 200).
#include <fcntl.h>
#include <stdlib.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>

#include "absl/strings/str_format.h"
#include "bench/bench_util.h"
#include "spdlog/spdlog.h"
#include "worker/checkpoint/checkpoint_manager.h"
#include "worker/state/state_backend.h"
#include "worker/testing/s3_server.h"
#define XXH_STATIC_LINKING_ONLY
#include "xxhash.h"

namespace fs = std::filesystem;

namespace {

constexpr size_t kKeyBytes = 16;
constexpr size_t kValueBytes = 84;
constexpr uint64_t kBatch = 10000;

void Die(const std::string& what, const absl::Status& st) {
  std::fprintf(stderr, "checkpoint_bench: %s: %s\n", what.c_str(), st.ToString().c_str());
  std::exit(1);
}

std::string KeyOf(uint64_t i) {
  uint64_t h = XXH64(&i, sizeof i, 0x6b6579);
  return absl::StrFormat("%016x", h);
}

void ValueOf(uint64_t i, uint64_t version, std::string* out) {
  out->resize(kValueBytes);
  XXH64_hash_t seed = XXH64(&version, sizeof version, i);
  for (size_t pos = 0; pos < kValueBytes; pos += 8) {
    uint64_t v = XXH64(&pos, sizeof pos, seed);
    std::memcpy(out->data() + pos, &v, std::min<size_t>(8, kValueBytes - pos));
  }
}

// Drops the store's (clean, fsync'ed) pages from the page cache.
void EvictFromPageCache(const std::string& dir) {
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (!e.is_regular_file()) continue;
    int fd = ::open(e.path().c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;
    ::fdatasync(fd);
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    ::close(fd);
  }
}

double Mb(uint64_t bytes) { return static_cast<double>(bytes) / 1e6; }

}  // namespace

int main(int argc, char** argv) {
  caravela::bench::Flags flags(argc, argv);
  const double gb = flags.Double("gb", 1.0);
  const double change_fraction = flags.Double("change-fraction", 0.01);
  const uint64_t state_bytes = static_cast<uint64_t>(gb * 1e9);
  const uint64_t keys = state_bytes / (kKeyBytes + kValueBytes);
  std::string work = flags.Str("work-dir");
  if (work.empty()) {
    std::string tmpl = "/tmp/caravela-checkpoint-bench-XXXXXX";
    if (mkdtemp(tmpl.data()) == nullptr) {
      std::perror("mkdtemp");
      return 1;
    }
    work = tmpl;
  } else {
    fs::remove_all(work);
    fs::create_directories(work);
  }
  work = fs::absolute(work).string();

  struct statvfs vfs {};
  if (statvfs(work.c_str(), &vfs) != 0) {
    std::perror("statvfs");
    return 1;
  }
  const uint64_t free_bytes = static_cast<uint64_t>(vfs.f_bavail) * vfs.f_frsize;
  std::printf("work dir %s: %.1f GB free, state %.2f GB (%llu keys), need %.1f GB\n", work.c_str(),
              free_bytes / 1e9, gb, static_cast<unsigned long long>(keys), 3 * state_bytes / 1e9);
  if (free_bytes < 3 * state_bytes) {
    std::fprintf(stderr,
                 "checkpoint_bench: refusing to run: %.1f GB free at %s but --gb %.2f needs 3x "
                 "(state, checkpoint store, restored copy) = %.1f GB; use a smaller --gb or "
                 "another --work-dir\n",
                 free_bytes / 1e9, work.c_str(), gb, 3 * state_bytes / 1e9);
    fs::remove_all(work);
    return 2;
  }

  spdlog::set_level(spdlog::level::warn);
  auto backend_or = caravela::OpenRocksDbBackend(work + "/db");
  if (!backend_or.ok()) Die("open db", backend_or.status());
  auto& backend = **backend_or;
  auto table_or = backend.OpenTable("state");
  if (!table_or.ok()) Die("open table", table_or.status());
  caravela::StateTable* table = *table_or;

  // ---- load ----
  double t0 = caravela::bench::NowSeconds();
  std::string value;
  for (uint64_t i = 0; i < keys; ++i) {
    ValueOf(i, 0, &value);
    table->Put(KeyOf(i), value);
    if ((i + 1) % kBatch == 0 || i + 1 == keys) {
      if (auto st = backend.Commit(); !st.ok()) Die("commit", st);
    }
  }
  double load_s = caravela::bench::NowSeconds() - t0;
  double compact_s = 0;
  if (!flags.Bool("no-compact")) {
    t0 = caravela::bench::NowSeconds();
    if (auto st = backend.Compact(); !st.ok()) Die("compact", st);
    compact_s = caravela::bench::NowSeconds() - t0;
  }
  std::printf("loaded %llu keys in %.1f s, compacted in %.1f s, state %.1f MB on disk\n",
              static_cast<unsigned long long>(keys), load_s, compact_s,
              Mb(backend.ApproximateBytes()));

  std::string store = "file://" + work + "/store";
  std::unique_ptr<caravela::S3Server> s3;
  if (flags.Bool("s3")) {
    auto started = caravela::S3Server::Start();
    if (!started.ok()) Die("s3rver", started.status());
    s3 = std::move(*started);
    s3->ExportEnvironment();
    store = std::string("s3://") + caravela::S3Server::kBucket + "/bench";
  }
  std::printf("store %s\n", store.c_str());
  auto mgr_or = caravela::CheckpointManager::Open(store, "bench", 0, work + "/scratch",
                                                  /*retain=*/2);
  if (!mgr_or.ok()) Die("open checkpoint manager", mgr_or.status());
  auto& mgr = **mgr_or;

  // ---- full checkpoint ----
  t0 = caravela::bench::NowSeconds();
  auto full = mgr.Write(backend, caravela::CheckpointManifest());
  double full_s = caravela::bench::NowSeconds() - t0;
  if (!full.ok()) Die("checkpoint 1", full.status());
  caravela::bench::PrintResult(
      "checkpoint_full", static_cast<long long>(keys), full_s,
      absl::StrFormat("state_mb=%.1f uploaded_mb=%.1f files=%d uploaded_files=%d snapshot_ms=%d "
                      "upload_mb_per_s=%.0f",
                      Mb(full->bytes_total), Mb(full->bytes_uploaded), full->files_total,
                      full->files_uploaded, full->snapshot_ms,
                      Mb(full->bytes_uploaded) / std::max(full_s, 1e-9)));

  // ---- change a fraction of the keys, spread over the key space ----
  const uint64_t stride =
      change_fraction > 0 ? std::max<uint64_t>(1, static_cast<uint64_t>(1 / change_fraction)) : 0;
  uint64_t changed = 0;
  if (stride > 0) {
    for (uint64_t i = 0; i < keys; i += stride) {
      ValueOf(i, 1, &value);
      table->Put(KeyOf(i), value);
      if (++changed % kBatch == 0) {
        if (auto st = backend.Commit(); !st.ok()) Die("commit", st);
      }
    }
  }
  if (auto st = backend.Commit(); !st.ok()) Die("commit", st);

  // ---- incremental checkpoint ----
  t0 = caravela::bench::NowSeconds();
  auto incr = mgr.Write(backend, caravela::CheckpointManifest());
  double incr_s = caravela::bench::NowSeconds() - t0;
  if (!incr.ok()) Die("checkpoint 2", incr.status());
  const double ratio =
      static_cast<double>(incr->bytes_uploaded) / static_cast<double>(incr->bytes_total);
  caravela::bench::PrintResult(
      "checkpoint_incremental", static_cast<long long>(changed), incr_s,
      absl::StrFormat("state_mb=%.1f uploaded_mb=%.2f uploaded_ratio=%.4f files=%d "
                      "uploaded_files=%d snapshot_ms=%d target_ratio<=0.05 %s",
                      Mb(incr->bytes_total), Mb(incr->bytes_uploaded), ratio, incr->files_total,
                      incr->files_uploaded, incr->snapshot_ms, ratio <= 0.05 ? "OK" : "MISSED"));

  // ---- restore into a fresh backend ----
  auto latest = mgr.Latest();
  if (!latest.ok() || !latest->has_value()) Die("latest", latest.status());
  if (!flags.Bool("warm") && s3 == nullptr) EvictFromPageCache(work + "/store");
  auto restored_or = caravela::OpenRocksDbBackend(work + "/restored");
  if (!restored_or.ok()) Die("open restored db", restored_or.status());
  // The store is on the same filesystem: SSTs are hard-linked (and read once
  // to verify them) unless --copy-restore, which measures the copy path a
  // store on another filesystem (NFS, PVC) takes.
  mgr.set_restore_hard_links(!flags.Bool("copy-restore"));
  t0 = caravela::bench::NowSeconds();
  auto rs = mgr.RestoreState(**latest, **restored_or);
  double restore_s = caravela::bench::NowSeconds() - t0;
  if (!rs.ok()) Die("restore", rs.status());
  const double mb_per_s = Mb(rs->bytes) / std::max(restore_s, 1e-9);
  caravela::bench::PrintResult(
      "restore", static_cast<long long>(keys), restore_s,
      absl::StrFormat(
          "restored_mb=%.1f files=%d download_ms=%d mb_per_s=%.0f cache=%s "
          "mode=%s target_mb_per_s>=200 %s",
          Mb(rs->bytes), rs->files, rs->download_ms, mb_per_s, flags.Bool("warm") ? "warm" : "cold",
          flags.Bool("copy-restore") ? "copy" : "link", mb_per_s >= 200 ? "OK" : "MISSED"));

  // ---- verify (not timed) ----
  auto rtable = (*restored_or)->OpenTable("state");
  if (!rtable.ok()) Die("open restored table", rtable.status());
  auto count = (*rtable)->CountKeys();
  if (!count.ok()) Die("count", count.status());
  std::string got;
  bool values_ok = true;
  for (uint64_t i = 0; i < keys && i < 100 * std::max<uint64_t>(stride, 1); i += 7) {
    auto found = (*rtable)->Get(KeyOf(i), &got);
    ValueOf(i, stride > 0 && i % stride == 0 ? 1 : 0, &value);
    if (!found.ok() || !*found || got != value) values_ok = false;
  }
  std::printf("verify: %llu keys restored (expected %llu), sampled values %s\n",
              static_cast<unsigned long long>(*count), static_cast<unsigned long long>(keys),
              values_ok ? "match" : "DIFFER");
  bool ok = *count == keys && values_ok;

  restored_or->reset();
  backend_or->reset();
  if (!flags.Bool("keep")) fs::remove_all(work);
  return ok ? 0 : 1;
}
