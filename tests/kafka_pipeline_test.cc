// End-to-end over real Kafka partitions: the embedded broker (librdkafka's
// mock cluster, speaking the Kafka protocol on loopback) holds a 2-partition
// input topic; a job with a Kafka source (bounded: reads what exists, then
// ends) deduplicates and aggregates into a Kafka sink; the output topic is
// read back with librdkafka and, if installed, with kcat.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include "common/job_spec.h"
#include "worker/connectors/embedded_broker.h"
#include "worker/connectors/kafka_test_util.h"
#include "worker/registry/builtin_kinds.h"
#include "worker/runtime/pipeline.h"
#include "worker/testing/status_testing.h"

namespace caravela {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::string Job(const std::string& out_dir) {
  return R"(
apiVersion: caravela/v1
kind: Job
metadata: {name: kafka-e2e}
spec:
  sources:
    - name: clicks
      kafka: {topic: clicks, bounded: true}
      event_time: {field: ts, format: iso8601}
      watermark: {max_out_of_orderness: 0s}
  operators:
    - name: unique
      dedup: {from: clicks, id: id, retention: 1d}
    - name: per_hour
      window:
        from: unique
        tumbling: 1h
        aggregates: [{as: clicks, count: "*"}, {as: value, sum: v}]
        allowed_lateness: 1h
  sinks:
    - {from: per_hour, kafka: {topic: per-hour}}
  dead_letter: {path: )" +
         out_dir + R"(/dead-letter.jsonl}
)";
}

std::string Click(const std::string& id, const std::string& ts, int v) {
  return R"({"id":")" + id + R"(","ts":"2026-10-01T)" + ts + R"(:00Z","v":)" + std::to_string(v) +
         "}";
}

TEST(KafkaPipelineTest, PerPartitionWatermarksFromRealPartitions) {
  auto broker = EmbeddedBroker::Start(0, 2);
  ASSERT_OK(broker.status());
  const std::string bootstrap = (*broker)->bootstrap();
  ASSERT_OK((*broker)->CreateTopic("clicks", 2));
  ASSERT_OK((*broker)->CreateTopic("per-hour", 1));
  // Each partition is in order; together they are not. With the watermark
  // as the min over partitions no record is late, so [10:00, 11:00) fires
  // ON_TIME once with all four records and is never corrected. A global-max
  // watermark would fire it early (after partition 0's 11:30) and then
  // correct it with LATE revisions as partition 1's 10:30 and 10:50 arrive.
  ASSERT_OK(ProduceLines(bootstrap, "clicks",
                         {{0, Click("a", "10:10", 1)},
                          {0, Click("b", "10:20", 2)},
                          {0, Click("c", "11:30", 4)},
                          {0, Click("d", "12:10", 8)},
                          {1, Click("e", "10:30", 16)},
                          {1, Click("e", "10:30", 16)},  // a retry
                          {1, Click("f", "10:50", 32)},
                          {1, "{broken json"},
                          {1, Click("g", "11:40", 64)},
                          {1, Click("h", "12:20", 128)}}));

  std::string dir = ::testing::TempDir() + "/kafka_e2e_" + std::to_string(::getpid());
  std::filesystem::remove_all(dir);
  ParseResult parsed = ParseJobSpec(Job(dir));
  ASSERT_TRUE(parsed.ok()) << parsed.errors[0].ToString();
  RunOptions options;
  options.data_dir = dir;
  options.embedded_bootstrap = bootstrap;
  auto pipeline = Pipeline::Create(parsed.spec, options);
  ASSERT_OK(pipeline.status());
  ASSERT_OK((*pipeline)->Run());

  MetricsRegistry& m = (*pipeline)->metrics();
  EXPECT_EQ(m.Value("records_in_total", "source=\"clicks\""), 10);
  EXPECT_EQ(m.Sum("invalid_records_total", "source=\"clicks\""), 1);
  EXPECT_EQ(m.Value("invalid_records_total", "source=\"clicks\",reason=\"malformed\""), 1);
  EXPECT_EQ(m.Value("dedup_duplicates_total", "op=\"unique\""), 1);

  auto out = ConsumeAll(bootstrap, "per-hour");
  ASSERT_OK(out.status());
  std::vector<std::string> values;
  for (const auto& r : *out) {
    values.push_back(r.value);
    EXPECT_THAT(r.key, HasSubstr("\"window_start\":\"2026-10-01T1")) << "keyed by window";
  }
  EXPECT_THAT(
      values,
      ElementsAre(
          R"({"window_start":"2026-10-01T10:00:00.000Z","window_end":"2026-10-01T11:00:00.000Z","clicks":4,"value":51,"revision":1,"state":"ON_TIME"})",
          R"({"window_start":"2026-10-01T11:00:00.000Z","window_end":"2026-10-01T12:00:00.000Z","clicks":2,"value":68,"revision":1,"state":"ON_TIME"})",
          R"({"window_start":"2026-10-01T10:00:00.000Z","window_end":"2026-10-01T11:00:00.000Z","clicks":4,"value":51,"revision":2,"state":"FINAL"})",
          R"({"window_start":"2026-10-01T12:00:00.000Z","window_end":"2026-10-01T13:00:00.000Z","clicks":2,"value":136,"revision":1,"state":"ON_TIME"})",
          R"({"window_start":"2026-10-01T11:00:00.000Z","window_end":"2026-10-01T12:00:00.000Z","clicks":2,"value":68,"revision":2,"state":"FINAL"})",
          R"({"window_start":"2026-10-01T12:00:00.000Z","window_end":"2026-10-01T13:00:00.000Z","clicks":2,"value":136,"revision":2,"state":"FINAL"})"));

  // A real Kafka client reads the same output.
  if (std::system("command -v kcat > /dev/null 2>&1") == 0) {
    std::string cmd = "kcat -b " + bootstrap + " -C -t per-hour -e -q -f '%s\\n' 2>/dev/null";
    FILE* p = popen(cmd.c_str(), "r");
    ASSERT_NE(p, nullptr);
    std::string text;
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, p)) > 0) text.append(buf, n);
    pclose(p);
    std::string expected;
    for (const auto& v : values) expected += v + "\n";
    EXPECT_EQ(text, expected);
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace caravela

namespace caravela {
namespace {

// A lookup table followed from a compacted Kafka topic: a tombstone (null
// value, key = the table key fields as JSON) deletes the row, so a later
// order with that alias no longer matches; a tombstone on a stream source is
// an invalid record with a reason.
TEST(KafkaPipelineTest, TombstonesDeleteLookupTableRows) {
  auto broker = EmbeddedBroker::Start(0, 1);
  ASSERT_OK(broker.status());
  const std::string bootstrap = (*broker)->bootstrap();
  ASSERT_OK((*broker)->CreateTopic("shops", 1));
  ASSERT_OK((*broker)->CreateTopic("orders", 1));
  ASSERT_OK(ProduceRecords(bootstrap, "shops",
                           {{0, R"({"alias":"porto"})", R"({"alias":"porto","shop_id":"PT-1"})"},
                            {0, R"({"alias":"lisboa"})", R"({"alias":"lisboa","shop_id":"PT-2"})"},
                            {0, R"({"alias":"lisboa"})", "", true}}));
  ASSERT_OK(ProduceRecords(bootstrap, "orders",
                           {{0, "", R"({"order":1,"shop":"porto","ts":"2026-10-01T10:00:00Z"})"},
                            {0, "", R"({"order":2,"shop":"lisboa","ts":"2026-10-01T10:01:00Z"})"},
                            {0, "o3", "", true}}));
  std::string dir = ::testing::TempDir() + "/kafka_tombstone_" + std::to_string(::getpid());
  std::filesystem::remove_all(dir);
  ParseResult parsed = ParseJobSpec(R"(apiVersion: caravela/v1
kind: Job
metadata: {name: tombstones}
spec:
  sources:
    - name: shops
      kafka: {topic: shops, bounded: true}
    - name: orders
      kafka: {topic: orders, bounded: true}
      event_time: {field: ts, format: iso8601}
      watermark: {max_out_of_orderness: 1m}
  operators:
    - name: enriched
      lookup_join: {stream: orders, table: shops, on: [[shop, alias]], type: left}
  sinks:
    - {from: enriched, file: {path: )" +
                                    dir + R"(/out.jsonl}}
    - {from: orders.invalid, file: {path: )" +
                                    dir + R"(/invalid.jsonl}}
)");
  ASSERT_TRUE(parsed.ok()) << parsed.errors[0].ToString();
  RunOptions options;
  options.data_dir = dir + "/data";
  options.embedded_bootstrap = bootstrap;
  auto pipeline = Pipeline::Create(parsed.spec, options);
  ASSERT_OK(pipeline.status());
  ASSERT_OK((*pipeline)->Run());
  auto read = [](const std::string& path) {
    std::ifstream in(path);
    std::vector<std::string> lines;
    for (std::string l; std::getline(in, l);) lines.push_back(l);
    return lines;
  };
  EXPECT_THAT(
      read(dir + "/out.jsonl"),
      ElementsAre(
          R"({"order":1,"shop":"porto","ts":"2026-10-01T10:00:00Z","shops":{"alias":"porto","shop_id":"PT-1"}})",
          R"({"order":2,"shop":"lisboa","ts":"2026-10-01T10:01:00Z","shops":null})"));
  std::vector<std::string> invalid = read(dir + "/invalid.jsonl");
  ASSERT_EQ(invalid.size(), 1u);
  EXPECT_THAT(invalid[0], HasSubstr("only lookup-table sources accept deletions"));
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace caravela
