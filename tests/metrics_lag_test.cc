// What /metrics and the JSON API say while a job falls behind (SPEC §9): a
// task stalled mid-run (a failpoint that blocks its thread, as a stuck sink
// would) leaves records unread, and the consumer lag of each partition is
// exactly what the test produced there and the task did not apply.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tests/child_process.h"
#include "tests/http_test_util.h"
#include "tests/test_util.h"
#include "worker/connectors/kafka_test_util.h"
#include "worker/testing/status_testing.h"

namespace caravela {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using milliseconds = std::chrono::milliseconds;

// The value of series `name{labels}` in Prometheus text, or -1.
double Sample(const std::string& text, const std::string& series) {
  const size_t at = text.find("\n" + series + " ");
  if (at == std::string::npos) return -1;
  return std::strtod(text.c_str() + at + series.size() + 2, nullptr);
}

TEST(MetricsLagTest, UnreadRecordsOfAStalledTaskAreItsLagPerPartition) {
  TempDir tmp("metrics-lag", "CARAVELA_KEEP_TEST_DIRS", "metrics lag test");
  const fs::path& dir = tmp.path();
  std::ofstream(dir / "job.yaml") << R"(apiVersion: caravela/v1
kind: Job
metadata: {name: lag-demo}
spec:
  sources:
    - name: purchases
      kafka: {topic: purchases}
      event_time: {field: ts, format: epoch_ms}
      watermark: {max_out_of_orderness: 5s}
  operators:
    - name: hourly
      window: {from: purchases, tumbling: 1h, aggregates: [{as: revenue, sum: amount}]}
  sinks:
    - {from: hourly, file: {path: out/hourly.jsonl}}
)";
  // The task thread blocks after applying its first batch; the HTTP server,
  // the metrics refresh and librdkafka's fetcher go on.
  setenv("CARAVELA_FAILPOINT", "source.after_batch=stall", 1);
  ChildProcess run({CARAVELA_BINARY, "run", (dir / "job.yaml").string(), "--data-dir",
                    (dir / "data").string(), "--http", "127.0.0.1:0", "-q"},
                   dir / "run.log");
  unsetenv("CARAVELA_FAILPOINT");
  const std::string http = run.WaitFor(R"(http=(\S+))", milliseconds(20000));
  const std::string broker = run.WaitFor(R"(bootstrap (\S+))", milliseconds(20000));
  ASSERT_FALSE(http.empty() || broker.empty()) << run.Log();

  // 5 records on partition 0: the first batch, then the task stalls.
  std::vector<std::pair<int32_t, std::string>> first;
  first.reserve(5);
  for (int i = 0; i < 5; ++i) {
    first.emplace_back(0, absl::StrCat(R"({"ts":)", 1700000000000 + i, R"(,"amount":1})"));
  }
  ASSERT_OK(ProduceLines(broker, "purchases", first, 30000));
  ASSERT_FALSE(
      run.WaitFor(R"((failpoint source.after_batch hit 1: stalling))", milliseconds(20000)).empty())
      << run.Log();
  // 1000 records on partition 2 that the stalled task never reads.
  std::vector<std::pair<int32_t, std::string>> unread;
  unread.reserve(1000);
  for (int i = 0; i < 1000; ++i) {
    unread.emplace_back(2, absl::StrCat(R"({"ts":)", 1700000001000 + i, R"(,"amount":2})"));
  }
  ASSERT_OK(ProduceLines(broker, "purchases", unread, 30000));

  const std::string p0 =
      R"(caravela_source_partition_lag_records{job_id="lag-demo",job_name="lag-demo",source="purchases",partition="0"})";
  const std::string p2 =
      R"(caravela_source_partition_lag_records{job_id="lag-demo",job_name="lag-demo",source="purchases",partition="2"})";
  const std::string o0 =
      R"(caravela_source_partition_offset{job_id="lag-demo",job_name="lag-demo",source="purchases",partition="0"})";
  std::string text;
  ASSERT_TRUE(Eventually(
      [&] {
        text = HttpGet(http, "/metrics");
        return Sample(text, p2) == 1000;
      },
      milliseconds(20000)))
      << text << run.Log();
  // Partition 0: whatever the first batch did not take is lag too.
  EXPECT_EQ(Sample(text, o0) + Sample(text, p0), 5) << text;
  EXPECT_GE(Sample(text, o0), 1) << text;
  // The records applied before the stall were observed by the arrival-delay
  // histogram (processing time - event time of 2023: far beyond its last
  // bucket, a day).
  const double applied = Sample(text, o0);
  EXPECT_EQ(
      Sample(
          text,
          R"(caravela_arrival_delay_seconds_count{job_id="lag-demo",job_name="lag-demo",source="purchases"})"),
      applied);
  EXPECT_EQ(
      Sample(
          text,
          R"(caravela_arrival_delay_seconds_bucket{job_id="lag-demo",job_name="lag-demo",source="purchases",le="86400.000"})"),
      0);
  EXPECT_EQ(
      Sample(
          text,
          R"(caravela_window_records_total{job_id="lag-demo",job_name="lag-demo",op="hourly",arrival="on_time"})"),
      applied);

  // The JSON API the dashboard reads says the same per task and partition.
  std::string job;
  ASSERT_TRUE(Eventually(
      [&] {
        job = HttpGet(http, "/api/v1/jobs/lag-demo");
        return job.find(R"("consumer_lag":)") != std::string::npos &&
               std::regex_search(job, std::regex(R"("partition":2,[^}]*"lag":1000[,}])"));
      },
      milliseconds(10000)))
      << job;
  const int64_t lag_total = 1000 + 5 - static_cast<int64_t>(applied);
  EXPECT_THAT(job, HasSubstr(absl::StrCat(R"("consumer_lag":)", lag_total, ",")));
  run.Stop(SIGKILL);
}

}  // namespace
}  // namespace caravela
