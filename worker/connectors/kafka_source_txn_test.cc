// KafkaSource on a topic written with transactions, on a real Apache Kafka
// (TestKafka, one broker for the suite; skipped on the embedded broker,
// which has no transactions): a transaction's
// commit or abort marker takes an offset and is never delivered, so the
// source's position follows librdkafka's (past the markers) and a bounded
// source ends at the end it queried (the last stable offset under
// read_committed, the high watermark under read_uncommitted).
#include <librdkafka/rdkafka.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/job_spec.h"
#include "common/source_kind.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/connectors/kafka_source.h"
#include "worker/connectors/kafka_test_util.h"
#include "worker/registry/builtin_kinds.h"
#include "worker/testing/status_testing.h"
#include "worker/testing/test_kafka.h"

namespace caravela {
namespace {

using ::testing::ElementsAre;

struct HandleDeleter {
  void operator()(rd_kafka_t* rk) const { rd_kafka_destroy(rk); }
};
using HandlePtr = std::unique_ptr<rd_kafka_t, HandleDeleter>;

absl::Status TxnStatus(rd_kafka_error_t* error, const char* what) {
  if (error == nullptr) return absl::OkStatus();
  absl::Status s = absl::InternalError(absl::StrCat(what, ": ", rd_kafka_error_string(error)));
  rd_kafka_error_destroy(error);
  return s;
}

// A transactional producer of partition 0 of one topic.
class TxnProducer {
 public:
  static absl::StatusOr<std::unique_ptr<TxnProducer>> Start(const std::string& bootstrap,
                                                            const std::string& topic) {
    ASSIGN_OR_RETURN(KafkaConfPtr conf,
                     NewKafkaConf({{"bootstrap.servers", bootstrap},
                                   {"transactional.id", "source-txn-test-" + topic}}));
    ASSIGN_OR_RETURN(rd_kafka_t * client,
                     NewKafkaClient(KafkaClientType::kProducer, std::move(conf), "txn producer"));
    auto p = std::unique_ptr<TxnProducer>(new TxnProducer);
    p->rk_.reset(client);
    p->topic_ = topic;
    RETURN_IF_ERROR(TxnStatus(rd_kafka_init_transactions(client, 30000), "init_transactions"));
    return p;
  }
  // Begins a transaction and writes `values` to partition 0 (delivered).
  absl::Status Write(const std::vector<std::string>& values) {
    RETURN_IF_ERROR(TxnStatus(rd_kafka_begin_transaction(rk_.get()), "begin_transaction"));
    for (const std::string& v : values) {
      const rd_kafka_resp_err_t err = rd_kafka_producev(
          rk_.get(), RD_KAFKA_V_TOPIC(topic_.c_str()), RD_KAFKA_V_PARTITION(0),
          RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
          RD_KAFKA_V_VALUE(const_cast<char*>(v.data()), v.size()), RD_KAFKA_V_END);
      if (err != RD_KAFKA_RESP_ERR_NO_ERROR) {
        return absl::InternalError(absl::StrCat("produce: ", rd_kafka_err2str(err)));
      }
    }
    if (rd_kafka_flush(rk_.get(), 30000) != RD_KAFKA_RESP_ERR_NO_ERROR) {
      return absl::DeadlineExceededError("flush");
    }
    return absl::OkStatus();
  }
  absl::Status Commit() {
    return TxnStatus(rd_kafka_commit_transaction(rk_.get(), 30000), "commit_transaction");
  }
  absl::Status Abort() {
    return TxnStatus(rd_kafka_abort_transaction(rk_.get(), 30000), "abort_transaction");
  }

 private:
  TxnProducer() = default;
  HandlePtr rk_;
  std::string topic_;
};

class KafkaSourceTxnTest : public KafkaSuiteTest {
 protected:
  void SetUp() override {
    CARAVELA_SKIP_UNLESS_APACHE_KAFKA(kafka_, "the embedded broker has no transactions");
  }

  // Offsets 0-2 committed (a, b, c), 3 its marker; 4-5 aborted (x, y), 6 its
  // marker; 7-8 committed (d, e), 9 its marker: high watermark 10.
  static void WriteThreeTransactions(const std::string& topic) {
    ASSERT_OK(kafka_->CreateTopic(topic, 1));
    auto producer = TxnProducer::Start(bootstrap(), topic);
    ASSERT_TRUE(producer.ok()) << producer.status();
    ASSERT_OK((*producer)->Write({"a", "b", "c"}));
    ASSERT_OK((*producer)->Commit());
    ASSERT_OK((*producer)->Write({"x", "y"}));
    ASSERT_OK((*producer)->Abort());
    ASSERT_OK((*producer)->Write({"d", "e"}));
    ASSERT_OK((*producer)->Commit());
  }

  static KafkaSourceOptions Options(const std::string& topic, const std::string& isolation) {
    KafkaSourceOptions o;
    o.bootstrap = bootstrap();
    o.topic = topic;
    o.config["isolation.level"] = isolation;
    return o;
  }
};

struct Drained {
  std::vector<std::string> values;
  std::vector<int64_t> offsets;
};

// Polls until `done()` or 10 s.
Drained PollUntil(KafkaSource& source, const std::function<bool()>& done) {
  Drained out;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!done() && std::chrono::steady_clock::now() < deadline) {
    auto n = source.Poll(100, 50, [&](const RawMessage& m) {
      out.values.emplace_back(m.payload);
      out.offsets.push_back(m.offset);
    });
    EXPECT_TRUE(n.ok()) << n.status();
    if (!n.ok()) break;
  }
  return out;
}

// Before: positions stopped at the last record + 1, i.e. on the final
// commit marker, so Backlog() stayed at 1 forever (measured: "read 5
// backlog 1 pos 9 hw 10").
TEST_F(KafkaSourceTxnTest, PositionsPassTransactionMarkersSoBacklogReachesZero) {
  const std::string topic = "txn-positions";
  WriteThreeTransactions(topic);
  {
    KafkaSource source(Options(topic, "read_committed"));
    ASSERT_OK(source.Open());
    EXPECT_EQ(source.Backlog(0), 10);
    Drained d = PollUntil(source, [&] { return source.Backlog(0) == 0; });
    EXPECT_THAT(d.values, ElementsAre("a", "b", "c", "d", "e"));
    EXPECT_THAT(d.offsets, ElementsAre(0, 1, 2, 7, 8));
    EXPECT_EQ(source.Backlog(0), 0);
    EXPECT_THAT(source.Positions(), ElementsAre(10));
  }
  {
    KafkaSource source(Options(topic, "read_uncommitted"));
    ASSERT_OK(source.Open());
    Drained d = PollUntil(source, [&] { return source.Backlog(0) == 0; });
    EXPECT_THAT(d.values, ElementsAre("a", "b", "c", "x", "y", "d", "e"));
    EXPECT_EQ(source.Backlog(0), 0);
    EXPECT_THAT(source.Positions(), ElementsAre(10));
  }
  // ConsumeAll (the tests' reader) ends on such a topic.
  auto all = ConsumeAllValues(bootstrap(), topic);
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_THAT(*all, ElementsAre("a", "b", "c", "d", "e"));
}

// Positions taken after any record resume right after it: what a
// checkpoint stores and a restore starts from.
TEST_F(KafkaSourceTxnTest, ARestoreResumesRightAfterTheLastDeliveredRecord) {
  const std::string topic = "txn-restore";
  WriteThreeTransactions(topic);
  KafkaSource first(Options(topic, "read_committed"));
  ASSERT_OK(first.Open());
  std::vector<std::string> seen;
  std::vector<std::vector<int64_t>> positions;  // after each record
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (first.Backlog(0) > 0 && std::chrono::steady_clock::now() < deadline) {
    auto n = first.Poll(1, 50, [&](const RawMessage& m) { seen.emplace_back(m.payload); });
    ASSERT_TRUE(n.ok()) << n.status();
    if (*n == 1) positions.push_back(first.Positions());
  }
  ASSERT_THAT(seen, ElementsAre("a", "b", "c", "d", "e"));
  for (size_t i = 0; i < positions.size(); ++i) {
    SCOPED_TRACE(absl::StrCat("restored after ", seen[i], " at ", positions[i][0]));
    KafkaSourceOptions o = Options(topic, "read_committed");
    o.start_offsets[0] = positions[i][0];
    KafkaSource restored(o);
    ASSERT_OK(restored.Open());
    Drained d = PollUntil(restored, [&] { return restored.Backlog(0) == 0; });
    EXPECT_EQ(d.values, std::vector<std::string>(seen.begin() + i + 1, seen.end()));
    EXPECT_THAT(restored.Positions(), ElementsAre(10));
  }
  // Restored on a marker (3: after c's commit; 6: after the abort): the
  // next committed record.
  for (int64_t at : {3, 6}) {
    KafkaSourceOptions o = Options(topic, "read_committed");
    o.start_offsets[0] = at;
    KafkaSource restored(o);
    ASSERT_OK(restored.Open());
    Drained d = PollUntil(restored, [&] { return restored.Backlog(0) == 0; });
    EXPECT_THAT(d.values, ElementsAre("d", "e")) << "from " << at;
  }
}

// A bounded source stops at the end it queried: under read_committed the
// last stable offset (an open transaction's records are not read and do not
// keep it from ending), under read_uncommitted the high watermark.
TEST_F(KafkaSourceTxnTest, ABoundedSourceEndsAtTheLastStableOffsetOrTheHighWatermark) {
  const std::string topic = "txn-bounded";
  WriteThreeTransactions(topic);
  auto open_txn = TxnProducer::Start(bootstrap(), topic);
  ASSERT_TRUE(open_txn.ok()) << open_txn.status();
  ASSERT_OK((*open_txn)->Write({"open1", "open2"}));  // offsets 10, 11; not decided

  {
    KafkaSource source(Options(topic, "read_committed"));
    ASSERT_OK(source.Open());
    ASSERT_OK(source.StopAtCurrentEnd());
    Drained d = PollUntil(source, [&] { return source.Exhausted(); });
    EXPECT_TRUE(source.Exhausted());
    EXPECT_THAT(d.values, ElementsAre("a", "b", "c", "d", "e"));
    EXPECT_THAT(source.Positions(), ElementsAre(10));
    EXPECT_EQ(source.Backlog(0), 0);
  }
  {
    KafkaSource source(Options(topic, "read_uncommitted"));
    ASSERT_OK(source.Open());
    ASSERT_OK(source.StopAtCurrentEnd());
    Drained d = PollUntil(source, [&] { return source.Exhausted(); });
    EXPECT_TRUE(source.Exhausted());
    EXPECT_THAT(d.values, ElementsAre("a", "b", "c", "x", "y", "d", "e", "open1", "open2"));
    EXPECT_THAT(source.Positions(), ElementsAre(12));
  }
  // An unbounded read_committed source reaches the open transaction and
  // waits there; once it commits, it reads on, past its marker.
  KafkaSource source(Options(topic, "read_committed"));
  ASSERT_OK(source.Open());
  Drained before = PollUntil(source, [&] { return source.Positions()[0] >= 10; });
  EXPECT_THAT(before.values, ElementsAre("a", "b", "c", "d", "e"));
  // Its backlog counts the open transaction's records (the high watermark
  // minus the position), as Kafka's consumer-group lag does.
  EXPECT_EQ(source.Backlog(0), 2);
  ASSERT_OK((*open_txn)->Commit());
  Drained after = PollUntil(source, [&] { return source.Positions()[0] >= 13; });
  EXPECT_THAT(after.values, ElementsAre("open1", "open2"));
  EXPECT_EQ(source.Backlog(0), 0);
  auto all = ConsumeAllValues(bootstrap(), topic);
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_EQ(all->size(), 7u);
}

// A job's `kafka.isolation` reaches its source's consumer (the kind's
// Create): read_committed by default, read_uncommitted when asked.
TEST_F(KafkaSourceTxnTest, AJobsIsolationReachesItsSource) {
  const std::string topic = "txn-job";
  WriteThreeTransactions(topic);
  (void)BuiltinKinds();
  auto read = [&](const std::string& isolation) {
    ParseResult r = ParseJobSpec(absl::StrCat(R"(apiVersion: caravela/v1
kind: Job
metadata: {name: iso}
spec:
  sources:
    - name: in
      kafka: {topic: )",
                                              topic, ", bootstrap: \"", bootstrap(),
                                              "\", bounded: true", isolation, R"(}
      event_time: {field: ts}
  sinks:
    - {from: in, stdout: {}}
)"));
    EXPECT_TRUE(r.ok()) << (r.errors.empty() ? "" : r.errors[0].ToString());
    std::vector<std::string> values;
    if (!r.ok()) return values;
    SourceContext ctx;
    ctx.job_name = "iso";
    absl::StatusOr<std::unique_ptr<RawSource>> source =
        r.spec.sources[0].kind->Create(r.spec.sources[0], ctx);
    EXPECT_TRUE(source.ok()) << source.status();
    if (!source.ok()) return values;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!(*source)->Exhausted() && std::chrono::steady_clock::now() < deadline) {
      auto n =
          (*source)->Poll(100, 50, [&](const RawMessage& m) { values.emplace_back(m.payload); });
      EXPECT_TRUE(n.ok()) << n.status();
      if (!n.ok()) break;
    }
    EXPECT_TRUE((*source)->Exhausted());
    return values;
  };
  EXPECT_THAT(read(""), ElementsAre("a", "b", "c", "d", "e"));
  EXPECT_THAT(read(", isolation: read_committed"), ElementsAre("a", "b", "c", "d", "e"));
  EXPECT_THAT(read(", isolation: read_uncommitted"),
              ElementsAre("a", "b", "c", "x", "y", "d", "e"));
}

}  // namespace
}  // namespace caravela
