// In-memory state backend: one std::map per table.
//
// Writes are applied to the maps immediately and a `dirty_` flag records that
// writes happened since the last Commit(). This is observably identical to the
// RocksDB backend's buffered batch: reads see uncommitted writes in both, both
// lose uncommitted writes on Restore() or destruction, and both refuse to
// Snapshot() with uncommitted writes. Nothing can fail between the writes and
// Commit(), so Commit() is trivially atomic.
//
// Snapshot format (one file, `<dir>/state.bin`, little-endian):
//   "CRVMEM01"                                 8-byte magic
//   u32 table_count
//   table_count x { u32 name_len, name, u64 entry_count,
//                   entry_count x { u32 key_len, key, u32 value_len, value } }
//   u64 FNV-1a 64 hash of all preceding bytes
// Snapshots are not fsynced: the memory backend is for tests and small jobs,
// where a snapshot only has to survive the process, not the machine.
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>

#include "absl/strings/str_cat.h"
#include "worker/state/state_backend.h"

namespace caravela {
namespace {

namespace fs = std::filesystem;

constexpr std::string_view kMagic = "CRVMEM01";
constexpr std::string_view kStateFile = "state.bin";
// Rough per-entry overhead of a std::map node, for ApproximateBytes().
constexpr uint64_t kEntryOverhead = 64;

uint64_t Fnv1a64(std::string_view data) {
  uint64_t h = 14695981039346656037ull;
  for (unsigned char c : data) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

void AppendFixed32(std::string* out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
void AppendFixed64(std::string* out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
void AppendBytes32(std::string* out, std::string_view s) {
  AppendFixed32(out, static_cast<uint32_t>(s.size()));
  out->append(s);
}

// Sequential reader over a snapshot file; every method returns false on a
// truncated input.
class Reader {
 public:
  explicit Reader(std::string_view data) : data_(data) {}
  bool Fixed32(uint32_t* v) {
    if (data_.size() < 4) return false;
    *v = 0;
    for (int i = 0; i < 4; ++i) *v |= uint32_t{static_cast<uint8_t>(data_[i])} << (8 * i);
    data_.remove_prefix(4);
    return true;
  }
  bool Fixed64(uint64_t* v) {
    if (data_.size() < 8) return false;
    *v = 0;
    for (int i = 0; i < 8; ++i) *v |= uint64_t{static_cast<uint8_t>(data_[i])} << (8 * i);
    data_.remove_prefix(8);
    return true;
  }
  bool Bytes32(std::string_view* s) {
    uint32_t n;
    if (!Fixed32(&n) || data_.size() < n) return false;
    *s = data_.substr(0, n);
    data_.remove_prefix(n);
    return true;
  }
  bool empty() const { return data_.empty(); }

 private:
  std::string_view data_;
};

using Map = std::map<std::string, std::string, std::less<>>;

class MemoryTable final : public StateTable {
 public:
  // `dirty` is the backend's uncommitted-writes flag; it outlives the table.
  explicit MemoryTable(bool* dirty) : dirty_(dirty) {}

  absl::StatusOr<bool> Get(std::string_view key, std::string* value) override {
    auto it = data_.find(key);
    if (it == data_.end()) return false;
    if (value != nullptr) value->assign(it->second);
    return true;
  }

  void Put(std::string_view key, std::string_view value) override {
    *dirty_ = true;
    auto it = data_.lower_bound(key);
    if (it != data_.end() && it->first == key) {
      bytes_ -= it->second.size();
      it->second.assign(value);
    } else {
      data_.emplace_hint(it, std::string(key), std::string(value));
      bytes_ += key.size() + kEntryOverhead;
    }
    bytes_ += value.size();
  }

  void Delete(std::string_view key) override {
    // A Delete counts as a write even if the key is absent (as in RocksDB,
    // where it adds a tombstone to the batch).
    *dirty_ = true;
    auto it = data_.find(key);
    if (it != data_.end()) Erase(it);
  }

  absl::Status Scan(
      std::string_view begin, std::string_view end,
      const std::function<bool(std::string_view key, std::string_view value)>& f) override {
    for (auto it = data_.lower_bound(begin); it != data_.end(); ++it) {
      if (!end.empty() && std::string_view(it->first) >= end) break;
      if (!f(it->first, it->second)) break;
    }
    return absl::OkStatus();
  }

  absl::Status DeleteRange(std::string_view begin, std::string_view end) override {
    auto it = data_.lower_bound(begin);
    while (it != data_.end() && (end.empty() || std::string_view(it->first) < end)) {
      *dirty_ = true;
      it = Erase(it);
    }
    return absl::OkStatus();
  }

  absl::StatusOr<uint64_t> CountKeys() override { return data_.size(); }

  uint64_t bytes() const { return bytes_; }
  const Map& data() const { return data_; }
  // Loads restored data (the table must be new).
  void Load(Map data) {
    data_ = std::move(data);
    bytes_ = 0;
    for (const auto& [k, v] : data_) bytes_ += k.size() + v.size() + kEntryOverhead;
  }

 private:
  Map::iterator Erase(Map::iterator it) {
    bytes_ -= it->first.size() + it->second.size() + kEntryOverhead;
    return data_.erase(it);
  }

  bool* dirty_;
  Map data_;
  uint64_t bytes_ = 0;
};

class MemoryBackend final : public StateBackend {
 public:
  absl::StatusOr<StateTable*> OpenTable(std::string_view name) override {
    if (name.empty()) return absl::InvalidArgumentError("state table name must not be empty");
    auto it = tables_.find(name);
    if (it == tables_.end()) {
      it = tables_.emplace(std::string(name), std::make_unique<MemoryTable>(&dirty_)).first;
    }
    return it->second.get();
  }

  absl::Status Commit() override {
    dirty_ = false;
    return absl::OkStatus();
  }

  absl::Status Snapshot(const std::string& dir) override {
    if (dirty_) {
      return absl::FailedPreconditionError(
          absl::StrCat("memory state snapshot to ", dir, ": uncommitted writes; Commit() first"));
    }
    std::string buf(kMagic);
    AppendFixed32(&buf, static_cast<uint32_t>(tables_.size()));
    for (const auto& [name, table] : tables_) {
      AppendBytes32(&buf, name);
      AppendFixed64(&buf, table->data().size());
      for (const auto& [k, v] : table->data()) {
        AppendBytes32(&buf, k);
        AppendBytes32(&buf, v);
      }
    }
    AppendFixed64(&buf, Fnv1a64(buf));

    std::error_code ec;
    fs::path path(dir);
    if (fs::exists(path, ec)) {
      return absl::AlreadyExistsError(absl::StrCat("memory state snapshot: ", dir, " exists"));
    }
    if (path.has_parent_path()) fs::create_directories(path.parent_path(), ec);
    if (!fs::create_directory(path, ec) || ec) {
      return absl::InternalError(
          absl::StrCat("memory state snapshot: cannot create ", dir, ": ", ec.message()));
    }
    fs::path tmp = path / (std::string(kStateFile) + ".tmp");
    {
      std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
      out.write(buf.data(), static_cast<std::streamsize>(buf.size()));
      out.close();
      if (!out) {
        return absl::InternalError(
            absl::StrCat("memory state snapshot: cannot write ", tmp.string()));
      }
    }
    fs::rename(tmp, path / kStateFile, ec);
    if (ec) {
      return absl::InternalError(
          absl::StrCat("memory state snapshot: rename in ", dir, ": ", ec.message()));
    }
    return absl::OkStatus();
  }

  // On error the current state is left unchanged.
  absl::Status Restore(const std::string& dir) override {
    fs::path file = fs::path(dir) / kStateFile;
    std::ifstream in(file, std::ios::binary);
    if (!in) {
      return absl::NotFoundError(absl::StrCat("memory state restore: cannot open ", file.string()));
    }
    std::string buf((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (in.bad()) {
      return absl::InternalError(absl::StrCat("memory state restore: cannot read ", file.string()));
    }
    auto corrupt = [&](absl::string_view why) {
      return absl::DataLossError(
          absl::StrCat("memory state restore: ", file.string(), " is corrupt: ", why));
    };
    if (buf.size() < kMagic.size() + 4 + 8 || std::string_view(buf).substr(0, 8) != kMagic) {
      return corrupt("bad magic");
    }
    std::string_view body = std::string_view(buf).substr(0, buf.size() - 8);
    uint64_t want_hash;
    Reader trailer(std::string_view(buf).substr(buf.size() - 8));
    trailer.Fixed64(&want_hash);
    if (Fnv1a64(body) != want_hash) return corrupt("checksum mismatch");

    Reader r(body.substr(kMagic.size()));
    uint32_t table_count;
    if (!r.Fixed32(&table_count)) return corrupt("truncated header");
    std::map<std::string, std::unique_ptr<MemoryTable>, std::less<>> tables;
    for (uint32_t t = 0; t < table_count; ++t) {
      std::string_view name;
      uint64_t entries;
      if (!r.Bytes32(&name) || !r.Fixed64(&entries)) return corrupt("truncated table header");
      Map data;
      for (uint64_t e = 0; e < entries; ++e) {
        std::string_view k, v;
        if (!r.Bytes32(&k) || !r.Bytes32(&v)) return corrupt("truncated entry");
        data.emplace_hint(data.end(), std::string(k), std::string(v));
      }
      auto table = std::make_unique<MemoryTable>(&dirty_);
      table->Load(std::move(data));
      tables.emplace(std::string(name), std::move(table));
    }
    if (!r.empty()) return corrupt("trailing bytes");
    tables_ = std::move(tables);
    dirty_ = false;
    return absl::OkStatus();
  }

  std::vector<TableStats> Stats() override {
    std::vector<TableStats> out;
    for (const auto& [name, table] : tables_) {
      out.push_back({name, table->data().size(), table->bytes()});
    }
    return out;
  }

  uint64_t ApproximateBytes() override {
    uint64_t total = 0;
    for (const auto& [name, table] : tables_) total += table->bytes();
    return total;
  }

 private:
  bool dirty_ = false;  // writes since the last Commit()
  std::map<std::string, std::unique_ptr<MemoryTable>, std::less<>> tables_;
};

}  // namespace

std::unique_ptr<StateBackend> NewMemoryBackend() { return std::make_unique<MemoryBackend>(); }

}  // namespace caravela
