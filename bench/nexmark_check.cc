#include "bench/nexmark_check.h"

#include <algorithm>
#include <exception>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <set>
#include <stdexcept>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/time_util.h"
#include "nlohmann/json.hpp"

namespace caravela::bench {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using Rows = std::vector<std::string>;

constexpr int64_t kWindow = 10'000;  // q7, q8: 10 s tumbling windows
constexpr int64_t kSlide = 2'000;    // q5: 10 s windows sliding by 2 s
constexpr int64_t kGap = 10'000;     // q11: sessions with a 10 s gap

// Epoch ms of an ISO-8601 dateTime.
int64_t Ms(const json& v) {
  const std::string text = v.get<std::string>();
  const std::optional<int64_t> ms = ParseIso8601(text);
  if (!ms.has_value()) throw std::invalid_argument("not an ISO-8601 time: " + text);
  return *ms;
}

// Calls `row` with every line of DIR/FILE, parsed.
absl::Status ForEachEvent(const std::string& dir, const char* file,
                          const std::function<void(const json&)>& row) {
  const fs::path path = fs::path(dir) / file;
  std::ifstream in(path);
  if (!in) {
    return absl::NotFoundError(absl::StrCat("cannot read ", path.string(),
                                            " (`caravela nexmark gen --out DIR` writes it)"));
  }
  int64_t n = 0;
  for (std::string line; std::getline(in, line);) {
    ++n;
    if (line.empty()) continue;
    const json j = json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded()) {
      return absl::DataLossError(absl::StrCat(path.string(), ":", n, ": not a JSON line"));
    }
    row(j);
  }
  return absl::OkStatus();
}

// The text of a top-level number field as written (`"price":1120.472,`).
std::string RawField(const std::string& line, const std::string& name) {
  const std::string key = absl::StrCat("\"", name, "\":");
  const size_t at = line.find(key);
  if (at == std::string::npos) throw std::invalid_argument("no " + name + " in " + line);
  const size_t begin = at + key.size();
  const size_t end = line.find_first_of(",}", begin);
  return line.substr(begin, end == std::string::npos ? std::string::npos : end - begin);
}

// price * 0.908 exactly: the integer price * 908 with three decimals.
std::string EuroPrice(int64_t price) {
  const int64_t milli = price * 908;
  return absl::StrCat(milli / 1000, ".", milli % 1000 / 100, milli % 100 / 10, milli % 10);
}

// q7's `highest` rows in a canonical order when the order is not compared.
json SortedUnless(bool in_order, json rows) {
  if (!in_order) {
    std::sort(rows.begin(), rows.end(),
              [](const json& a, const json& b) { return a.dump() < b.dump(); });
  }
  return rows;
}

// ---- The brute force, one function per query.

absl::StatusOr<Rows> Q0Expected(const std::string& dir) {
  Rows want;
  RETURN_IF_ERROR(ForEachEvent(dir, "bids.jsonl", [&](const json& b) {
    want.push_back(json{{"auction", b.at("auction")},
                        {"bidder", b.at("bidder")},
                        {"price", b.at("price")},
                        {"dateTime", b.at("dateTime")},
                        {"extra", b.at("extra")}}
                       .dump());
  }));
  return want;
}

absl::StatusOr<Rows> Q1Expected(const std::string& dir) {
  Rows want;
  RETURN_IF_ERROR(ForEachEvent(dir, "bids.jsonl", [&](const json& b) {
    want.push_back(json{{"auction", b.at("auction")},
                        {"bidder", b.at("bidder")},
                        {"price", EuroPrice(b.at("price").get<int64_t>())},
                        {"dateTime", b.at("dateTime")},
                        {"extra", b.at("extra")}}
                       .dump());
  }));
  return want;
}

absl::StatusOr<Rows> Q2Expected(const std::string& dir) {
  Rows want;
  RETURN_IF_ERROR(ForEachEvent(dir, "bids.jsonl", [&](const json& b) {
    if (b.at("auction").get<int64_t>() % 123 == 0) {
      want.push_back(json{{"auction", b.at("auction")}, {"price", b.at("price")}}.dump());
    }
  }));
  return want;
}

// q5 and its output: one row per window end, its hot items (sorted dumps).
std::string HotRow(const std::string& window_end, const std::set<std::string>& items) {
  return absl::StrCat("{\"hot\":[", absl::StrJoin(items, ","),
                      "],\"window_end\":", json(window_end).dump(), "}");
}

absl::StatusOr<Rows> Q5Expected(const std::string& dir) {
  // Every 10 s window starting at a multiple of 2 s counts the bids per
  // auction; its hot items are the auctions with the most.
  std::map<int64_t, std::map<int64_t, int64_t>> counts;  // window start -> auction -> bids
  RETURN_IF_ERROR(ForEachEvent(dir, "bids.jsonl", [&](const json& b) {
    const int64_t last = Ms(b.at("dateTime")) / kSlide * kSlide;
    for (int64_t s = last - kWindow + kSlide; s <= last; s += kSlide) {
      ++counts[s][b.at("auction").get<int64_t>()];
    }
  }));
  Rows want;
  for (const auto& [start, per_auction] : counts) {
    int64_t most = 0;
    for (const auto& [a, n] : per_auction) most = std::max(most, n);
    const std::string end = FormatIso8601(start + kWindow);
    std::set<std::string> hot;
    for (const auto& [a, n] : per_auction) {
      if (n != most) continue;
      hot.insert(json{
          {"auction", a}, {"bids", n}, {"window_start", FormatIso8601(start)}, {"window_end", end}}
                     .dump());
    }
    want.push_back(HotRow(end, hot));
  }
  return want;
}

// q7 and its output: one row per 10 s window, its highest bids.
std::string HighestRow(int64_t window, const json& highest) {
  return json{{"window_start", FormatIso8601(window * kWindow)}, {"highest", highest}}.dump();
}

absl::StatusOr<Rows> Q7Expected(const std::string& dir, bool in_order) {
  // Per 10 s window, the maximum price and every bid with it.
  std::map<int64_t, std::pair<int64_t, json>> best;  // window -> (price, bids)
  RETURN_IF_ERROR(ForEachEvent(dir, "bids.jsonl", [&](const json& b) {
    const int64_t w = Ms(b.at("dateTime")) / kWindow;
    const int64_t price = b.at("price").get<int64_t>();
    json row = {{"auction", b.at("auction")},
                {"price", b.at("price")},
                {"bidder", b.at("bidder")},
                {"dateTime", b.at("dateTime")},
                {"extra", b.at("extra")}};
    auto [it, inserted] = best.try_emplace(w, price, json::array({row}));
    if (inserted) return;
    if (price > it->second.first) {
      it->second = {price, json::array({row})};
    } else if (price == it->second.first) {
      it->second.second.push_back(std::move(row));
    }
  }));
  Rows want;
  for (const auto& [w, b] : best) want.push_back(HighestRow(w, SortedUnless(in_order, b.second)));
  return want;
}

absl::StatusOr<Rows> Q8Expected(const std::string& dir) {
  // Every (person, auction) with id == seller whose dateTimes fall into the
  // same 10 s window.
  std::vector<json> person_rows;
  RETURN_IF_ERROR(ForEachEvent(dir, "persons.jsonl", [&](const json& p) {
    person_rows.push_back(
        json{{"id", p.at("id")}, {"name", p.at("name")}, {"t", p.at("dateTime")}});
  }));
  std::multimap<std::pair<int64_t, int64_t>, const json*> persons;  // (id, window) -> person
  for (const json& p : person_rows) {
    persons.emplace(std::make_pair(p.at("id").get<int64_t>(), Ms(p.at("t")) / kWindow), &p);
  }
  Rows want;
  RETURN_IF_ERROR(ForEachEvent(dir, "auctions.jsonl", [&](const json& a) {
    const int64_t w = Ms(a.at("dateTime")) / kWindow;
    auto [b, e] = persons.equal_range({a.at("seller").get<int64_t>(), w});
    for (auto it = b; it != e; ++it) {
      want.push_back(json{{"window_start", FormatIso8601(w * kWindow)},
                          {"window_end", FormatIso8601((w + 1) * kWindow)},
                          {"id", it->second->at("id")},
                          {"name", it->second->at("name")},
                          {"reserve", a.at("reserve")}}
                         .dump());
    }
  }));
  return want;
}

absl::StatusOr<Rows> Q11Expected(const std::string& dir) {
  // Per bidder, bids in time order; a session ends when the next bid is
  // more than 10 s after the last (sessions that touch merge); it spans
  // [first, last + 10 s).
  std::map<int64_t, std::vector<int64_t>> times;
  RETURN_IF_ERROR(ForEachEvent(dir, "bids.jsonl", [&](const json& b) {
    times[b.at("bidder").get<int64_t>()].push_back(Ms(b.at("dateTime")));
  }));
  Rows want;
  for (auto& [bidder, ts] : times) {
    std::sort(ts.begin(), ts.end());
    size_t first = 0;
    for (size_t i = 1; i <= ts.size(); ++i) {
      if (i < ts.size() && ts[i] <= ts[i - 1] + kGap) continue;
      want.push_back(json{{"window_start", FormatIso8601(ts[first])},
                          {"window_end", FormatIso8601(ts[i - 1] + kGap)},
                          {"bidder", bidder},
                          {"bids", static_cast<int64_t>(i - first)}}
                         .dump());
      first = i;
    }
  }
  return want;
}

// ---- The output in the same unit.

Rows OutputRows(const std::string& query, const std::vector<std::string>& lines, bool in_order) {
  Rows got;
  if (query == "q0" || query == "q2" || query == "q8") {
    // Every line.
    for (const std::string& l : lines) got.push_back(json::parse(l).dump());
  } else if (query == "q1") {
    // Every line, its price as written.
    for (const std::string& l : lines) {
      json o = json::parse(l);
      o["price"] = RawField(l, "price");
      got.push_back(o.dump());
    }
  } else if (query == "q5") {
    // One FINAL result per 2 s window, ending where its 10 s window does.
    std::map<std::string, std::set<std::string>> hot;  // window_end -> items
    for (const std::string& l : lines) {
      const json o = json::parse(l);
      if (o.value("state", "") != "FINAL") continue;
      std::set<std::string>& items = hot[o.at("window_end").get<std::string>()];
      for (const json& h : o.at("hot")) items.insert(h.dump());
    }
    for (const auto& [end, items] : hot) got.push_back(HotRow(end, items));
  } else if (query == "q7") {
    // The window's (last) FINAL result.
    std::map<int64_t, json> highest;
    for (const std::string& l : lines) {
      const json o = json::parse(l);
      if (o.value("state", "") == "FINAL")
        highest[Ms(o.at("window_start")) / kWindow] = o.at("highest");
    }
    for (const auto& [w, h] : highest) got.push_back(HighestRow(w, SortedUnless(in_order, h)));
  } else if (query == "q11") {
    // Each FINAL session once, without its revision and state.
    std::set<std::string> sessions;
    for (const std::string& l : lines) {
      json o = json::parse(l);
      if (o.value("state", "") != "FINAL") continue;
      o.erase("revision");
      o.erase("state");
      sessions.insert(o.dump());
    }
    got.assign(sessions.begin(), sessions.end());
  }
  return got;
}

absl::Status UnknownQuery(const std::string& query) {
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown query ", query, " (checked: ", absl::StrJoin(NexmarkCheckedQueries(), ", "), ")"));
}

// A row for a message: at most 200 characters.
std::string Short(const std::string& row) {
  return row.size() <= 200 ? row : absl::StrCat(row.substr(0, 200), "...");
}

// `got` against `want`: as multisets, and when `in_order` also row by row.
NexmarkCheckResult Compare(Rows want, Rows got, bool in_order, const std::string& unit) {
  NexmarkCheckResult r;
  r.unit = unit;
  r.expected = static_cast<int64_t>(want.size());
  r.got = static_cast<int64_t>(got.size());
  std::string order;  // the first row out of place
  if (in_order) {
    size_t i = 0;
    while (i < want.size() && i < got.size() && want[i] == got[i]) ++i;
    if (i < want.size() && i < got.size()) {
      order = absl::StrCat("row ", i + 1, " is ", Short(got[i]), ", expected ", Short(want[i]));
    }
  }
  std::sort(want.begin(), want.end());
  std::sort(got.begin(), got.end());
  Rows missing, unexpected;
  std::set_difference(want.begin(), want.end(), got.begin(), got.end(),
                      std::back_inserter(missing));
  std::set_difference(got.begin(), got.end(), want.begin(), want.end(),
                      std::back_inserter(unexpected));
  r.missing = static_cast<int64_t>(missing.size());
  r.unexpected = static_cast<int64_t>(unexpected.size());
  r.match = missing.empty() && unexpected.empty() && order.empty();
  if (r.match) return r;
  if (missing.empty() && unexpected.empty()) {
    r.detail = absl::StrCat("the expected ", r.expected, " ", unit, " in another order: ", order);
    return r;
  }
  r.detail = absl::StrCat(r.missing, " of ", r.expected, " expected ", unit, " missing, ",
                          r.unexpected, " of ", r.got, " unexpected");
  if (!missing.empty()) absl::StrAppend(&r.detail, "; first missing: ", Short(missing.front()));
  if (!unexpected.empty()) {
    absl::StrAppend(&r.detail, "; first unexpected: ", Short(unexpected.front()));
  }
  return r;
}

}  // namespace

const std::vector<std::string>& NexmarkCheckedQueries() {
  static const std::vector<std::string> queries = {"q0", "q1", "q2", "q5", "q7", "q8", "q11"};
  return queries;
}

std::string NexmarkCheckResult::Verdict() const {
  return match ? "match" : absl::StrCat("mismatch: ", detail);
}

absl::StatusOr<std::vector<std::string>> NexmarkExpectedRows(const std::string& query,
                                                             const std::string& events_dir,
                                                             const NexmarkCheckOptions& options) {
  try {
    if (query == "q0") return Q0Expected(events_dir);
    if (query == "q1") return Q1Expected(events_dir);
    if (query == "q2") return Q2Expected(events_dir);
    if (query == "q5") return Q5Expected(events_dir);
    if (query == "q7") return Q7Expected(events_dir, options.in_order);
    if (query == "q8") return Q8Expected(events_dir);
    if (query == "q11") return Q11Expected(events_dir);
  } catch (const std::exception& e) {
    return absl::DataLossError(
        absl::StrCat(events_dir, ": not the generator's events: ", e.what()));
  }
  return UnknownQuery(query);
}

absl::StatusOr<std::vector<std::string>> NexmarkOutputRows(const std::string& query,
                                                           const std::vector<std::string>& lines,
                                                           const NexmarkCheckOptions& options) {
  const std::vector<std::string>& known = NexmarkCheckedQueries();
  if (std::find(known.begin(), known.end(), query) == known.end()) return UnknownQuery(query);
  try {
    return OutputRows(query, lines, options.in_order);
  } catch (const std::exception& e) {
    return absl::DataLossError(
        absl::StrCat(query, ": an output line is not a result of the query: ", e.what()));
  }
}

absl::StatusOr<std::vector<std::string>> ReadSinkOutput(const std::string& path) {
  const fs::path p(path);
  std::vector<std::string> files;
  std::error_code ec;
  if (fs::is_regular_file(p, ec)) files.push_back(path);
  const std::string prefix = p.stem().string() + ".part-";
  const std::string ext = p.extension().string();
  const fs::path dir = p.has_parent_path() ? p.parent_path() : fs::path(".");
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (absl::StartsWith(name, prefix) && absl::EndsWith(name, ext) &&
        !absl::StrContains(name, ".pending")) {
      files.push_back(e.path().string());
    }
  }
  if (files.empty()) {
    return absl::NotFoundError(
        absl::StrCat("no output: neither ", path, " nor its part files exist; has the query run?"));
  }
  std::sort(files.begin(), files.end());
  std::vector<std::string> lines;
  for (const std::string& f : files) {
    std::ifstream in(f);
    if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", f));
    for (std::string line; std::getline(in, line);) {
      if (!line.empty()) lines.push_back(std::move(line));
    }
  }
  return lines;
}

absl::StatusOr<NexmarkCheckResult> CheckNexmarkQuery(const std::string& query,
                                                     const std::string& events_dir,
                                                     const std::string& output,
                                                     const NexmarkCheckOptions& options) {
  ASSIGN_OR_RETURN(const std::vector<std::string> lines, ReadSinkOutput(output));
  ASSIGN_OR_RETURN(std::vector<std::string> got, NexmarkOutputRows(query, lines, options));
  ASSIGN_OR_RETURN(std::vector<std::string> want, NexmarkExpectedRows(query, events_dir, options));
  // Lines are compared in order where the query keeps it; windows and
  // sessions come sorted from both sides.
  const bool lines_in_order = options.in_order && (query == "q0" || query == "q1" || query == "q2");
  const char* unit = query == "q5" || query == "q7" ? "windows"
                     : query == "q11"               ? "sessions"
                                                    : "lines";
  return Compare(std::move(want), std::move(got), lines_in_order, unit);
}

}  // namespace caravela::bench
