// A small purchase stream, and the job over it, for the sink and storage
// end-to-end tests: `n`
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
#include <string>

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

// The job both tests run over it (job name `name`): dedup by event_id,
// revenue and orders per country and hour with EARLY fires every minute and
// 30 minutes of lateness, a file sink out/revenue.jsonl, checkpoints every
// 10 minutes into `storage` (empty: the default), plus `extra_sink` (one
// line of YAML, e.g. "    - {from: revenue, clickhouse: {...}}\n").
inline std::string PurchasesRevenueJob(const std::string& name, const std::string& storage,
                                       const std::string& extra_sink = "") {
  return absl::StrCat("apiVersion: caravela/v1\nkind: Job\nmetadata: {name: ", name,
                      "}\nspec:\n  checkpoint: {interval: 10m, retain: 2",
                      storage.empty() ? "" : absl::StrCat(", storage: \"", storage, "\""), R"(}
  sources:
    - name: purchases
      file: {path: input.jsonl, arrival_field: arrival}
      event_time: {field: event_time, format: iso8601}
      watermark: {max_out_of_orderness: 5m}
  operators:
    - name: unique
      dedup: {from: purchases, id: event_id, retention: 24h}
    - name: revenue
      window:
        from: unique
        tumbling: 1h
        group_by: [country]
        aggregates: [{as: revenue, sum: amount}, {as: orders, count: "*"}]
        early_fire_every: 1m
        allowed_lateness: 30m
  sinks:
    - {from: revenue, file: {path: out/revenue.jsonl}}
)",
                      extra_sink, "  dead_letter: {path: out/dead-letter.jsonl}\n");
}

}  // namespace caravela
