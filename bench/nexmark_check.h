// The brute-force answers of the Nexmark queries of bench/nexmark/ (q0, q1,
// q2, q5, q7, q8, q11), computed with plain loops over the generated event
// files (DIR/persons.jsonl, auctions.jsonl, bids.jsonl, `caravela nexmark
// gen`), independently of the operators, and the comparison of a query's
// output with them (issue 53). `caravela nexmark check`, scripts/nexmark and
// tests/nexmark_test.cc use it.
//
// What is compared, per query (each a "row" of the counts below):
//  * q0, q1, q2: every output line with every expected one (q1's price as
//    the exact text the sink wrote: 1234 * 0.908 is `1120.472`);
//  * q5: per window, the hot items of its FINAL results (their union, as a
//    set) with the auctions that have the most bids in that 10 s window;
//  * q7: per 10 s window, the `highest` of its (last) FINAL result with the
//    bids of the highest price;
//  * q8: every output line with every (person, auction) pair of one window;
//  * q11: the FINAL sessions (without revision and state; each once) with
//    the sessions of each bidder's bids.
// Rows are JSON texts with sorted keys; lines are compared as multisets and
// windows and sessions as sets, so the order of part files and partitions
// does not matter, unless `in_order` asks for the events' order.
//
// Threading: functions without shared state.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

namespace caravela::bench {

// The queries with a brute force, in number order.
const std::vector<std::string>& NexmarkCheckedQueries();

struct NexmarkCheckOptions {
  // The output was written by one task reading the event files in order
  // (`caravela run` from files): q0-q2's lines and q7's tied bids must also
  // come in the events' order. Otherwise (Kafka partitions, a cluster's
  // tasks) only what is there counts, not its order.
  bool in_order = false;
};

struct NexmarkCheckResult {
  bool match = false;
  int64_t expected = 0;    // rows of the brute force
  int64_t got = 0;         // rows of the output
  int64_t missing = 0;     // expected rows not in the output
  int64_t unexpected = 0;  // output rows not expected
  std::string unit;        // what a row is: "lines", "windows" or "sessions"
  std::string detail;      // empty on a match, else the first differences

  // "match" or "mismatch: <detail>".
  std::string Verdict() const;
};

// The brute-force rows of `query` over the event files in `events_dir`.
// InvalidArgument for a query without one; NotFound/DataLoss for missing or
// unreadable event files.
absl::StatusOr<std::vector<std::string>> NexmarkExpectedRows(const std::string& query,
                                                             const std::string& events_dir,
                                                             const NexmarkCheckOptions& options);

// The rows of `query`'s output lines (as its file sink wrote them), in the
// unit NexmarkExpectedRows gives. DataLoss for a line that is not JSON.
absl::StatusOr<std::vector<std::string>> NexmarkOutputRows(const std::string& query,
                                                           const std::vector<std::string>& lines,
                                                           const NexmarkCheckOptions& options);

// The lines of a file sink's output `path` (out/q5.jsonl): the file and its
// part files (out/q5.part-N.jsonl, not pending ones), in name order.
// NotFound if there are none.
absl::StatusOr<std::vector<std::string>> ReadSinkOutput(const std::string& path);

// Compares `query`'s output (ReadSinkOutput(output)) with its brute force.
absl::StatusOr<NexmarkCheckResult> CheckNexmarkQuery(const std::string& query,
                                                     const std::string& events_dir,
                                                     const std::string& output,
                                                     const NexmarkCheckOptions& options = {});

}  // namespace caravela::bench
