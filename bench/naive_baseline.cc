// naive_baseline: the job of bench (a) written the obvious way, as a yardstick
// for the engine: read JSON Lines, parse each line with simdjson (DOM), drop
// repeated event_ids with a std::unordered_set<std::string>, and sum amount /
// count per (country, hour) in a std::unordered_map; print the totals at the
// end. One thread, everything in memory, no watermarks, no lateness, no
// revisions, no state backend, no side outputs: a lower bound on the work, not
// an equivalent program.
//
//   naive_baseline --input /tmp/purchases.jsonl [--out /tmp/naive.jsonl]
#include <cstdio>
#include <cstring>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "bench/bench_util.h"
#include "common/time_util.h"
#include "simdjson.h"

namespace {

struct Totals {
  double amount = 0;
  long long count = 0;
};

}  // namespace

int main(int argc, char** argv) {
  caravela::bench::Flags flags(argc, argv);
  std::string input = flags.Str("input");
  std::string out_path = flags.Str("out", "/dev/null");
  if (input.empty()) {
    std::fprintf(stderr, "usage: naive_baseline --input FILE [--out FILE]\n");
    return 2;
  }
  double t0 = caravela::bench::NowSeconds();
  std::FILE* f = std::fopen(input.c_str(), "rb");
  if (f == nullptr) {
    std::perror(input.c_str());
    return 1;
  }
  simdjson::dom::parser parser;
  std::unordered_set<std::string> seen;
  std::unordered_map<std::string, Totals> totals;  // country + '\0' + hour start
  long long lines = 0, duplicates = 0, bad = 0;
  std::vector<char> buf(1 << 20);
  std::string carry;
  auto handle = [&](const char* p, size_t n) {
    if (n == 0) return;
    ++lines;
    simdjson::dom::element doc;
    if (parser.parse(p, n).get(doc)) {
      ++bad;
      return;
    }
    std::string_view id, country, ts;
    double amount = 0;
    if (doc["event_id"].get(id) || doc["country"].get(country) || doc["event_time"].get(ts) ||
        doc["amount"].get(amount)) {
      ++bad;
      return;
    }
    if (!seen.emplace(id).second) {
      ++duplicates;
      return;
    }
    auto t = caravela::ParseIso8601(ts);
    if (!t) {
      ++bad;
      return;
    }
    std::string key(country);
    key.push_back('\0');
    key += std::to_string(caravela::FloorDiv(*t, 3600'000) * 3600'000);
    Totals& tot = totals[key];
    tot.amount += amount;
    ++tot.count;
  };
  for (;;) {
    size_t n = std::fread(buf.data(), 1, buf.size(), f);
    if (n == 0) break;
    size_t start = 0;
    for (size_t i = 0; i < n; ++i) {
      if (buf[i] != '\n') continue;
      if (!carry.empty()) {
        carry.append(buf.data() + start, i - start);
        handle(carry.data(), carry.size());
        carry.clear();
      } else {
        handle(buf.data() + start, i - start);
      }
      start = i + 1;
    }
    carry.append(buf.data() + start, n - start);
  }
  handle(carry.data(), carry.size());
  std::fclose(f);
  std::FILE* out = std::fopen(out_path.c_str(), "wb");
  for (const auto& [key, tot] : totals) {
    std::fprintf(out, "{\"country\":\"%s\",\"window_start\":%s,\"revenue\":%.2f,\"orders\":%lld}\n",
                 key.c_str(), key.c_str() + std::strlen(key.c_str()) + 1, tot.amount, tot.count);
  }
  std::fclose(out);
  double secs = caravela::bench::NowSeconds() - t0;
  caravela::bench::PrintResult("naive_baseline", lines, secs,
                               "duplicates=" + std::to_string(duplicates) + " windows=" +
                                   std::to_string(totals.size()) + " bad=" + std::to_string(bad),
                               caravela::bench::ThreadCpuSeconds());
  return 0;
}
