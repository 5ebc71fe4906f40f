// ClickHouseSink against a real clickhouse-server (worker/testing): table
// creation and types, revisions replaced at merge, a batch written twice,
// keyless rows, values that do not fit their column, an existing table
// that does not fit, and the client's errors. Skips only when the server
// binary is missing.
#include "worker/connectors/clickhouse_sink.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/job_spec.h"
#include "worker/operators/window_operator.h"
#include "worker/registry/builtin_kinds.h"
#include "worker/testing/clickhouse_server.h"
#include "worker/testing/status_testing.h"

namespace caravela {
namespace {

using ::testing::HasSubstr;

TEST(ClickHouseTimeTypeTest, DateTime64FromVersion20Point1) {
  EXPECT_EQ(ClickHouseTimeType("18.16.1"), "Int64");
  EXPECT_EQ(ClickHouseTimeType("19.17.4.11"), "Int64");
  EXPECT_EQ(ClickHouseTimeType("20.1.2.4"), "DateTime64(3, 'UTC')");
  EXPECT_EQ(ClickHouseTimeType("23.8.2.7"), "DateTime64(3, 'UTC')");
}

TEST(ClickHouseTypeHintsTest, AggregatesOfAWindow) {
  OperatorSpec op;
  op.kind = BuiltinKinds().operators.Find("window");
  WindowSpec window;
  for (auto [as, fn] : {std::pair{"n", AggFn::kCount}, std::pair{"total", AggFn::kSum},
                        std::pair{"best", AggFn::kArgMax}}) {
    AggregateSpec a;
    a.as = as;
    a.fn = fn;
    window.aggregates.push_back(a);
  }
  op.config = window;
  auto hints = ClickHouseTypeHints(op);
  EXPECT_EQ(hints["n"], "Int64");
  EXPECT_EQ(hints["total"], "Nullable(Float64)");
  EXPECT_EQ(hints["best"], "Nullable(String)");
  EXPECT_EQ(hints.count("events"), 0u);
}

class ClickHouseSinkTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (std::string missing = ClickHouseServer::Missing(); !missing.empty()) {
      GTEST_SKIP() << missing;
    }
    auto s = ClickHouseServer::Start();
    ASSERT_TRUE(s.ok()) << s.status();
    server_ = std::move(*s);
  }
  ClickHouseSinkOptions Options(const std::string& table) const {
    ClickHouseSinkOptions o;
    o.flush_interval_ms = 60'000;
    o.url = server_->url();
    o.database = "caravela_test";
    o.table = table;
    o.hints = {{"n", "Int64"}, {"total", "Nullable(Float64)"}};
    o.retries = 1;
    o.backoff_ms = 10;
    return o;
  }
  std::string Query(const std::string& sql) const {
    auto r = server_->Query(sql);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? *r : "";
  }
  static SinkRecord Result(const std::string& key, const std::string& value, int64_t revision) {
    SinkRecord r;
    r.key = key;
    r.value = value;
    r.revision = revision;
    return r;
  }

  std::unique_ptr<ClickHouseServer> server_;
};

std::string Window(const std::string& country, const std::string& start, double total, int n,
                   int64_t revision, const std::string& state) {
  return absl::StrCat(R"({"country":")", country, R"(","window_start":")", start,
                      R"(","window_end":"2026-10-01T11:00:00.000Z","total":)", total, R"(,"n":)", n,
                      R"(,"revision":)", revision, R"(,"state":")", state, R"("})");
}

TEST_F(ClickHouseSinkTest, RevisionsCollapseToTheHighestAndABatchWrittenTwiceIsHarmless) {
  ClickHouseSink sink(Options("rev"));
  ASSERT_OK(sink.Open());
  EXPECT_EQ(sink.time_type(), ClickHouseTimeType(Query("SELECT version()")));
  const std::string key_pt =
      R"({"country":"PT","window_start":"2026-10-01T10:00:00.000Z","window_end":"2026-10-01T11:00:00.000Z"})";
  const std::string key_es =
      R"({"country":"ES","window_start":"2026-10-01T10:00:00.000Z","window_end":"2026-10-01T11:00:00.000Z"})";
  const std::vector<std::pair<std::string, std::string>> batch = {
      {key_pt, Window("PT", "2026-10-01T10:00:00.000Z", 10.5, 1, 1, "EARLY")},
      {key_es, Window("ES", "2026-10-01T10:00:00.000Z", 3, 1, 1, "EARLY")},
      {key_pt, Window("PT", "2026-10-01T10:00:00.000Z", 30.25, 3, 2, "FINAL")},
  };
  for (int pass = 0; pass < 2; ++pass) {  // the second: a replay after a crash
    for (const auto& [k, v] : batch) ASSERT_OK(sink.WriteRecord(Result(k, v, 0)));
    // A batch's end: small and fresh, the rows wait for more.
    ASSERT_OK(sink.Flush());
    if (pass == 0) {
      EXPECT_EQ(sink.written(), 0);
      EXPECT_EQ(Query("SELECT count() FROM caravela_test.rev"), "0\n");
    }
    ASSERT_OK(sink.PreCommit(pass + 1));  // a checkpoint sends them
  }
  EXPECT_EQ(sink.written(), 6);
  EXPECT_EQ(Query("SELECT country, window_start, total, n, revision, state FROM caravela_test.rev "
                  "FINAL ORDER BY country"),
            "ES\t1790848800000\t3\t1\t1\tEARLY\nPT\t1790848800000\t30.25\t3\t2\tFINAL\n");
  ASSERT_TRUE(Query("OPTIMIZE TABLE caravela_test.rev FINAL").empty());
  EXPECT_EQ(Query("SELECT count() FROM caravela_test.rev"), "2\n");
  // argMax over revision reads the same without FINAL.
  EXPECT_EQ(Query("SELECT country, argMax(total, revision) FROM caravela_test.rev GROUP BY "
                  "country ORDER BY country"),
            "ES\t3\nPT\t30.25\n");
  // _result keeps the whole result.
  EXPECT_THAT(Query("SELECT _result FROM caravela_test.rev WHERE country = 'PT'"),
              HasSubstr(R"("total":30.25)"));
  // A keyed result must carry a revision (the table keeps the highest).
  absl::Status no_revision = sink.WriteRecord(Result(key_pt, R"({"country":"PT"})", -1));
  EXPECT_EQ(no_revision.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(no_revision.message(), HasSubstr("a keyed result without a revision"));
  ASSERT_OK(sink.Close());

  // A second sink on the existing table uses it as it is.
  ClickHouseSink again(Options("rev"));
  ASSERT_OK(again.Open());
  ASSERT_TRUE(
      again
          .WriteRecord(Result(
              key_pt, Window("PT", "2026-10-01T10:00:00.000Z", 31, 4, 1000000001, "FINAL"), 0))
          .ok());
  ASSERT_OK(again.Close());
  EXPECT_EQ(Query("SELECT n FROM caravela_test.rev FINAL WHERE country = 'PT'"), "4\n");
}

TEST_F(ClickHouseSinkTest, KeylessRowsAreAppendedAndMisfitsAreCounted) {
  ClickHouseSink sink(Options("rows"));
  ASSERT_OK(sink.Open());
  ASSERT_OK(sink.Write("", R"({"left":{"id":1},"right":null,"amount":2.5,"ok":true})"));
  // amount as text does not fit Nullable(Float64): NULL, counted, kept in _result.
  ASSERT_TRUE(
      sink.Write("", R"({"left":{"id":2},"right":{"id":9},"amount":"n/a","ok":false})").ok());
  ASSERT_OK(sink.Close());
  EXPECT_EQ(sink.mismatched(), 1);
  EXPECT_EQ(Query("SELECT left, right, amount, ok FROM caravela_test.rows ORDER BY left"),
            "{\"id\":1}\t\\N\t2.5\t1\n{\"id\":2}\t{\"id\":9}\t\\N\t0\n");
  EXPECT_THAT(Query("SELECT engine FROM system.tables WHERE database = 'caravela_test' AND name = "
                    "'rows'"),
              HasSubstr("MergeTree"));
  // A keyed result into the keyless table: the table has no revision.
  ClickHouseSink keyed(Options("rows"));
  ASSERT_OK(keyed.Open());
  absl::Status st = keyed.WriteRecord(
      Result(R"({"country":"PT"})", R"({"country":"PT","revision":1,"state":"FINAL"})", 1));
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(st.message(), HasSubstr("has no column country, revision"));
}

TEST_F(ClickHouseSinkTest, ErrorsNameTheUrlAndWhatToDo) {
  ClickHouseSinkOptions o = Options("t");
  o.url = "http://127.0.0.1:1";
  ClickHouseSink unreachable(o);
  absl::Status st = unreachable.Open();
  EXPECT_EQ(st.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(st.message(), HasSubstr("clickhouse sink (table caravela_test.t): clickhouse "
                                      "http://127.0.0.1:1: "));
  EXPECT_THAT(st.message(), HasSubstr("(after 2 attempts); is the server running"));

  o = Options("t");
  o.user = std::string(ClickHouseServer::kUser);  // with no password
  ClickHouseSink denied(o);
  st = denied.Open();
  EXPECT_EQ(st.code(), absl::StatusCode::kUnauthenticated) << st;
  EXPECT_THAT(st.message(), HasSubstr("as user caravela"));

  o = Options("t");
  o.password_file = "/nonexistent/password";
  ClickHouseSink no_file(o);
  EXPECT_THAT(no_file.Open().message(), HasSubstr("cannot read password_file /nonexistent"));
}

}  // namespace
}  // namespace caravela
