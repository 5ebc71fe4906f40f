// /metrics over HTTP (SPEC §9; the operations issue's first slice): `caravela
// run --http`, the coordinator and a worker serve the Prometheus text format,
// checked with the real `promtool check metrics` (Debian's prometheus
// package), and /healthz for probes; a job's source offsets reach its
// consumer group after each checkpoint.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <httplib.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
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

// `promtool check metrics` on `text`: its exit code and output.
std::pair<int, std::string> Promtool(const std::string& text, const fs::path& dir) {
  const fs::path in = dir / "metrics.txt", out = dir / "promtool.out";
  std::ofstream(in) << text;
  const std::string cmd =
      absl::StrCat("promtool check metrics < ", in.string(), " > ", out.string(), " 2>&1");
  const int rc = std::system(cmd.c_str());
  return {WIFEXITED(rc) ? WEXITSTATUS(rc) : -1, ReadFile(out)};
}

bool HavePromtool() { return std::system("command -v promtool > /dev/null 2>&1") == 0; }

TEST(MetricsHttpTest, RunServesPrometheusMetricsWhileItRuns) {
  ASSERT_TRUE(HavePromtool()) << "promtool is missing: run scripts/install-deps (prometheus)";
  TempDir tmp("metrics-run", "CARAVELA_KEEP_TEST_DIRS", "metrics test");
  const fs::path& dir = tmp.path();
  std::ofstream(dir / "job.yaml") << R"(apiVersion: caravela/v1
kind: Job
metadata: {name: metrics-demo}
spec:
  checkpoint: {interval: 200ms}
  sources:
    - name: purchases
      kafka: {topic: purchases}
      event_time: {field: ts, format: epoch_ms}
      watermark: {max_out_of_orderness: 5s, idle_timeout: 1h}
  operators:
    - name: unique
      dedup: {from: purchases, id: event_id, retention: 1h}
  sinks:
    - {from: unique, file: {path: out/unique.jsonl}}
)";
  ChildProcess run({CARAVELA_BINARY, "run", (dir / "job.yaml").string(), "--data-dir",
                    (dir / "data").string(), "--http", "127.0.0.1:0", "-q"},
                   dir / "run.log");
  const std::string http = run.WaitFor(R"(http=(\S+))", milliseconds(20000));
  const std::string broker = run.WaitFor(R"(bootstrap (\S+))", milliseconds(20000));
  ASSERT_FALSE(http.empty() || broker.empty()) << run.Log();
  EXPECT_THAT(HttpGet(http, "/healthz"), HasSubstr("SERVING"));
  // 2 records on partition 0 (e0, e1) and 3 on partition 2 (e2, e0, e1),
  // event time by id (copies are identical: duplicates).
  std::vector<std::pair<int32_t, std::string>> lines;
  lines.reserve(5);
  for (int i = 0; i < 5; ++i) {
    lines.emplace_back(i < 2 ? 0 : 2, absl::StrCat(R"({"event_id":"e)", i % 3, R"(","ts":)",
                                                   1700000000000 + (i % 3) * 60'000, "}"));
  }
  ASSERT_OK(ProduceLines(broker, "purchases", lines, 30000));
  std::string text;
  ASSERT_TRUE(Eventually(
      [&] {
        text = HttpGet(http, "/metrics");
        return text.find(
                   R"(caravela_dedup_passed_total{job_id="metrics-demo",job_name="metrics-demo",op="unique"} 3)") !=
               std::string::npos;
      },
      milliseconds(20000)))
      << text << run.Log();
  EXPECT_THAT(
      text,
      HasSubstr(
          R"(caravela_dedup_duplicates_total{job_id="metrics-demo",job_name="metrics-demo",op="unique"} 2)"));
  EXPECT_THAT(
      text,
      HasSubstr(
          R"(caravela_operator_records_out_total{job_id="metrics-demo",job_name="metrics-demo",op="unique"} 3)"));
  EXPECT_THAT(
      text,
      HasSubstr(
          R"(caravela_operator_side_records_total{job_id="metrics-demo",job_name="metrics-demo",op="unique",output="conflicts"} 0)"));
  // Per source partition: the position, nothing unread, and the watermark
  // (the highest event time there minus the 5 s out-of-orderness), once
  // the task published them (every 250 ms).
  const std::string p0 =
      R"({job_id="metrics-demo",job_name="metrics-demo",source="purchases",partition="0"})";
  const std::string p2 =
      R"({job_id="metrics-demo",job_name="metrics-demo",source="purchases",partition="2"})";
  ASSERT_TRUE(Eventually(
      [&] {
        text = HttpGet(http, "/metrics");
        return text.find("caravela_source_partition_offset" + p2 + " 3") != std::string::npos &&
               text.find("caravela_source_partition_watermark_seconds" + p2) != std::string::npos;
      },
      milliseconds(10000)))
      << text;
  EXPECT_THAT(text, HasSubstr("caravela_source_partition_offset" + p0 + " 2"));
  EXPECT_THAT(text, HasSubstr("caravela_source_partition_lag_records" + p0 + " 0"));
  EXPECT_THAT(text, HasSubstr("caravela_source_partition_lag_records" + p2 + " 0"));
  EXPECT_THAT(text, HasSubstr("caravela_source_partition_watermark_seconds" + p0 +
                              " 1700000055.000"));  // 1700000060000 - 5000 ms
  EXPECT_THAT(text, HasSubstr("caravela_source_partition_watermark_seconds" + p2 +
                              " 1700000115.000"));  // 1700000120000 - 5000 ms
  EXPECT_THAT(text, HasSubstr("caravela_source_partition_idle" + p2 + " 0"));
  // State per table at the checkpoints (every 200 ms): the dedup's 3 ids.
  ASSERT_TRUE(Eventually(
      [&] {
        text = HttpGet(http, "/metrics");
        return text.find(
                   R"(caravela_state_keys{job_id="metrics-demo",job_name="metrics-demo",task="metrics-demo",table="unique/ids"} 3)") !=
               std::string::npos;
      },
      milliseconds(10000)))
      << text;
  EXPECT_THAT(
      text,
      HasSubstr(
          R"(caravela_state_bytes{job_id="metrics-demo",job_name="metrics-demo",task="metrics-demo",table="unique/ids"})"));
  // Partitions 1 and 3 got nothing: no watermark yet, offset 0.
  EXPECT_THAT(
      text,
      HasSubstr(
          R"(caravela_source_partition_offset{job_id="metrics-demo",job_name="metrics-demo",source="purchases",partition="1"} 0)"));
  EXPECT_THAT(
      text,
      ::testing::Not(HasSubstr(
          R"(caravela_source_partition_watermark_seconds{job_id="metrics-demo",job_name="metrics-demo",source="purchases",partition="1"})")));
  EXPECT_THAT(text, HasSubstr("# TYPE caravela_records_in_total counter"));
  // Counted in ms, exported in seconds.
  EXPECT_THAT(
      text,
      HasSubstr(
          R"(caravela_dedup_retention_seconds{job_id="metrics-demo",job_name="metrics-demo",op="unique"} 3600.000)"));
  const auto [rc, lint] = Promtool(text, dir);
  EXPECT_EQ(rc, 0) << lint << text;
  // After each checkpoint its source offsets go to the consumer group
  // caravela-<job>, where lag tools read them: all 5 records.
  EXPECT_TRUE(Eventually(
      [&] {
        auto committed = CommittedOffsets(broker, "caravela-metrics-demo", "purchases", 4);
        int64_t total = 0;
        if (committed.ok()) {
          for (int64_t o : *committed) total += std::max<int64_t>(o, 0);
        }
        return total == 5;
      },
      milliseconds(10000)));
  EXPECT_EQ(run.Stop(SIGTERM), 0) << run.Log();
}

TEST(MetricsHttpTest, CoordinatorAndWorkerServePrometheusMetrics) {
  ASSERT_TRUE(HavePromtool()) << "promtool is missing: run scripts/install-deps (prometheus)";
  TempDir tmp("metrics-cluster", "CARAVELA_KEEP_TEST_DIRS", "metrics test");
  const fs::path& dir = tmp.path();
  ChildProcess coordinator({CARAVELA_BINARY, "coordinator", "--listen", "127.0.0.1:0", "--http",
                            "127.0.0.1:0", "--data-dir", (dir / "coord").string()},
                           dir / "coordinator.log");
  const std::vector<std::string> c =
      coordinator.WaitForMatch(R"(grpc=(\S+) http=(\S+))", milliseconds(20000));
  ASSERT_EQ(c.size(), 3u) << coordinator.Log();
  ChildProcess worker({CARAVELA_BINARY, "worker", "--coordinator", c[1], "--http", "127.0.0.1:0",
                       "--data-dir", (dir / "w").string()},
                      dir / "worker.log");
  const std::string worker_http = worker.WaitFor(R"(grpc=\S+ http=(\S+))", milliseconds(20000));
  ASSERT_FALSE(worker_http.empty()) << worker.Log();
  std::string text;
  ASSERT_TRUE(Eventually(
      [&] {
        text = HttpGet(c[2], "/metrics");
        return text.find(R"(caravela_coordinator_workers{state="ALIVE"} 1)") != std::string::npos;
      },
      milliseconds(10000)))
      << text;
  EXPECT_THAT(text, HasSubstr(R"(caravela_coordinator_jobs{state="RUNNING"} 0)"));
  EXPECT_THAT(text, HasSubstr("caravela_coordinator_worker_slots 1"));
  EXPECT_THAT(text, HasSubstr("# TYPE caravela_coordinator_heartbeats_total counter"));
  auto [rc, lint] = Promtool(text, dir);
  EXPECT_EQ(rc, 0) << lint << text;
  EXPECT_THAT(HttpGet(worker_http, "/healthz"), HasSubstr("SERVING"));
  httplib::Client client("http://" + worker_http);
  auto m = client.Get("/metrics");
  ASSERT_TRUE(m);
  EXPECT_EQ(m->status, 200);
  std::tie(rc, lint) = Promtool(m->body, dir);
  EXPECT_EQ(rc, 0) << lint << m->body;
  // gRPC request metrics: the coordinator counts the heartbeats it served,
  // the worker the ones it made (both pass promtool with them).
  const std::string server_heartbeats =
      R"(caravela_grpc_server_handled_total{method="/caravela.v1.WorkerService/Heartbeat",code="OK"})";
  text = HttpGetUntil(c[2], "/metrics", server_heartbeats, milliseconds(10000));
  EXPECT_THAT(text, HasSubstr(server_heartbeats));
  EXPECT_THAT(text, HasSubstr("# TYPE caravela_grpc_server_handling_seconds histogram"));
  std::tie(rc, lint) = Promtool(text, dir);
  EXPECT_EQ(rc, 0) << lint << text;
  const std::string client_heartbeats =
      R"(caravela_grpc_client_handled_total{method="/caravela.v1.WorkerService/Heartbeat",code="OK"})";
  text = HttpGetUntil(worker_http, "/metrics", client_heartbeats, milliseconds(10000));
  EXPECT_THAT(text, HasSubstr(client_heartbeats));
  EXPECT_THAT(text, HasSubstr("# TYPE caravela_grpc_client_handling_seconds histogram"));
  std::tie(rc, lint) = Promtool(text, dir);
  EXPECT_EQ(rc, 0) << lint << text;
}

}  // namespace
}  // namespace caravela
