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
#include <set>
#include <string>
#include <vector>

namespace caravela {

class Counter {
 public:
  void Add(int64_t n = 1) { v_.fetch_add(n, std::memory_order_relaxed); }
  void Set(int64_t n) { v_.store(n, std::memory_order_relaxed); }
  int64_t value() const { return v_.load(std::memory_order_relaxed); }

 private:
  std::atomic<int64_t> v_{0};
};

// A float counter (amounts: the sum of a field over records). Threading:
// relaxed atomic adds; add once per batch.
class DoubleCounter {
 public:
  void Add(double v) { v_.fetch_add(v, std::memory_order_relaxed); }
  double value() const { return v_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> v_{0};
};

// A Prometheus histogram of integer observations (e.g. milliseconds):
// counts per bucket (inclusive upper bounds, ascending; +Inf implied), their
// sum and count. Threading: relaxed atomics; hot loops observe into a Local
// and add it once per batch.
class Histogram {
 public:
  explicit Histogram(std::vector<int64_t> bounds);
  void Observe(int64_t v) { Add(BucketOf(v), v, 1); }
  // Index of v's bucket (bounds().size() for +Inf).
  size_t BucketOf(int64_t v) const;
  const std::vector<int64_t>& bounds() const { return bounds_; }
  // Per bucket (not cumulative), then +Inf.
  std::vector<int64_t> counts() const;
  int64_t sum() const { return sum_.load(std::memory_order_relaxed); }
  int64_t count() const { return count_.load(std::memory_order_relaxed); }
  // The q-quantile (0 < q < 1) estimated like PromQL's histogram_quantile:
  // linear within the bucket holding it; the last bound when it falls in
  // +Inf; 0 without observations.
  int64_t Quantile(double q) const;

  // Observations of one batch, added with one atomic per non-empty bucket.
  class Local {
   public:
    explicit Local(Histogram* h) : h_(h), counts_(h->bounds().size() + 1, 0) {}
    void Observe(int64_t v) {
      ++counts_[h_->BucketOf(v)];
      sum_ += v;
      ++n_;
    }
    // Adds what was observed to the histogram and starts over.
    void Flush();

   private:
    Histogram* h_;
    std::vector<int64_t> counts_;
    int64_t sum_ = 0;
    int64_t n_ = 0;
  };

 private:
  void Add(size_t bucket, int64_t sum, int64_t n) {
    buckets_[bucket].fetch_add(n, std::memory_order_relaxed);
    sum_.fetch_add(sum, std::memory_order_relaxed);
    count_.fetch_add(n, std::memory_order_relaxed);
  }
  std::vector<int64_t> bounds_;
  std::unique_ptr<std::atomic<int64_t>[]> buckets_;
  std::atomic<int64_t> sum_{0};
  std::atomic<int64_t> count_{0};
};

// Bucket bounds for delays in milliseconds: 10 ms .. 1 day.
const std::vector<int64_t>& DelayBucketsMs();

class MetricsRegistry {
 public:
  MetricsRegistry() = default;
  // A view of `parent` that puts `scope` (label text, e.g.
  // `job_id="a-1",job_name="a"`) before the labels of every series it
  // registers or looks up there: a worker's job part counts into the
  // worker's registry under its job's labels. Its ToPrometheusText is the
  // parent's (every series); its Snapshot has its own series only, without
  // the scope's labels. `parent` outlives the view.
  // The series a view registered leave the parent with the last view that
  // uses them (a job's tasks gone from a worker: no stale series there).
  MetricsRegistry(MetricsRegistry* parent, std::string scope)
      : parent_(parent), scope_(std::move(scope)) {}
  ~MetricsRegistry();
  MetricsRegistry(const MetricsRegistry&) = delete;
  MetricsRegistry& operator=(const MetricsRegistry&) = delete;

  // Returns the counter for `name{labels}`; created on first use; the pointer
  // is stable for the registry's lifetime. `labels` is Prometheus label text,
  // e.g. `op="unique",reason="duplicate"`.
  Counter* Get(const std::string& name, const std::string& labels = "");
  // Returns the histogram `name{labels}`, created with `bounds` on first use
  // (later calls get the existing one, whatever their bounds); stable pointer.
  Histogram* GetHistogram(const std::string& name, const std::string& labels,
                          const std::vector<int64_t>& bounds);
  // Returns the float counter `name{labels}` (exported with full
  // precision); stable pointer.
  DoubleCounter* GetDouble(const std::string& name, const std::string& labels = "");
  double DoubleValue(const std::string& name, const std::string& labels = "") const;
  // For every series `time_name{labels}` (a time in ms, e.g. a watermark or
  // when something last happened), sets `age_name{labels}` to now_ms minus
  // it (at least 0): ages that grow while nothing updates the time, computed
  // when metrics are read. Ages whose time series is gone are dropped.
  void SetAges(const std::string& time_name, const std::string& age_name, int64_t now_ms);
  // The histogram `name{labels}`, or nullptr.
  const Histogram* FindHistogram(const std::string& name, const std::string& labels = "") const;
  // Value of a counter, 0 if absent.
  int64_t Value(const std::string& name, const std::string& labels = "") const;
  // Sum of the counters `name{...}` whose labels start with `labels_prefix`
  // (e.g. every reason of invalid_records_total{source="s",reason=...}).
  int64_t Sum(const std::string& name, const std::string& labels_prefix = "") const;
  // Prometheus text exposition format (0.0.4): per metric family `# HELP`
  // and `# TYPE` (counter for names ending in `_total`, else gauge), then its
  // series, every name with `prefix`. Names counted in milliseconds (`_ms`)
  // are exported in seconds, the base unit (`_seconds`, value / 1000).
  // Histograms export `_bucket{...,le="..."}` (cumulative), `_sum`, `_count`.
  std::string ToPrometheusText(const std::string& prefix = "") const;
  // name{labels} -> value, sorted; a histogram as name_count and name_sum.
  std::map<std::string, int64_t> Snapshot() const;

 private:
  // `labels` under the view's scope.
  std::string Scoped(const std::string& labels) const {
    return labels.empty() ? scope_ : scope_ + "," + labels;
  }

  // The series `key` of `map`, created with `args` on first use; `hold`:
  // one more view holds it. The caller holds mu_.
  template <class T, class... Args>
  T* Slot(std::map<std::string, std::unique_ptr<T>>& map, char kind, const std::string& key,
          bool hold, Args&&... args);
  // A view's lookup: the parent's series `name{scope,labels}` of `map`,
  // held by this view from its first use.
  template <class T, class... Args>
  T* ViewSlot(std::map<std::string, std::unique_ptr<T>> MetricsRegistry::*map, char kind,
              const std::string& name, const std::string& labels, Args&&... args);
  // A view ended: each series it held and no other view holds is dropped.
  void Release(const std::set<std::string>& held);

  MetricsRegistry* parent_ = nullptr;  // a view's: every series lives there
  std::string scope_;
  mutable std::mutex mu_;
  std::set<std::string> held_;          // a view's: kind ('c', 'h', 'd') + key it holds
  std::map<std::string, int> holders_;  // kind + key -> how many views hold it
  std::map<std::string, std::unique_ptr<Counter>> counters_;       // key: name{labels}
  std::map<std::string, std::unique_ptr<Histogram>> histograms_;   // key: name{labels}
  std::map<std::string, std::unique_ptr<DoubleCounter>> doubles_;  // key: name{labels}
};

}  // namespace caravela
