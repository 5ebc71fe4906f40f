#include "common/logging.h"

namespace caravela {

std::shared_ptr<spdlog::logger> SubsystemLogger(const std::string& name) {
  if (auto existing = spdlog::get(name)) return existing;
  auto created = spdlog::default_logger()->clone(name);
  try {
    spdlog::register_logger(created);
  } catch (const spdlog::spdlog_ex&) {
    if (auto existing = spdlog::get(name)) return existing;  // another thread won the race
  }
  return created;
}

}  // namespace caravela
