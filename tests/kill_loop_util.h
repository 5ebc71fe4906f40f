// What the random kill loops (kill_loop_test.cc, parallel_kill_loop_test.cc)
// share (header-only): the binary under test, the generated purchase stream
// and the job reading it, a checkpoint's progress, the parsing of window
// result lines and their revision contract, the random kill moments, and
// failure-message helpers comparing with the reference run.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <random>
#include <regex>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/time_util.h"
#include "tests/test_util.h"
#include "worker/connectors/kafka_test_util.h"

namespace caravela {

// The binary under test (CARAVELA_BINARY, which tests/CMakeLists.txt defines);
// KILL_LOOP_CARAVELA overrides it (e.g. to run the loop against a release
// build).
inline std::string KillLoopBinary() {
  const char* b = std::getenv("KILL_LOOP_CARAVELA");
  return b != nullptr ? b : CARAVELA_BINARY;
}

// The generated purchase stream: records (partition; key: the user_id, or
// none) in produce order, and what dedup must report for it.
struct PurchaseStream {
  std::vector<KafkaTestRecord> records;
  int events = 0;      // distinct event ids
  int duplicates = 0;  // byte-identical copies (retries)
  int conflicts = 0;   // same id, different amount
  int late = 0;        // events delayed by 70-100 min within their partition
};

struct PurchaseStreamOptions {
  uint64_t seed = 0;
  int events = 0;
  int64_t step_ms = 0;  // event i's time: 2026-11-01T00:00:00Z + i * step_ms + 0-2 min
  int partitions = 0;
  // > 0: every event has a user_id (of that many users), the record's key,
  // and a user's events all go to partition user % partitions (as a producer
  // keyed by user would do). 0: no user_id, no key, and each event's
  // partition is drawn at random.
  int users = 0;
};

// `events` purchases, 6 countries, exact decimal amounts. An event's copies
// (retries and conflicting copies) all go to its partition, 5-20 s after it
// in that partition's order; most events are delayed 0-30 s, every 40th (on
// average) by 70-100 min: late, but within the 3 h lateness and the 12 h
// dedup retention of KillLoopJobYaml, and no partition is ever behind
// another by more, so the in-partition disorder bounds what is late.
inline PurchaseStream GeneratePurchases(const PurchaseStreamOptions& o) {
  constexpr int64_t kStart = 1793491200000;  // 2026-11-01T00:00:00Z
  constexpr int64_t kSecond = 1000;
  constexpr int64_t kMinute = 60 * kSecond;
  std::mt19937_64 rng(o.seed);
  const char* countries[] = {"PT", "BR", "AO", "MZ", "CV", "GW"};
  struct Item {
    int64_t order;  // position in the partition: event time + delay
    int seq;
    std::string key;
    std::string json;
  };
  std::vector<std::vector<Item>> parts(o.partitions);
  PurchaseStream s;
  int seq = 0;
  auto json = [&o](int i, int user, const char* country, int cents, int64_t t) {
    const std::string user_id = o.users > 0 ? absl::StrFormat(R"("user_id":"u%05d",)", user) : "";
    return absl::StrFormat(R"({"event_id":"e%06d",%s"country":"%s","amount":%d.%02d,"ts":"%s"})", i,
                           user_id, country, cents / 100, cents % 100, FormatIso8601(t));
  };
  for (int i = 0; i < o.events; ++i) {
    const int64_t t = kStart + int64_t{i} * o.step_ms + static_cast<int64_t>(rng() % (2 * kMinute));
    int64_t delay = static_cast<int64_t>(rng() % (30 * kSecond));
    if (rng() % 40 == 0) {
      delay = 70 * kMinute + static_cast<int64_t>(rng() % (30 * kMinute));
      ++s.late;
    }
    const uint64_t draw = rng();  // the user, or else the partition
    const int user = o.users > 0 ? static_cast<int>(draw % o.users) : 0;
    const int p = o.users > 0 ? user % o.partitions : static_cast<int>(draw % o.partitions);
    const std::string key = o.users > 0 ? absl::StrFormat("u%05d", user) : "";
    const char* country = countries[rng() % 6];
    const int cents = 100 + static_cast<int>(rng() % 25000);
    const std::string first = json(i, user, country, cents, t);
    ++s.events;
    parts[p].push_back({t + delay, seq++, key, first});
    if (rng() % 7 == 0) {  // a retry: the same bytes again
      parts[p].push_back({t + delay + 5 * kSecond, seq++, key, first});
      ++s.duplicates;
    }
    if (rng() % 97 == 0) {  // a conflicting copy: same id and time, another amount
      parts[p].push_back(
          {t + delay + 20 * kSecond, seq++, key, json(i, user, country, cents + 1, t)});
      ++s.conflicts;
    }
  }
  for (auto& items : parts) {
    std::sort(items.begin(), items.end(), [](const Item& a, const Item& b) {
      return a.order != b.order ? a.order < b.order : a.seq < b.seq;
    });
  }
  // Interleaved across partitions (only the order within a partition matters).
  for (size_t k = 0;; ++k) {
    bool any = false;
    for (int p = 0; p < o.partitions; ++p) {
      if (k < parts[p].size()) {
        KafkaTestRecord r;
        r.partition = p;
        r.key = std::move(parts[p][k].key);
        r.value = std::move(parts[p][k].json);
        s.records.push_back(std::move(r));
        any = true;
      }
    }
    if (!any) break;
  }
  return s;
}

// The kill loops' job `name`: the purchases topic of the broker at
// `bootstrap` (bounded; keyed by user_id if `keyed`), dedup by event_id
// (12 h retention), hourly revenue by country (early firings every second,
// 3 h lateness), checkpoints every 100 ms keeping `retain`; file sinks under
// out/ (relative to the job file) for the results and every side output.
inline std::string KillLoopJobYaml(const std::string& name, const std::string& retain,
                                   const std::string& bootstrap, bool keyed) {
  return absl::StrCat(R"(apiVersion: caravela/v1
kind: Job
metadata: {name: )",
                      name, R"(}
spec:
  checkpoint: {interval: 100ms, retain: )",
                      retain, R"(}
  sources:
    - name: purchases
      kafka: {topic: purchases, bootstrap: ")",
                      bootstrap, R"(", bounded: true}
)",
                      keyed ? "      key: [user_id]\n" : "",
                      R"(      event_time: {field: ts, format: iso8601}
      watermark: {max_out_of_orderness: 2m}
  operators:
    - name: unique
      dedup: {from: purchases, id: event_id, retention: 12h}
    - name: revenue
      window:
        from: unique
        tumbling: 1h
        group_by: [country]
        aggregates: [{as: revenue, sum: amount}, {as: orders, count: "*"}]
        early_fire_every: 1s
        allowed_lateness: 3h
  sinks:
    - {from: revenue, file: {path: out/revenue.jsonl}}
    - {from: unique.conflicts, file: {path: out/conflicts.jsonl}}
    - {from: unique.too_late, file: {path: out/dedup_too_late.jsonl}}
    - {from: revenue.too_late, file: {path: out/too_late.jsonl}}
    - {from: purchases.invalid, file: {path: out/invalid.jsonl}}
)");
}

// A checkpoint (-1: none) and the number of input records before its source
// offsets.
struct CheckpointProgress {
  int64_t checkpoint = -1;
  int64_t records = 0;
};

// One line of hourly revenue by country (a file sink's line or a changelog
// record's value).
struct WindowLine {
  std::string key;  // window_start|country
  int64_t revision = -1;
  std::string state;
  std::string normalized;  // the line without its revision
};

inline bool ParseWindowLine(const std::string& line, WindowLine* w) {
  static const std::regex start_re(R"re("window_start":"([^"]+)")re");
  static const std::regex country_re(R"re("country":"([^"]+)")re");
  static const std::regex rev_re(R"re(,?"revision":([0-9]+))re");
  static const std::regex state_re(R"re("state":"([A-Z_]+)")re");
  std::smatch a, b, r, s;
  if (!std::regex_search(line, a, start_re) || !std::regex_search(line, b, country_re) ||
      !std::regex_search(line, r, rev_re) || !std::regex_search(line, s, state_re)) {
    return false;
  }
  w->key = a[1].str() + "|" + b[1].str();
  w->revision = std::stoll(r[1].str());
  w->state = s[1].str();
  w->normalized = r.prefix().str() + r.suffix().str();
  return true;
}

// The revision contract of one output file, checked line by line in file
// order: per window key strictly increasing revisions, no revision
// published twice, at most one ON_TIME, nothing after FINAL.
class RevisionContract {
 public:
  // Checks `w` (parsed from `line`; `where` names the line) against the
  // lines before it; appends what it violates to `errors`.
  void Check(const WindowLine& w, const std::string& where, const std::string& line,
             std::vector<std::string>* errors) {
    if (!seen_.emplace(w.key, w.revision).second) {
      errors->push_back(absl::StrCat(where, ": window ", w.key, " revision ", w.revision,
                                     " published twice: ", line));
    }
    auto it = last_.find(w.key);
    if (it != last_.end() && w.revision <= it->second) {
      errors->push_back(absl::StrCat(where, ": window ", w.key, " revision ", w.revision, " after ",
                                     it->second, ": ", line));
    }
    last_[w.key] = w.revision;
    if (finished_.count(w.key) > 0) {
      errors->push_back(absl::StrCat(where, ": window ", w.key, " published after FINAL: ", line));
    }
    if (w.state == "ON_TIME" && !on_time_.insert(w.key).second) {
      errors->push_back(absl::StrCat(where, ": window ", w.key, " ON_TIME again: ", line));
    }
    if (w.state == "FINAL") finished_.insert(w.key);
  }

 private:
  std::map<std::string, int64_t> last_;
  std::set<std::pair<std::string, int64_t>> seen_;
  std::set<std::string> on_time_, finished_;
};

// The sum of the integer field `field` ("field":N) over `lines`.
inline int64_t SumField(const std::vector<std::string>& lines, const std::string& field) {
  const std::regex re("\"" + field + "\":([0-9]+)");
  int64_t sum = 0;
  for (const std::string& l : lines) {
    std::smatch m;
    if (std::regex_search(l, m, re)) sum += std::stoll(m[1].str());
  }
  return sum;
}

// For a failure message: the lines only in sorted `got` ("only <where>") and
// those only in sorted `want` ("only in the reference").
inline std::string Differences(const std::vector<std::string>& got,
                               const std::vector<std::string>& want, const std::string& where) {
  return absl::StrCat("\n  only ", where, ": ", Missing(got, want),
                      "\n  only in the reference: ", Missing(want, got));
}

// The random kill moments of a loop, drawn from a generator seeded with
// `seed` (the same seed, the same draws).
class KillTiming {
 public:
  explicit KillTiming(uint32_t seed) : rng_(seed) {}

  // Whether the next kill comes during startup: one in five.
  bool DuringStartup() { return rng_() % 5 == 0; }

  // Uniform in [lo, hi] (lo if hi <= lo).
  int64_t Uniform(int64_t lo, int64_t hi) {
    return hi <= lo ? lo : lo + static_cast<int64_t>(rng_() % static_cast<uint32_t>(hi - lo + 1));
  }

  // A kill's delay after the run is ready. Never long enough to finish the
  // rest of the input, `remaining_ms` at the fastest rate seen so far (a
  // lower bound of the real rate, hence the margin): 100-600 ms; and once
  // `late_phase` (enough of the input is checkpointed), short: at most
  // 150 ms, no more progress before the last kill.
  int64_t AfterReady(double remaining_ms, bool late_phase) {
    const int64_t cap = std::min<int64_t>(600, static_cast<int64_t>(0.4 * remaining_ms));
    return late_phase ? Uniform(0, std::min<int64_t>(150, cap))
                      : Uniform(std::min<int64_t>(100, cap / 2), cap);
  }

 private:
  std::mt19937 rng_;
};

}  // namespace caravela
