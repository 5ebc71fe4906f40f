// RocksDB state backend: one DB per task, one column family per table.
//
// Writes of all tables go into one WriteBatchWithIndex (overwrite_key=true) so
// Get/Scan see them before Commit(); Commit() writes the batch atomically with
// the WAL disabled. Tables opened with OpenWriteBehindTable write into a
// plain WriteBatch instead (no index to maintain); a read of such a table
// first writes that batch to the DB, and Commit() writes it after the indexed
// one. Durability across crashes comes only from checkpoints
// (Snapshot()); a clean close flushes memtables so reopening the same path
// sees every committed write, and atomic_flush keeps whatever is on disk after
// a crash a consistent cut across tables (but possibly older than the last
// Commit()).
#include <algorithm>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/free_space.h"
#include "common/logging.h"
#include "rocksdb/cache.h"
#include "rocksdb/convenience.h"
#include "rocksdb/db.h"
#include "rocksdb/filter_policy.h"
#include "rocksdb/options.h"
#include "rocksdb/slice_transform.h"
#include "rocksdb/table.h"
#include "rocksdb/utilities/checkpoint.h"
#include "rocksdb/utilities/write_batch_with_index.h"
#include "rocksdb/write_buffer_manager.h"
#include "spdlog/spdlog.h"
#include "worker/state/state_backend.h"
#include "worker/state/unsynced_env.h"

namespace caravela {
namespace {

namespace fs = std::filesystem;

// Tuning for a per-task streaming state store (see README.md).
constexpr size_t kBlockCacheBytes = 32 << 20;     // shared by all CFs of one DB
constexpr size_t kWriteBufferBytes = 16 << 20;    // per CF memtable
constexpr size_t kDbWriteBufferBytes = 64 << 20;  // all memtables of one DB
constexpr int kMaxOpenFiles = 256;
constexpr int kBloomBitsPerKey = 10;
// DeleteRange collects at most this many keys before deleting them.
constexpr size_t kDeleteRangeChunk = 4096;

// "a/b/" -> "a/b", so that sibling paths like "a/b.restoring" stay outside.
std::string NormalizePath(const std::string& path) {
  fs::path p = fs::path(path).lexically_normal();
  if (!p.has_filename() && p.has_parent_path() && p != p.root_path()) p = p.parent_path();
  return p.string();
}

// Free space a snapshot keeps beyond twice the memtables (RocksDB's own
// files: MANIFEST, OPTIONS, the checkpoint's copies of them).
constexpr uint64_t kSnapshotMarginBytes = 4 << 20;
// Free space an open needs: a new MANIFEST, OPTIONS and WAL file, and the
// info LOG's option dump, with room to spare.
constexpr uint64_t kOpenReserveBytes = 4 << 20;

std::shared_ptr<spdlog::logger> Log() {
  static const std::shared_ptr<spdlog::logger> logger = SubsystemLogger("state");
  return logger;
}

rocksdb::Slice ToSlice(std::string_view s) { return rocksdb::Slice(s.data(), s.size()); }
std::string_view ToView(const rocksdb::Slice& s) { return std::string_view(s.data(), s.size()); }

// Converts a RocksDB status; `context` names the operation, path and table.
// A full file system (at `path`, when given) is ResourceExhausted with the
// free space and what to do.
absl::Status FromRocks(const rocksdb::Status& s, absl::string_view context,
                       std::string_view path = {}) {
  if (s.ok()) return absl::OkStatus();
  std::string msg = absl::StrCat(context, ": ", s.ToString());
  if (s.IsNoSpace() || msg.find("No space left on device") != std::string::npos) {
    return absl::ResourceExhaustedError(absl::StrCat(msg, FreeSpaceNote(path)));
  }
  switch (s.code()) {
    case rocksdb::Status::kNotFound:
      return absl::NotFoundError(msg);
    case rocksdb::Status::kCorruption:
      return absl::DataLossError(msg);
    case rocksdb::Status::kNotSupported:
      return absl::UnimplementedError(msg);
    case rocksdb::Status::kInvalidArgument:
      return absl::InvalidArgumentError(msg);
    case rocksdb::Status::kBusy:
    case rocksdb::Status::kTimedOut:
    case rocksdb::Status::kTryAgain:
    case rocksdb::Status::kIncomplete:
      return absl::UnavailableError(msg);
    case rocksdb::Status::kAborted:
      return absl::AbortedError(msg);
    case rocksdb::Status::kShutdownInProgress:
      return absl::CancelledError(msg);
    default:
      return absl::InternalError(msg);
  }
}

// A full file system (at `path`, when given) is ResourceExhausted with the
// free space and what to do, as in FromRocks.
absl::Status FromErrorCode(const std::error_code& ec, absl::string_view context,
                           std::string_view path = {}) {
  if (ec == std::errc::no_space_on_device) {
    return absl::ResourceExhaustedError(
        absl::StrCat(context, ": ", ec.message(), FreeSpaceNote(path)));
  }
  return absl::InternalError(absl::StrCat(context, ": ", ec.message()));
}

}  // namespace

// The RocksDB side of a process's state memory budget (state_backend.h).
struct StateMemoryBudget {
  std::shared_ptr<rocksdb::Cache> cache;
  std::shared_ptr<rocksdb::WriteBufferManager> buffers;
};

namespace {

rocksdb::Options MakeOptions(const std::shared_ptr<rocksdb::Cache>& block_cache,
                             const std::shared_ptr<rocksdb::WriteBufferManager>& buffers) {
  rocksdb::Options o;
  // DB-wide.
  o.create_if_missing = true;
  o.create_missing_column_families = true;
  // Local state is never recovered from its own files (unsynced_env.h).
  o.env = UnsyncedEnv();
  o.max_open_files = kMaxOpenFiles;
  o.max_background_jobs = 2;
  o.db_write_buffer_size = kDbWriteBufferBytes;
  // A process-wide budget replaces the per-DB one (memtables of every DB
  // sharing it count against it, and against its block cache).
  if (buffers != nullptr) o.write_buffer_manager = buffers;
  // Writes skip the WAL, so flushes must commit all CFs together for the files
  // on disk to be a consistent cut across tables.
  o.atomic_flush = true;
  // Close() flushes only when CloseDb() asks, and then only if it fits.
  o.avoid_flush_during_shutdown = true;
  o.keep_log_file_num = 3;
  o.max_log_file_size = 8 << 20;

  // Per CF: level compaction, bloom filters, compression.
  o.compaction_style = rocksdb::kCompactionStyleLevel;
  o.level_compaction_dynamic_level_bytes = true;
  o.write_buffer_size = kWriteBufferBytes;
  o.max_write_buffer_number = 3;
  // One memtable insert hint per column family (a 1-byte "prefix"): inserts
  // that land near the previous one (time-ordered keys such as dedup ids,
  // written sorted per batch) only repair the skip-list levels that changed
  // instead of searching from the top.
  o.memtable_insert_with_hint_prefix_extractor.reset(rocksdb::NewFixedPrefixTransform(1));

  auto supported = rocksdb::GetSupportedCompressions();
  auto has = [&](rocksdb::CompressionType t) {
    return std::find(supported.begin(), supported.end(), t) != supported.end();
  };
  if (has(rocksdb::kLZ4Compression)) {
    o.compression = rocksdb::kLZ4Compression;
  } else if (has(rocksdb::kSnappyCompression)) {
    o.compression = rocksdb::kSnappyCompression;
  } else {
    o.compression = rocksdb::kNoCompression;
  }
  if (has(rocksdb::kZSTD)) o.bottommost_compression = rocksdb::kZSTD;

  rocksdb::BlockBasedTableOptions t;
  t.filter_policy.reset(rocksdb::NewBloomFilterPolicy(kBloomBitsPerKey));
  t.whole_key_filtering = true;
  t.block_cache = block_cache;
  t.cache_index_and_filter_blocks = true;
  t.pin_l0_filter_and_index_blocks_in_cache = true;
  t.optimize_filters_for_memory = true;
  t.format_version = 5;
  o.table_factory.reset(rocksdb::NewBlockBasedTableFactory(t));
  return o;
}

class RocksDbBackend;

class RocksDbTable final : public StateTable {
 public:
  RocksDbTable(RocksDbBackend* backend, std::string name, rocksdb::ColumnFamilyHandle* cf)
      : backend_(backend), name_(std::move(name)), cf_(cf) {}

  bool write_behind() const { return write_behind_; }
  void set_write_behind(bool on) { write_behind_ = on; }

  absl::StatusOr<bool> Get(std::string_view key, std::string* value) override;
  void Put(std::string_view key, std::string_view value) override;
  void Delete(std::string_view key) override;
  absl::Status Scan(
      std::string_view begin, std::string_view end,
      const std::function<bool(std::string_view key, std::string_view value)>& f) override;
  absl::Status DeleteRange(std::string_view begin, std::string_view end) override;
  absl::StatusOr<uint64_t> CountKeys() override;

  rocksdb::ColumnFamilyHandle* cf() const { return cf_; }

 private:
  // Returns an iterator over the committed data merged with the batch,
  // bounded above by `*upper` if not null (`*upper` must outlive it).
  std::unique_ptr<rocksdb::Iterator> NewIterator(const rocksdb::Slice* upper);
  std::string Context(absl::string_view op) const;

  RocksDbBackend* backend_;
  std::string name_;
  rocksdb::ColumnFamilyHandle* cf_;  // owned by backend_
  bool write_behind_ = false;
  // Applies the write-behind batch to the DB before a read of this table.
  absl::Status BeforeRead();
};

class RocksDbBackend final : public StateBackend {
 public:
  RocksDbBackend(const std::string& path, std::shared_ptr<StateMemoryBudget> budget,
                 bool flush_on_close)
      : path_(NormalizePath(path)),
        flush_on_close_(flush_on_close),
        budget_(std::move(budget)),
        block_cache_(budget_ != nullptr ? budget_->cache : rocksdb::NewLRUCache(kBlockCacheBytes)),
        options_(MakeOptions(block_cache_, budget_ != nullptr ? budget_->buffers : nullptr)),
        batch_(rocksdb::BytewiseComparator(), 0, /*overwrite_key=*/true) {}

  ~RocksDbBackend() override { CloseDb(/*flush=*/flush_on_close_); }

  // Opens the DB at path_ with every existing column family.
  absl::Status OpenDb();

  absl::StatusOr<StateTable*> OpenTable(std::string_view name) override;
  absl::StatusOr<StateTable*> OpenWriteBehindTable(std::string_view name) override;
  absl::Status Commit() override;
  absl::Status Snapshot(const std::string& dir) override;
  absl::Status Restore(const std::string& dir) override;
  uint64_t ApproximateBytes() override;
  std::vector<TableStats> Stats() override;
  absl::Status Compact() override;

 private:
  friend class RocksDbTable;

  absl::Status CheckOpen(absl::string_view op) const;
  std::vector<rocksdb::ColumnFamilyHandle*> Handles() const;
  // Flushes (if `flush` and the memtables fit on the disk), releases column
  // families and closes the DB. Drops the uncommitted batch.
  void CloseDb(bool flush);
  // What a flush of the memtables may take on disk: twice the memtables
  // (the flush, and a snapshot's copies) plus kSnapshotMarginBytes.
  uint64_t FlushReserveBytes() const;

  const std::string path_;
  const bool flush_on_close_;
  std::shared_ptr<StateMemoryBudget> budget_;  // null: a cache of its own
  std::shared_ptr<rocksdb::Cache> block_cache_;
  rocksdb::Options options_;
  std::unique_ptr<rocksdb::DB> db_;  // null only after a failed Restore()
  std::map<std::string, std::unique_ptr<RocksDbTable>, std::less<>> tables_;
  // Opens `name` in the given mode; switching an open table's mode commits
  // first, so that no key has writes pending in both batches.
  absl::StatusOr<StateTable*> Open(std::string_view name, bool write_behind);
  // Writes blind_batch_ to the DB (WAL off).
  absl::Status WriteBlind();
  bool HasPendingWrites() {
    return batch_.GetWriteBatch()->Count() != 0 || blind_batch_.Count() != 0;
  }

  rocksdb::WriteBatchWithIndex batch_;  // uncommitted writes of indexed tables
  rocksdb::WriteBatch blind_batch_;     // uncommitted writes of write-behind tables
};

// ---- RocksDbTable ----

std::string RocksDbTable::Context(absl::string_view op) const {
  return absl::StrCat("rocksdb state ", op, " (db ", backend_->path_, ", table ", name_, ")");
}

absl::Status RocksDbTable::BeforeRead() {
  if (!write_behind_) return absl::OkStatus();
  return backend_->WriteBlind();
}

absl::StatusOr<bool> RocksDbTable::Get(std::string_view key, std::string* value) {
  RETURN_IF_ERROR(BeforeRead());
  std::string scratch;
  rocksdb::Status s =
      backend_->batch_.GetFromBatchAndDB(backend_->db_.get(), rocksdb::ReadOptions(), cf_,
                                         ToSlice(key), value != nullptr ? value : &scratch);
  if (s.IsNotFound()) return false;
  if (!s.ok()) return FromRocks(s, Context("get"));
  return true;
}

void RocksDbTable::Put(std::string_view key, std::string_view value) {
  // WBWI writes only fail when a max_bytes limit is set; none is.
  if (write_behind_) {
    CARAVELA_CHECK(backend_->blind_batch_.Put(cf_, ToSlice(key), ToSlice(value)).ok());
    return;
  }
  CARAVELA_CHECK(backend_->batch_.Put(cf_, ToSlice(key), ToSlice(value)).ok());
}

void RocksDbTable::Delete(std::string_view key) {
  if (write_behind_) {
    CARAVELA_CHECK(backend_->blind_batch_.Delete(cf_, ToSlice(key)).ok());
    return;
  }
  CARAVELA_CHECK(backend_->batch_.Delete(cf_, ToSlice(key)).ok());
}

std::unique_ptr<rocksdb::Iterator> RocksDbTable::NewIterator(const rocksdb::Slice* upper) {
  rocksdb::ReadOptions ro;
  ro.iterate_upper_bound = upper;
  return std::unique_ptr<rocksdb::Iterator>(
      backend_->batch_.NewIteratorWithBase(cf_, backend_->db_->NewIterator(ro, cf_), &ro));
}

absl::Status RocksDbTable::Scan(
    std::string_view begin, std::string_view end,
    const std::function<bool(std::string_view key, std::string_view value)>& f) {
  RETURN_IF_ERROR(BeforeRead());
  rocksdb::Slice upper = ToSlice(end);
  auto it = NewIterator(end.empty() ? nullptr : &upper);
  // Keys and values are copied before calling `f`: entries from the batch
  // point into the WriteBatch buffer, which a write to another table made by
  // `f` may reallocate.
  std::string key, value;
  for (it->Seek(ToSlice(begin)); it->Valid(); it->Next()) {
    std::string_view k = ToView(it->key());
    if (!end.empty() && k >= end) break;
    key.assign(k);
    value.assign(ToView(it->value()));
    if (!f(key, value)) break;
  }
  return FromRocks(it->status(), Context("scan"));
}

// WriteBatchWithIndex cannot read through range tombstones, so ranges are
// deleted key by key (in chunks, since the batch must not be written while
// iterating it).
absl::Status RocksDbTable::DeleteRange(std::string_view begin, std::string_view end) {
  RETURN_IF_ERROR(BeforeRead());
  rocksdb::Slice upper = ToSlice(end);
  std::string from(begin);
  std::vector<std::string> keys;
  while (true) {
    keys.clear();
    {
      auto it = NewIterator(end.empty() ? nullptr : &upper);
      for (it->Seek(from); it->Valid() && keys.size() < kDeleteRangeChunk; it->Next()) {
        std::string_view k = ToView(it->key());
        if (!end.empty() && k >= end) break;
        keys.emplace_back(k);
      }
      RETURN_IF_ERROR(FromRocks(it->status(), Context("delete range")));
    }
    for (const auto& k : keys) Delete(k);
    if (keys.size() < kDeleteRangeChunk) return absl::OkStatus();
    from = keys.back();
    from.push_back('\0');  // smallest key after keys.back()
  }
}

absl::StatusOr<uint64_t> RocksDbTable::CountKeys() {
  RETURN_IF_ERROR(BeforeRead());
  auto it = NewIterator(nullptr);
  uint64_t n = 0;
  for (it->SeekToFirst(); it->Valid(); it->Next()) ++n;
  RETURN_IF_ERROR(FromRocks(it->status(), Context("count keys")));
  return n;
}

// ---- RocksDbBackend ----

absl::Status RocksDbBackend::CheckOpen(absl::string_view op) const {
  if (db_ != nullptr) return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrCat("rocksdb state ", op, " (db ", path_, "): DB is closed after a failed Restore"));
}

std::vector<rocksdb::ColumnFamilyHandle*> RocksDbBackend::Handles() const {
  std::vector<rocksdb::ColumnFamilyHandle*> handles;
  handles.reserve(tables_.size());
  for (const auto& [name, table] : tables_) handles.push_back(table->cf());
  return handles;
}

absl::Status RocksDbBackend::OpenDb() {
  // Opening writes a MANIFEST, an OPTIONS file and a WAL; one of those
  // writes running out of space leaves RocksDB's file writer in the state
  // its assertions abort on (Debian's build keeps them), as a flush does
  // (Snapshot): refuse up front, with the free space and what to do, when
  // the margin does not fit.
  if (const std::optional<uint64_t> free = FreeBytes(path_);
      free.has_value() && *free < kOpenReserveBytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "rocksdb state open (db ", path_, "): No space left on device to open it (it needs about ",
        kOpenReserveBytes, " bytes)", FreeSpaceNote(path_)));
  }
  std::error_code ec;
  std::vector<std::string> names;
  if (fs::exists(fs::path(path_) / "CURRENT", ec)) {
    RETURN_IF_ERROR(FromRocks(rocksdb::DB::ListColumnFamilies(options_, path_, &names),
                              absl::StrCat("rocksdb state list tables (db ", path_, ")")));
  } else {
    names.push_back(rocksdb::kDefaultColumnFamilyName);
    fs::create_directories(path_, ec);
    if (ec) return FromErrorCode(ec, absl::StrCat("rocksdb state create ", path_));
  }
  std::vector<rocksdb::ColumnFamilyDescriptor> descriptors;
  descriptors.reserve(names.size());
  for (const auto& name : names) descriptors.emplace_back(name, options_);
  std::vector<rocksdb::ColumnFamilyHandle*> handles;
  rocksdb::DB* db = nullptr;
  RETURN_IF_ERROR(FromRocks(rocksdb::DB::Open(options_, path_, descriptors, &handles, &db),
                            absl::StrCat("rocksdb state open (db ", path_, ")"), path_));
  db_.reset(db);
  for (size_t i = 0; i < names.size(); ++i) {
    tables_.emplace(names[i], std::make_unique<RocksDbTable>(this, names[i], handles[i]));
  }
  return absl::OkStatus();
}

void RocksDbBackend::CloseDb(bool flush) {
  batch_.Clear();
  blind_batch_.Clear();
  if (db_ == nullptr) return;
  if (flush) {
    // Best effort: the WAL is off, so unflushed memtables would be lost. A
    // failure here surfaces as missing data on reopen, which recovery from the
    // last checkpoint covers. Not on a full disk: a flush that runs out of
    // space aborts the process (Snapshot()).
    const uint64_t reserve = FlushReserveBytes();
    const std::optional<uint64_t> free = FreeBytes(path_);
    if (free.has_value() && *free < reserve) {
      Log()->warn(
          "closing the state at {} without flushing it: {} bytes free, about {} needed; the "
          "task restores from its last checkpoint",
          path_, *free, reserve);
    } else {
      rocksdb::FlushOptions fo;
      fo.wait = true;
      db_->Flush(fo, Handles()).PermitUncheckedError();
    }
  }
  for (const auto& [name, table] : tables_) {
    db_->DestroyColumnFamilyHandle(table->cf()).PermitUncheckedError();
  }
  tables_.clear();
  db_->Close().PermitUncheckedError();
  db_.reset();
}

absl::StatusOr<StateTable*> RocksDbBackend::OpenTable(std::string_view name) {
  return Open(name, /*write_behind=*/false);
}

absl::StatusOr<StateTable*> RocksDbBackend::OpenWriteBehindTable(std::string_view name) {
  return Open(name, /*write_behind=*/true);
}

absl::StatusOr<StateTable*> RocksDbBackend::Open(std::string_view name, bool write_behind) {
  RETURN_IF_ERROR(CheckOpen("open table"));
  if (name.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("rocksdb state (db ", path_, "): table name must not be empty"));
  }
  auto it = tables_.find(name);
  if (it != tables_.end()) {
    if (it->second->write_behind() != write_behind) {
      RETURN_IF_ERROR(Commit());
      it->second->set_write_behind(write_behind);
    }
    return it->second.get();
  }
  std::string cf_name(name);
  rocksdb::ColumnFamilyHandle* cf = nullptr;
  RETURN_IF_ERROR(
      FromRocks(db_->CreateColumnFamily(options_, cf_name, &cf),
                absl::StrCat("rocksdb state create table (db ", path_, ", table ", cf_name, ")")));
  it = tables_.emplace(cf_name, std::make_unique<RocksDbTable>(this, cf_name, cf)).first;
  it->second->set_write_behind(write_behind);
  return it->second.get();
}

absl::Status RocksDbBackend::WriteBlind() {
  RETURN_IF_ERROR(CheckOpen("commit"));
  if (blind_batch_.Count() == 0) return absl::OkStatus();
  rocksdb::WriteOptions wo;
  wo.disableWAL = true;
  RETURN_IF_ERROR(FromRocks(db_->Write(wo, &blind_batch_),
                            absl::StrCat("rocksdb state commit (db ", path_, ")"), path_));
  blind_batch_.Clear();
  return absl::OkStatus();
}

absl::Status RocksDbBackend::Commit() {
  RETURN_IF_ERROR(CheckOpen("commit"));
  if (batch_.GetWriteBatch()->Count() != 0) {
    rocksdb::WriteOptions wo;
    wo.disableWAL = true;
    // On failure the batch is kept, so the caller may retry or fail the task.
    RETURN_IF_ERROR(FromRocks(db_->Write(wo, batch_.GetWriteBatch()),
                              absl::StrCat("rocksdb state commit (db ", path_, ")"), path_));
    batch_.Clear();
  }
  // Tables are in one mode at a time (Open commits on a switch), so the two
  // batches never hold the same key and their order does not matter.
  return WriteBlind();
}

uint64_t RocksDbBackend::FlushReserveBytes() const {
  uint64_t memtables = 0;
  for (rocksdb::ColumnFamilyHandle* cf : Handles()) {
    uint64_t bytes = 0;
    if (db_->GetIntProperty(cf, "rocksdb.cur-size-all-mem-tables", &bytes)) memtables += bytes;
  }
  return 2 * memtables + kSnapshotMarginBytes;
}

absl::Status RocksDbBackend::Snapshot(const std::string& dir) {
  RETURN_IF_ERROR(CheckOpen("snapshot"));
  std::string context = absl::StrCat("rocksdb state snapshot (db ", path_, ", to ", dir, ")");
  if (HasPendingWrites()) {
    return absl::FailedPreconditionError(
        absl::StrCat(context, ": uncommitted writes; Commit() first"));
  }
  std::error_code ec;
  fs::path target = fs::absolute(dir, ec);
  if (ec) return FromErrorCode(ec, context);
  if (fs::exists(target, ec)) return absl::AlreadyExistsError(absl::StrCat(context, ": exists"));
  if (target.has_parent_path()) {
    fs::create_directories(target.parent_path(), ec);
    if (ec) return FromErrorCode(ec, context);
  }
  // A flush that runs out of space leaves RocksDB's file writer in a state
  // its assertions abort on (Debian's build keeps them): refuse up front
  // when the memtables (twice, for the flush and the checkpoint's copies)
  // plus a margin do not fit, with the free space and what to do.
  const uint64_t reserve = FlushReserveBytes();
  for (const std::string& where : {path_, target.parent_path().string()}) {
    const std::optional<uint64_t> free = FreeBytes(where);
    if (free.has_value() && *free < reserve) {
      return absl::ResourceExhaustedError(
          absl::StrCat(context, ": No space left on device for the snapshot (it needs about ",
                       reserve, " bytes)", FreeSpaceNote(where)));
    }
  }
  // With the WAL off, memtable data exists nowhere else: flush it into SSTs
  // so the checkpoint (which hard-links SSTs) contains it.
  rocksdb::FlushOptions fo;
  fo.wait = true;
  RETURN_IF_ERROR(FromRocks(db_->Flush(fo, Handles()), context, path_));
  rocksdb::Checkpoint* raw = nullptr;
  RETURN_IF_ERROR(FromRocks(rocksdb::Checkpoint::Create(db_.get(), &raw), context, path_));
  std::unique_ptr<rocksdb::Checkpoint> checkpoint(raw);
  return FromRocks(checkpoint->CreateCheckpoint(target.string()), context, target.string());
}

absl::Status RocksDbBackend::Restore(const std::string& dir) {
  std::string context = absl::StrCat("rocksdb state restore (db ", path_, ", from ", dir, ")");
  std::error_code ec;
  fs::path source(dir);
  if (!fs::exists(source / "CURRENT", ec)) {
    return absl::NotFoundError(absl::StrCat(context, ": not a RocksDB snapshot (no CURRENT)"));
  }
  if (fs::exists(path_, ec) && fs::equivalent(source, path_, ec)) {
    return absl::InvalidArgumentError(absl::StrCat(context, ": snapshot is the live DB"));
  }

  // Copy the snapshot next to the DB first, so a failed copy leaves the live
  // DB intact. SST files are immutable: hard-link them when possible; copy
  // everything else (MANIFEST, OPTIONS, ... may be rewritten by RocksDB).
  fs::path tmp = fs::path(path_).concat(".restoring");
  fs::remove_all(tmp, ec);
  if (ec) return FromErrorCode(ec, absl::StrCat(context, ": remove ", tmp.string()));
  fs::create_directories(tmp, ec);
  if (ec) return FromErrorCode(ec, absl::StrCat(context, ": create ", tmp.string()));
  for (auto it = fs::recursive_directory_iterator(source, ec);
       !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    fs::path to = tmp / it->path().lexically_relative(source);
    bool is_dir = it->is_directory(ec);
    if (ec) {
      // Reported below.
    } else if (is_dir) {
      fs::create_directories(to, ec);
    } else if (it->path().extension() == ".sst") {
      fs::create_hard_link(it->path(), to, ec);
      if (ec) {
        ec.clear();
        fs::copy_file(it->path(), to, ec);
      }
    } else {
      fs::copy_file(it->path(), to, ec);
    }
    if (ec) {
      absl::Status err =
          FromErrorCode(ec, absl::StrCat(context, ": copy ", it->path().string()), path_);
      fs::remove_all(tmp, ec);
      return err;
    }
  }
  if (ec) {
    absl::Status err = FromErrorCode(ec, absl::StrCat(context, ": list ", dir));
    fs::remove_all(tmp, ec);
    return err;
  }

  // From here on a failure leaves the backend closed (every call fails).
  CloseDb(/*flush=*/false);
  fs::remove_all(path_, ec);
  if (ec) return FromErrorCode(ec, absl::StrCat(context, ": remove old DB"));
  fs::rename(tmp, path_, ec);
  if (ec) return FromErrorCode(ec, absl::StrCat(context, ": rename ", tmp.string()));
  return OpenDb();
}

uint64_t RocksDbBackend::ApproximateBytes() {
  if (db_ == nullptr) return 0;
  uint64_t total = batch_.GetDataSize() + blind_batch_.GetDataSize();
  for (const auto& [name, table] : tables_) {
    uint64_t v = 0;
    if (db_->GetIntProperty(table->cf(), rocksdb::DB::Properties::kTotalSstFilesSize, &v)) {
      total += v;
    }
    if (db_->GetIntProperty(table->cf(), rocksdb::DB::Properties::kCurSizeAllMemTables, &v)) {
      total += v;
    }
  }
  return total;
}

std::vector<StateBackend::TableStats> RocksDbBackend::Stats() {
  std::vector<TableStats> out;
  if (db_ == nullptr) return out;
  for (const auto& [name, table] : tables_) {
    TableStats t;
    t.table = name;
    uint64_t v = 0;
    if (db_->GetIntProperty(table->cf(), rocksdb::DB::Properties::kEstimateNumKeys, &v)) t.keys = v;
    if (db_->GetIntProperty(table->cf(), rocksdb::DB::Properties::kTotalSstFilesSize, &v)) {
      t.bytes += v;
    }
    if (db_->GetIntProperty(table->cf(), rocksdb::DB::Properties::kCurSizeAllMemTables, &v)) {
      t.bytes += v;
    }
    out.push_back(std::move(t));
  }
  return out;
}

absl::Status RocksDbBackend::Compact() {
  RETURN_IF_ERROR(CheckOpen("compact"));
  rocksdb::CompactRangeOptions co;
  // Rewrite the bottommost level too, so tombstones and the data they delete
  // are physically removed.
  co.bottommost_level_compaction = rocksdb::BottommostLevelCompaction::kForceOptimized;
  for (const auto& [name, table] : tables_) {
    RETURN_IF_ERROR(
        FromRocks(db_->CompactRange(co, table->cf(), nullptr, nullptr),
                  absl::StrCat("rocksdb state compact (db ", path_, ", table ", name, ")")));
  }
  return absl::OkStatus();
}

}  // namespace

std::shared_ptr<StateMemoryBudget> NewStateMemoryBudget(size_t block_cache_bytes,
                                                        size_t write_buffer_bytes) {
  auto budget = std::make_shared<StateMemoryBudget>();
  budget->cache = rocksdb::NewLRUCache(block_cache_bytes);
  budget->buffers =
      std::make_shared<rocksdb::WriteBufferManager>(write_buffer_bytes, budget->cache);
  return budget;
}

StateMemoryUsage GetStateMemoryUsage(const StateMemoryBudget& budget) {
  StateMemoryUsage u;
  u.block_cache_capacity = budget.cache->GetCapacity();
  u.block_cache_usage = budget.cache->GetUsage();
  u.write_buffer_limit = budget.buffers->buffer_size();
  u.write_buffer_usage = budget.buffers->memory_usage();
  return u;
}

absl::StatusOr<std::unique_ptr<StateBackend>> OpenRocksDbBackend(
    const std::string& path, std::shared_ptr<StateMemoryBudget> budget, bool flush_on_close) {
  auto backend = std::make_unique<RocksDbBackend>(path, std::move(budget), flush_on_close);
  RETURN_IF_ERROR(backend->OpenDb());
  return backend;
}

}  // namespace caravela
