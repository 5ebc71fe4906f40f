#include "bench/nexmark_generator.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>

#include "absl/strings/str_cat.h"
#include "bench/purchase_generator.h"  // Mix64
#include "common/time_util.h"

namespace caravela::bench {
namespace {

// The reference generator's constants (GeneratorConfig, NexmarkConfiguration
// defaults of the Flink harness).
constexpr int64_t kPersonProportion = 1;
constexpr int64_t kAuctionProportion = 3;
constexpr int64_t kTotalProportion = 50;  // + 46 bids
constexpr int64_t kFirstPersonId = 1000;
constexpr int64_t kFirstAuctionId = 1000;
constexpr int64_t kFirstCategoryId = 10;
constexpr int64_t kNumCategories = 5;
constexpr int64_t kNumActivePeople = 1000;
constexpr int64_t kNumInFlightAuctions = 100;
constexpr int64_t kPersonIdLead = 10;
constexpr int64_t kAuctionIdLead = 10;
constexpr int64_t kHotRatio = 100;  // hot sellers/bidders/auctions: 1 in 100 ids
constexpr int64_t kHotAuctionRatio = 2;
constexpr int64_t kHotSellersRatio = 4;
constexpr int64_t kHotBiddersRatio = 4;
constexpr int64_t kHotChannelsRatio = 2;
constexpr int64_t kChannels = 10'000;
constexpr size_t kAvgPersonBytes = 200;
constexpr size_t kAvgAuctionBytes = 500;

constexpr const char* kStates[] = {"AZ", "CA", "ID", "OR", "WA", "WY"};
constexpr const char* kCities[] = {"Phoenix", "Los Angeles", "San Francisco", "Boise", "Portland",
                                   "Bend",    "Redmond",     "Seattle",       "Kent",  "Cheyenne"};
constexpr const char* kFirstNames[] = {"Peter", "Paul",  "Luke",  "John",   "Saul",  "Vicky",
                                       "Kate",  "Julie", "Sarah", "Deiter", "Walter"};
constexpr const char* kLastNames[] = {"Shultz", "Abrams", "Spencer", "White", "Bartels",
                                      "Walton", "Smith",  "Jones",   "Noris"};
constexpr const char* kHotChannels[] = {"Google", "Facebook", "Baidu", "Apple"};

template <typename T, size_t N>
constexpr int64_t Size(const T (&)[N]) {
  return static_cast<int64_t>(N);
}

// The last person id (base 0) at event n: the current one if n is a person.
int64_t LastPerson(int64_t n) {
  int64_t epoch = n / kTotalProportion, offset = n % kTotalProportion;
  if (offset >= kPersonProportion) offset = kPersonProportion - 1;
  return epoch * kPersonProportion + offset;
}

// The last auction id (base 0) at event n: the current one if n is an auction.
int64_t LastAuction(int64_t n) {
  int64_t epoch = n / kTotalProportion, offset = n % kTotalProportion;
  if (offset < kPersonProportion) {
    --epoch;  // a person: the last auction of the previous epoch
    offset = kAuctionProportion - 1;
  } else if (offset >= kPersonProportion + kAuctionProportion) {
    offset = kAuctionProportion - 1;  // a bid: the last auction of this epoch
  } else {
    offset -= kPersonProportion;
  }
  return epoch * kAuctionProportion + offset;
}

void AppendJsonField(std::string* out, const char* name, int64_t v) {
  absl::StrAppend(out, "\"", name, "\":", v, ",");
}
void AppendJsonField(std::string* out, const char* name, std::string_view v) {
  // Generated text needs no escaping.
  absl::StrAppend(out, "\"", name, "\":\"", absl::string_view(v.data(), v.size()), "\",");
}
void AppendJsonTime(std::string* out, const char* name, int64_t ms) {
  absl::StrAppend(out, "\"", name, "\":\"", FormatIso8601(ms), "\",");
}

}  // namespace

NexmarkGenerator::NexmarkGenerator(NexmarkOptions options)
    : options_(options), state_(Mix64(options.seed ^ 0x6e65786d61726bULL)) {
  options_.rate = std::max<int64_t>(options_.rate, 1);
}

uint64_t NexmarkGenerator::Rand() {
  state_ += 0x9e3779b97f4a7c15ULL;
  return Mix64(state_);
}

int64_t NexmarkGenerator::RandBelow(int64_t n) {
  return n <= 1 ? 0 : static_cast<int64_t>(Rand() % static_cast<uint64_t>(n));
}

double NexmarkGenerator::Unit() { return UnitDouble(Rand()); }

int64_t NexmarkGenerator::Price() { return std::llround(std::pow(10.0, Unit() * 6.0) * 100.0); }

void NexmarkGenerator::AppendText(int max_length, std::string* out) {
  int len = 3 + static_cast<int>(RandBelow(max_length - 3));
  std::string s;
  while (len-- > 0) s.push_back(RandBelow(13) == 0 ? ' ' : static_cast<char>('a' + RandBelow(26)));
  const size_t b = s.find_first_not_of(' ');
  const size_t e = s.find_last_not_of(' ');
  if (b != std::string::npos) out->append(s, b, e - b + 1);
}

void NexmarkGenerator::AppendExtra(size_t current, size_t average, std::string* out) {
  // `extra` so that the row averages `average` bytes: its length is the gap
  // +-20 %, lowercase letters.
  if (current >= average) return;
  const auto gap = static_cast<int64_t>(average - current);
  const int64_t delta = std::llround(static_cast<double>(gap) * 0.2);
  int64_t len = gap - delta + (delta == 0 ? 0 : RandBelow(2 * delta));
  while (len-- > 0) out->push_back(static_cast<char>('a' + RandBelow(26)));
}

int64_t NexmarkGenerator::TimeOf(int64_t n) const {
  // n * (1e6 / rate) microseconds, in ms, exactly in integers.
  return options_.base_time_ms +
         static_cast<int64_t>(static_cast<__int128>(n) * 1000 / options_.rate);
}

bool NexmarkGenerator::Next(NexmarkKind* kind, std::string* line) {
  if (next_ >= options_.events) return false;
  const int64_t n = next_++;
  last_time_ = TimeOf(n);
  line->clear();
  const int64_t rem = n % kTotalProportion;
  if (rem < kPersonProportion) {
    *kind = NexmarkKind::kPerson;
    Person(n, line);
  } else if (rem < kPersonProportion + kAuctionProportion) {
    *kind = NexmarkKind::kAuction;
    Auction(n, line);
  } else {
    *kind = NexmarkKind::kBid;
    Bid(n, line);
  }
  return true;
}

namespace {
// A random active person (base 0): among the last kNumActivePeople, plus a
// few leads not created yet.
int64_t ActivePerson(int64_t n, int64_t r) {
  const int64_t people = LastPerson(n) + 1;
  const int64_t active = std::min(people, kNumActivePeople);
  return people - active + r % (active + kPersonIdLead);
}
}  // namespace

void NexmarkGenerator::Person(int64_t n, std::string* line) {
  std::string name = absl::StrCat(kFirstNames[RandBelow(Size(kFirstNames))], " ",
                                  kLastNames[RandBelow(Size(kLastNames))]);
  std::string email;
  AppendText(7, &email);
  email.push_back('@');
  AppendText(5, &email);
  email.append(".com");
  std::string card;
  for (int i = 0; i < 4; ++i) {
    char group[8];
    std::snprintf(group, sizeof group, "%s%04d", i > 0 ? " " : "",
                  static_cast<int>(RandBelow(10000)));
    card.append(group);
  }
  line->push_back('{');
  AppendJsonField(line, "id", LastPerson(n) + kFirstPersonId);
  AppendJsonField(line, "name", name);
  AppendJsonField(line, "emailAddress", email);
  AppendJsonField(line, "creditCard", card);
  AppendJsonField(line, "city", kCities[RandBelow(Size(kCities))]);
  AppendJsonField(line, "state", kStates[RandBelow(Size(kStates))]);
  AppendJsonTime(line, "dateTime", last_time_);
  line->append("\"extra\":\"");
  AppendExtra(line->size() + 2, kAvgPersonBytes, line);
  line->append("\"}");
}

void NexmarkGenerator::Auction(int64_t n, std::string* line) {
  int64_t seller = RandBelow(kHotSellersRatio) > 0
                       ? (LastPerson(n) / kHotRatio) * kHotRatio
                       : ActivePerson(n, static_cast<int64_t>(Rand() >> 1));
  const int64_t category = kFirstCategoryId + RandBelow(kNumCategories);
  const int64_t initial_bid = Price();
  // Lasts on average until kNumInFlightAuctions more auctions exist.
  const int64_t horizon =
      TimeOf(n + kNumInFlightAuctions * kTotalProportion / kAuctionProportion) - last_time_;
  const int64_t expires = last_time_ + 1 + RandBelow(std::max<int64_t>(horizon * 2, 1));
  std::string item, description;
  AppendText(20, &item);
  AppendText(100, &description);
  const int64_t reserve = initial_bid + Price();
  line->push_back('{');
  AppendJsonField(line, "id", LastAuction(n) + kFirstAuctionId);
  AppendJsonField(line, "itemName", item);
  AppendJsonField(line, "description", description);
  AppendJsonField(line, "initialBid", initial_bid);
  AppendJsonField(line, "reserve", reserve);
  AppendJsonTime(line, "dateTime", last_time_);
  AppendJsonTime(line, "expires", expires);
  AppendJsonField(line, "seller", seller + kFirstPersonId);
  AppendJsonField(line, "category", category);
  line->append("\"extra\":\"");
  AppendExtra(line->size() + 2, kAvgAuctionBytes, line);
  line->append("\"}");
}

void NexmarkGenerator::Bid(int64_t n, std::string* line) {
  int64_t auction;
  if (RandBelow(kHotAuctionRatio) > 0) {
    auction = (LastAuction(n) / kHotRatio) * kHotRatio;
  } else {
    const int64_t last = LastAuction(n);
    const int64_t lo = std::max<int64_t>(last - kNumInFlightAuctions, 0);
    auction = lo + RandBelow(last - lo + 1 + kAuctionIdLead);
  }
  const int64_t bidder = RandBelow(kHotBiddersRatio) > 0
                             ? (LastPerson(n) / kHotRatio) * kHotRatio + 1
                             : ActivePerson(n, static_cast<int64_t>(Rand() >> 1));
  const int64_t price = Price();
  std::string channel, url;
  if (RandBelow(kHotChannelsRatio) > 0) {
    const int64_t c = RandBelow(Size(kHotChannels));
    channel = kHotChannels[c];
    url = absl::StrCat("https://www.nexmark.com/", channel, "/item.htm?query=1&channel_id=", c);
  } else {
    // One of kChannels channels, each with its own fixed URL.
    const int64_t c = RandBelow(kChannels);
    channel = absl::StrCat("channel-", c);
    const uint64_t h = Mix64(static_cast<uint64_t>(c));
    std::string path;
    for (int part = 0; part < 3; ++part) {
      path.push_back('/');
      for (int i = 0; i < 5; ++i)
        path.push_back(static_cast<char>('a' + (h >> (part * 20 + i * 4)) % 26));
    }
    url = absl::StrCat("https://www.nexmark.com", path, "/item.htm?query=1&channel_id=", c);
  }
  line->push_back('{');
  AppendJsonField(line, "auction", auction + kFirstAuctionId);
  AppendJsonField(line, "bidder", bidder + kFirstPersonId);
  AppendJsonField(line, "price", price);
  AppendJsonField(line, "channel", channel);
  AppendJsonField(line, "url", url);
  AppendJsonTime(line, "dateTime", last_time_);
  line->append("\"extra\":\"\"}");
}

absl::StatusOr<NexmarkCounts> WriteNexmarkFiles(const NexmarkOptions& options,
                                                const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) {
    return absl::UnavailableError(
        absl::StrCat("cannot create the output directory ", dir, ": ", ec.message()));
  }
  struct Out {
    std::string path;
    std::FILE* f = nullptr;
    std::string buf;
  };
  Out outs[3];
  const char* names[3] = {"persons.jsonl", "auctions.jsonl", "bids.jsonl"};
  auto close_all = [&outs] {
    for (Out& o : outs) {
      if (o.f != nullptr) std::fclose(o.f);
      o.f = nullptr;
    }
  };
  for (int i = 0; i < 3; ++i) {
    outs[i].path = (std::filesystem::path(dir) / names[i]).string();
    outs[i].f = std::fopen(outs[i].path.c_str(), "wb");
    if (outs[i].f == nullptr) {
      const std::string why = std::strerror(errno);
      close_all();
      return absl::UnavailableError(absl::StrCat("cannot write ", outs[i].path, ": ", why));
    }
  }
  auto flush = [](Out& o) {
    const size_t n = std::fwrite(o.buf.data(), 1, o.buf.size(), o.f);
    const bool ok = n == o.buf.size();
    o.buf.clear();
    return ok;
  };
  NexmarkGenerator gen(options);
  NexmarkCounts counts;
  NexmarkKind kind;
  std::string line;
  absl::Status status;
  while (status.ok() && gen.Next(&kind, &line)) {
    const int k = static_cast<int>(kind);
    Out& o = outs[k];
    o.buf.append(line);
    o.buf.push_back('\n');
    const auto bytes = static_cast<int64_t>(line.size()) + 1;
    if (kind == NexmarkKind::kPerson) {
      ++counts.persons;
      counts.person_bytes += bytes;
    } else if (kind == NexmarkKind::kAuction) {
      ++counts.auctions;
      counts.auction_bytes += bytes;
    } else {
      ++counts.bids;
      counts.bid_bytes += bytes;
    }
    if (o.buf.size() >= (1 << 20) && !flush(o)) {
      status =
          absl::UnavailableError(absl::StrCat("cannot write ", o.path, ": ", std::strerror(errno)));
    }
  }
  for (Out& o : outs) {
    if (status.ok() && !flush(o)) {
      status =
          absl::UnavailableError(absl::StrCat("cannot write ", o.path, ": ", std::strerror(errno)));
    }
    if (std::fclose(o.f) != 0 && status.ok()) {
      status =
          absl::UnavailableError(absl::StrCat("cannot write ", o.path, ": ", std::strerror(errno)));
    }
    o.f = nullptr;
  }
  if (!status.ok()) return status;
  return counts;
}

}  // namespace caravela::bench
