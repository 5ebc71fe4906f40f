// File connectors: a JSON Lines source (bounded; one line = one message, the
// offset is the 0-based line number) and JSONL / stdout sinks.
#pragma once

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "worker/connectors/sink.h"
#include "worker/connectors/source.h"

namespace caravela {

class FileSource : public RawSource {
 public:
  explicit FileSource(std::string path) : path_(std::move(path)) {}
  ~FileSource() override;
  absl::Status Open() override;
  int PartitionCount() const override { return 1; }
  absl::StatusOr<int> Poll(int max_messages, int timeout_ms,
                           const std::function<void(const RawMessage&)>& f) override;
  bool Bounded() const override { return true; }
  bool Exhausted() const override { return eof_ && pos_ >= buf_.size(); }
  int64_t Backlog(int32_t partition) const override { return Exhausted() ? 0 : 1; }
  std::vector<int64_t> Positions() const override { return {next_line_}; }
  // Skips the first `lines` lines (restore).
  absl::Status SkipLines(int64_t lines);

 private:
  bool Fill();
  std::string path_;
  std::FILE* file_ = nullptr;
  std::string buf_;
  size_t pos_ = 0;
  bool eof_ = false;
  int64_t next_line_ = 0;
};

// Writes one JSON object per line. Creates parent directories; truncates an
// existing file at Open().
class FileSink : public Sink {
 public:
  explicit FileSink(std::string path) : path_(std::move(path)) {}
  ~FileSink() override;
  absl::Status Open() override;
  absl::Status Write(std::string_view key, std::string_view json) override;
  absl::Status Flush() override;
  absl::Status Close() override;

 private:
  std::string path_;
  std::FILE* file_ = nullptr;
};

// Prints one JSON object per line to a FILE* (stdout by default).
class StdoutSink : public Sink {
 public:
  explicit StdoutSink(std::FILE* out = stdout) : out_(out) {}
  absl::Status Open() override { return absl::OkStatus(); }
  absl::Status Write(std::string_view key, std::string_view json) override;
  absl::Status Flush() override;
  absl::Status Close() override { return Flush(); }

 private:
  std::FILE* out_;
};

}  // namespace caravela
