#include "worker/checkpoint/file_storage.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/failpoint.h"
#include "common/free_space.h"
#include "common/storage_scheme.h"

namespace caravela {
namespace {

namespace fs = std::filesystem;

// absl::string_view is not std::string_view in this abseil build.
absl::string_view AV(std::string_view s) { return absl::string_view(s.data(), s.size()); }

constexpr size_t kChunkBytes = 4 << 20;

// `path`: where a full file system (ENOSPC, EDQUOT) is reported with its
// free space.
absl::Status Errno(int err, absl::string_view what, std::string_view path = {}) {
  std::string msg = absl::StrCat(what, ": ", strerror(err));
  if (err == ENOSPC || err == EDQUOT) {
    return absl::ResourceExhaustedError(absl::StrCat(msg, FreeSpaceNote(path)));
  }
  if (err == ENOENT) return absl::NotFoundError(msg);
  if (err == EACCES || err == EPERM) return absl::PermissionDeniedError(msg);
  return absl::InternalError(msg);
}

// Closes the descriptor on scope exit unless released.
class Fd {
 public:
  explicit Fd(int fd = -1) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }
  // Closes now, reporting the error (close can report deferred write errors).
  int Close() {
    int rc = ::close(fd_);
    fd_ = -1;
    return rc;
  }

 private:
  int fd_;
};

absl::Status FsyncDir(const std::string& dir, absl::string_view context) {
  Fd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (fd.get() < 0) return Errno(errno, absl::StrCat(context, ": open dir ", dir));
  if (::fsync(fd.get()) != 0) return Errno(errno, absl::StrCat(context, ": fsync dir ", dir));
  return absl::OkStatus();
}

// `path`: the file `fd` writes (a full file system is reported with its free
// space).
absl::Status WriteAll(int fd, const char* data, size_t n, absl::string_view context,
                      std::string_view path) {
  while (n > 0) {
    ssize_t w = ::write(fd, data, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return Errno(errno, context, path);
    }
    data += w;
    n -= static_cast<size_t>(w);
  }
  return absl::OkStatus();
}

bool IsTemporaryName(absl::string_view name) { return absl::StartsWith(name, "."); }

class FileStorage final : public CheckpointStorage {
 public:
  FileStorage(std::string root, std::string url) : root_(std::move(root)), url_(std::move(url)) {}

  const std::string& url() const override { return url_; }

  absl::Status Write(std::string_view key, std::string_view data) override {
    return AtomicWrite(key, [&](int fd, absl::string_view context, std::string_view path) {
      return WriteAll(fd, data.data(), data.size(), context, path);
    });
  }

  absl::Status Upload(std::string_view key, const std::string& local_path) override {
    return AtomicWrite(
        key, [&](int out, absl::string_view context, std::string_view path) -> absl::Status {
          Fd in(::open(local_path.c_str(), O_RDONLY | O_CLOEXEC));
          if (in.get() < 0) return Errno(errno, absl::StrCat(context, ": open ", local_path));
          // In-kernel copy (no user-space buffer; may even share extents).
          while (true) {
            ssize_t n = ::copy_file_range(in.get(), nullptr, out, nullptr, 64 << 20, 0);
            if (n == 0) return absl::OkStatus();
            if (n > 0) continue;
            if (errno == EINTR) continue;
            if (errno == EXDEV || errno == ENOSYS || errno == EOPNOTSUPP || errno == EINVAL) break;
            return Errno(errno, absl::StrCat(context, ": copy from ", local_path), path);
          }
          // Fallback: plain read/write from wherever copy_file_range stopped.
          std::string buf(kChunkBytes, '\0');
          while (true) {
            ssize_t n = ::read(in.get(), buf.data(), buf.size());
            if (n < 0 && errno == EINTR) continue;
            if (n < 0) return Errno(errno, absl::StrCat(context, ": read ", local_path));
            if (n == 0) return absl::OkStatus();
            RETURN_IF_ERROR(WriteAll(out, buf.data(), static_cast<size_t>(n), context, path));
          }
        });
  }

  absl::StatusOr<std::string> Read(std::string_view key) override {
    std::string out;
    RETURN_IF_ERROR(ReadChunks(key, [&](std::string_view chunk) {
      out.append(chunk);
      return absl::OkStatus();
    }));
    return out;
  }

  absl::Status ReadChunks(std::string_view key,
                          const std::function<absl::Status(std::string_view)>& f) override {
    std::string context = Context("read", key);
    RETURN_IF_ERROR(ValidateStorageKey(key));
    std::string path = PathOf(key);
    Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    if (fd.get() < 0) return Errno(errno, context);
    std::string buf(kChunkBytes, '\0');
    while (true) {
      ssize_t n = ::read(fd.get(), buf.data(), buf.size());
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return Errno(errno, context);
      if (n == 0) return absl::OkStatus();
      RETURN_IF_ERROR(f(std::string_view(buf.data(), static_cast<size_t>(n))));
    }
  }

  absl::StatusOr<bool> Exists(std::string_view key) override {
    RETURN_IF_ERROR(ValidateStorageKey(key));
    struct stat st;
    if (::stat(PathOf(key).c_str(), &st) == 0) return S_ISREG(st.st_mode);
    if (errno == ENOENT || errno == ENOTDIR) return false;
    return Errno(errno, Context("stat", key));
  }

  absl::StatusOr<uint64_t> Size(std::string_view key) override {
    RETURN_IF_ERROR(ValidateStorageKey(key));
    struct stat st;
    if (::stat(PathOf(key).c_str(), &st) != 0) return Errno(errno, Context("stat", key));
    if (!S_ISREG(st.st_mode)) return absl::NotFoundError(Context("stat", key) + ": not a file");
    return static_cast<uint64_t>(st.st_size);
  }

  absl::StatusOr<std::vector<ObjectInfo>> List(std::string_view prefix) override {
    std::vector<ObjectInfo> out;
    RETURN_IF_ERROR(Walk(
        prefix,
        [&](const fs::directory_entry& e, const std::string& key, bool temporary) -> absl::Status {
          if (temporary) return absl::OkStatus();
          std::error_code ec;
          uint64_t size = e.file_size(ec);
          if (ec == std::errc::no_such_file_or_directory)
            return absl::OkStatus();  // deleted meanwhile
          if (ec) return Errno(ec.value(), Context("list", key));
          out.push_back({key, size});
          return absl::OkStatus();
        }));
    std::sort(out.begin(), out.end(),
              [](const ObjectInfo& a, const ObjectInfo& b) { return a.key < b.key; });
    return out;
  }

  absl::Status Delete(std::string_view key) override {
    RETURN_IF_ERROR(ValidateStorageKey(key));
    std::string path = PathOf(key);
    if (::unlink(path.c_str()) != 0 && errno != ENOENT && errno != ENOTDIR) {
      return Errno(errno, Context("delete", key));
    }
    RemoveEmptyParents(fs::path(path).parent_path());
    return absl::OkStatus();
  }

  std::string LocalPath(std::string_view key) const override {
    return ValidateStorageKey(key).ok() ? PathOf(key) : "";
  }

  absl::Status DeleteStaleTemporaries(std::string_view prefix,
                                      int64_t older_than_unix_ms) override {
    std::vector<fs::path> dirs;
    RETURN_IF_ERROR(Walk(
        prefix,
        [&](const fs::directory_entry& e, const std::string& key, bool temporary) -> absl::Status {
          if (!temporary) return absl::OkStatus();
          struct stat st;
          if (::lstat(e.path().c_str(), &st) != 0) return absl::OkStatus();  // gone already
          int64_t mtime_ms =
              static_cast<int64_t>(st.st_mtim.tv_sec) * 1000 + st.st_mtim.tv_nsec / 1000000;
          if (mtime_ms >= older_than_unix_ms) return absl::OkStatus();
          if (::unlink(e.path().c_str()) != 0 && errno != ENOENT) {
            return Errno(errno, absl::StrCat("checkpoint storage ", url_, ": delete temporary ",
                                             e.path().string()));
          }
          dirs.push_back(e.path().parent_path());
          return absl::OkStatus();
        }));
    for (const auto& d : dirs) RemoveEmptyParents(d);
    // Empty directories left by crashed writes (created, nothing renamed in).
    std::string base = BaseDirOf(prefix);
    std::error_code ec;
    std::vector<fs::path> all_dirs;
    for (auto it = fs::recursive_directory_iterator(base, ec);
         !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
      if (it->is_directory(ec)) all_dirs.push_back(it->path());
    }
    // Deepest first, so parents become empty before they are tried.
    std::sort(all_dirs.rbegin(), all_dirs.rend());
    for (const auto& d : all_dirs) {
      std::string rel = d.lexically_relative(root_).generic_string();
      if (std::string_view(rel).starts_with(prefix)) ::rmdir(d.c_str());  // fails unless empty
    }
    return absl::OkStatus();
  }

 private:
  std::string Context(absl::string_view op, std::string_view key) const {
    return absl::StrCat("checkpoint storage ", url_, ": ", op, " ", AV(key));
  }
  std::string PathOf(std::string_view key) const { return absl::StrCat(root_, "/", AV(key)); }

  // Directory that contains every key starting with `prefix`.
  std::string BaseDirOf(std::string_view prefix) const {
    size_t slash = prefix.rfind('/');
    if (slash == std::string_view::npos) return root_;
    return absl::StrCat(root_, "/", AV(prefix.substr(0, slash)));
  }

  // Calls f(entry, key, is_temporary) for every regular file whose key (path
  // relative to the root; for temporaries, of the directory holding it plus
  // the temporary's name) starts with `prefix`.
  absl::Status Walk(
      std::string_view prefix,
      const std::function<absl::Status(const fs::directory_entry&, const std::string&, bool)>& f) {
    std::string base = BaseDirOf(prefix);
    std::error_code ec;
    auto it = fs::recursive_directory_iterator(base, ec);
    if (ec == std::errc::no_such_file_or_directory || ec == std::errc::not_a_directory) {
      return absl::OkStatus();
    }
    for (; !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
      const fs::directory_entry& e = *it;
      std::error_code ec2;
      if (!e.is_regular_file(ec2)) continue;  // directories, or vanished meanwhile
      std::string key = e.path().lexically_relative(root_).generic_string();
      if (!std::string_view(key).starts_with(prefix)) continue;
      bool temporary = false;
      for (absl::string_view part : absl::StrSplit(key, '/')) {
        if (IsTemporaryName(part)) temporary = true;
      }
      RETURN_IF_ERROR(f(e, key, temporary));
    }
    if (ec && ec != std::errc::no_such_file_or_directory) {
      return Errno(ec.value(), absl::StrCat("checkpoint storage ", url_, ": list ", AV(prefix)));
    }
    return absl::OkStatus();
  }

  // Creates the missing directories of `dir` (below the root), fsyncing the
  // parent of each one created so the new entry is durable.
  absl::Status MakeDirs(const fs::path& dir, absl::string_view context) {
    struct stat st;
    if (::stat(dir.c_str(), &st) == 0) return absl::OkStatus();
    if (dir.string().size() <= root_.size()) {
      return Errno(errno, absl::StrCat(context, ": root ", root_));
    }
    RETURN_IF_ERROR(MakeDirs(dir.parent_path(), context));
    if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) {
      return Errno(errno, absl::StrCat(context, ": mkdir ", dir.string()));
    }
    return FsyncDir(dir.parent_path().string(), context);
  }

  void RemoveEmptyParents(fs::path dir) {
    const fs::path root(root_);
    while (dir.string().size() > root_.size() && dir != root) {
      if (::rmdir(dir.c_str()) != 0) return;  // not empty (or gone)
      dir = dir.parent_path();
    }
  }

  // Writes `key` through a temporary file renamed into place:
  // fill(fd, context, temporary path) writes the bytes.
  template <typename Fill>
  absl::Status AtomicWrite(std::string_view key, Fill&& fill) {
    std::string context = Context("write", key);
    RETURN_IF_ERROR(ValidateStorageKey(key));
    fs::path path = PathOf(key);
    fs::path dir = path.parent_path();
    RETURN_IF_ERROR(MakeDirs(dir, context));
    std::string tmp = (dir / absl::StrCat(".", path.filename().string(), ".tmp.", ::getpid(), ".",
                                          counter_.fetch_add(1)))
                          .string();
    Fd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644));
    if (fd.get() < 0) return Errno(errno, absl::StrCat(context, ": create ", tmp), tmp);
    absl::Status st = fill(fd.get(), absl::StrCat(context, ": write ", tmp), tmp);
    if (st.ok() && ::fsync(fd.get()) != 0) {
      st = Errno(errno, absl::StrCat(context, ": fsync"), tmp);
    }
    if (fd.Close() != 0 && st.ok()) st = Errno(errno, absl::StrCat(context, ": close"), tmp);
    Failpoint("file_storage.before_rename");
    if (st.ok() && ::rename(tmp.c_str(), path.c_str()) != 0) {
      st = Errno(errno, absl::StrCat(context, ": rename ", tmp));
    }
    if (!st.ok()) {
      ::unlink(tmp.c_str());
      return st;
    }
    return FsyncDir(dir.string(), context);
  }

  const std::string root_;
  const std::string url_;
  std::atomic<uint64_t> counter_{0};
};

}  // namespace

absl::Status ValidateStorageKey(std::string_view key) {
  auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(
        absl::StrCat("invalid checkpoint storage key '", AV(key), "': ", why));
  };
  if (key.empty()) return bad("empty");
  for (absl::string_view part : absl::StrSplit(absl::string_view(key.data(), key.size()), '/')) {
    if (part.empty()) return bad("empty path component (leading, trailing or double '/')");
    if (part == "." || part == "..") return bad("'.' and '..' are not allowed");
    if (part[0] == '.') return bad("components must not start with '.' (reserved for temporaries)");
  }
  if (key.find('\0') != std::string_view::npos) return bad("NUL byte");
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<CheckpointStorage>> OpenFileStorage(const std::string& root) {
  fs::path p = fs::path(root).lexically_normal();
  if (!p.is_absolute()) {
    return absl::InvalidArgumentError(
        absl::StrCat("checkpoint storage root '", root, "' must be an absolute path"));
  }
  std::string r = p.string();
  while (r.size() > 1 && r.back() == '/') r.pop_back();
  std::error_code ec;
  fs::create_directories(r, ec);
  if (ec) {
    return absl::InternalError(
        absl::StrCat("checkpoint storage file://", r, ": create root: ", ec.message()));
  }
  return std::make_unique<FileStorage>(r, absl::StrCat("file://", r));
}

absl::StatusOr<std::optional<int64_t>> ReadEpoch(CheckpointStorage& storage, std::string_view key) {
  ASSIGN_OR_RETURN(bool exists, storage.Exists(key));
  if (!exists) return std::nullopt;
  ASSIGN_OR_RETURN(std::string text, storage.Read(key));
  int64_t v = 0;
  if (!absl::SimpleAtoi(absl::string_view(text.data(), text.size()), &v)) {
    return absl::DataLossError(absl::StrCat("corrupt epoch file ", storage.url(), "/",
                                            absl::string_view(key.data(), key.size()), ": \"", text,
                                            "\""));
  }
  return v;
}

namespace {

// file:///absolute/dir: a FileStorage rooted there (created if missing).
class FileScheme final : public StorageScheme {
 public:
  std::string_view name() const override { return "file"; }
  std::string_view example() const override {
    return "file:///absolute/dir (a local, NFS or PVC directory)";
  }
  bool Matches(std::string_view url) const override { return url.size() > strlen("file://"); }
  std::string LocalPath(std::string_view url) const override {
    return std::string(url.substr(strlen("file://")));
  }
  absl::StatusOr<std::unique_ptr<CheckpointStorage>> Open(const std::string& url) const override {
    std::string path = url.substr(strlen("file://"));
    if (path.empty() || path[0] != '/') {
      return absl::InvalidArgumentError(absl::StrCat("checkpoint storage URL '", url,
                                                     "' has no absolute path; expected ",
                                                     std::string(example())));
    }
    return OpenFileStorage(path);
  }
};

}  // namespace

const StorageScheme& FileStorageScheme() {
  static const FileScheme scheme;
  return scheme;
}

}  // namespace caravela
