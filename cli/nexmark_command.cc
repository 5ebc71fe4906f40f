// `caravela nexmark gen`: the Nexmark events of the benchmark (issue 12;
// bench/nexmark_generator.h) into JSON Lines files and, with --kafka, into
// topics nexmark-person, nexmark-auction and nexmark-bid. Exit codes: 0 ok,
// 1 failure, 2 usage.
// `caravela nexmark check`: a query's output against its brute force over
// those files (bench/nexmark_check.h). Exit codes: 0 match, 3 mismatch,
// 1 failure (files missing or unreadable), 2 usage.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "bench/nexmark_check.h"
#include "bench/nexmark_generator.h"
#include "cli/commands.h"
#include "common/time_util.h"
#include "nlohmann/json.hpp"
#include "worker/connectors/kafka_sink.h"

namespace caravela {
namespace {

struct NexmarkFlags {
  int64_t events = 1'000'000;
  std::string out;
  uint64_t seed = 1;
  int64_t rate = 10'000'000;
  std::string base_time = "2026-01-01T00:00:00Z";
  std::string kafka;
};

struct CheckFlags {
  std::string query;
  std::string events;
  std::string output;
  bool in_order = false;
  bool json = false;
};

// Produces the files' lines to nexmark-person|auction|bid on `bootstrap`.
absl::Status ProduceToKafka(const std::string& bootstrap, const std::string& dir) {
  const std::pair<const char*, const char*> files[] = {{"persons.jsonl", "nexmark-person"},
                                                       {"auctions.jsonl", "nexmark-auction"},
                                                       {"bids.jsonl", "nexmark-bid"}};
  for (const auto& [file, topic] : files) {
    KafkaSinkOptions o;
    o.bootstrap = bootstrap;
    o.topic = topic;
    o.mode = KafkaSinkOptions::Mode::kChangelog;
    KafkaSink sink(o);
    RETURN_IF_ERROR(sink.Open());
    std::ifstream in(std::filesystem::path(dir) / file);
    std::string line;
    int64_t n = 0;
    while (std::getline(in, line)) {
      // Keyed by the record's number: the partitioner's hash spreads them
      // evenly (an empty key would hash every record to one partition).
      RETURN_IF_ERROR(sink.Write(std::to_string(n), line));
      if (++n % 100'000 == 0) RETURN_IF_ERROR(sink.Flush());
    }
    RETURN_IF_ERROR(sink.Close());
    std::fprintf(stderr, "nexmark: %lld records to %s on %s\n", static_cast<long long>(n), topic,
                 bootstrap.c_str());
  }
  return absl::OkStatus();
}

int RunGen(const NexmarkFlags& f) {
  if (f.events < 1) {
    std::fprintf(stderr, "error: --events %lld: generate at least 1 event\n",
                 static_cast<long long>(f.events));
    return 2;
  }
  if (f.rate < 1) {
    std::fprintf(stderr, "error: --rate %lld: the event rate must be at least 1 event/s\n",
                 static_cast<long long>(f.rate));
    return 2;
  }
  bench::NexmarkOptions o;
  o.events = f.events;
  o.seed = f.seed;
  o.rate = f.rate;
  std::optional<int64_t> base = ParseIso8601(f.base_time);
  if (!base.has_value()) {
    std::fprintf(stderr, "error: --base-time %s: not an ISO-8601 time (2026-01-01T00:00:00Z)\n",
                 f.base_time.c_str());
    return 2;
  }
  o.base_time_ms = *base;
  const auto t0 = std::chrono::steady_clock::now();
  absl::StatusOr<bench::NexmarkCounts> counts = bench::WriteNexmarkFiles(o, f.out);
  if (!counts.ok()) {
    std::fprintf(stderr, "error: %s\n", std::string(counts.status().message()).c_str());
    return 1;
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  auto avg = [](int64_t bytes, int64_t n) { return n == 0 ? 0.0 : static_cast<double>(bytes) / n; };
  std::printf(
      "nexmark: %lld events in %.1f s into %s: %lld persons (%.0f B/row), %lld auctions (%.0f "
      "B/row), %lld bids (%.0f B/row)\n",
      static_cast<long long>(f.events), secs, f.out.c_str(),
      static_cast<long long>(counts->persons), avg(counts->person_bytes, counts->persons),
      static_cast<long long>(counts->auctions), avg(counts->auction_bytes, counts->auctions),
      static_cast<long long>(counts->bids), avg(counts->bid_bytes, counts->bids));
  if (!f.kafka.empty()) {
    if (absl::Status st = ProduceToKafka(f.kafka, f.out); !st.ok()) {
      std::fprintf(stderr, "error: --kafka %s: %s\n", f.kafka.c_str(),
                   std::string(st.message()).c_str());
      return 1;
    }
  }
  return 0;
}

int RunCheck(const CheckFlags& f) {
  const std::vector<std::string>& known = bench::NexmarkCheckedQueries();
  if (std::find(known.begin(), known.end(), f.query) == known.end()) {
    std::fprintf(stderr, "error: --query %s: unknown query (checked: %s)\n", f.query.c_str(),
                 absl::StrJoin(known, ", ").c_str());
    return 2;
  }
  bench::NexmarkCheckOptions o;
  o.in_order = f.in_order;
  absl::StatusOr<bench::NexmarkCheckResult> r =
      bench::CheckNexmarkQuery(f.query, f.events, f.output, o);
  if (!r.ok()) {
    std::fprintf(stderr, "error: %s\n", std::string(r.status().message()).c_str());
    return 1;
  }
  if (f.json) {
    const nlohmann::json j = {{"query", f.query},        {"verdict", r->Verdict()},
                              {"match", r->match},       {"unit", r->unit},
                              {"expected", r->expected}, {"got", r->got},
                              {"missing", r->missing},   {"unexpected", r->unexpected}};
    std::printf("%s\n", j.dump().c_str());
  } else if (r->match) {
    std::printf("%s: match (%lld %s)\n", f.query.c_str(), static_cast<long long>(r->expected),
                r->unit.c_str());
  } else {
    std::printf("%s: %s\n", f.query.c_str(), r->Verdict().c_str());
  }
  return r->match ? 0 : 3;
}

}  // namespace

Command AddNexmarkCommand(CLI::App& app) {
  auto f = std::make_shared<NexmarkFlags>();
  CLI::App* nexmark =
      app.add_subcommand("nexmark", "The Nexmark benchmark's events (see scripts/nexmark)");
  nexmark->require_subcommand(1);
  CLI::App* gen = nexmark->add_subcommand(
      "gen",
      "Generate Nexmark events (persons, auctions, bids: the reference generator's model,\n"
      "deterministic by seed) into OUT/persons.jsonl, OUT/auctions.jsonl, OUT/bids.jsonl,\n"
      "each in generation order; dateTime advances by 1/RATE s per event.");
  gen->add_option("--events", f->events, "Events to generate (all kinds)")->capture_default_str();
  gen->add_option("--out", f->out, "Output directory (created)")->required();
  gen->add_option("--seed", f->seed, "Random seed")->capture_default_str();
  gen->add_option("--rate", f->rate, "Events per second of event time")->capture_default_str();
  gen->add_option("--base-time", f->base_time, "Event time of the first event (ISO-8601)")
      ->capture_default_str();
  gen->add_option("--kafka", f->kafka,
                  "Also produce the events to topics nexmark-person|auction|bid on this "
                  "bootstrap address");

  auto c = std::make_shared<CheckFlags>();
  CLI::App* check = nexmark->add_subcommand(
      "check",
      "Compare a query's output with its brute force over the events in EVENTS (plain\n"
      "loops over the files: bench/nexmark_check.h): OUTPUT and its part files\n"
      "(OUTPUT's stem.part-N.jsonl), the FINAL results of windowed queries. Prints\n"
      "the verdict; exit 0 match, 3 mismatch, 1 files missing or unreadable.");
  check
      ->add_option("--query", c->query, "The query of bench/nexmark/ (q0, q1, q2, q5, q7, q8, q11)")
      ->required();
  check->add_option("--events", c->events, "The directory `nexmark gen --out` wrote")->required();
  check->add_option("--output", c->output, "The query's file sink path (out/q5.jsonl)")->required();
  check->add_flag("--in-order", c->in_order,
                  "The output was written by one task reading the files in order (caravela\n"
                  "run): lines (q0-q2) and tied bids (q7) must also be in the events' order");
  check->add_flag("--json", c->json,
                  "Print the verdict as one JSON object (query, verdict, match, unit,\n"
                  "expected, got, missing, unexpected)");
  return {nexmark, [f, c, gen, check] { return *gen ? RunGen(*f) : RunCheck(*c); }};
}

}  // namespace caravela
