// Nexmark events (persons, auctions, bids) for the field's benchmark (issue
// 12), reimplementing the event model of the reference generator (the
// nexmark/nexmark Flink harness, itself from Apache Beam):
//
//  * event n (0, 1, ...) is a person when n % 50 == 0, an auction when
//    n % 50 is 1..3, a bid otherwise (proportions 1 : 3 : 46);
//  * its event time is base_time + n * 1e6 / rate microseconds (in ms;
//    rate 10M/s as in the Flink harness: 10,000 events per millisecond);
//  * ids: persons and auctions are numbered from 1000 in generation order;
//    a bid goes to a "hot" auction (the first of the last 100 auctions) with
//    probability 1/2 (hot_auction_ratio 2) and to a random in-flight auction
//    (among the last 100, plus 10 not created yet) otherwise; its bidder is
//    a hot bidder (the second of the last 100 persons) with probability 3/4,
//    else a random active person (among the last 1000, plus 10 leads); an
//    auction's seller is a hot seller (the first of the last 100 persons)
//    with probability 3/4, else a random active person;
//  * prices are round(10^(6u) * 100) cents (u uniform in [0, 1)); reserve =
//    initial bid + another price; an auction expires a random time (average:
//    the time until 100 more auctions exist) after it starts; category is one
//    of 10..14;
//  * strings as in the reference (names, emails, cities, states from its
//    lists; random lowercase text with spaces for item names and
//    descriptions); bids carry a channel and URL (half of them one of 4 hot
//    channels); `extra` pads each row so the JSON lines average about 200
//    (persons) and 500 (auctions) bytes; bids, whose channel, URL and
//    ISO-8601 time alone exceed the reference's 100 bytes, get no padding
//    (about 194 bytes).
//
// Deviations from the reference (docs/benchmarks.md "Nexmark"): a seeded
// splitmix64 stream instead of java.util.Random, so the same seed gives the
// same bytes on every platform but not the reference's exact values; the
// base time is fixed (2026-01-01T00:00:00Z by default) instead of the wall
// clock; event times are strictly in generation order (the reference's
// out-of-order groups are off by default there too); row sizes are JSON
// bytes, not the reference's "idealized" sizes.
//
// Threading: a generator is a plain value; not synchronized.
#pragma once

#include <cstdint>
#include <string>

#include "common/status.h"

namespace caravela::bench {

struct NexmarkOptions {
  uint64_t seed = 1;
  int64_t events = 1'000'000;
  int64_t rate = 10'000'000;             // events per second of event time
  int64_t base_time_ms = 1767225600000;  // 2026-01-01T00:00:00Z
};

enum class NexmarkKind { kPerson, kAuction, kBid };

// Counts and bytes (newlines included) per kind.
struct NexmarkCounts {
  int64_t persons = 0, auctions = 0, bids = 0;
  int64_t person_bytes = 0, auction_bytes = 0, bid_bytes = 0;
};

class NexmarkGenerator {
 public:
  explicit NexmarkGenerator(NexmarkOptions options);

  // Replaces `*line` with the next event's JSON object (no newline) and sets
  // `*kind`. Returns false after `events` events.
  bool Next(NexmarkKind* kind, std::string* line);
  // Event time (epoch ms) of the event last returned.
  int64_t last_event_time() const { return last_time_; }

 private:
  uint64_t Rand();
  int64_t RandBelow(int64_t n);  // uniform in [0, n), n >= 1
  double Unit();                 // uniform in [0, 1)
  int64_t Price();
  void AppendText(int max_length, std::string* out);  // 3..max_length-1 chars, trimmed
  void AppendExtra(size_t current, size_t average, std::string* out);
  int64_t TimeOf(int64_t n) const;

  void Person(int64_t n, std::string* line);
  void Auction(int64_t n, std::string* line);
  void Bid(int64_t n, std::string* line);

  NexmarkOptions options_;
  uint64_t state_;
  int64_t next_ = 0;
  int64_t last_time_ = 0;
};

// Writes DIR/persons.jsonl, DIR/auctions.jsonl and DIR/bids.jsonl (each in
// generation order; DIR is created). Unavailable naming the path that could
// not be written.
absl::StatusOr<NexmarkCounts> WriteNexmarkFiles(const NexmarkOptions& options,
                                                const std::string& dir);

}  // namespace caravela::bench
