// Metrics registry: named counters and gauges with labels, kept per job (in
// common/: operators, the task runtime and the services all count into it,
// so it sits below them). The runtime and operators increment them; a later /metrics endpoint and
// the dashboard export them (Prometheus text format: `ToPrometheusText`).
//
// Threading: counters are relaxed atomics; registration takes a mutex.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>

namespace caravela {

class Counter {
 public:
  void Add(int64_t n = 1) { v_.fetch_add(n, std::memory_order_relaxed); }
  void Set(int64_t n) { v_.store(n, std::memory_order_relaxed); }
  int64_t value() const { return v_.load(std::memory_order_relaxed); }

 private:
  std::atomic<int64_t> v_{0};
};

class MetricsRegistry {
 public:
  // Returns the counter for `name{labels}`; created on first use; the pointer
  // is stable for the registry's lifetime. `labels` is Prometheus label text,
  // e.g. `op="unique",reason="duplicate"`.
  Counter* Get(const std::string& name, const std::string& labels = "");
  // Value of a counter, 0 if absent.
  int64_t Value(const std::string& name, const std::string& labels = "") const;
  // Prometheus text exposition format (0.0.4): per metric family `# HELP`
  // and `# TYPE` (counter for names ending in `_total`, else gauge), then its
  // series, every name with `prefix`. Names counted in milliseconds (`_ms`)
  // are exported in seconds, the base unit (`_seconds`, value / 1000).
  std::string ToPrometheusText(const std::string& prefix = "") const;
  // name{labels} -> value, sorted.
  std::map<std::string, int64_t> Snapshot() const;

 private:
  mutable std::mutex mu_;
  std::map<std::string, std::unique_ptr<Counter>> counters_;  // key: name{labels}
};

}  // namespace caravela
