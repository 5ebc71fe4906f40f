// KafkaSink modes (upsert/changelog), record headers and exactly-once
// transactions, against the suite's Kafka (TestKafka: Apache Kafka when
// installed, or as CARAVELA_TEST_KAFKA=apache|embedded says; the embedded
// broker is librdkafka 2.0.2's mock cluster).
//
// The 2.0.2 mock cluster implements the transactional *protocol* but not its
// effects (measured, see README "Limits of librdkafka 2.0.2's mock cluster"):
// aborted and open transactions are visible to read_committed consumers and
// init_transactions does not fence an older producer. The assertions that
// need those effects run only on Apache Kafka; with the embedded
// broker the same tests assert what the mock does instead, so a librdkafka
// upgrade that changes it shows up here.
#include <librdkafka/rdkafka.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <ctime>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/connectors/embedded_broker.h"
#include "worker/connectors/kafka_sink.h"
#include "worker/connectors/kafka_source.h"
#include "worker/testing/status_testing.h"
#include "worker/testing/test_kafka.h"

namespace caravela {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

struct Got {
  int32_t partition = 0;
  int64_t offset = 0;
  std::string key;  // "" for a null key
  std::string value;
  std::map<std::string, std::string> headers;
};

// Reads every partition of `topic` from the start to its end (the last
// stable offset for read_committed) and returns the records ordered by
// (partition, offset).
std::vector<Got> ReadTopic(const std::string& bootstrap, const std::string& topic,
                           bool read_committed) {
  std::vector<Got> out;
  auto conf =
      NewKafkaConf({{"bootstrap.servers", bootstrap},
                    {"group.id", "caravela-test-reader"},
                    {"enable.auto.commit", "false"},
                    {"enable.partition.eof", "true"},
                    {"isolation.level", read_committed ? "read_committed" : "read_uncommitted"}});
  EXPECT_TRUE(conf.ok()) << conf.status();
  if (!conf.ok()) return out;
  char err[512];
  rd_kafka_t* c = rd_kafka_new(RD_KAFKA_CONSUMER, conf->get(), err, sizeof(err));
  EXPECT_NE(c, nullptr) << err;
  if (c == nullptr) return out;
  (void)conf->release();
  auto partitions = AwaitTopicPartitions(c, bootstrap, topic, /*name_topic=*/false, 10000);
  EXPECT_TRUE(partitions.ok()) << partitions.status();
  const int n = partitions.ok() ? *partitions : 0;
  rd_kafka_topic_partition_list_t* list = rd_kafka_topic_partition_list_new(n);
  for (int p = 0; p < n; ++p) {
    rd_kafka_topic_partition_list_add(list, topic.c_str(), p)->offset = RD_KAFKA_OFFSET_BEGINNING;
  }
  rd_kafka_assign(c, list);
  rd_kafka_topic_partition_list_destroy(list);
  int eofs = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(15);
  while (eofs < n && std::chrono::steady_clock::now() < deadline) {
    rd_kafka_message_t* m = rd_kafka_consumer_poll(c, 100);
    if (m == nullptr) continue;
    if (m->err == RD_KAFKA_RESP_ERR__PARTITION_EOF) {
      ++eofs;
    } else if (m->err != RD_KAFKA_RESP_ERR_NO_ERROR) {
      ADD_FAILURE() << rd_kafka_message_errstr(m);
    } else {
      Got g;
      g.partition = m->partition;
      g.offset = m->offset;
      if (m->key != nullptr) g.key.assign(static_cast<const char*>(m->key), m->key_len);
      if (m->payload != nullptr) g.value.assign(static_cast<const char*>(m->payload), m->len);
      rd_kafka_headers_t* hdrs = nullptr;
      if (rd_kafka_message_headers(m, &hdrs) == RD_KAFKA_RESP_ERR_NO_ERROR) {
        const char* name;
        const void* val;
        size_t size;
        for (size_t i = 0;
             rd_kafka_header_get_all(hdrs, i, &name, &val, &size) == RD_KAFKA_RESP_ERR_NO_ERROR;
             ++i) {
          g.headers[name] = std::string(static_cast<const char*>(val), size);
        }
      }
      out.push_back(std::move(g));
    }
    rd_kafka_message_destroy(m);
  }
  EXPECT_EQ(eofs, n) << "did not reach the end of " << topic;
  rd_kafka_consumer_close(c);
  rd_kafka_destroy(c);
  std::stable_sort(out.begin(), out.end(), [](const Got& a, const Got& b) {
    return a.partition != b.partition ? a.partition < b.partition : a.offset < b.offset;
  });
  return out;
}

std::vector<std::string> Values(const std::vector<Got>& records) {
  std::vector<std::string> v;
  v.reserve(records.size());
  for (const Got& g : records) v.push_back(g.value);
  return v;
}

SinkRecord Rec(std::string_view key, std::string_view value, int64_t revision,
               std::string_view state = "") {
  SinkRecord r;
  r.key = key;
  r.value = value;
  r.revision = revision;
  r.state = state;
  return r;
}

class KafkaSinkModesTest : public KafkaSuiteTest {
 protected:
  // True on Apache Kafka, which implements transactions.
  static bool RealBroker() { return kafka_->is_apache(); }
  // Unique per run.
  static std::string Topic(const std::string& name) {
    static const std::string suffix = absl::StrCat(getpid(), "-", time(nullptr));
    return absl::StrCat(name, "-", suffix);
  }

  KafkaSinkOptions Options(const std::string& topic, KafkaSinkOptions::Mode mode) {
    KafkaSinkOptions o;
    o.bootstrap = bootstrap();
    o.topic = topic;
    o.mode = mode;
    return o;
  }
  KafkaSinkOptions ExactlyOnce(const std::string& topic) {
    KafkaSinkOptions o = Options(topic, KafkaSinkOptions::Mode::kChangelog);
    o.exactly_once = true;
    o.transactional_id = "caravela-" + topic + "-sink0";
    o.epoch = 3;
    return o;
  }
};

// The same sequence of writes for both modes: k1 revisions 1, 3, 2 (2 comes
// late), k2 revision 1, a keyless record and a keyed record without
// revision.
void WriteSequence(KafkaSink& sink) {
  ASSERT_OK(sink.WriteRecord(Rec(R"({"k":1})", R"({"k":1,"v":"a","revision":1})", 1, "EARLY")));
  ASSERT_OK(sink.WriteRecord(Rec(R"({"k":2})", R"({"k":2,"v":"b","revision":1})", 1, "ON_TIME")));
  ASSERT_OK(sink.WriteRecord(Rec(R"({"k":1})", R"({"k":1,"v":"c","revision":3})", 3, "LATE")));
  ASSERT_OK(sink.WriteRecord(Rec(R"({"k":1})", R"({"k":1,"v":"d","revision":2})", 2, "ON_TIME")));
  ASSERT_OK(sink.WriteRecord(Rec("", R"({"side":"x"})", -1)));
  ASSERT_OK(sink.Write(R"({"k":3})", R"({"k":3,"v":"no revision"})"));
}

TEST_F(KafkaSinkModesTest, UpsertProducesOnlyTheHighestRevisionPerKeyWithinAFlush) {
  const std::string topic = Topic("upsert");
  KafkaSink sink(Options(topic, KafkaSinkOptions::Mode::kUpsert));
  ASSERT_OK(sink.Open());
  WriteSequence(sink);
  ASSERT_OK(sink.Flush());
  EXPECT_EQ(sink.delivered(), 4);   // k1@3, k2@1, keyless, k3
  EXPECT_EQ(sink.superseded(), 2);  // k1@1 replaced by k1@3; k1@2 older than k1@3
  // The next flush produces the key again.
  ASSERT_OK(sink.WriteRecord(Rec(R"({"k":1})", R"({"k":1,"v":"e","revision":4})", 4, "LATE")));
  ASSERT_OK(sink.Close());  // flushes
  EXPECT_EQ(sink.delivered(), 5);

  std::vector<Got> got = ReadTopic(bootstrap(), topic, /*read_committed=*/true);
  std::map<std::string, std::vector<Got>> by_key;
  for (const Got& g : got) by_key[g.key].push_back(g);
  ASSERT_EQ(by_key[R"({"k":1})"].size(), 2u);
  const Got& k1 = by_key[R"({"k":1})"][0];
  EXPECT_EQ(k1.value, R"({"k":1,"v":"c","revision":3})");
  EXPECT_THAT(k1.headers, ElementsAre(std::pair<const std::string, std::string>("revision", "3"),
                                      std::pair<const std::string, std::string>("state", "LATE")));
  EXPECT_EQ(by_key[R"({"k":1})"][1].value, R"({"k":1,"v":"e","revision":4})");
  EXPECT_EQ(by_key[R"({"k":1})"][1].partition, k1.partition);
  ASSERT_EQ(by_key[R"({"k":2})"].size(), 1u);
  EXPECT_EQ(by_key[R"({"k":2})"][0].headers.at("state"), "ON_TIME");
  ASSERT_EQ(by_key[""].size(), 1u);  // keyless: produced as-is, no headers
  EXPECT_EQ(by_key[""][0].value, R"({"side":"x"})");
  EXPECT_THAT(by_key[""][0].headers, IsEmpty());
  ASSERT_EQ(by_key[R"({"k":3})"].size(), 1u);
  EXPECT_THAT(by_key[R"({"k":3})"][0].headers, IsEmpty());
}

TEST_F(KafkaSinkModesTest, ChangelogProducesEveryRevisionInOrder) {
  const std::string topic = Topic("changelog");
  KafkaSink sink(Options(topic, KafkaSinkOptions::Mode::kChangelog));
  ASSERT_OK(sink.Open());
  WriteSequence(sink);
  ASSERT_OK(sink.Close());
  EXPECT_EQ(sink.delivered(), 6);
  EXPECT_EQ(sink.superseded(), 0);

  std::vector<Got> got = ReadTopic(bootstrap(), topic, /*read_committed=*/true);
  ASSERT_EQ(got.size(), 6u);
  std::vector<std::string> k1_revisions;
  std::vector<std::string> k1_states;
  std::set<int32_t> k1_partitions;
  for (const Got& g : got) {
    if (g.key != R"({"k":1})") continue;
    k1_revisions.push_back(g.headers.at("revision"));
    k1_states.push_back(g.headers.at("state"));
    k1_partitions.insert(g.partition);
  }
  EXPECT_THAT(k1_revisions, ElementsAre("1", "3", "2"));  // as written
  EXPECT_THAT(k1_states, ElementsAre("EARLY", "LATE", "ON_TIME"));
  EXPECT_EQ(k1_partitions.size(), 1u);  // keyed: one partition per key
}

TEST_F(KafkaSinkModesTest, UpsertBufferIsProducedWhenFull) {
  const std::string topic = Topic("upsert-full");
  KafkaSinkOptions o = Options(topic, KafkaSinkOptions::Mode::kUpsert);
  o.max_buffered_records = 3;
  KafkaSink sink(o);
  ASSERT_OK(sink.Open());
  for (int i = 0; i < 3; ++i) {
    std::string key = absl::StrCat("k", i);
    ASSERT_OK(sink.WriteRecord(Rec(key, "{}", 1)));
  }
  // Produced by Write itself: delivered without a Flush (poll with a deadline).
  ASSERT_OK(sink.WriteRecord(Rec("k9", "{}", 1)));
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (ReadTopic(bootstrap(), topic, true).size() < 3 &&
         std::chrono::steady_clock::now() < deadline) {
  }
  EXPECT_EQ(ReadTopic(bootstrap(), topic, true).size(), 3u);
  ASSERT_OK(sink.Close());
  EXPECT_EQ(ReadTopic(bootstrap(), topic, true).size(), 4u);
}

TEST_F(KafkaSinkModesTest, ExactlyOnceCommitsWithTheCheckpointAndRemembersIt) {
  const std::string topic = Topic("eos-flow");
  KafkaSinkOptions o = ExactlyOnce(topic);
  {
    KafkaSink sink(o);
    ASSERT_OK(sink.Open());
    EXPECT_EQ(sink.commit_topic(), topic + ".caravela-commits");
    auto none = sink.LastCommittedCheckpoint();
    ASSERT_TRUE(none.ok()) << none.status();
    EXPECT_EQ(*none, 0);  // nothing committed yet
    ASSERT_OK(sink.WriteRecord(Rec("a", "a1", 1)));
    ASSERT_OK(sink.WriteRecord(Rec("b", "b1", 1)));
    auto state = sink.PreCommit(1);
    ASSERT_TRUE(state.ok()) << state.status();
    EXPECT_EQ(*state, o.transactional_id);
    ASSERT_OK(sink.Commit(1));
    EXPECT_THAT(Values(ReadTopic(bootstrap(), topic, true)),
                ::testing::UnorderedElementsAre("a1", "b1"));
    EXPECT_EQ(*sink.LastCommittedCheckpoint(), 1);
    ASSERT_OK(sink.WriteRecord(Rec("a", "a2", 2)));
    ASSERT_OK(sink.PreCommit(2));
    ASSERT_OK(sink.Commit(2));
    EXPECT_EQ(sink.delivered(), 3);
    ASSERT_OK(sink.Close());
  }
  // A new instance reads it back from the commit topic.
  KafkaSink again(o);
  ASSERT_OK(again.Open());
  auto last = again.LastCommittedCheckpoint();
  ASSERT_TRUE(last.ok()) << last.status();
  EXPECT_EQ(*last, 2);
  ASSERT_OK(again.Recover(2, o.transactional_id));
  ASSERT_OK(again.Close());
  // The markers: key = transactional id, value = checkpoint id, epoch header.
  std::vector<Got> markers = ReadTopic(bootstrap(), topic + ".caravela-commits", true);
  ASSERT_EQ(markers.size(), 2u);
  EXPECT_EQ(markers[0].key, o.transactional_id);
  EXPECT_EQ(markers[0].partition, 0);
  EXPECT_THAT(Values(markers), ElementsAre("1", "2"));
  EXPECT_EQ(markers[1].headers.at("epoch"), "3");
}

TEST_F(KafkaSinkModesTest, ExactlyOnceProtocolOrderIsChecked) {
  const std::string topic = Topic("eos-order");
  KafkaSinkOptions o = ExactlyOnce(topic);
  KafkaSink sink(o);
  ASSERT_OK(sink.Open());
  absl::Status s = sink.Commit(1);
  EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;
  ASSERT_OK(sink.WriteRecord(Rec("a", "a1", 1)));
  ASSERT_OK(sink.PreCommit(1));
  s = sink.Commit(7);
  EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("the last PreCommit was for 1"));
  // A write after PreCommit voids it: checkpoint 1's state lacks "a2".
  ASSERT_OK(sink.WriteRecord(Rec("a", "a2", 2)));
  s = sink.Commit(1);
  EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;
  ASSERT_OK(sink.PreCommit(2));
  ASSERT_OK(sink.Commit(2));
  EXPECT_EQ(*sink.LastCommittedCheckpoint(), 2);
  s = sink.Recover(2, "caravela-other-sink0");
  EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;
  s = sink.Recover(3, o.transactional_id);
  EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("only checkpoint 2 has committed"));
  ASSERT_OK(sink.Recover(2, o.transactional_id));
  ASSERT_OK(sink.Close());
  // Without exactly_once nothing is tracked.
  KafkaSink plain(Options(topic, KafkaSinkOptions::Mode::kUpsert));
  ASSERT_OK(plain.Open());
  EXPECT_EQ(*plain.LastCommittedCheckpoint(), -1);
  auto state = plain.PreCommit(1);
  ASSERT_OK(state);
  EXPECT_EQ(*state, "");
  ASSERT_OK(plain.Close());
}

// Crash after writing, before PreCommit: the marker of the next checkpoint
// was never produced, so the last committed checkpoint stays.
TEST_F(KafkaSinkModesTest, ExactlyOnceCrashBeforePreCommitKeepsTheLastCommittedCheckpoint) {
  const std::string topic = Topic("eos-crash1");
  KafkaSinkOptions o = ExactlyOnce(topic);
  auto first = std::make_unique<KafkaSink>(o);
  ASSERT_OK(first->Open());
  ASSERT_OK(first->WriteRecord(Rec("a", "committed", 1)));
  ASSERT_OK(first->PreCommit(1));
  ASSERT_OK(first->Commit(1));
  ASSERT_OK(first->WriteRecord(Rec("a", "uncommitted", 2)));
  ASSERT_OK(first->Flush());  // on the broker, inside the open transaction
  first.reset();              // crash: no Commit, no Close

  KafkaSink second(o);
  ASSERT_OK(second.Open());  // fences `first`
  auto last = second.LastCommittedCheckpoint();
  ASSERT_TRUE(last.ok()) << last.status();
  EXPECT_EQ(*last, 1);
  // The record was delivered (the test can fail) ...
  EXPECT_THAT(Values(ReadTopic(bootstrap(), topic, /*read_committed=*/false)),
              ElementsAre("committed", "uncommitted"));
  // ... but only a broker that implements transactions hides it.
  if (RealBroker()) {
    EXPECT_THAT(Values(ReadTopic(bootstrap(), topic, /*read_committed=*/true)),
                ElementsAre("committed"));
  }
  ASSERT_OK(second.Close());
}

// Crash between PreCommit(2) (the runtime then writes manifest 2) and
// Commit(2): a broker aborts transaction 2 when the new producer fences the
// old one, so LastCommittedCheckpoint() says 1 and the runtime restores 1.
TEST_F(KafkaSinkModesTest, ExactlyOnceCrashBetweenPreCommitAndCommit) {
  const std::string topic = Topic("eos-crash2");
  KafkaSinkOptions o = ExactlyOnce(topic);
  auto first = std::make_unique<KafkaSink>(o);
  ASSERT_OK(first->Open());
  ASSERT_OK(first->WriteRecord(Rec("a", "committed", 1)));
  ASSERT_OK(first->PreCommit(1));
  ASSERT_OK(first->Commit(1));
  ASSERT_OK(first->WriteRecord(Rec("a", "precommitted", 2)));
  ASSERT_OK(first->PreCommit(2));
  first.reset();  // crash before Commit(2)

  KafkaSink second(o);
  ASSERT_OK(second.Open());
  auto last = second.LastCommittedCheckpoint();
  ASSERT_TRUE(last.ok()) << last.status();
  EXPECT_THAT(Values(ReadTopic(bootstrap(), topic, /*read_committed=*/false)),
              ElementsAre("committed", "precommitted"));
  if (RealBroker()) {
    EXPECT_EQ(*last, 1);
    EXPECT_THAT(Values(ReadTopic(bootstrap(), topic, /*read_committed=*/true)),
                ElementsAre("committed"));
    EXPECT_TRUE(absl::IsFailedPrecondition(second.Recover(2, o.transactional_id)));
  } else {
    // The mock never aborts: transaction 2 stays visible, marker included,
    // so the sink reports 2 -- consistent with what readers see there.
    EXPECT_EQ(*last, 2) << "the embedded broker now aborts fenced transactions: make the "
                           "RealBroker() assertions unconditional";
    EXPECT_THAT(Values(ReadTopic(bootstrap(), topic, /*read_committed=*/true)),
                ElementsAre("committed", "precommitted"));
  }
  ASSERT_OK(second.Close());
}

TEST_F(KafkaSinkModesTest, ExactlyOnceStaleProducerIsFenced) {
  const std::string topic = Topic("eos-fence");
  KafkaSinkOptions o = ExactlyOnce(topic);
  KafkaSink stale(o);
  ASSERT_OK(stale.Open());
  ASSERT_OK(stale.WriteRecord(Rec("a", "stale", 1)));
  ASSERT_OK(stale.PreCommit(1));
  KafkaSink fresh(o);
  ASSERT_OK(fresh.Open());  // init_transactions fences `stale`
  absl::Status committed = stale.Commit(1);
  if (RealBroker()) {
    EXPECT_TRUE(absl::IsFailedPrecondition(committed)) << committed;
    EXPECT_THAT(std::string(committed.message()), HasSubstr("fenced"));
    EXPECT_FALSE(stale.WriteRecord(Rec("a", "stale2", 2)).ok());  // sticky
    EXPECT_THAT(Values(ReadTopic(bootstrap(), topic, /*read_committed=*/true)), IsEmpty());
  } else {
    // librdkafka 2.0.2's mock gives the new producer a new producer id and
    // leaves the old one valid: no fencing.
    EXPECT_TRUE(committed.ok()) << "the embedded broker now fences stale producers (" << committed
                                << "): make the RealBroker() assertions unconditional";
  }
  ASSERT_OK(fresh.Close());
  (void)stale.Close();
}

}  // namespace
}  // namespace caravela
