#include "worker/connectors/file_connectors.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <thread>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/json.h"
#include "common/logging.h"
#include "spdlog/spdlog.h"

namespace caravela {

std::string PartFilePath(const std::string& path, const std::string& part) {
  std::filesystem::path p(path);
  std::string stem = p.stem().string();
  std::string ext = p.extension().string();
  return (p.parent_path() / absl::StrCat(stem, ".part-", part, ext)).string();
}
namespace {
// 256 KiB: a chunk read is still in L2 when its lines are parsed (1 MiB
// chunks went through L3 and measured 1-3 % slower; docs/benchmarks.md).
constexpr size_t kChunk = 1 << 18;

absl::Status Errno(std::string_view what, const std::string& path) {
  return absl::UnavailableError(
      absl::StrCat(std::string(what), " ", path, ": ", std::strerror(errno)));
}
}  // namespace

FileSource::~FileSource() {
  if (file_ != nullptr) std::fclose(file_);
}

absl::Status FileSource::Open() {
  file_ = std::fopen(path_.c_str(), "rb");
  if (file_ == nullptr) {
    return absl::NotFoundError(absl::StrCat("cannot open input file ", path_, ": ",
                                            std::strerror(errno),
                                            " (paths are relative to the job file)"));
  }
  return absl::OkStatus();
}

bool FileSource::Fill() {
  if (eof_) return false;
  // Keep the partial line, then read a chunk after it: no zero-filling,
  // padding kept readable for the decoder.
  const size_t keep = end_ - pos_;
  const size_t need = keep + kChunk + 1 + JsonDecoder::kPadding;
  if (cap_ < need) {
    // Allocated once for lines under a chunk; doubling for longer ones.
    cap_ = std::max(need + kChunk, 2 * cap_);
    auto bigger = std::make_unique_for_overwrite<char[]>(cap_);
    if (keep > 0) std::memcpy(bigger.get(), buf_.get() + pos_, keep);
    buf_ = std::move(bigger);
  } else if (keep > 0 && pos_ > 0) {
    std::memmove(buf_.get(), buf_.get() + pos_, keep);
  }
  pos_ = 0;
  end_ = keep;
  const size_t n = std::fread(buf_.get() + end_, 1, kChunk, file_);
  end_ += n;
  if (n == 0) {
    eof_ = true;
    // A last line without a trailing newline.
    if (end_ > 0 && buf_[end_ - 1] != '\n') buf_[end_++] = '\n';
  }
  std::memset(buf_.get() + end_, ' ', JsonDecoder::kPadding);
  return n > 0;
}

bool FileSource::NextLine(std::string_view* line, bool fill) {
  for (;;) {
    const char* start = buf_.get() + pos_;
    const char* nl =
        pos_ < end_ ? static_cast<const char*>(std::memchr(start, '\n', end_ - pos_)) : nullptr;
    if (nl != nullptr) {
      *line = std::string_view(start, static_cast<size_t>(nl - start));
      pos_ += line->size() + 1;
      ++next_line_;
      return true;
    }
    if (eof_ || !fill) return false;
    Fill();
  }
}

absl::StatusOr<int> FileSource::Poll(int max_messages, int timeout_ms,
                                     const std::function<void(const RawMessage&)>& f) {
  // The lines of one poll are found first, all in the buffer as it is (a
  // refill moves it, so it happens only before the first line): the
  // decoder parses them in one pass over the block they form.
  lines_.clear();
  std::string_view line;
  while (static_cast<int>(lines_.size()) < max_messages &&
         NextLine(&line, /*fill=*/lines_.empty())) {
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty()) continue;  // blank lines are not records
    lines_.push_back({line, next_line_ - 1});
  }
  if (lines_.empty()) return 0;
  RawMessage m;
  m.padded = true;  // the newline and the rest of the buffer follow
  const char* first = lines_.front().first.data();
  m.block = std::string_view(
      first, static_cast<size_t>(lines_.back().first.data() + lines_.back().first.size() - first));
  for (const auto& [payload, offset] : lines_) {
    m.payload = payload;
    m.offset = offset;
    f(m);
  }
  return static_cast<int>(lines_.size());
}

absl::Status FileSource::SkipLines(int64_t lines) {
  // By lines, not records: blank lines count in positions (next_line_) but
  // are not delivered, so skipping records would overshoot past them.
  std::string_view line;
  while (next_line_ < lines && NextLine(&line, /*fill=*/true)) {
  }
  return absl::OkStatus();
}

FileSink::~FileSink() {
  if (file_ != nullptr) std::fclose(file_);
}

namespace {

// Closes the fence lock's fd (releasing the flock) when it goes out of scope.
struct FenceLock {
  int fd = -1;
  ~FenceLock() {
    if (fd >= 0) ::close(fd);
  }
};

}  // namespace

absl::Status FileSink::Open() {
  std::error_code ec;
  auto parent = std::filesystem::path(path_).parent_path();
  if (!parent.empty()) std::filesystem::create_directories(parent, ec);
  if (!checkpointed_) {
    file_ = OpenBuffered(path_);
    if (file_ == nullptr) return Errno("cannot open output file", path_);
    return absl::OkStatus();
  }
  // Checkpointed: nothing is visible until Recover() says what is committed.
  {
    FenceLock lock;
    ASSIGN_OR_RETURN(lock.fd, LockFence(/*raise=*/true));
  }
  return OpenPending();
}

std::string FileSink::PendingPath(int64_t id) const {
  if (id < 0) {
    return fence_epoch_ < 0 ? path_ + ".pending" : absl::StrCat(path_, ".pending-e", fence_epoch_);
  }
  return path_ + ".pending-" + std::to_string(id);
}

absl::StatusOr<int> FileSink::LockFence(bool raise) {
  if (fence_epoch_ < 0) return -1;
  const std::string fence = path_ + ".fence";
  const int fd = ::open(fence.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return Errno("cannot open the epoch fence", fence);
  // Held only around a rename or an append; a holder that does not let go
  // within 10 s is a paused process (a worker of an older epoch stopped in
  // the middle of a commit): fail clearly rather than wait forever.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    if (errno != EWOULDBLOCK || std::chrono::steady_clock::now() > deadline) {
      const int err = errno;
      ::close(fd);
      return absl::UnavailableError(absl::StrCat(
          "file sink ", path_, ": cannot lock the epoch fence ", fence, ": ",
          err == EWOULDBLOCK ? "held for 10 s by another writer (a paused worker of an older "
                               "epoch in the middle of a commit?)"
                             : std::strerror(err)));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  // "<epoch>" or "<epoch> <job id>".
  char buf[512] = {0};
  const ssize_t n = ::pread(fd, buf, sizeof(buf) - 1, 0);
  int64_t current = -1;
  std::string holder;
  if (n > 0) {
    const std::vector<std::string> words = absl::StrSplit(
        absl::StripAsciiWhitespace(absl::string_view(buf, static_cast<size_t>(n))), ' ');
    if (!absl::SimpleAtoi(words[0], &current)) current = -1;
    if (words.size() > 1) holder = words[1];
  }
  const bool other_job = !holder.empty() && !job_id_.empty() && holder != job_id_;
  if (other_job && current >= fence_epoch_) {
    ::close(fd);
    return absl::PermissionDeniedError(absl::StrCat(
        "file sink ", path_, ": job ", holder, " writes this output (epoch ", current,
        "); this is job ", job_id_, " (epoch ", fence_epoch_,
        "): one job at a time writes an output. Cancel job ", holder,
        " or give this job's sink another path (if no job ", holder,
        " runs any more, for instance one of another coordinator, remove ", path_, ".fence)"));
  }
  if (current > fence_epoch_) {
    ::close(fd);
    return absl::FailedPreconditionError(
        absl::StrCat("file sink ", path_, ": fenced: epoch ", current,
                     " writes it now; this writer has epoch ", fence_epoch_));
  }
  if (raise && (current < fence_epoch_ || (holder.empty() && !job_id_.empty()))) {
    if (other_job) {
      SubsystemLogger("file")->info("file sink {}: taking the output over from job {} (epoch {})",
                                    path_, holder, current);
    }
    const std::string text =
        job_id_.empty() ? std::to_string(fence_epoch_) : absl::StrCat(fence_epoch_, " ", job_id_);
    if (::ftruncate(fd, 0) != 0 ||
        ::pwrite(fd, text.data(), text.size(), 0) != static_cast<ssize_t>(text.size()) ||
        ::fsync(fd) != 0) {
      ::close(fd);
      return Errno("cannot write the epoch fence", fence);
    }
  }
  return fd;
}

std::FILE* FileSink::OpenBuffered(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) return nullptr;
  // stdio's default 4 KiB buffer costs a write(2) every ~20 records.
  if (buffer_ == nullptr) buffer_ = std::make_unique<char[]>(kBufferBytes);
  std::setvbuf(f, buffer_.get(), _IOFBF, kBufferBytes);
  return f;
}

absl::Status FileSink::OpenPending() {
  file_ = OpenBuffered(PendingPath(-1));
  if (file_ == nullptr) return Errno("cannot open pending output file", PendingPath(-1));
  return absl::OkStatus();
}

absl::Status FileSink::WriteRecord(const SinkRecord& r) {
  // One task thread owns the sink: skip stdio's per-call locking.
  fwrite_unlocked(r.value.data(), 1, r.value.size(), file_);
  fputc_unlocked('\n', file_);
  return absl::OkStatus();
}

absl::Status FileSink::Flush() {
  if (file_ != nullptr && std::fflush(file_) != 0) return Errno("cannot write", path_);
  return absl::OkStatus();
}

namespace {

absl::Status FsyncPath(const std::string& path, bool dir) {
  int fd = ::open(path.c_str(), dir ? O_RDONLY | O_DIRECTORY : O_RDWR);
  if (fd < 0) return Errno("cannot open for fsync", path);
  int rc = ::fsync(fd);
  ::close(fd);
  if (rc != 0) return Errno("cannot fsync", path);
  return absl::OkStatus();
}

std::string ParentDir(const std::string& path) {
  auto parent = std::filesystem::path(path).parent_path();
  return parent.empty() ? "." : parent.string();
}

}  // namespace

absl::StatusOr<std::string> FileSink::PreCommit(int64_t checkpoint_id) {
  if (!checkpointed_) {
    RETURN_IF_ERROR(Flush());
    return std::string();
  }
  RETURN_IF_ERROR(Flush());
  if (std::ftell(file_) == 0) {
    // Nothing written since the last checkpoint (a dead letter, mostly):
    // no pending file to publish, so no fsync, rename or directory fsync on
    // the task thread (each checkpoint of every task; tens of ms on a busy
    // disk, while its barriers or its aligned inputs wait). Commit(id) has
    // nothing to append; Recover(id) finds no pending file and keeps the
    // committed size. The fence is still checked (a flock, no fsync): a
    // fenced writer learns it here as it would with output.
    FenceLock lock;
    ASSIGN_OR_RETURN(lock.fd, LockFence(/*raise=*/false));
    empty_precommit_id_ = checkpoint_id;
    return absl::StrCat(committed_size_, " ", committed_size_);
  }
  empty_precommit_id_ = -1;
  if (::fsync(fileno(file_)) != 0) return Errno("cannot fsync", PendingPath(-1));
  const int64_t pending_size = static_cast<int64_t>(std::ftell(file_));
  FenceLock lock;
  ASSIGN_OR_RETURN(lock.fd, LockFence(/*raise=*/false));
  std::fclose(file_);
  file_ = nullptr;
  if (std::rename(PendingPath(-1).c_str(), PendingPath(checkpoint_id).c_str()) != 0) {
    return Errno("cannot rename pending output", PendingPath(-1));
  }
  RETURN_IF_ERROR(FsyncPath(ParentDir(path_), true));
  RETURN_IF_ERROR(OpenPending());
  return absl::StrCat(committed_size_, " ", committed_size_ + pending_size);
}

absl::Status FileSink::AppendFile(const std::string& from) {
  std::FILE* in = std::fopen(from.c_str(), "rb");
  if (in == nullptr) return Errno("cannot open", from);
  std::FILE* out = std::fopen(path_.c_str(), "ab");
  if (out == nullptr) {
    std::fclose(in);
    return Errno("cannot open output file", path_);
  }
  char buf[1 << 16];
  size_t n;
  bool ok = true;
  while ((n = std::fread(buf, 1, sizeof buf, in)) > 0) {
    ok = ok && std::fwrite(buf, 1, n, out) == n;
  }
  std::fclose(in);
  ok = ok && std::fflush(out) == 0 && ::fsync(fileno(out)) == 0;
  committed_size_ = static_cast<int64_t>(std::ftell(out));
  std::fclose(out);
  if (!ok) return Errno("cannot append committed output to", path_);
  return absl::OkStatus();
}

absl::Status FileSink::Commit(int64_t checkpoint_id) {
  if (!checkpointed_) return absl::OkStatus();
  FenceLock lock;
  ASSIGN_OR_RETURN(lock.fd, LockFence(/*raise=*/false));
  if (checkpoint_id == empty_precommit_id_) return absl::OkStatus();  // nothing pending
  const std::string pending = PendingPath(checkpoint_id);
  RETURN_IF_ERROR(AppendFile(pending));
  std::remove(pending.c_str());
  return absl::OkStatus();
}

absl::Status FileSink::Recover(int64_t checkpoint_id, std::string_view state) {
  if (!checkpointed_) return absl::OkStatus();
  FenceLock lock;
  ASSIGN_OR_RETURN(lock.fd, LockFence(/*raise=*/true));
  int64_t before = 0, after = 0;
  if (checkpoint_id > 0) {
    std::vector<std::string> parts =
        absl::StrSplit(absl::string_view(state.data(), state.size()), ' ');
    if (parts.size() != 2 || !absl::SimpleAtoi(parts[0], &before) ||
        !absl::SimpleAtoi(parts[1], &after)) {
      return absl::DataLossError(
          absl::StrCat("file sink ", path_, ": bad checkpoint state \"", std::string(state), "\""));
    }
  }
  std::error_code ec;
  if (!std::filesystem::exists(path_, ec)) {
    std::FILE* f = std::fopen(path_.c_str(), "wb");
    if (f == nullptr) return Errno("cannot create output file", path_);
    std::fclose(f);
  }
  const int64_t size = static_cast<int64_t>(std::filesystem::file_size(path_, ec));
  const std::string pending = PendingPath(checkpoint_id);
  if (local_ && checkpoint_id > 0 && size < after && !std::filesystem::exists(pending, ec)) {
    SubsystemLogger("file")->warn(
        "file sink {}: {} bytes here, {} committed by checkpoint {}: the task ran on another "
        "worker before (its output stays there); going on from here",
        path_, size, after, checkpoint_id);
    committed_size_ = size;
    return absl::OkStatus();
  }
  if (checkpoint_id > 0 && std::filesystem::exists(pending, ec)) {
    // The crash came between the manifest and the commit: finish the commit.
    if (size < before) {
      return absl::DataLossError(absl::StrCat("file sink ", path_, " holds ", size,
                                              " bytes, less than the ", before,
                                              " its checkpoint committed; was it modified?"));
    }
    if (::truncate(path_.c_str(), before) != 0) return Errno("cannot truncate", path_);
    committed_size_ = before;
    RETURN_IF_ERROR(AppendFile(pending));
    std::remove(pending.c_str());
  } else {
    if (size < after) {
      return absl::DataLossError(absl::StrCat("file sink ", path_, " holds ", size,
                                              " bytes, less than the ", after,
                                              " its checkpoint committed; was it modified?"));
    }
    if (::truncate(path_.c_str(), after) != 0) return Errno("cannot truncate", path_);
    RETURN_IF_ERROR(FsyncPath(path_, false));
    committed_size_ = after;
  }
  // Output of checkpoints that never committed is regenerated by the replay.
  const std::string dir = ParentDir(path_);
  const std::string base = std::filesystem::path(path_).filename().string() + ".pending-";
  const std::string own = std::filesystem::path(PendingPath(-1)).filename().string();
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind(base, 0) == 0 && name != own) std::filesystem::remove(entry.path(), ec);
  }
  return absl::OkStatus();
}

absl::Status FileSink::Close() {
  if (file_ == nullptr) return absl::OkStatus();
  absl::Status st = Flush();
  std::fclose(file_);
  file_ = nullptr;
  if (checkpointed_) std::remove(PendingPath(-1).c_str());  // uncommitted: dropped
  return st;
}

absl::Status StdoutSink::WriteRecord(const SinkRecord& r) {
  std::fwrite(r.value.data(), 1, r.value.size(), out_);
  std::fputc('\n', out_);
  return absl::OkStatus();
}

absl::Status StdoutSink::Flush() {
  std::fflush(out_);
  return absl::OkStatus();
}

}  // namespace caravela
