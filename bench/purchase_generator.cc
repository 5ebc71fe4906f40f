#include "bench/purchase_generator.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/time_util.h"

namespace caravela::bench {
namespace {

constexpr const char* kCountries[] = {"US", "DE", "GB", "FR", "BR", "PT", "ES", "IT", "NL", "JP",
                                      "IN", "CA", "MX", "AU", "PL", "SE", "BE", "CH", "AT", "IE",
                                      "DK", "NO", "FI", "CZ", "RO", "GR", "HU", "AR", "CL", "CO",
                                      "ZA", "NG", "KE", "EG", "TR", "KR", "SG", "NZ", "TH", "VN"};

// The i-th random draw of purchase `p` (independent of generation order).
uint64_t Draw(uint64_t seed, int64_t p, int i) {
  return Mix64(seed ^ Mix64(static_cast<uint64_t>(p) * 8 + static_cast<uint64_t>(i)));
}

void AppendPadded(uint64_t v, int width, std::string* out) {
  char buf[24];
  int n = std::snprintf(buf, sizeof buf, "%0*llu", width, static_cast<unsigned long long>(v));
  out->append(buf, n);
}

}  // namespace

PurchaseGenerator::PurchaseGenerator(PurchaseStreamOptions options)
    : options_(options), rng_(Mix64(options_.seed)) {
  options_.countries = std::clamp(options_.countries, 1, 40);
  options_.users = std::max(options_.users, 1);
  options_.skus = std::max(options_.skus, 1);
  // Zipf-like country weights (1/rank): a few big markets, a long tail.
  double total = 0;
  for (int c = 0; c < options_.countries; ++c) total += 1.0 / (c + 1);
  double acc = 0;
  for (int c = 0; c < options_.countries; ++c) {
    acc += 1.0 / (c + 1) / total;
    country_cdf_.push_back(acc);
  }
  country_cdf_.back() = 1.0;
}

void PurchaseGenerator::GenerateNext() {
  const int64_t p = next_purchase_++;
  const uint64_t seed = options_.seed;
  const int64_t n = std::max<int64_t>(options_.purchases, 1);
  int64_t jitter = static_cast<int64_t>(Draw(seed, p, 0) % 1000);
  int64_t event_time = options_.start_ms +
                       static_cast<int64_t>(static_cast<__int128>(p) * options_.span_ms / n) +
                       jitter;
  int64_t delay;
  bool late = UnitDouble(Draw(seed, p, 1)) < options_.late_upload_fraction;
  if (late) {
    delay = options_.late_upload_min_ms +
            static_cast<int64_t>(
                UnitDouble(Draw(seed, p, 2)) *
                static_cast<double>(options_.late_upload_max_ms - options_.late_upload_min_ms));
    ++stats_.late_uploads;
  } else {
    // Most deliveries are prompt; a tail reaches max_disorder_ms.
    double u = UnitDouble(Draw(seed, p, 2));
    delay = static_cast<int64_t>(u * u * static_cast<double>(options_.max_disorder_ms));
  }
  Pending first{event_time + delay, next_seq_++, p, event_time, false, false};
  heap_.push(first);
  if (UnitDouble(Draw(seed, p, 3)) < options_.retry_fraction) {
    int64_t retry_delay = 100 + static_cast<int64_t>(UnitDouble(Draw(seed, p, 4)) *
                                                     static_cast<double>(std::max<int64_t>(
                                                         options_.max_retry_delay_ms - 100, 0)));
    heap_.push(Pending{first.delivery + retry_delay, next_seq_++, p, event_time, true, false});
  }
  if (options_.conflict_fraction > 0 && UnitDouble(Draw(seed, p, 8)) < options_.conflict_fraction) {
    int64_t conflict_delay = 1000 + static_cast<int64_t>(Draw(seed, p, 9) % 3'600'000);
    heap_.push(Pending{first.delivery + conflict_delay, next_seq_++, p, event_time, false, true});
  }
}

void PurchaseGenerator::Format(const Pending& pd, std::string* line) {
  const uint64_t seed = options_.seed;
  const int64_t p = pd.purchase;
  uint64_t attrs = Draw(seed, p, 5);
  double cu = UnitDouble(Draw(seed, p, 6));
  int country = static_cast<int>(std::lower_bound(country_cdf_.begin(), country_cdf_.end(), cu) -
                                 country_cdf_.begin());
  country = std::min(country, options_.countries - 1);
  uint64_t user = attrs % static_cast<uint64_t>(options_.users);
  uint64_t sku = (attrs >> 20) % static_cast<uint64_t>(options_.skus);
  uint64_t quantity = 1 + (attrs >> 40) % 4;
  uint64_t cents = 99 + (Draw(seed, p, 7) % 29901) * quantity;
  if (pd.conflict) cents += 100;  // same id, another payload

  line->clear();
  line->append("{\"event_id\":\"evt-");
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx",
                static_cast<unsigned long long>(
                    Mix64(seed * 0x9e3779b97f4a7c15ULL + static_cast<uint64_t>(p))));
  line->append(hex, 16);
  line->append("\",\"user_id\":\"u");
  last_key_.assign("u");
  AppendPadded(user, 7, &last_key_);
  line->append(last_key_, 1, std::string::npos);
  line->append("\",\"country\":\"");
  line->append(kCountries[country]);
  line->append("\",\"sku\":\"sku-");
  AppendPadded(sku, 5, line);
  line->append("\",\"quantity\":");
  line->append(std::to_string(quantity));
  line->append(",\"amount\":");
  line->append(std::to_string(cents / 100));
  line->push_back('.');
  AppendPadded(cents % 100, 2, line);
  line->append(",\"event_time\":\"");
  AppendIso8601(pd.event_time, line);
  line->append("\"}");
}

bool PurchaseGenerator::Next(std::string* line) {
  // Every purchase not generated yet is delivered at or after its event
  // time, which is at least next_event_time: generate until the heap's top
  // is known to be the earliest delivery.
  while (next_purchase_ < options_.purchases) {
    int64_t next_event_time =
        options_.start_ms +
        static_cast<int64_t>(static_cast<__int128>(next_purchase_) * options_.span_ms /
                             std::max<int64_t>(options_.purchases, 1));
    if (!heap_.empty() && heap_.top().delivery < next_event_time) break;
    GenerateNext();
  }
  if (heap_.empty()) return false;
  Pending p = heap_.top();
  heap_.pop();
  Format(p, line);
  last_event_time_ = p.event_time;
  last_delivery_time_ = p.delivery;
  ++stats_.lines;
  if (p.retry) ++stats_.retries;
  if (p.conflict) ++stats_.conflicts;
  stats_.bytes += static_cast<int64_t>(line->size()) + 1;
  return true;
}

absl::StatusOr<PurchaseStreamStats> WritePurchaseFile(const PurchaseStreamOptions& options,
                                                      const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) {
    return absl::UnavailableError(absl::StrCat("cannot write ", path, ": ", std::strerror(errno)));
  }
  PurchaseGenerator gen(options);
  std::string line, buf;
  while (gen.Next(&line)) {
    buf.append(line);
    buf.push_back('\n');
    if (buf.size() >= (1 << 20)) {
      std::fwrite(buf.data(), 1, buf.size(), f);
      buf.clear();
    }
  }
  std::fwrite(buf.data(), 1, buf.size(), f);
  if (std::fclose(f) != 0) {
    return absl::UnavailableError(absl::StrCat("cannot write ", path, ": ", std::strerror(errno)));
  }
  return gen.stats();
}

}  // namespace caravela::bench
