// `caravela run` with a ClickHouse sink against a real clickhouse-server
// (issue 14): the hourly revenue job with early fires and late corrections;
// after OPTIMIZE TABLE ... FINAL, SELECT ... FINAL equals the FINAL results of
// a file sink of the same job. A SIGKILL between a sink write and the next
// checkpoint (failpoint sink.after_write), or between a checkpoint's
// PreCommit and its manifest (checkpoint.after_files), followed by a restart
// leaves the same table. Skips (with the reason) only when clickhouse-server
// is missing.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/time_util.h"
#include "nlohmann/json.hpp"
#include "tests/purchases_input.h"
#include "tests/test_util.h"
#include "worker/testing/clickhouse_server.h"
#include "worker/testing/status_testing.h"

namespace caravela {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

// (country, window_start ms) -> (revenue, orders, state)
using Results =
    std::map<std::tuple<std::string, int64_t>, std::tuple<double, int64_t, std::string>>;

int RunJob(const fs::path& dir, const std::string& data, const std::string& failpoint = "") {
  const std::string cmd =
      absl::StrCat("cd '", dir.string(), "' && ",
                   failpoint.empty() ? "" : "CARAVELA_FAILPOINT=" + failpoint + " ",
                   CARAVELA_BINARY, " run -q job.yaml --data-dir ", data, " >> run.log 2>&1");
  const int rc = std::system(cmd.c_str());
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

std::string Job(const std::string& url, const std::string& table, const std::string& extra) {
  return PurchasesRevenueJob(
      "clickhouse-e2e", "",
      absl::StrCat("    - {from: revenue, clickhouse: {url: \"", url,
                   "\", database: analytics, table: ", table, extra, "}}\n"));
}

class ClickHouseSinkE2ETest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (std::string missing = ClickHouseServer::Missing(); !missing.empty()) {
      GTEST_SKIP() << missing;
    }
    auto s = ClickHouseServer::Start();
    ASSERT_OK(s.status());
    server_ = std::move(*s);
    dir_ =
        std::make_unique<TempDir>("clickhouse_e2e", "CARAVELA_KEEP_TEST_DIRS", "clickhouse test");
    WritePurchases(dir_->path() / "input.jsonl", 3000);
  }

  fs::path Dir() const { return dir_->path(); }

  // The file sink's FINAL results.
  Results FileFinals(const fs::path& file) {
    Results out;
    for (const std::string& line : ReadLines(file)) {
      const nlohmann::json r = nlohmann::json::parse(line);
      if (r["state"] != "FINAL") continue;
      out[{r["country"], *ParseIso8601(r["window_start"].get<std::string>())}] = {
          r["revenue"].get<double>(), r["orders"].get<int64_t>(), "FINAL"};
    }
    return out;
  }

  // The table after OPTIMIZE ... FINAL, read with SELECT ... FINAL.
  Results TableFinals(const std::string& table, int64_t* rows = nullptr) {
    Results out;
    const std::string t = "analytics." + table;
    EXPECT_OK(server_->Query("OPTIMIZE TABLE " + t + " FINAL").status());
    auto body = server_->Query(absl::StrCat(
        "SELECT country, window_start, toString(revenue), orders, state FROM ", t, " FINAL"));
    EXPECT_OK(body.status());
    if (!body.ok()) return out;
    for (absl::string_view line : absl::StrSplit(*body, '\n', absl::SkipEmpty())) {
      std::vector<std::string> f = absl::StrSplit(line, '\t');
      if (f.size() != 5) continue;
      out[{f[0], std::stoll(f[1])}] = {std::stod(f[2]), std::stoll(f[3]), f[4]};
    }
    if (rows != nullptr) {
      auto n = server_->Query("SELECT count() FROM " + t);
      *rows = n.ok() ? std::stoll(*n) : -1;
    }
    return out;
  }

  static void ExpectSame(const Results& a, const Results& b) {
    ASSERT_EQ(a.size(), b.size());
    for (const auto& [key, v] : a) {
      auto it = b.find(key);
      ASSERT_NE(it, b.end()) << std::get<0>(key) << " " << std::get<1>(key);
      EXPECT_NEAR(std::get<0>(v), std::get<0>(it->second), 1e-6 * (1 + std::abs(std::get<0>(v))));
      EXPECT_EQ(std::get<1>(v), std::get<1>(it->second));
      EXPECT_EQ(std::get<2>(v), std::get<2>(it->second));
    }
  }

  std::unique_ptr<ClickHouseServer> server_;
  std::unique_ptr<TempDir> dir_;
};

TEST_F(ClickHouseSinkE2ETest, SelectFinalEqualsTheJobsFinalResultsAndSurvivesACrash) {
  std::ofstream(Dir() / "job.yaml") << Job(server_->url(), "hourly_revenue", "");
  ASSERT_EQ(RunJob(Dir(), "data1"), 0) << ReadFile(Dir() / "run.log");
  const Results expected = FileFinals(Dir() / "out/revenue.jsonl");
  ASSERT_GE(expected.size(), 3u * 6u);  // 3 countries, 6 hours and more
  const std::string all = ReadFile(Dir() / "out/revenue.jsonl");
  ASSERT_THAT(all, HasSubstr(R"("state":"EARLY")"));
  ASSERT_THAT(all, HasSubstr(R"("state":"LATE")"));
  int64_t rows = 0;
  ExpectSame(TableFinals("hourly_revenue", &rows), expected);
  EXPECT_EQ(rows, static_cast<int64_t>(expected.size()));  // merged to one row per window
  // The table's types: window bounds as epoch milliseconds on this server
  // (no DateTime64 before 20.1), counts Int64, sums Nullable(Float64).
  auto types = server_->Query(
      "SELECT name, type FROM system.columns WHERE database = 'analytics' AND table = "
      "'hourly_revenue' FORMAT TabSeparated");
  ASSERT_OK(types.status());
  auto version = server_->Query("SELECT version()");
  ASSERT_OK(version.status());
  const std::string time_type = std::stoi(*version) >= 20 ? "DateTime64(3, 'UTC')" : "Int64";
  EXPECT_EQ(*types,
            absl::StrCat("country\tString\nwindow_start\t", time_type, "\nwindow_end\t", time_type,
                         "\nrevenue\tNullable(Float64)\norders\tInt64\nrevision\tUInt64\n"
                         "state\tString\nreconciled\tUInt8\n_result\tString\n"));

  // Two crashes: after a sink write, before the next checkpoint (its rows
  // still buffered); and after the checkpoint's PreCommit sent the rows to
  // ClickHouse, before its manifest (the rows are in the table, the
  // checkpoint is not: the restart writes the same revisions again).
  for (const auto& [table, failpoint] :
       {std::pair<std::string, std::string>{"crashed", "sink.after_write:40"},
        std::pair<std::string, std::string>{"crashed_at_checkpoint", "checkpoint.after_files:3"}}) {
    std::ofstream(Dir() / "job.yaml", std::ios::trunc) << Job(server_->url(), table, "");
    fs::remove_all(Dir() / "out");
    const std::string data = "data-" + table;
    const int killed = RunJob(Dir(), data, failpoint);
    ASSERT_NE(killed, 0) << ReadFile(Dir() / "run.log");
    ASSERT_THAT(ReadFile(Dir() / "run.log"),
                HasSubstr("failpoint " + failpoint.substr(0, failpoint.find(':'))));
    ASSERT_EQ(RunJob(Dir(), data), 0) << ReadFile(Dir() / "run.log");
    ExpectSame(TableFinals(table), expected);
    // The restart restored a checkpoint: its revisions are of epoch 1.
    auto max_revision = server_->Query("SELECT max(revision) FROM analytics." + table);
    ASSERT_OK(max_revision.status());
    EXPECT_GE(std::stoll(*max_revision), 1'000'000'000) << table << " " << *max_revision;
  }
}

// `caravela reconcile --sink clickhouse:DB.TABLE` reads the table back (its
// `_result` column, older revisions not yet merged away included) and finds
// the same differing windows as from the file sink (the purchases 95 minutes
// late were too late for the stream: windows that differ, and windows only
// the recomputation has); --apply publishes them into the table
// as higher revisions, after which the table matches and SELECT ... FINAL
// holds the reconciled rows.
TEST_F(ClickHouseSinkE2ETest, ReconcileReadsTheTableBackAndApplyRaisesItsRevisions) {
  std::ofstream(Dir() / "job.yaml") << Job(server_->url(), "reconciled", "");
  auto reconcile = [&](const std::string& args, const std::string& out) {
    const int rc =
        std::system(absl::StrCat("cd '", Dir().string(), "' && ", CARAVELA_BINARY,
                                 " reconcile job.yaml ", args, " > ", out, " 2> ", out, ".err")
                        .c_str());
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
  };
  const std::string sink = "--sink clickhouse:analytics.reconciled";
  // Before the job ran there is no table to read.
  EXPECT_EQ(reconcile(sink, "none.txt"), 1);
  EXPECT_THAT(ReadFile(Dir() / "none.txt.err"),
              HasSubstr(absl::StrCat("clickhouse sink analytics.reconciled at ", server_->url(),
                                     ": cannot read it back")));

  ASSERT_EQ(RunJob(Dir(), "data"), 0) << ReadFile(Dir() / "run.log");
  auto differing = [&](const std::string& file) {
    const nlohmann::json r = nlohmann::json::parse(ReadFile(Dir() / file));
    std::set<std::tuple<std::string, std::string, std::string>> keys;  // kind, country, start
    for (const nlohmann::json& d : r["differences"]) {
      keys.emplace(d["kind"], d["key"]["country"], d["key"]["window_start"]);
    }
    return std::make_pair(keys, r["matching"].get<int64_t>());
  };
  ASSERT_EQ(reconcile("--json", "file.json"), 3) << ReadFile(Dir() / "file.json.err");
  ASSERT_EQ(reconcile(sink + " --json", "ch.json"), 3) << ReadFile(Dir() / "ch.json.err");
  const auto from_file = differing("file.json");
  const auto from_table = differing("ch.json");
  ASSERT_FALSE(from_file.first.empty());
  EXPECT_EQ(from_table.first, from_file.first);
  EXPECT_EQ(from_table.second, from_file.second);
  EXPECT_GT(from_table.second, 0) << "most windows match";

  ASSERT_EQ(reconcile(sink + " --apply --json", "apply.json"), 3)
      << ReadFile(Dir() / "apply.json.err");
  EXPECT_EQ(nlohmann::json::parse(ReadFile(Dir() / "apply.json"))["applied"],
            static_cast<int64_t>(from_file.first.size()));
  ASSERT_EQ(reconcile(sink + " --json", "again.json"), 0) << ReadFile(Dir() / "again.json");
  EXPECT_TRUE(differing("again.json").first.empty());
  const std::string t = "analytics.reconciled";
  ASSERT_OK(server_->Query("OPTIMIZE TABLE " + t + " FINAL").status());
  auto reconciled = server_->Query("SELECT count() FROM " + t + " FINAL WHERE reconciled = 1");
  ASSERT_OK(reconciled.status());
  EXPECT_EQ(std::stoll(*reconciled), static_cast<int64_t>(from_file.first.size()));
}

TEST_F(ClickHouseSinkE2ETest, WrongPasswordOrUnreachableServerFailWithTheUrl) {
  std::ofstream(Dir() / "password") << "not-the-password\n";
  std::ofstream(Dir() / "job.yaml") << Job(
      server_->url(), "t",
      absl::StrCat(", user: ", std::string(ClickHouseServer::kUser), ", password_file: password"));
  EXPECT_EQ(RunJob(Dir(), "data1"), 1);
  EXPECT_THAT(ReadFile(Dir() / "run.log"),
              HasSubstr(absl::StrCat("spec.sinks[1].clickhouse (table analytics.t): clickhouse ",
                                     server_->url(), " as user caravela")));
  // The right password works.
  std::ofstream(Dir() / "password", std::ios::trunc) << ClickHouseServer::kPassword << "\n";
  fs::remove_all(Dir() / "out");
  EXPECT_EQ(RunJob(Dir(), "data2"), 0) << ReadFile(Dir() / "run.log");
  // Nothing listens on port 1.
  std::ofstream(Dir() / "job.yaml", std::ios::trunc) << Job("http://127.0.0.1:1", "t", "");
  EXPECT_EQ(RunJob(Dir(), "data3"), 1);
  EXPECT_THAT(ReadFile(Dir() / "run.log"),
              HasSubstr("clickhouse http://127.0.0.1:1: Failed to connect"));
}

}  // namespace
}  // namespace caravela
