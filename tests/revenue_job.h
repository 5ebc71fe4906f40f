// The revenue job the parallel and cluster tests run (purchases keyed by
// user_id -> dedup by event_id -> hourly revenue by country: two exchanges)
// and how they read its FINAL results back from the file sink's part files
// (header-only).
#pragma once

#include <gtest/gtest.h>

#include <map>
#include <string>

#include "absl/strings/str_cat.h"
#include "bench/purchase_generator.h"
#include "common/json.h"
#include "common/record.h"
#include "tests/test_util.h"

namespace caravela {

// purchases keyed by user_id -> dedup by event_id -> hourly revenue by
// country: two exchanges.
// The purchase stream both tests feed it: retries, conflicts, disorder within
// the watermark's 5 minutes (never late), and 2 % late uploads 20-40 minutes
// late: LATE corrections within the allowed lateness (1 h), never too late,
// whatever the interleaving of partitions (a record `d` behind its
// partition's max is at least `d` behind the watermark, which waits for the
// slowest partition). Whether a record is too late depends on that
// interleaving, so FINAL results are only comparable without such records.
inline bench::PurchaseStreamOptions RevenueStream(uint64_t seed, int64_t purchases) {
  bench::PurchaseStreamOptions o;
  o.seed = seed;
  o.purchases = purchases;
  o.span_ms = 6LL * 3600 * 1000;
  o.retry_fraction = 0.05;
  o.conflict_fraction = 0.01;
  o.max_disorder_ms = 4 * 60'000;
  o.late_upload_fraction = 0.02;
  o.late_upload_min_ms = 20 * 60'000;
  o.late_upload_max_ms = 40 * 60'000;
  o.countries = 8;
  o.users = 5000;
  return o;
}

inline std::string RevenueJob(const std::string& name, const std::string& dir,
                              int64_t checkpoint_ms, const std::string& dedup_retention = "24h") {
  std::string checkpoint =
      checkpoint_ms > 0 ? absl::StrCat("  checkpoint: {interval: ", checkpoint_ms, "ms}\n") : "";
  return absl::StrCat(R"(
apiVersion: caravela/v1
kind: Job
metadata: {name: )",
                      name, R"(}
spec:
)",
                      checkpoint, R"(  sources:
    - name: purchases
      kafka: {topic: purchases, bounded: true}
      key: [user_id]
      event_time: {field: event_time, format: iso8601}
      watermark: {max_out_of_orderness: 5m, idle_timeout: 1m}
  operators:
    - name: unique
      dedup: {from: purchases, id: event_id, retention: )",
                      dedup_retention, R"(}
    - name: revenue
      window:
        from: unique
        tumbling: 1h
        group_by: [country]
        aggregates: [{as: revenue, sum: amount}, {as: orders, count: "*"}]
        allowed_lateness: 1h
  sinks:
    - {from: revenue, file: {path: )",
                      dir, R"(/out/revenue.jsonl}}
    - {from: unique.conflicts, file: {path: )",
                      dir, R"(/out/conflicts.jsonl}}
    - {from: revenue.too_late, file: {path: )",
                      dir, R"(/out/too_late.jsonl}}
  dead_letter: {path: )",
                      dir, R"(/out/dead-letter.jsonl}
)");
}

struct WindowResult {
  std::string text;  // the FINAL record without its revision
  int finals = 0;
};

// Per window key (window_start + country): the FINAL result; checks that
// revisions of a key only increase within the file that holds it.
inline std::map<std::string, WindowResult> FinalResults(const std::string& out_dir) {
  std::map<std::string, WindowResult> results;
  std::map<std::string, int64_t> last_revision;
  JsonDecoder decoder;
  const FieldPath start = FieldPath::Parse("window_start"), country = FieldPath::Parse("country"),
                  revision = FieldPath::Parse("revision"), state = FieldPath::Parse("state"),
                  revenue = FieldPath::Parse("revenue"), orders = FieldPath::Parse("orders");
  for (const std::filesystem::path& file : PartFiles(out_dir, "revenue")) {
    const std::string name = file.filename().string();
    for (const std::string& line : ReadLines(file)) {
      Record r;
      EXPECT_TRUE(decoder.Decode(line, &r).ok()) << line;
      std::string key = std::string(r.GetPath(start).s) + "/" + std::string(r.GetPath(country).s);
      const int64_t rev = r.GetPath(revision).i;
      auto [it, fresh] = last_revision.emplace(name + key, rev);
      if (!fresh) {
        EXPECT_GT(rev, it->second) << "revision went backwards for " << key << " in " << name;
        it->second = rev;
      }
      if (r.GetPath(state).s == "FINAL") {
        std::string json;
        r.GetPath(revenue).AppendJson(&json);
        WindowResult& w = results[key];
        w.text = absl::StrCat("revenue=", json, " orders=", r.GetPath(orders).i);
        ++w.finals;
      }
    }
  }
  return results;
}

// Per window key: the result with the highest revision among `values` (JSON
// window results from a changelog topic or a table), if that one is FINAL
// (a key whose highest revision is not FINAL is listed with text "not FINAL").
inline std::map<std::string, WindowResult> HighestFinals(const std::vector<std::string>& values) {
  JsonDecoder decoder;
  const FieldPath start = FieldPath::Parse("window_start"), country = FieldPath::Parse("country"),
                  revision = FieldPath::Parse("revision"), state = FieldPath::Parse("state"),
                  revenue = FieldPath::Parse("revenue"), orders = FieldPath::Parse("orders");
  std::map<std::string, std::pair<int64_t, WindowResult>> best;
  for (const std::string& v : values) {
    Record r;
    EXPECT_TRUE(decoder.Decode(v, &r).ok()) << v;
    std::string key = std::string(r.GetPath(start).s) + "/" + std::string(r.GetPath(country).s);
    const int64_t rev = r.GetPath(revision).i;
    auto [it, fresh] = best.emplace(key, std::make_pair(rev, WindowResult{}));
    if (!fresh && rev <= it->second.first) continue;
    it->second.first = rev;
    WindowResult& w = it->second.second;
    w.finals = 1;
    if (r.GetPath(state).s != "FINAL") {
      w.text = "not FINAL";
      continue;
    }
    std::string json;
    r.GetPath(revenue).AppendJson(&json);
    w.text = absl::StrCat("revenue=", json, " orders=", r.GetPath(orders).i);
  }
  std::map<std::string, WindowResult> out;
  for (auto& [key, b] : best) out[key] = std::move(b.second);
  return out;
}

// Where a window's revision does not rise from one published value to the
// next in `values` (one partition's order, or any order that keeps each
// key's: a key lives in one partition): "key: r1 then r2", empty if none.
inline std::vector<std::string> RevisionRegressions(const std::vector<std::string>& values) {
  JsonDecoder decoder;
  const FieldPath start = FieldPath::Parse("window_start"), country = FieldPath::Parse("country"),
                  revision = FieldPath::Parse("revision");
  std::map<std::string, int64_t> last;
  std::vector<std::string> out;
  for (const std::string& v : values) {
    Record r;
    if (!decoder.Decode(v, &r).ok()) {
      out.push_back("not JSON: " + v);
      continue;
    }
    const std::string key =
        std::string(r.GetPath(start).s) + "/" + std::string(r.GetPath(country).s);
    const int64_t rev = r.GetPath(revision).i;
    auto [it, fresh] = last.emplace(key, rev);
    if (!fresh && rev <= it->second) {
      out.push_back(absl::StrCat(key, ": ", it->second, " then ", rev));
    }
    it->second = std::max(it->second, rev);
  }
  return out;
}

// Every window of `want` has the same single FINAL result in `got`, and
// `got` has no other window.
inline void ExpectSameFinals(const std::map<std::string, WindowResult>& want,
                             const std::map<std::string, WindowResult>& got) {
  ASSERT_EQ(got.size(), want.size());
  for (const auto& [key, w] : want) {
    auto it = got.find(key);
    ASSERT_NE(it, got.end()) << key;
    EXPECT_EQ(it->second.text, w.text) << key;
    EXPECT_EQ(it->second.finals, 1) << key;
  }
}

}  // namespace caravela
