#include "worker/connectors/file_connectors.h"

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "absl/strings/str_cat.h"

namespace caravela {
namespace {
constexpr size_t kChunk = 1 << 20;

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
  buf_.erase(0, pos_);
  pos_ = 0;
  size_t old = buf_.size();
  buf_.resize(old + kChunk);
  size_t n = std::fread(buf_.data() + old, 1, kChunk, file_);
  buf_.resize(old + n);
  if (n == 0) {
    eof_ = true;
    // A last line without a trailing newline.
    if (!buf_.empty() && buf_.back() != '\n') buf_.push_back('\n');
  }
  return n > 0;
}

absl::StatusOr<int> FileSource::Poll(int max_messages, int timeout_ms,
                                     const std::function<void(const RawMessage&)>& f) {
  int delivered = 0;
  while (delivered < max_messages) {
    const char* start = buf_.data() + pos_;
    const void* nl = std::memchr(start, '\n', buf_.size() - pos_);
    if (nl == nullptr) {
      if (eof_) break;
      Fill();
      continue;
    }
    size_t len = static_cast<const char*>(nl) - start;
    RawMessage m;
    m.payload = std::string_view(start, len);
    if (!m.payload.empty() && m.payload.back() == '\r') m.payload.remove_suffix(1);
    m.offset = next_line_++;
    pos_ += len + 1;
    if (m.payload.empty()) continue;  // blank lines are not records
    f(m);
    ++delivered;
  }
  return delivered;
}

absl::Status FileSource::SkipLines(int64_t lines) {
  while (next_line_ < lines) {
    auto n = Poll(static_cast<int>(std::min<int64_t>(lines - next_line_, 4096)), 0,
                  [](const RawMessage&) {});
    if (!n.ok()) return n.status();
    if (*n == 0 && Exhausted()) break;
  }
  return absl::OkStatus();
}

FileSink::~FileSink() {
  if (file_ != nullptr) std::fclose(file_);
}

absl::Status FileSink::Open() {
  std::error_code ec;
  auto parent = std::filesystem::path(path_).parent_path();
  if (!parent.empty()) std::filesystem::create_directories(parent, ec);
  file_ = std::fopen(path_.c_str(), "wb");
  if (file_ == nullptr) return Errno("cannot open output file", path_);
  return absl::OkStatus();
}

absl::Status FileSink::Write(std::string_view key, std::string_view json) {
  std::fwrite(json.data(), 1, json.size(), file_);
  std::fputc('\n', file_);
  return absl::OkStatus();
}

absl::Status FileSink::Flush() {
  if (file_ != nullptr && std::fflush(file_) != 0) return Errno("cannot write", path_);
  return absl::OkStatus();
}

absl::Status FileSink::Close() {
  if (file_ == nullptr) return absl::OkStatus();
  absl::Status st = Flush();
  std::fclose(file_);
  file_ = nullptr;
  return st;
}

absl::Status StdoutSink::Write(std::string_view key, std::string_view json) {
  std::fwrite(json.data(), 1, json.size(), out_);
  std::fputc('\n', out_);
  return absl::OkStatus();
}

absl::Status StdoutSink::Flush() {
  std::fflush(out_);
  return absl::OkStatus();
}

}  // namespace caravela
