// PostgresSink against a real PostgreSQL server (worker/testing/postgres_server.h).
#include "worker/connectors/postgres_sink.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "worker/connectors/sink_factory.h"
#include "worker/registry/builtin_kinds.h"
#include "worker/testing/postgres_server.h"
#include "worker/testing/status_testing.h"

namespace caravela {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;
using Rows = std::vector<std::vector<std::string>>;

constexpr int64_t kEpochBase = 1'000'000'000;

class PostgresSinkTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    absl::StatusOr<std::unique_ptr<PostgresServer>> s = PostgresServer::Start();
    if (!s.ok()) {
      start_error_ = new std::string(s.status().ToString());
      return;
    }
    server_ = s->release();
  }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
    delete start_error_;
    start_error_ = nullptr;
  }
  void SetUp() override {
    ASSERT_NE(server_, nullptr) << "could not start PostgreSQL: "
                                << (start_error_ ? *start_error_ : "");
  }

  static PostgresSinkOptions Options(const std::string& table, int64_t epoch = 0) {
    PostgresSinkOptions o;
    o.dsn = server_->Dsn();
    o.table = table;
    o.epoch = epoch;
    o.yaml_path = "spec.sinks[0].postgres";
    return o;
  }
  static std::unique_ptr<PostgresSink> OpenSink(const PostgresSinkOptions& o) {
    auto sink = std::make_unique<PostgresSink>(o);
    absl::Status st = sink->Open();
    EXPECT_TRUE(st.ok()) << st;
    return sink;
  }
  static Rows Query(const std::string& sql) {
    absl::StatusOr<Rows> rows = server_->Query(sql);
    EXPECT_TRUE(rows.ok()) << rows.status();
    return rows.ok() ? *rows : Rows{};
  }

  static std::string Key(const std::string& country, const std::string& start) {
    return absl::StrCat(R"({"country":")", country, R"(","window_start":")", start, R"("})");
  }
  static std::string Value(const std::string& country, const std::string& start, int64_t rev,
                           int revenue, const std::string& state) {
    return absl::StrCat(R"({"window_start":")", start, R"(","country":")", country,
                        R"(","revenue":)", revenue, R"(,"revision":)", rev, R"(,"state":")", state,
                        R"("})");
  }
  // Writes one window result (key = country + window_start).
  static absl::Status Put(PostgresSink& sink, const std::string& country, int64_t rev, int revenue,
                          const std::string& state = "LATE",
                          const std::string& start = "2026-10-01T10:00:00.000Z") {
    std::string key = Key(country, start);
    std::string value = Value(country, start, rev, revenue, state);
    SinkRecord r;
    r.key = key;
    r.value = value;
    r.revision = rev;
    r.state = state;
    return sink.WriteRecord(r);
  }

  static PostgresServer* server_;
  static std::string* start_error_;
};

PostgresServer* PostgresSinkTest::server_ = nullptr;
std::string* PostgresSinkTest::start_error_ = nullptr;

TEST_F(PostgresSinkTest, CreatesTheTableAtTheFirstFlush) {
  auto sink = OpenSink(Options("Created_Table", /*epoch=*/2));
  // Unknown key fields: nothing is created before the first record is flushed.
  EXPECT_THAT(Query("SELECT to_regclass('created_table') IS NULL"), ElementsAre(ElementsAre("t")));
  ASSERT_OK(sink->Flush());
  EXPECT_THAT(Query("SELECT to_regclass('created_table') IS NULL"), ElementsAre(ElementsAre("t")));

  ASSERT_OK(Put(*sink, "PT", 2 * kEpochBase + 1, 150, "ON_TIME"));
  ASSERT_OK(sink->Flush());
  EXPECT_EQ(sink->written(), 1);
  // The name is folded to lower case, like an unquoted SQL name.
  EXPECT_THAT(
      Query("SELECT column_name, data_type, is_nullable, coalesce(column_default, '') FROM "
            "information_schema.columns WHERE table_name = 'created_table' ORDER BY "
            "ordinal_position"),
      ElementsAre(
          ElementsAre("country", "text", "NO", ""), ElementsAre("window_start", "text", "NO", ""),
          ElementsAre("revision", "bigint", "NO", ""), ElementsAre("state", "text", "YES", ""),
          ElementsAre("epoch", "bigint", "NO", ""), ElementsAre("value", "jsonb", "NO", ""),
          ElementsAre("updated_at", "timestamp with time zone", "NO", "now()")));
  EXPECT_THAT(Query("SELECT a.attname FROM pg_index i JOIN pg_attribute a ON a.attrelid = "
                    "i.indrelid AND a.attnum = ANY(i.indkey) WHERE i.indrelid = "
                    "'created_table'::regclass AND i.indisprimary ORDER BY a.attnum"),
              ElementsAre(ElementsAre("country"), ElementsAre("window_start")));
  EXPECT_THAT(Query("SELECT country, window_start, revision, state, epoch, value->>'revenue', "
                    "updated_at IS NOT NULL FROM created_table"),
              ElementsAre(ElementsAre("PT", "2026-10-01T10:00:00.000Z", "2000000001", "ON_TIME",
                                      "2", "150", "t")));
  EXPECT_OK(sink->Close());
}

TEST_F(PostgresSinkTest, KeyValuesAreStoredAsText) {
  auto sink = OpenSink(Options("key_text"));
  std::string key = R"({"name":"say \"hi\" \\ ok","n":7,"d":1.50,"b":true,"z":null,"o":{"a":[1]}})";
  SinkRecord r;
  r.key = key;
  r.value = R"({"s":"quote \" backslash \\ tab \t unicode é 😀","revision":1})";
  r.revision = 1;
  ASSERT_OK(sink->WriteRecord(r));
  ASSERT_OK(sink->Close());
  EXPECT_THAT(
      Query("SELECT name, n, d, b, z, o, state IS NULL, value->>'s' FROM key_text"),
      // Non-strings are the runtime's JSON text (1.50 is the exact decimal 1.5).
      ElementsAre(ElementsAre("say \"hi\" \\ ok", "7", "1.5", "true", "null", R"({"a":[1]})", "t",
                              "quote \" backslash \\ tab \t unicode é 😀")));
}

TEST_F(PostgresSinkTest, UpsertKeepsTheHighestRevision) {
  auto sink = OpenSink(Options("upsert"));
  ASSERT_OK(Put(*sink, "PT", 1, 100, "EARLY"));
  ASSERT_OK(sink->Flush());
  ASSERT_OK(Put(*sink, "PT", 3, 170, "LATE"));
  ASSERT_OK(sink->Flush());
  EXPECT_EQ(sink->written(), 2);
  EXPECT_EQ(sink->rejected(), 0);
  // An older and an equal revision (a replay with different content, to see
  // that it is not applied).
  ASSERT_OK(Put(*sink, "PT", 2, 150, "ON_TIME"));
  ASSERT_OK(sink->Flush());
  ASSERT_OK(Put(*sink, "PT", 3, 999, "LATE"));
  ASSERT_OK(sink->Flush());
  EXPECT_EQ(sink->written(), 2);
  EXPECT_EQ(sink->rejected(), 2);
  EXPECT_THAT(Query("SELECT revision, state, value->>'revenue' FROM upsert"),
              ElementsAre(ElementsAre("3", "LATE", "170")));
  // A higher revision still goes through.
  ASSERT_OK(Put(*sink, "PT", 4, 190, "FINAL"));
  ASSERT_OK(sink->Close());
  EXPECT_EQ(sink->written(), 3);
  EXPECT_THAT(Query("SELECT revision, state, value->>'revenue' FROM upsert"),
              ElementsAre(ElementsAre("4", "FINAL", "190")));
}

TEST_F(PostgresSinkTest, ManyKeysInOneBatchWithRepeatedKeys) {
  PostgresSinkOptions o = Options("many_keys");
  o.max_rows_per_statement = 97;  // several statements per flush
  auto sink = OpenSink(o);
  // 500 keys x revisions 1..6, shuffled: the buffer sees lower revisions after
  // higher ones and must keep the highest of each key.
  struct W {
    int key;
    int64_t rev;
  };
  std::vector<W> writes;
  for (int k = 0; k < 500; ++k) {
    for (int64_t rev = 1; rev <= 6; ++rev) writes.push_back({k, rev});
  }
  std::mt19937 rng(42);
  std::shuffle(writes.begin(), writes.end(), rng);
  for (const W& w : writes) {
    ASSERT_OK(Put(*sink, absl::StrCat("C", w.key), w.rev, static_cast<int>(w.rev * 10)));
  }
  EXPECT_EQ(sink->pending(), 500u);
  ASSERT_OK(sink->Flush());
  EXPECT_EQ(sink->pending(), 0u);
  EXPECT_EQ(sink->written(), 500);
  EXPECT_EQ(sink->written() + sink->rejected() + sink->superseded(),
            static_cast<int64_t>(writes.size()));
  EXPECT_THAT(Query("SELECT count(*), min(revision), max(revision), sum((value->>'revenue')::int) "
                    "FROM many_keys"),
              ElementsAre(ElementsAre("500", "6", "6", "30000")));

  // Second batch: every key again at revisions 5..8, in one flush: only 7 and 8 apply.
  writes.clear();
  for (int k = 0; k < 500; ++k) {
    for (int64_t rev = 5; rev <= 8; ++rev) writes.push_back({k, rev});
  }
  std::shuffle(writes.begin(), writes.end(), rng);
  for (const W& w : writes) {
    ASSERT_OK(Put(*sink, absl::StrCat("C", w.key), w.rev, static_cast<int>(w.rev * 10)));
  }
  ASSERT_OK(sink->Close());
  EXPECT_EQ(sink->written(), 1000);
  EXPECT_THAT(Query("SELECT count(*), min(revision), max(revision) FROM many_keys"),
              ElementsAre(ElementsAre("500", "8", "8")));
}

TEST_F(PostgresSinkTest, ReplayedBatchIsRejected) {
  // The same batch delivered twice (recovery re-delivers what was flushed
  // after the checkpoint): the second delivery changes nothing.
  auto sink = OpenSink(Options("replayed"));
  for (int round = 0; round < 2; ++round) {
    for (int k = 0; k < 20; ++k) ASSERT_OK(Put(*sink, absl::StrCat("K", k), 5, k));
    ASSERT_OK(sink->Flush());
  }
  EXPECT_EQ(sink->written(), 20);
  EXPECT_EQ(sink->rejected(), 20);
  EXPECT_THAT(Query("SELECT count(*), sum(revision) FROM replayed"),
              ElementsAre(ElementsAre("20", "100")));
}

TEST_F(PostgresSinkTest, ASecondInstanceStillRespectsTheGuard) {
  {
    auto first = OpenSink(Options("restart"));
    ASSERT_OK(Put(*first, "PT", 5, 170));
    ASSERT_OK(Put(*first, "ES", 2, 20));
    ASSERT_OK(first->Close());
  }
  auto second = OpenSink(Options("restart"));  // the table exists now
  ASSERT_OK(Put(*second, "PT", 4, 1));
  ASSERT_OK(Put(*second, "ES", 2, 2));
  ASSERT_OK(second->Flush());
  EXPECT_EQ(second->written(), 0);
  EXPECT_EQ(second->rejected(), 2);
  ASSERT_OK(Put(*second, "PT", 6, 180));
  ASSERT_OK(second->Close());
  EXPECT_EQ(second->written(), 1);
  EXPECT_THAT(Query("SELECT country, revision, value->>'revenue' FROM restart ORDER BY 1"),
              ElementsAre(ElementsAre("ES", "2", "20"), ElementsAre("PT", "6", "180")));
}

TEST_F(PostgresSinkTest, StaleEpochIsFenced) {
  auto current = OpenSink(Options("fenced", /*epoch=*/1));
  ASSERT_OK(Put(*current, "PT", kEpochBase + 1, 170));
  ASSERT_OK(current->Flush());

  // A stale worker still running epoch 0, far along in its own numbering.
  auto stale = OpenSink(Options("fenced", /*epoch=*/0));
  ASSERT_OK(Put(*stale, "PT", 999'999, 5));
  ASSERT_OK(stale->Flush());
  EXPECT_EQ(stale->written(), 0);
  EXPECT_EQ(stale->rejected(), 1);
  EXPECT_THAT(Query("SELECT revision, epoch, value->>'revenue' FROM fenced"),
              ElementsAre(ElementsAre("1000000001", "1", "170")));

  // The current run goes on.
  ASSERT_OK(Put(*current, "PT", kEpochBase + 2, 180));
  ASSERT_OK(current->Close());
  EXPECT_THAT(Query("SELECT revision, epoch, value->>'revenue' FROM fenced"),
              ElementsAre(ElementsAre("1000000002", "1", "180")));
  ASSERT_OK(stale->Close());
}

// Cluster jobs fence by epoch explicitly: once epoch 2 of the job opened its
// sink, a paused worker of epoch 1 lands nothing, not even keys epoch 2 has
// not written yet (the revision guard alone would let those through until
// epoch 2 supersedes them), and its flush says it was fenced.
TEST_F(PostgresSinkTest, ClusterEpochFenceKeepsAStaleWorkerOut) {
  PostgresSinkOptions old_options = Options("epoch_fence", /*epoch=*/1);
  old_options.fence_job = "revenue";
  auto stale = OpenSink(old_options);
  ASSERT_OK(Put(*stale, "PT", kEpochBase + 1, 100));
  ASSERT_OK(stale->Flush());  // before the new epoch: lands

  PostgresSinkOptions new_options = Options("epoch_fence", /*epoch=*/2);
  new_options.fence_job = "revenue";
  auto current = OpenSink(new_options);
  ASSERT_OK(Put(*current, "PT", 2 * kEpochBase + 1, 110));
  ASSERT_OK(current->Flush());

  // The stale worker resumes: a key the new epoch has not written yet.
  ASSERT_OK(Put(*stale, "ES", kEpochBase + 2, 7));
  absl::Status st = stale->Flush();
  EXPECT_TRUE(absl::IsFailedPrecondition(st)) << st;
  EXPECT_THAT(st.message(), HasSubstr("fenced"));
  EXPECT_EQ(stale->written(), 1);
  EXPECT_THAT(Query("SELECT country, epoch, value->>'revenue' FROM epoch_fence ORDER BY 1"),
              ElementsAre(ElementsAre("PT", "2", "110")));
  EXPECT_THAT(Query("SELECT job, target, epoch FROM caravela_fences WHERE job = 'revenue'"),
              ElementsAre(ElementsAre("revenue", "epoch_fence", "2")));

  // A stale writer that opens late is refused at Open.
  PostgresSink late(old_options);
  absl::Status opened = late.Open();
  EXPECT_TRUE(absl::IsFailedPrecondition(opened)) << opened;
  EXPECT_THAT(opened.message(), HasSubstr("epoch 2 of job revenue"));
  ASSERT_OK(current->Close());
}

TEST_F(PostgresSinkTest, KeylessRecordsAreAppended) {
  auto sink = OpenSink(Options("keyless", /*epoch=*/3));
  ASSERT_OK(sink->Write("", R"({"reason":"late","n":1})"));
  ASSERT_OK(sink->Write("", R"({"reason":"late","n":1})"));  // no dedup: appended
  SinkRecord r;
  r.value = R"({"n":2,"revision":9,"state":"FINAL"})";
  r.revision = 9;
  r.state = "FINAL";
  ASSERT_OK(sink->WriteRecord(r));
  ASSERT_OK(sink->Flush());
  ASSERT_OK(sink->Write("", R"({"n":3})"));
  ASSERT_OK(sink->Close());
  EXPECT_EQ(sink->written(), 4);
  EXPECT_THAT(
      Query("SELECT coalesce(revision::text, 'null'), coalesce(state, 'null'), epoch, "
            "value->>'n' FROM keyless ORDER BY value->>'n', revision NULLS FIRST"),
      ElementsAre(ElementsAre("null", "null", "3", "1"), ElementsAre("null", "null", "3", "1"),
                  ElementsAre("9", "FINAL", "3", "2"), ElementsAre("null", "null", "3", "3")));
  EXPECT_THAT(Query("SELECT count(*) FROM pg_index WHERE indrelid = 'keyless'::regclass"),
              ElementsAre(ElementsAre("0")));

  // A keyed record into the keyless table is an error, also for a new instance.
  auto again = OpenSink(Options("keyless"));
  absl::Status st = Put(*again, "PT", 1, 1);
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(st.message(), HasSubstr("no key columns"));
}

TEST_F(PostgresSinkTest, BadDsnGivesAClearError) {
  // A port nothing listens on (the test server's port after it is stopped
  // would do too; this one is reserved and refused on loopback).
  PostgresSinkOptions o = Options("t");
  o.dsn = "host=127.0.0.1 port=1 dbname=x user=y password=s3cret connect_timeout=5";
  PostgresSink sink(o);
  absl::Status st = sink.Open();
  EXPECT_EQ(st.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(st.message(), HasSubstr("spec.sinks[0].postgres: cannot connect to PostgreSQL"));
  EXPECT_THAT(st.message(), HasSubstr("host=127.0.0.1 port=1 dbname=x user=y password=***"));
  EXPECT_THAT(st.message(), HasSubstr("check that the server is running"));
  EXPECT_THAT(st.message(), Not(HasSubstr("s3cret")));

  o.dsn = server_->Dsn("no_such_db");
  PostgresSink missing_db(o);
  st = missing_db.Open();
  EXPECT_EQ(st.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(st.message(), HasSubstr("database \"no_such_db\" does not exist"));

  o.dsn = "postgresql://u:pw0rd@127.0.0.1:1/db";
  PostgresSink uri(o);
  st = uri.Open();
  EXPECT_THAT(st.message(), HasSubstr("postgresql://u:***@127.0.0.1:1/db"));
  EXPECT_THAT(st.message(), Not(HasSubstr("pw0rd")));
  // Never crashes when used after a failed Open.
  EXPECT_FALSE(Put(uri, "PT", 1, 1).ok() && uri.Flush().ok());
  EXPECT_FALSE(uri.Close().ok());
}

TEST_F(PostgresSinkTest, ExistingTableThatDoesNotFitIsRefused) {
  ASSERT_TRUE(server_
                  ->Exec("CREATE TABLE misfit (country text PRIMARY KEY, revision int, "
                         "epoch bigint, value text)")
                  .ok());
  PostgresSink sink(Options("misfit"));
  absl::Status st = sink.Open();
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(st.message(), HasSubstr("spec.sinks[0].postgres (table misfit): the table exists "
                                      "but does not fit"));
  EXPECT_THAT(st.message(), HasSubstr("column revision is integer, expected bigint"));
  EXPECT_THAT(st.message(), HasSubstr("column state (text) is missing"));
  EXPECT_THAT(st.message(), HasSubstr("column value is text, expected jsonb"));
}

TEST_F(PostgresSinkTest, RecordKeyMustMatchTheTablesKey) {
  {
    auto first = OpenSink(Options("key_match"));
    ASSERT_OK(Put(*first, "PT", 1, 1));
    ASSERT_OK(first->Close());
  }
  auto sink = OpenSink(Options("key_match"));
  SinkRecord r;
  r.key = R"({"region":"EU"})";
  r.value = R"({"region":"EU"})";
  r.revision = 1;
  absl::Status st = sink->WriteRecord(r);
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(st.message(), HasSubstr("a record's key has fields (region) but the table's key "
                                      "columns are (country, window_start)"));
  // Same fields in another order are fine.
  r.key = R"({"window_start":"2026-10-01T10:00:00.000Z","country":"PT"})";
  r.revision = 2;
  ASSERT_OK(sink->WriteRecord(r));
  ASSERT_OK(sink->Close());
  EXPECT_THAT(Query("SELECT country, revision FROM key_match"),
              ElementsAre(ElementsAre("PT", "2")));
}

TEST_F(PostgresSinkTest, RecordErrors) {
  auto sink = OpenSink(Options("record_errors"));
  SinkRecord r;
  r.key = R"({"country":"PT"})";
  r.value = R"({"country":"PT"})";
  absl::Status st = sink->WriteRecord(r);  // no revision
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(st.message(), HasSubstr("has no integer \"revision\" field"));

  r.key = R"({"state":"CA"})";
  r.revision = 1;
  st = sink->WriteRecord(r);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(st.message(), HasSubstr("key field \"state\" is also the name of one of the sink's "
                                      "own columns"));

  r.key = "not json";
  st = sink->WriteRecord(r);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);

  // Nothing was buffered; a good record still works.
  EXPECT_EQ(sink->pending(), 0u);
  ASSERT_OK(Put(*sink, "PT", 1, 1));
  ASSERT_OK(sink->Close());
  EXPECT_EQ(sink->written(), 1);

  PostgresSink bad_name(Options("bad-name"));
  EXPECT_EQ(bad_name.Open().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(PostgresSinkTest, SqlErrorsSayWhatFailed) {
  // The table exists but rejects the sink's rows (a CHECK constraint).
  ASSERT_TRUE(server_
                  ->Exec("CREATE TABLE checked (country text, window_start text, revision bigint "
                         "NOT NULL CHECK (revision < 100), state text, epoch bigint NOT NULL, "
                         "value jsonb NOT NULL, PRIMARY KEY (country, window_start))")
                  .ok());
  auto sink = OpenSink(Options("checked"));
  ASSERT_OK(Put(*sink, "PT", 5, 1));
  ASSERT_OK(Put(*sink, "ES", 500, 1));
  absl::Status st = sink->Flush();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(st.message(), HasSubstr("spec.sinks[0].postgres (table checked): upsert of 2 rows "
                                      "failed: ERROR:  new row for relation \"checked\" violates "
                                      "check constraint"));
  EXPECT_THAT(st.message(), HasSubstr("[SQLSTATE 23514]"));
  EXPECT_EQ(sink->pending(), 2u);  // kept for a later Flush
  EXPECT_FALSE(sink->Close().ok());
}

TEST_F(PostgresSinkTest, ReconnectsOnceAfterALostConnection) {
  PostgresSinkOptions o = Options("reconnect");
  o.dsn = server_->Dsn() + " application_name=reconnect_test";
  auto sink = OpenSink(o);
  ASSERT_OK(Put(*sink, "PT", 1, 100));
  ASSERT_OK(sink->Flush());
  absl::StatusOr<int> killed = server_->TerminateConnections();
  ASSERT_TRUE(killed.ok()) << killed.status();
  EXPECT_GE(*killed, 1);
  ASSERT_OK(Put(*sink, "PT", 2, 150));
  ASSERT_OK(sink->Flush());
  EXPECT_EQ(sink->written(), 2);
  EXPECT_THAT(Query("SELECT revision, value->>'revenue' FROM reconnect"),
              ElementsAre(ElementsAre("2", "150")));
  ASSERT_OK(sink->Close());
}

TEST_F(PostgresSinkTest, WriteFlushesWhenTheBufferIsFull) {
  PostgresSinkOptions o = Options("auto_flush");
  o.max_buffered = 10;
  auto sink = OpenSink(o);
  for (int k = 0; k < 25; ++k) ASSERT_OK(Put(*sink, absl::StrCat("K", k), 1, k));
  EXPECT_EQ(sink->written(), 20);
  EXPECT_EQ(sink->pending(), 5u);
  ASSERT_OK(sink->Close());
  EXPECT_THAT(Query("SELECT count(*) FROM auto_flush"), ElementsAre(ElementsAre("25")));
}

TEST_F(PostgresSinkTest, SchemaQualifiedTableAndFactory) {
  ASSERT_OK(server_->Exec("CREATE SCHEMA analytics"));
  SinkSpec spec;
  spec.kind = BuiltinKinds().sinks.Find("postgres");
  spec.config = PostgresSinkSpec{server_->Dsn(), "Analytics.Hourly"};
  SinkContext ctx;
  ctx.epoch = 7;
  ctx.sink_index = 3;
  absl::StatusOr<std::unique_ptr<Sink>> made = MakeSink(spec, ctx);
  ASSERT_TRUE(made.ok()) << made.status();
  auto* sink = dynamic_cast<PostgresSink*>(made->get());
  ASSERT_NE(sink, nullptr);
  ASSERT_OK(sink->Open());
  EXPECT_EQ(sink->quoted_table(), "\"analytics\".\"hourly\"");
  ASSERT_OK(Put(*sink, "PT", 7 * kEpochBase + 1, 1));
  ASSERT_OK(sink->Close());
  EXPECT_THAT(Query("SELECT epoch FROM analytics.hourly"), ElementsAre(ElementsAre("7")));

  // The factory names the sink's YAML path in errors.
  spec.Mutable<PostgresSinkSpec>()->dsn = "host=127.0.0.1 port=1";
  made = MakeSink(spec, ctx);
  ASSERT_OK(made);
  EXPECT_THAT((*made)->Open().message(), HasSubstr("spec.sinks[3].postgres: cannot connect"));
}

}  // namespace
}  // namespace caravela
