// Nexmark (issue 12): the generator's event model, and each query's output
// under `caravela run` and on a cluster against a brute-force computation
// over the same generated rows, written independently of the operators
// (plain loops over the parsed JSON: bench/nexmark_check.h, which
// `caravela nexmark check` and scripts/nexmark use too). Bad input to
// `caravela nexmark gen` and scripts/nexmark gives clear errors, and the
// script's cluster mode writes its JSON with a verdict per query.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "bench/nexmark_check.h"
#include "bench/nexmark_generator.h"
#include "common/time_util.h"
#include "nlohmann/json.hpp"
#include "tests/child_process.h"
#include "tests/test_util.h"
#include "worker/connectors/embedded_broker.h"
#include "worker/connectors/kafka_test_util.h"
#include "worker/testing/status_testing.h"

namespace caravela {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using ::testing::HasSubstr;

constexpr int64_t kEvents = 200'000;
// 2,000 events per second of event time: the 200k events span 100 s, so the
// 10 s windows and sessions of q8 and q11 are many (at the default 10M/s
// they would all fall into one window).
constexpr int64_t kRate = 2'000;

// Runs `command` with stdout and stderr into `out`; the exit code.
int Sh(const std::string& command, const fs::path& out) {
  const int rc = std::system(absl::StrCat(command, " > ", out.string(), " 2>&1").c_str());
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

std::vector<json> Rows(const fs::path& file) {
  std::vector<json> rows;
  for (const std::string& line : ReadLines(file)) rows.push_back(json::parse(line));
  return rows;
}

// The events, generated once for every test (by the CLI, as users do).
class NexmarkTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir("nexmark", "CARAVELA_KEEP_TEST_DIRS", "nexmark test");
    const fs::path& d = dir_->path();
    ASSERT_EQ(Sh(absl::StrCat(CARAVELA_BINARY, " nexmark gen --events ", kEvents, " --rate ", kRate,
                              " --out ", (d / "events").string()),
                 d / "gen.log"),
              0)
        << ReadFile(d / "gen.log");
    bids_ = new std::vector<json>(Rows(d / "events/bids.jsonl"));
  }
  static void TearDownTestSuite() {
    delete bids_;
    delete dir_;
  }
  static fs::path Events() { return dir_->path() / "events"; }

  // Runs bench/nexmark/<q>.yaml over the events; its output lines.
  static std::vector<std::string> RunQuery(const std::string& q) {
    const fs::path yaml = Events() / (q + ".yaml");
    fs::copy_file(fs::path(CARAVELA_SOURCE_DIR) / "bench/nexmark" / (q + ".yaml"), yaml,
                  fs::copy_options::overwrite_existing);
    const fs::path log = dir_->path() / (q + ".log");
    EXPECT_EQ(Sh(absl::StrCat(CARAVELA_BINARY, " run -q ", yaml.string(), " --data-dir ",
                              (dir_->path() / ("data-" + q)).string()),
                 log),
              0)
        << ReadFile(log);
    return ReadLines(Events() / "out" / (q + ".jsonl"));
  }

  // Compares out/<q>.jsonl of RunQuery with the brute force
  // (bench/nexmark_check.h), in the events' order: `caravela run` reads the
  // files in order.
  static bench::NexmarkCheckResult Check(const std::string& q) {
    bench::NexmarkCheckOptions o;
    o.in_order = true;
    absl::StatusOr<bench::NexmarkCheckResult> r = bench::CheckNexmarkQuery(
        q, Events().string(), (Events() / "out" / (q + ".jsonl")).string(), o);
    EXPECT_OK(r.status());
    return r.ok() ? *r : bench::NexmarkCheckResult{};
  }

  static TempDir* dir_;
  static std::vector<json>* bids_;
};
TempDir* NexmarkTest::dir_ = nullptr;
std::vector<json>* NexmarkTest::bids_ = nullptr;

TEST_F(NexmarkTest, GeneratorFollowsTheReferenceModel) {
  const std::vector<json> persons = Rows(Events() / "persons.jsonl");
  const std::vector<json> auctions = Rows(Events() / "auctions.jsonl");
  // Proportions 1 : 3 : 46 of 50.
  EXPECT_EQ(persons.size(), static_cast<size_t>(kEvents / 50));
  EXPECT_EQ(auctions.size(), static_cast<size_t>(kEvents / 50 * 3));
  EXPECT_EQ(bids_->size(), static_cast<size_t>(kEvents / 50 * 46));
  // Ids from 1000 in generation order.
  EXPECT_EQ(persons.front()["id"], 1000);
  EXPECT_EQ(persons.back()["id"], 1000 + kEvents / 50 - 1);
  EXPECT_EQ(auctions.front()["id"], 1000);
  // Row sizes: persons ~200 B, auctions ~500 B (JSON bytes).
  auto average = [](const fs::path& f) {
    const std::vector<std::string> lines = ReadLines(f);
    size_t bytes = 0;
    for (const std::string& l : lines) bytes += l.size() + 1;
    return static_cast<double>(bytes) / static_cast<double>(lines.size());
  };
  EXPECT_NEAR(average(Events() / "persons.jsonl"), 200, 10);
  EXPECT_NEAR(average(Events() / "auctions.jsonl"), 500, 15);
  // 2,000 events/s of event time: event n at base + n / 2 ms; the last
  // bid (event 199,999) 99.9995 s after the first event, in whole ms.
  EXPECT_EQ(persons.front()["dateTime"], "2026-01-01T00:00:00.000Z");
  EXPECT_EQ(bids_->back()["dateTime"], "2026-01-01T00:01:39.999Z");
  // Half of the bids go to hot auctions (ids ending in 00, relative to 1000).
  int64_t hot = 0;
  std::set<int64_t> auction_ids;
  for (const json& a : auctions) auction_ids.insert(a["id"].get<int64_t>());
  int64_t known = 0;
  for (const json& b : *bids_) {
    const int64_t a = b["auction"].get<int64_t>();
    hot += (a - 1000) % 100 == 0 ? 1 : 0;
    known += auction_ids.count(a);
  }
  EXPECT_NEAR(static_cast<double>(hot) / bids_->size(), 0.5, 0.03);
  // Bids name auctions that exist, but for the few "leads" not created yet.
  EXPECT_GT(static_cast<double>(known) / bids_->size(), 0.95);
  // Every field of the model is there.
  for (const char* f :
       {"id", "name", "emailAddress", "creditCard", "city", "state", "dateTime", "extra"}) {
    EXPECT_TRUE(persons[7].contains(f)) << f;
  }
  for (const char* f : {"id", "itemName", "description", "initialBid", "reserve", "dateTime",
                        "expires", "seller", "category", "extra"}) {
    EXPECT_TRUE(auctions[7].contains(f)) << f;
  }
  for (const char* f : {"auction", "bidder", "price", "channel", "url", "dateTime", "extra"}) {
    EXPECT_TRUE((*bids_)[7].contains(f)) << f;
  }
  EXPECT_GE(auctions[7]["reserve"].get<int64_t>(), auctions[7]["initialBid"].get<int64_t>());
}

TEST_F(NexmarkTest, GeneratorIsDeterministicBySeed) {
  bench::NexmarkOptions o;
  o.events = 1000;
  auto lines = [](bench::NexmarkOptions opts) {
    bench::NexmarkGenerator gen(opts);
    bench::NexmarkKind kind;
    std::string line, all;
    while (gen.Next(&kind, &line)) absl::StrAppend(&all, line, "\n");
    return all;
  };
  EXPECT_EQ(lines(o), lines(o));
  bench::NexmarkOptions other = o;
  other.seed = 2;
  EXPECT_NE(lines(o), lines(other));
  // The CLI wrote what the library generates for the same options.
  bench::NexmarkOptions cli;
  cli.events = kEvents;
  cli.rate = kRate;
  bench::NexmarkGenerator gen(cli);
  bench::NexmarkKind kind;
  std::string line;
  ASSERT_TRUE(gen.Next(&kind, &line));
  EXPECT_EQ(kind, bench::NexmarkKind::kPerson);
  EXPECT_EQ(line, ReadLines(Events() / "persons.jsonl").front());
}

TEST_F(NexmarkTest, Q0PassesEveryBidThrough) {
  const std::vector<std::string> out = RunQuery("q0");
  ASSERT_EQ(out.size(), bids_->size());
  const bench::NexmarkCheckResult r = Check("q0");
  EXPECT_TRUE(r.match) << r.detail;
}

TEST_F(NexmarkTest, Q1ConvertsEveryPriceExactly) {
  const std::vector<std::string> out = RunQuery("q1");
  ASSERT_EQ(out.size(), bids_->size());
  // The price as written: the integer price * 908 with three decimals.
  const bench::NexmarkCheckResult r = Check("q1");
  EXPECT_TRUE(r.match) << r.detail;
}

TEST_F(NexmarkTest, Q2SelectsTheBidsOfEvery123rdAuction) {
  RunQuery("q2");
  const bench::NexmarkCheckResult r = Check("q2");
  EXPECT_GT(r.expected, 0);
  EXPECT_TRUE(r.match) << r.detail;
}

TEST_F(NexmarkTest, Q8JoinsPersonsToTheirAuctionsInTheSameWindow) {
  RunQuery("q8");
  // Every (person, auction) with id == seller whose dateTimes fall into the
  // same 10 s window.
  const bench::NexmarkCheckResult r = Check("q8");
  EXPECT_GT(r.expected, 100);
  EXPECT_TRUE(r.match) << r.detail;
}

TEST_F(NexmarkTest, Q5FindsTheHotItemsOfEachSlidingWindow) {
  RunQuery("q5");
  // Per 10 s window sliding by 2 s, the auctions with the most bids: one
  // FINAL result per 2 s window, ending where its 10 s window does.
  const bench::NexmarkCheckResult r = Check("q5");
  EXPECT_GT(r.expected, 40);
  EXPECT_TRUE(r.match) << r.detail;
}

TEST_F(NexmarkTest, Q7KeepsTheHighestBidsOfEachWindow) {
  RunQuery("q7");
  // Per 10 s window, every bid with the maximum price, in the bids' order.
  const bench::NexmarkCheckResult r = Check("q7");
  EXPECT_GT(r.expected, 0);
  EXPECT_TRUE(r.match) << r.detail;
}

TEST_F(NexmarkTest, Q11CountsEachBiddersSessions) {
  RunQuery("q11");
  // Per bidder, sessions of bids at most 10 s apart: the FINAL revisions.
  const bench::NexmarkCheckResult r = Check("q11");
  EXPECT_GT(r.expected, 100);
  EXPECT_TRUE(r.match) << r.detail;
}

// The check finds what a wrong answer gets wrong: a line dropped, a price
// off, two lines swapped, a window's FINAL result missing, bad input.
TEST_F(NexmarkTest, CheckReportsTheFirstDifferences) {
  const fs::path out = dir_->path() / "wrong" / "q.jsonl";
  fs::create_directories(out.parent_path());
  auto check = [&](const std::string& q, const std::vector<std::string>& lines, bool in_order) {
    std::ofstream f(out, std::ios::trunc);
    for (const std::string& l : lines) f << l << "\n";
    f.close();
    bench::NexmarkCheckOptions o;
    o.in_order = in_order;
    return bench::CheckNexmarkQuery(q, Events().string(), out.string(), o);
  };
  std::vector<std::string> q2 = RunQuery("q2");
  ASSERT_GT(q2.size(), 3u);
  auto r = check("q2", q2, true);
  ASSERT_OK(r.status());
  EXPECT_EQ(r->Verdict(), "match");
  // Two different lines swapped: the same lines, in another order.
  const auto other =
      std::find_if(q2.begin(), q2.end(), [&](const std::string& l) { return l != q2[0]; });
  ASSERT_NE(other, q2.end());
  std::iter_swap(q2.begin(), other);
  r = check("q2", q2, true);
  ASSERT_OK(r.status());
  EXPECT_FALSE(r->match);
  EXPECT_THAT(r->Verdict(), HasSubstr("in another order: row 1 is"));
  EXPECT_TRUE(check("q2", q2, false)->match);  // order not asked for
  // A line dropped.
  q2.pop_back();
  r = check("q2", q2, false);
  ASSERT_OK(r.status());
  EXPECT_EQ(r->missing, 1);
  EXPECT_EQ(r->unexpected, 0);
  EXPECT_THAT(r->Verdict(), HasSubstr("mismatch: 1 of "));
  EXPECT_THAT(r->Verdict(), HasSubstr("expected lines missing, 0 of"));
  // A price changed (q1's exact text).
  std::vector<std::string> q1 = RunQuery("q1");
  const size_t at = q1[5].find("\"price\":");
  ASSERT_NE(at, std::string::npos);
  q1[5].insert(at + 8, "1");
  r = check("q1", q1, true);
  ASSERT_OK(r.status());
  EXPECT_EQ(r->missing, 1);
  EXPECT_EQ(r->unexpected, 1);
  EXPECT_THAT(r->detail, HasSubstr("first unexpected: "));
  // A window's FINAL result missing (q7): the window is missing.
  std::vector<std::string> q7 = RunQuery("q7");
  auto final_line = std::find_if(q7.begin(), q7.end(), [](const std::string& l) {
    return l.find("\"state\":\"FINAL\"") != std::string::npos;
  });
  ASSERT_NE(final_line, q7.end());
  q7.erase(final_line);
  r = check("q7", q7, true);
  ASSERT_OK(r.status());
  EXPECT_EQ(r->missing, 1);
  EXPECT_EQ(r->unit, "windows");
  // Not a result, no output, an unknown query.
  EXPECT_EQ(check("q7", {"not json"}, true).status().code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(
      bench::CheckNexmarkQuery("q7", Events().string(), (out.parent_path() / "none.jsonl").string())
          .status()
          .code(),
      absl::StatusCode::kNotFound);
  EXPECT_THAT(check("q3", q2, false).status().message(),
              HasSubstr("unknown query q3 (checked: q0,"));

  // `caravela nexmark check`: exit 0 match, 3 mismatch, 1 no output, 2 usage.
  const std::string cli =
      absl::StrCat(CARAVELA_BINARY, " nexmark check --events ", Events().string());
  const fs::path log = out.parent_path() / "check.log";
  std::ofstream(out, std::ios::trunc) << absl::StrJoin(RunQuery("q2"), "\n") << "\n";
  EXPECT_EQ(Sh(absl::StrCat(cli, " --query q2 --in-order --output ", out.string()), log), 0);
  EXPECT_THAT(ReadFile(log), HasSubstr("q2: match ("));
  std::ofstream(out, std::ios::app) << "{\"auction\":1,\"price\":2}\n";
  EXPECT_EQ(Sh(absl::StrCat(cli, " --query q2 --json --output ", out.string()), log), 3);
  const json verdict = json::parse(ReadFile(log));
  EXPECT_EQ(verdict["unexpected"], 1);
  EXPECT_THAT(verdict["verdict"].get<std::string>(),
              HasSubstr("first unexpected: {\"auction\":1,\"price\":2}"));
  EXPECT_EQ(
      Sh(absl::StrCat(cli, " --query q2 --output ", (out.parent_path() / "none.jsonl").string()),
         log),
      1);
  EXPECT_THAT(ReadFile(log), HasSubstr("no output: neither"));
  EXPECT_EQ(Sh(absl::StrCat(cli, " --query q3 --output ", out.string()), log), 2);
  EXPECT_THAT(ReadFile(log), HasSubstr("--query q3: unknown query (checked: q0, q1,"));
}

// The queries on a cluster (`caravela local --workers 2`, parallelism 2,
// checkpoints every second): the file-reading stage runs one task, the
// joins, windows and top-N behind exchanges two, and each query's output
// (its part files together) is the same set of lines as `caravela run`'s
// and the brute force's answer (in any order). Over both exchanges.
class NexmarkClusterTest : public NexmarkTest, public ::testing::WithParamInterface<const char*> {
 protected:
  void SetUp() override {
    exchange_ = GetParam();
    root_ = dir_->path() / absl::StrCat("cluster-", exchange_);
    shared_ = root_ / "shared";
    fs::create_directories(shared_);
    for (const char* f : {"persons.jsonl", "auctions.jsonl", "bids.jsonl"}) {
      fs::create_hard_link(Events() / f, shared_ / f);
    }
    local_ = std::make_unique<ChildProcess>(
        std::vector<std::string>{CARAVELA_BINARY, "local", "--workers", "2", "--slots", "4",
                                 "--data-dir", (root_ / "local").string(), "--shared-dir",
                                 shared_.string()},
        root_ / "local.log");
    address_ = local_->WaitFor(R"(coordinator=(\S+))", std::chrono::milliseconds(30000));
    ASSERT_FALSE(address_.empty()) << local_->Log();
  }
  void TearDown() override {
    if (local_ != nullptr) local_->Stop(SIGINT, std::chrono::milliseconds(20000));
  }

  // A result line without its revision: a cluster's revisions carry the
  // epoch (1000000001 for revision 1 of epoch 1), so only the rest, state
  // included, is compared.
  static std::string WithoutRevision(const std::string& line) {
    json j = json::parse(line);
    j.erase("revision");
    return j.dump();
  }

  // Runs bench/nexmark/<q>.yaml on the cluster; its output lines, sorted.
  std::vector<std::string> RunOnCluster(const std::string& q) {
    std::string yaml = ReadFile(fs::path(CARAVELA_SOURCE_DIR) / "bench/nexmark" / (q + ".yaml"));
    const std::string spec = "spec:\n";
    yaml.insert(yaml.find(spec) + spec.size(),
                absl::StrCat("  checkpoint: {interval: 1s}\n  exchange: ", exchange_, "\n"));
    const fs::path file = root_ / (q + ".yaml");
    std::ofstream(file) << yaml;
    const std::string at = " --coordinator " + address_;
    CliResult submitted =
        Cli(absl::StrCat("submit ", file.string(), " --parallelism 2", at), root_);
    EXPECT_EQ(submitted.code, 0) << submitted.out;
    const std::string id(absl::StripAsciiWhitespace(submitted.out));
    EXPECT_THAT(WaitForJobEnd(id, at, root_), HasSubstr("FINISHED")) << local_->Log();
    std::vector<std::string> lines;
    for (const auto& f : fs::directory_iterator(shared_ / "out")) {
      const std::string name = f.path().filename().string();
      // q8.jsonl or q8.part-N.jsonl (not pending or fence files).
      if (name.rfind(q + ".", 0) != 0 || f.path().extension() != ".jsonl") continue;
      for (std::string& l : ReadLines(f.path())) lines.push_back(WithoutRevision(l));
    }
    std::sort(lines.begin(), lines.end());
    return lines;
  }

  std::string exchange_;
  fs::path root_, shared_;
  std::unique_ptr<ChildProcess> local_;
  std::string address_;
};

TEST_P(NexmarkClusterTest, QueriesGiveTheSingleProcessAnswer) {
  // Every query of bench/nexmark (q0-q2 have no exchange, but their sources
  // and sinks are split over the workers too).
  for (const std::string q : {"q0", "q1", "q2", "q5", "q7", "q8", "q11"}) {
    // A fresh `caravela run` (the other exchange's test ran it too).
    fs::remove_all(dir_->path() / ("data-" + q));
    fs::remove(Events() / "out" / (q + ".jsonl"));
    std::vector<std::string> want;
    for (const std::string& l : RunQuery(q)) want.push_back(WithoutRevision(l));
    std::sort(want.begin(), want.end());
    ASSERT_FALSE(want.empty()) << q;
    const std::vector<std::string> got = RunOnCluster(q);
    EXPECT_EQ(got.size(), want.size()) << q;
    EXPECT_EQ(Missing(want, got, 5), "0 line(s)") << q;
    EXPECT_EQ(Missing(got, want, 5), "0 line(s)") << q;
    // And the brute force, whatever order the part files hold.
    absl::StatusOr<bench::NexmarkCheckResult> checked =
        bench::CheckNexmarkQuery(q, Events().string(), (shared_ / "out" / (q + ".jsonl")).string());
    ASSERT_TRUE(checked.ok()) << q << ": " << checked.status();
    EXPECT_TRUE(checked->match) << q << ": " << checked->detail;
  }
}

INSTANTIATE_TEST_SUITE_P(Exchanges, NexmarkClusterTest, ::testing::Values("network", "kafka"),
                         [](const ::testing::TestParamInfo<const char*>& info) {
                           return std::string(info.param);
                         });

TEST(NexmarkCliTest, GenProducesTheFilesToKafkaTopics) {
  TempDir tmp("nexmark-kafka", "CARAVELA_KEEP_TEST_DIRS", "nexmark kafka test");
  const fs::path& d = tmp.path();
  auto broker = EmbeddedBroker::Start(0, 4);
  ASSERT_OK(broker.status());
  ASSERT_EQ(Sh(absl::StrCat(CARAVELA_BINARY, " nexmark gen --events 5000 --out ",
                            (d / "events").string(), " --kafka ", (*broker)->bootstrap()),
               d / "gen.log"),
            0)
      << ReadFile(d / "gen.log");
  // Each topic holds its file's lines, spread over its partitions.
  const std::pair<const char*, const char*> topics[] = {{"nexmark-person", "persons.jsonl"},
                                                        {"nexmark-auction", "auctions.jsonl"},
                                                        {"nexmark-bid", "bids.jsonl"}};
  for (const auto& [topic, file] : topics) {
    auto records = ConsumeAll((*broker)->bootstrap(), topic);
    ASSERT_OK(records.status());
    std::vector<std::string> got;
    std::set<int32_t> partitions;
    for (const KafkaConsumedRecord& r : *records) {
      got.push_back(r.value);
      partitions.insert(r.partition);
    }
    std::vector<std::string> want = ReadLines(d / "events" / file);
    std::sort(got.begin(), got.end());
    std::sort(want.begin(), want.end());
    EXPECT_EQ(got, want) << topic;
    if (want.size() > 100) {
      EXPECT_EQ(partitions.size(), 4u) << topic;
    }
  }
}

// scripts/nexmark --cluster (issue 53): a broker, a coordinator and two
// workers; every query from the topics to file sinks in the shared
// directory, checked against the brute force; the JSON has a row per query
// with its measurements and verdict.
TEST(NexmarkCliTest, ScriptRunsEveryQueryOnAClusterAndWritesVerdicts) {
  TempDir tmp("nexmark-script", "CARAVELA_KEEP_TEST_DIRS", "nexmark script test");
  const fs::path& d = tmp.path();
  const fs::path results = d / "results.json";
  const std::string script = absl::StrCat(CARAVELA_SOURCE_DIR, "/scripts/nexmark");
  ASSERT_EQ(Sh(absl::StrCat(script, " --cluster --events 20000 --binary ", CARAVELA_BINARY,
                            " --json ", results.string()),
               d / "script.log"),
            0)
      << ReadFile(d / "script.log");
  const std::string log = ReadFile(d / "script.log");
  EXPECT_THAT(log, HasSubstr("verdict"));
  EXPECT_THAT(log, HasSubstr("wrote " + results.string()));
  const json rows = json::parse(ReadFile(results));
  ASSERT_TRUE(rows.is_array());
  std::vector<std::string> queries;
  for (const json& r : rows) {
    queries.push_back(r.at("query"));
    EXPECT_EQ(r.at("mode"), "cluster");
    EXPECT_EQ(r.at("verdict"), "match") << r.dump();
    EXPECT_GT(r.at("events_read").get<int64_t>(), 0) << r.dump();
    EXPECT_GT(r.at("wall_s").get<double>(), 0) << r.dump();
    EXPECT_EQ(r.at("cpu_s"), r.at("worker_cpu_s"));
    for (const char* f : {"read_per_s_per_core", "stream_events_per_s_per_core", "peak_rss_kb",
                          "state_disk_kb", "coordinator_cpu_s", "broker_cpu_s"}) {
      EXPECT_TRUE(r.at(f).is_number()) << f << ": " << r.dump();
    }
    EXPECT_EQ(r.at("parallelism"), 2);
    EXPECT_EQ(r.at("exchange"), "network");
  }
  EXPECT_EQ(queries, (std::vector<std::string>{"q0", "q1", "q2", "q5", "q7", "q8", "q11"}));
}

TEST(NexmarkCliTest, BadInputGivesClearErrors) {
  TempDir tmp("nexmark-cli", "CARAVELA_KEEP_TEST_DIRS", "nexmark cli test");
  const fs::path& d = tmp.path();
  EXPECT_EQ(Sh(absl::StrCat(CARAVELA_BINARY, " nexmark gen --events 0 --out ", d.string()),
               d / "zero.log"),
            2);
  EXPECT_THAT(ReadFile(d / "zero.log"), HasSubstr("--events 0: generate at least 1 event"));
  std::ofstream(d / "file") << "x";
  EXPECT_EQ(Sh(absl::StrCat(CARAVELA_BINARY, " nexmark gen --events 10 --out ",
                            (d / "file" / "sub").string()),
               d / "unwritable.log"),
            1);
  EXPECT_THAT(ReadFile(d / "unwritable.log"),
              HasSubstr("cannot create the output directory " + (d / "file" / "sub").string()));
  const std::string script = absl::StrCat(CARAVELA_SOURCE_DIR, "/scripts/nexmark");
  EXPECT_EQ(Sh(script + " --queries q0,q99", d / "query.log"), 2);
  EXPECT_THAT(ReadFile(d / "query.log"), HasSubstr("unknown query q99 (known: q0,"));
  EXPECT_EQ(Sh(script + " --events 0", d / "events.log"), 2);
  EXPECT_THAT(ReadFile(d / "events.log"), HasSubstr("--events 0: give a positive number"));
  EXPECT_EQ(Sh(script + " --json " + (d / "file" / "x.json").string(), d / "json.log"), 2);
  EXPECT_THAT(ReadFile(d / "json.log"), HasSubstr("cannot write that file"));
}

}  // namespace
}  // namespace caravela
