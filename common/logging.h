// One spdlog logger per subsystem ("runtime", "kafka", "checkpoint", ...):
// a clone of the default logger (same sinks and pattern), registered under
// its name so levels can be set per subsystem (spdlog::get(name)).
#pragma once

#include <memory>
#include <string>

#include "spdlog/spdlog.h"

namespace caravela {

// Gets or creates the logger `name` (thread-safe; call it once and keep the
// pointer, e.g. in a function-local static).
std::shared_ptr<spdlog::logger> SubsystemLogger(const std::string& name);

}  // namespace caravela
