// The ApacheKafka fixture against real brokers: one broker serves a
// 3-partition topic, auto-creates topics and serves transactions; on three, a topic with
// replication factor 3 and min.insync.replicas=2 still takes acks=all writes after its leader is
// SIGKILLed, and the broker comes back.
#include "worker/testing/apache_kafka.h"

#include <gtest/gtest.h>
#include <librdkafka/rdkafka.h>

#include <chrono>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "worker/connectors/kafka_source.h"
#include "worker/connectors/kafka_test_util.h"
#include "worker/testing/status_testing.h"

namespace caravela {
namespace {

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

// One transaction of `values` to partition 0 of `topic`, committed or
// aborted.
absl::Status ProduceTransaction(const std::string& bootstrap, const std::string& topic,
                                const std::vector<std::string>& values, bool commit) {
  ASSIGN_OR_RETURN(KafkaConfPtr conf,
                   NewKafkaConf({{"bootstrap.servers", bootstrap},
                                 {"transactional.id", "apache-kafka-test-" + topic}}));
  ASSIGN_OR_RETURN(rd_kafka_t * client, NewKafkaClient(KafkaClientType::kProducer, std::move(conf),
                                                       "transactional producer"));
  HandlePtr rk(client);
  RETURN_IF_ERROR(TxnStatus(rd_kafka_init_transactions(rk.get(), 30000), "init_transactions"));
  RETURN_IF_ERROR(TxnStatus(rd_kafka_begin_transaction(rk.get()), "begin_transaction"));
  for (const std::string& v : values) {
    const rd_kafka_resp_err_t err =
        rd_kafka_producev(rk.get(), RD_KAFKA_V_TOPIC(topic.c_str()), RD_KAFKA_V_PARTITION(0),
                          RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
                          RD_KAFKA_V_VALUE(const_cast<char*>(v.data()), v.size()), RD_KAFKA_V_END);
    if (err != RD_KAFKA_RESP_ERR_NO_ERROR) {
      return absl::InternalError(absl::StrCat("produce: ", rd_kafka_err2str(err)));
    }
  }
  if (commit) {
    return TxnStatus(rd_kafka_commit_transaction(rk.get(), 30000), "commit_transaction");
  }
  // Delivered before the abort: the log holds records read_committed must skip.
  if (rd_kafka_flush(rk.get(), 30000) != RD_KAFKA_RESP_ERR_NO_ERROR) {
    return absl::DeadlineExceededError("flush before abort_transaction");
  }
  return TxnStatus(rd_kafka_abort_transaction(rk.get(), 30000), "abort_transaction");
}

// The values of partition 0 of `topic` as a read_committed consumer sees
// them, up to the last stable offset. (ConsumeAll() reads up to the high
// watermark, which a transaction's final marker keeps out of its reach.)
absl::StatusOr<std::vector<std::string>> ReadCommitted(const std::string& bootstrap,
                                                       const std::string& topic) {
  ASSIGN_OR_RETURN(KafkaConfPtr conf, NewKafkaConf({{"bootstrap.servers", bootstrap},
                                                    {"group.id", "apache-kafka-test"},
                                                    {"isolation.level", "read_committed"},
                                                    {"enable.partition.eof", "true"},
                                                    {"enable.auto.commit", "false"}}));
  ASSIGN_OR_RETURN(rd_kafka_t * client, NewKafkaClient(KafkaClientType::kConsumer, std::move(conf),
                                                       "read_committed consumer"));
  HandlePtr rk(client);
  rd_kafka_topic_partition_list_t* list = rd_kafka_topic_partition_list_new(1);
  rd_kafka_topic_partition_list_add(list, topic.c_str(), 0)->offset = RD_KAFKA_OFFSET_BEGINNING;
  const rd_kafka_resp_err_t aerr = rd_kafka_assign(rk.get(), list);
  rd_kafka_topic_partition_list_destroy(list);
  if (aerr != RD_KAFKA_RESP_ERR_NO_ERROR) {
    return absl::InternalError(absl::StrCat("assign: ", rd_kafka_err2str(aerr)));
  }
  std::vector<std::string> values;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (std::chrono::steady_clock::now() < deadline) {
    rd_kafka_message_t* m = rd_kafka_consumer_poll(rk.get(), 200);
    if (m == nullptr) continue;
    const rd_kafka_resp_err_t err = m->err;
    if (err == RD_KAFKA_RESP_ERR_NO_ERROR) {
      values.emplace_back(static_cast<const char*>(m->payload), m->len);
    }
    rd_kafka_message_destroy(m);
    if (err == RD_KAFKA_RESP_ERR__PARTITION_EOF) {
      rd_kafka_consumer_close(rk.get());
      return values;
    }
  }
  rd_kafka_consumer_close(rk.get());
  return absl::DeadlineExceededError(
      absl::StrCat("read_committed ", topic, ": no end after ", values.size(), " records"));
}

std::vector<KafkaTestRecord> Records(const std::string& prefix, int n) {
  std::vector<KafkaTestRecord> out;
  out.reserve(n);
  for (int i = 0; i < n; ++i) {
    out.push_back({-1, absl::StrCat("key-", i), absl::StrCat(prefix, i)});
  }
  return out;
}

TEST(ApacheKafkaTest, OneBrokerServesPartitionsAndTransactions) {
  auto kafka = ApacheKafka::Start(1, /*default_partitions=*/4);
  ASSERT_OK(kafka);
  const std::string& bootstrap = (*kafka)->bootstrap();
  EXPECT_EQ((*kafka)->brokers(), 1);
  EXPECT_EQ(bootstrap, (*kafka)->address(0));

  ASSERT_OK((*kafka)->CreateTopic("three", 3));
  EXPECT_TRUE(absl::IsAlreadyExists((*kafka)->CreateTopic("three", 3)));
  ASSERT_OK(ProduceRecords(bootstrap, "three", Records("v", 12)));
  auto records = ConsumeAll(bootstrap, "three");
  ASSERT_OK(records);
  ASSERT_EQ(records->size(), 12u);
  std::set<int32_t> partitions;
  std::set<std::string> values;
  for (const KafkaConsumedRecord& r : *records) {
    partitions.insert(r.partition);
    values.insert(r.value);
  }
  EXPECT_EQ(partitions.size(), 3u) << "12 keys over 3 partitions";
  EXPECT_EQ(values.size(), 12u);

  // A producer auto-creates the topic it names, with default_partitions (as
  // the suite's sinks and kcat expect).
  ASSERT_OK(ProduceRecords(bootstrap, "auto", Records("a", 4)));
  ASSERT_OK((*kafka)->WaitForLeaders("auto", 4));

  // Transactions: a read_committed consumer sees the committed ones only.
  ASSERT_OK((*kafka)->CreateTopic("txn", 1));
  ASSERT_OK(ProduceTransaction(bootstrap, "txn", {"c1", "c2"}, /*commit=*/true));
  ASSERT_OK(ProduceTransaction(bootstrap, "txn", {"a1", "a2"}, /*commit=*/false));
  ASSERT_OK(ProduceTransaction(bootstrap, "txn", {"c3"}, /*commit=*/true));
  auto committed = ReadCommitted(bootstrap, "txn");
  ASSERT_OK(committed);
  EXPECT_EQ(*committed, (std::vector<std::string>{"c1", "c2", "c3"}));
}

TEST(ApacheKafkaTest, ThreeBrokersKeepAcksAllWritesThroughAKilledLeader) {
  auto started = ApacheKafka::Start(3);
  ASSERT_OK(started);
  ApacheKafka& kafka = **started;
  const std::string& bootstrap = kafka.bootstrap();
  ASSERT_OK(kafka.CreateTopic("replicated", 1, /*replication_factor=*/3,
                              /*min_insync_replicas=*/2));
  // ProduceRecords is idempotent: acks=all.
  ASSERT_OK(ProduceRecords(bootstrap, "replicated", Records("before-", 5)));

  auto leader = kafka.Leader("replicated", 0);
  ASSERT_OK(leader);
  kafka.Kill(*leader);
  EXPECT_FALSE(kafka.running(*leader));
  // Two replicas left, min.insync.replicas=2: writes go on once the
  // controller has fenced the dead leader and another one leads.
  ASSERT_OK(ProduceRecords(bootstrap, "replicated", Records("after-kill-", 5), 40000));
  ASSERT_OK(kafka.WaitForLeaders("replicated", 1));
  auto new_leader = kafka.Leader("replicated", 0);
  ASSERT_OK(new_leader);
  EXPECT_NE(*new_leader, *leader);

  ASSERT_OK(kafka.StartAgain(*leader));
  EXPECT_TRUE(kafka.running(*leader));
  EXPECT_FALSE(kafka.StartAgain(*leader).ok()) << "it is running";

  auto values = ConsumeAllValues(bootstrap, "replicated", 20000);
  ASSERT_OK(values);
  ASSERT_EQ(values->size(), 10u);
  EXPECT_EQ((*values)[0], "before-0");
  EXPECT_EQ((*values)[5], "after-kill-0");

  // A paused follower does not take the leadership away; a stopped one is
  // stopped.
  int follower = 0;
  while (follower == *new_leader) ++follower;
  ASSERT_OK(kafka.Pause(follower));
  ASSERT_OK(kafka.WaitForLeaders("replicated", 1));
  ASSERT_OK(kafka.Resume(follower));
  kafka.Stop(follower);  // a controlled shutdown
  EXPECT_FALSE(kafka.running(follower));
}

}  // namespace
}  // namespace caravela
