// One spdlog logger per subsystem ("runtime", "kafka", "checkpoint", ...):
// a clone of the default logger (same sinks and pattern), registered under
// its name so levels can be set per subsystem (spdlog::get(name)).
#pragma once

#include <memory>
#include <string>

#include "common/status.h"
#include "spdlog/spdlog.h"

namespace caravela {

// What a log line is about, for every line logged on this thread while the
// context lives (RAII, nests: the inner one wins, the outer one is back
// after it): JSON lines get "job", "task" (and "partition" when >= 0)
// fields; text lines a "[job=... task=...]" prefix. The task runtime sets
// it on each task's thread, the job runner on its own.
class LogContext {
 public:
  explicit LogContext(std::string job, std::string task = "", int partition = -1);
  ~LogContext();
  LogContext(const LogContext&) = delete;
  LogContext& operator=(const LogContext&) = delete;

  const std::string& job() const { return job_; }
  const std::string& task() const { return task_; }
  int partition() const { return partition_; }
  // This thread's innermost context, or nullptr.
  static const LogContext* Current();

 private:
  std::string job_, task_;
  int partition_;
  const LogContext* outer_;
};

// Gets or creates the logger `name` (thread-safe; call it once and keep the
// pointer, e.g. in a function-local static).
std::shared_ptr<spdlog::logger> SubsystemLogger(const std::string& name);

// Sends every logger, existing and future ones, to stderr (spdlog's default
// is stdout, which carries commands' output: reports, --json, the stdout
// sink). The binary calls it first thing.
void LogToStderr();

// Sets every logger's format and levels, existing and future ones.
// `format`: "text" ([time] [subsystem] [level] message) or "json" (one
// object per line: ts (UTC, RFC 3339 with microseconds), level, subsystem,
// job, task and partition when a LogContext is set, msg, the message
// JSON-escaped). `levels`: "info", or a default and/or
// per-subsystem levels, e.g. "warn,checkpoint=debug,kafka=info" (trace,
// debug, info, warn, error, critical, off); "" keeps the levels.
// InvalidArgument naming the bad part.
absl::Status ConfigureLogging(const std::string& format, const std::string& levels);

}  // namespace caravela
