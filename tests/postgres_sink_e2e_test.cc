// `caravela run` with a PostgreSQL sink against a real server: the table ends
// up holding exactly the FINAL results a file sink of the same job writes, and
// re-running the job (a replay of the same revisions) changes nothing.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "tests/test_util.h"
#include "worker/testing/operator_harness.h"
#include "worker/testing/postgres_server.h"
#include "worker/testing/status_testing.h"

namespace fs = std::filesystem;

namespace caravela {
namespace {

using ::testing::HasSubstr;
using Rows = std::vector<std::vector<std::string>>;

struct RunResult {
  int exit_code;
  std::string stderr_text;
};

RunResult RunJob(const fs::path& dir, const std::string& data_dir) {
  std::string cmd = "cd '" + dir.string() + "' && " + CARAVELA_BINARY +
                    " run --quiet --print-metrics job.yaml --data-dir " + data_dir +
                    " > stdout.txt 2> stderr.txt";
  int rc = std::system(cmd.c_str());
  return {WEXITSTATUS(rc), ReadFile(dir / "stderr.txt")};
}

// Hourly revenue per country: EARLY, ON_TIME, LATE and FINAL revisions, a
// duplicate and a too-late record.
constexpr char kInput[] =
    R"({"event_id":"A","country":"PT","event_time":"2026-10-01T10:10:00Z","amount":100.0,"arrival":10000}
{"event_id":"B","country":"ES","event_time":"2026-10-01T10:20:00Z","amount":50.0,"arrival":20000}
{"event_id":"A","country":"PT","event_time":"2026-10-01T10:10:00Z","amount":100.0,"arrival":30000}
{"event_id":"C","country":"PT","event_time":"2026-10-01T10:40:00Z","amount":20.5,"arrival":90000}
{"event_id":"D","country":"PT","event_time":"2026-10-01T11:10:00Z","amount":7.0,"arrival":130000}
{"event_id":"E","country":"ES","event_time":"2026-10-01T10:50:00Z","amount":5.0,"arrival":150000}
{"event_id":"F","country":"ES","event_time":"2026-10-01T11:45:00Z","amount":1.0,"arrival":200000}
{"event_id":"G","country":"PT","event_time":"2026-10-01T10:30:00Z","amount":9.0,"arrival":210000}
{"event_id":"H","country":"PT","event_time":"2026-10-01T11:50:00Z","amount":3.25,"arrival":260000}
)";

std::string Job(const std::string& dsn) {
  return R"(apiVersion: caravela/v1
kind: Job
metadata: {name: pg-e2e}
spec:
  sources:
    - name: purchases
      file: {path: input.jsonl, arrival_field: arrival}
      event_time: {field: event_time, format: iso8601}
      watermark: {max_out_of_orderness: 5m}
  operators:
    - name: unique
      dedup: {from: purchases, id: event_id, retention: 24h}
    - name: revenue
      window:
        from: unique
        tumbling: 1h
        group_by: [country]
        aggregates: [{as: revenue, sum: amount}, {as: orders, count: "*"}]
        early_fire_every: 1m
        allowed_lateness: 30m
  sinks:
    - {from: revenue, file: {path: out/revenue.jsonl}}
    - {from: revenue, postgres: {dsn: ")" +
         dsn + R"(", table: hourly_revenue}}
  dead_letter: {path: out/dead-letter.jsonl}
)";
}

class PostgresSinkE2ETest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<PostgresServer>> s = PostgresServer::Start();
    ASSERT_OK(s.status());
    server_ = std::move(*s);
    dir_ = fs::temp_directory_path() / ("caravela-pg-e2e-" + std::to_string(getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    std::ofstream(dir_ / "input.jsonl") << kInput;
  }
  void TearDown() override { RemoveTree(dir_.string()); }

  // The FINAL lines of the file sink, as jsonb text (PostgreSQL's normal
  // form), sorted.
  Rows FinalResults() {
    std::string values;
    std::istringstream lines(ReadFile(dir_ / "out/revenue.jsonl"));
    std::string line;
    int finals = 0;
    while (std::getline(lines, line)) {
      if (line.find(R"("state":"FINAL")") == std::string::npos) continue;
      values += (finals++ == 0 ? "(" : ", (") + SqlLiteral(line) + "::jsonb)";
    }
    EXPECT_GT(finals, 0);
    if (finals == 0) return {};
    absl::StatusOr<Rows> rows =
        server_->Query("SELECT v::text FROM (VALUES " + values + ") AS f(v) ORDER BY 1");
    EXPECT_OK(rows.status());
    return rows.ok() ? *rows : Rows{};
  }
  Rows Table(const std::string& columns) {
    absl::StatusOr<Rows> rows =
        server_->Query("SELECT " + columns + " FROM hourly_revenue ORDER BY value::text");
    EXPECT_OK(rows.status());
    return rows.ok() ? *rows : Rows{};
  }

  std::unique_ptr<PostgresServer> server_;
  fs::path dir_;
};

TEST_F(PostgresSinkE2ETest, TableHoldsTheFinalResultsOfTheFileSink) {
  std::ofstream(dir_ / "job.yaml") << Job(server_->Dsn());
  RunResult r = RunJob(dir_, "data1");
  ASSERT_EQ(r.exit_code, 0) << r.stderr_text;

  Rows finals = FinalResults();
  ASSERT_EQ(finals.size(), 4u);  // PT and ES, 10:00 and 11:00
  EXPECT_EQ(Table("value::text"), finals);
  // Every row is the FINAL revision, and the key columns and revision match
  // the value.
  EXPECT_EQ(Table("count(*) FILTER (WHERE state = 'FINAL' AND revision = (value->>'revision')"
                  "::bigint AND country = value->>'country' AND window_start = "
                  "value->>'window_start' AND window_end = value->>'window_end' AND epoch = 0) "
                  "OVER ()"),
            Rows(4, std::vector<std::string>{"4"}));
  // The file sink saw more than the FINAL revisions: the table was upserted.
  std::string all = ReadFile(dir_ / "out/revenue.jsonl");
  EXPECT_THAT(all, HasSubstr(R"("state":"EARLY")"));
  EXPECT_THAT(all, HasSubstr(R"("state":"LATE")"));

  // Running the same job again (fresh state, the same revisions) is a replay:
  // every row is rejected and the table is unchanged.
  Rows before = Table("value::text, updated_at::text");
  const std::string first_metrics = ReadFile(dir_ / "stdout.txt");
  r = RunJob(dir_, "data2");
  ASSERT_EQ(r.exit_code, 0) << r.stderr_text;
  EXPECT_EQ(Table("value::text, updated_at::text"), before);
  // The metrics say so: the first run's revisions were all accepted (none
  // met a newer one in the table), the replay's upserts were all refused by
  // the guard (one per row: revisions a flush supersedes are never sent).
  const std::string metrics = ReadFile(dir_ / "stdout.txt");
  const std::string from =
      R"({job_id="pg-e2e",job_name="pg-e2e",from="revenue",sink="postgres:hourly_revenue"})";
  auto value = [](const std::string& text, const std::string& series) {
    const size_t at = text.find(series + " ");
    return at == std::string::npos
               ? std::string("absent")
               : text.substr(at + series.size() + 1, text.find('\n', at) - at - series.size() - 1);
  };
  const std::string handed = value(first_metrics, "sink_revisions_written_total" + from);
  EXPECT_NE(handed, "absent") << first_metrics;
  EXPECT_NE(handed, "0");
  EXPECT_EQ(value(metrics, "sink_revisions_written_total" + from), handed) << metrics;
  EXPECT_EQ(value(first_metrics, "sink_revisions_rejected_total" + from), "0") << first_metrics;
  // At least one per row; more if the run flushed more than once.
  const int64_t rejected =
      std::atoll(value(metrics, "sink_revisions_rejected_total" + from).c_str());
  EXPECT_GE(rejected, 4) << metrics;
  EXPECT_LE(rejected, std::atoll(handed.c_str())) << metrics;
}

TEST_F(PostgresSinkE2ETest, UnreachableDatabaseFailsTheRunWithTheSinksPath) {
  std::ofstream(dir_ / "job.yaml") << Job("host=127.0.0.1 port=1 dbname=x user=y");
  RunResult r = RunJob(dir_, "data");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_THAT(r.stderr_text, HasSubstr("spec.sinks[1].postgres: cannot connect to PostgreSQL with "
                                       "dsn \"host=127.0.0.1 port=1 dbname=x user=y\""));
}

}  // namespace
}  // namespace caravela
