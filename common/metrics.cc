#include "common/metrics.h"

namespace caravela {
namespace {
std::string FullName(const std::string& name, const std::string& labels) {
  return labels.empty() ? name : name + "{" + labels + "}";
}
}  // namespace

Counter* MetricsRegistry::Get(const std::string& name, const std::string& labels) {
  std::lock_guard<std::mutex> lock(mu_);
  auto& slot = counters_[FullName(name, labels)];
  if (!slot) slot = std::make_unique<Counter>();
  return slot.get();
}

int64_t MetricsRegistry::Value(const std::string& name, const std::string& labels) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = counters_.find(FullName(name, labels));
  return it == counters_.end() ? 0 : it->second->value();
}

std::string MetricsRegistry::ToPrometheusText() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::string out;
  for (const auto& [k, c] : counters_) {
    out += k;
    out += ' ';
    out += std::to_string(c->value());
    out += '\n';
  }
  return out;
}

std::map<std::string, int64_t> MetricsRegistry::Snapshot() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::map<std::string, int64_t> out;
  for (const auto& [k, c] : counters_) out[k] = c->value();
  return out;
}

}  // namespace caravela
