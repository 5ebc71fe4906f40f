// Deterministic purchase stream for benchmarks and demos.
//
// Generates JSON Lines purchases in *delivery* order from a seed: the same
// options always give the same bytes (a hand-rolled PRNG, no <random>
// distributions, whose output differs between standard libraries).
//
//   {"event_id":"evt-3f9c0d1e2a4b5c6d","user_id":"u0042117","country":"PT",
//    "sku":"sku-00812","quantity":2,"amount":45.98,
//    "event_time":"2026-10-01T10:00:00.123Z"}
//
// What makes it a realistic event-time workload:
//  * event times advance over `span_ms` (evenly, with sub-second jitter);
//  * every purchase is delivered after a random delay in [0, max_disorder_ms],
//    so deliveries are out of event-time order by up to that much;
//  * `late_upload_fraction` of purchases are delivered hours late
//    (a delay in [late_upload_min_ms, late_upload_max_ms]: offline devices);
//  * `retry_fraction` of purchases are delivered a second time, byte-identical,
//    up to `max_retry_delay_ms` after the first copy (producer retries);
//  * `conflict_fraction` of purchases are delivered a second time with the
//    same event_id but another amount (a buggy client: a dedup conflict).
//
// Threading: a generator is a plain value; not synchronized.
#pragma once

#include <cstdint>
#include <queue>
#include <string>
#include <vector>

#include "common/status.h"

namespace caravela::bench {

struct PurchaseStreamOptions {
  uint64_t seed = 42;
  int64_t purchases = 2'000'000;         // distinct purchases (before retries)
  int64_t start_ms = 1790812800000;      // 2026-10-01T00:00:00Z
  int64_t span_ms = 24LL * 3600 * 1000;  // event-time span of the stream
  double retry_fraction = 0.05;
  int64_t max_retry_delay_ms = 120'000;
  double conflict_fraction = 0;
  int64_t max_disorder_ms = 4 * 60'000;
  double late_upload_fraction = 0.001;
  int64_t late_upload_min_ms = 1 * 3600'000;
  int64_t late_upload_max_ms = 6 * 3600'000;
  int countries = 20;  // at most 40
  int users = 200'000;
  int skus = 5'000;
};

// Counts of what a generator produced so far.
struct PurchaseStreamStats {
  int64_t lines = 0;         // lines delivered (purchases + retries)
  int64_t retries = 0;       // byte-identical second copies delivered
  int64_t conflicts = 0;     // same-id copies with another amount delivered
  int64_t late_uploads = 0;  // purchases delivered hours late
  int64_t bytes = 0;         // bytes of all lines, newlines included
};

class PurchaseGenerator {
 public:
  explicit PurchaseGenerator(PurchaseStreamOptions options);

  // Replaces `*line` with the next line (no trailing newline) in delivery
  // order. Returns false when the stream is exhausted.
  bool Next(std::string* line);
  // Event time (epoch ms) of the line last returned by Next().
  int64_t last_event_time() const { return last_event_time_; }
  // Delivery time (epoch ms) of the line last returned by Next(): event time
  // plus the simulated delay; non-decreasing.
  int64_t last_delivery_time() const { return last_delivery_time_; }
  // Partition key of the line last returned (its user_id), for producers.
  const std::string& last_key() const { return last_key_; }
  const PurchaseStreamStats& stats() const { return stats_; }
  const PurchaseStreamOptions& options() const { return options_; }

 private:
  struct Pending {
    int64_t delivery;
    int64_t seq;  // tie-break: generation order
    int64_t purchase;
    int64_t event_time;
    bool retry;
    bool conflict;
    bool operator>(const Pending& o) const {
      return delivery != o.delivery ? delivery > o.delivery : seq > o.seq;
    }
  };
  void GenerateNext();
  void Format(const Pending& p, std::string* line);

  PurchaseStreamOptions options_;
  uint64_t rng_;
  int64_t next_purchase_ = 0;
  int64_t next_seq_ = 0;
  std::priority_queue<Pending, std::vector<Pending>, std::greater<Pending>> heap_;
  std::vector<double> country_cdf_;
  int64_t last_event_time_ = 0;
  int64_t last_delivery_time_ = 0;
  std::string last_key_;
  PurchaseStreamStats stats_;
};

// Writes the whole stream to `path` (one line per purchase delivery).
absl::StatusOr<PurchaseStreamStats> WritePurchaseFile(const PurchaseStreamOptions& options,
                                                      const std::string& path);

// A uniform double in [0, 1) from the top 53 bits of `r`.
inline double UnitDouble(uint64_t r) { return static_cast<double>(r >> 11) * 0x1.0p-53; }

// splitmix64: the generator's mixing function (a bijection on uint64).
inline uint64_t Mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

}  // namespace caravela::bench
