// A small purchase stream for the sink and storage end-to-end tests: `n`
// purchases in 3 countries arriving every 7 s from 2026-10-01T00:00:00Z, up
// to 20 minutes late (EARLY, ON_TIME and LATE revisions of an hourly window),
// every 13th retried, every 97th 95 minutes late (too late for a 30 minute
// lateness). Deterministic by `seed`. Lines: {event_id, country, amount,
// event_time (ISO-8601), arrival (epoch ms)}.
#pragma once

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <random>

#include "absl/strings/str_cat.h"
#include "common/time_util.h"
#include "nlohmann/json.hpp"

namespace caravela {

inline void WritePurchases(const std::filesystem::path& path, int n, uint32_t seed = 7) {
  constexpr int64_t kBase = 1790812800000;  // 2026-10-01T00:00:00Z
  constexpr int64_t kMin = 60'000;
  std::mt19937 rng(seed);
  std::ofstream out(path);
  const char* countries[] = {"PT", "ES", "FR"};
  for (int i = 0; i < n; ++i) {
    const int64_t arrival = kBase + i * 7'000;
    int64_t delay = static_cast<int64_t>(rng() % 20) * kMin;
    if (i % 97 == 0) delay = 95 * kMin;
    const nlohmann::json p = {{"event_id", absl::StrCat("e", i)},
                              {"country", countries[rng() % 3]},
                              {"amount", static_cast<double>(rng() % 10000) / 100},
                              {"event_time", FormatIso8601(arrival - delay)},
                              {"arrival", arrival}};
    out << p.dump() << "\n";
    if (i % 13 == 0) out << p.dump() << "\n";  // a retry
  }
}

}  // namespace caravela
