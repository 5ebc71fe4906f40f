// One spdlog logger per subsystem ("runtime", "kafka", "checkpoint", ...):
// a clone of the default logger (same sinks and pattern), registered under
// its name so levels can be set per subsystem (spdlog::get(name)).
#pragma once

#include <memory>
#include <string>

#include "common/status.h"
#include "spdlog/spdlog.h"

namespace caravela {

// Gets or creates the logger `name` (thread-safe; call it once and keep the
// pointer, e.g. in a function-local static).
std::shared_ptr<spdlog::logger> SubsystemLogger(const std::string& name);

// Sets every logger's format and levels, existing and future ones.
// `format`: "text" ([time] [subsystem] [level] message) or "json" (one
// object per line: ts (UTC, RFC 3339 with microseconds), level, subsystem,
// msg, the message JSON-escaped). `levels`: "info", or a default and/or
// per-subsystem levels, e.g. "warn,checkpoint=debug,kafka=info" (trace,
// debug, info, warn, error, critical, off); "" keeps the levels.
// InvalidArgument naming the bad part.
absl::Status ConfigureLogging(const std::string& format, const std::string& levels);

}  // namespace caravela
