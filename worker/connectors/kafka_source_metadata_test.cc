// KafkaSource against real metadata changes on Apache Kafka: a leader killed
// under it (3 brokers, replication factor 3, min.insync.replicas 2) is ridden
// through without an error and without a record lost or repeated; a topic
// deleted under it fails it naming the topic.
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/connectors/kafka_admin.h"
#include "worker/connectors/kafka_source.h"
#include "worker/connectors/kafka_test_util.h"
#include "worker/testing/apache_kafka.h"
#include "worker/testing/status_testing.h"
#include "worker/testing/test_kafka.h"

namespace caravela {
namespace {

using ::testing::HasSubstr;

std::vector<KafkaTestRecord> Numbered(int from, int to) {
  std::vector<KafkaTestRecord> out;
  for (int i = from; i < to; ++i) out.push_back({0, "", absl::StrCat(i)});
  return out;
}

// Polls until `want` values arrived, an error, or `timeout`.
absl::Status ReadUntil(KafkaSource& source, std::vector<std::string>& values, size_t want,
                       std::chrono::seconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (values.size() < want && std::chrono::steady_clock::now() < deadline) {
    absl::StatusOr<int> n =
        source.Poll(1000, 100, [&](const RawMessage& m) { values.emplace_back(m.payload); });
    if (!n.ok()) return n.status();
  }
  return absl::OkStatus();
}

class KafkaSourceFailoverTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    std::string why;
    auto kind = TestKafka::Chosen(&why);
    if (!kind.ok() || *kind != TestKafka::Kind::kApache) return;  // skipped in SetUp
    auto kafka = ApacheKafka::Start(3);
    ASSERT_TRUE(kafka.ok()) << kafka.status();
    kafka_ = std::move(*kafka);
  }
  static void TearDownTestSuite() { kafka_.reset(); }
  void SetUp() override {
    if (kafka_ == nullptr) {
      GTEST_SKIP() << "needs Apache Kafka (CARAVELA_TEST_KAFKA=apache): leader elections";
    }
  }
  static inline std::unique_ptr<ApacheKafka> kafka_;
};

// The leader of the partition the source reads is SIGKILLed between two
// batches: the source reports no error, and reads the second batch (written
// through the new leader) right after the first, every record once.
TEST_F(KafkaSourceFailoverTest, ALeaderKilledUnderTheSourceIsRiddenThrough) {
  const std::string topic = "failover";
  ASSERT_OK(kafka_->CreateTopic(topic, 1, 3, 2));
  ASSERT_OK(ProduceRecords(kafka_->bootstrap(), topic, Numbered(0, 500)));
  KafkaSourceOptions o;
  o.bootstrap = kafka_->bootstrap();
  o.topic = topic;
  KafkaSource source(o);
  ASSERT_OK(source.Open());
  std::vector<std::string> values;
  ASSERT_OK(ReadUntil(source, values, 500, std::chrono::seconds(20)));
  ASSERT_EQ(values.size(), 500u);

  auto leader = kafka_->Leader(topic, 0);
  ASSERT_TRUE(leader.ok()) << leader.status();
  kafka_->Kill(*leader);
  // Polled while the leader is gone and until it moved.
  ASSERT_OK(ReadUntil(source, values, 501, std::chrono::seconds(2)));
  ASSERT_OK(kafka_->WaitForLeaders(topic));
  auto moved = kafka_->Leader(topic, 0);
  ASSERT_TRUE(moved.ok()) << moved.status();
  EXPECT_NE(*moved, *leader);
  ASSERT_OK(ProduceRecords(kafka_->bootstrap(), topic, Numbered(500, 1000), 30000));
  ASSERT_OK(ReadUntil(source, values, 1000, std::chrono::seconds(30)));
  ASSERT_EQ(values.size(), 1000u);
  for (int i = 0; i < 1000; ++i) ASSERT_EQ(values[i], absl::StrCat(i)) << "at " << i;
  EXPECT_EQ(source.Positions()[0], 1000);

  // The broker comes back (a restart): still nothing lost or repeated.
  ASSERT_OK(kafka_->StartAgain(*leader));
  ASSERT_OK(ProduceRecords(kafka_->bootstrap(), topic, Numbered(1000, 1200), 30000));
  ASSERT_OK(ReadUntil(source, values, 1200, std::chrono::seconds(30)));
  ASSERT_EQ(values.size(), 1200u);
  for (int i = 1000; i < 1200; ++i) ASSERT_EQ(values[i], absl::StrCat(i)) << "at " << i;
}

class KafkaSourceMetadataTest : public KafkaSuiteTest {};

// A topic deleted while the source reads it: NotFound (a permanent failure
// of the job) naming the topic.
TEST_F(KafkaSourceMetadataTest, ADeletedTopicFailsTheSourceNamingIt) {
  CARAVELA_SKIP_UNLESS_APACHE_KAFKA(kafka_, "the embedded broker cannot delete topics");
  const std::string topic = "doomed";
  ASSERT_OK(kafka_->CreateTopic(topic, 2));
  ASSERT_OK(ProduceLines(bootstrap(), topic, {{0, "a"}, {1, "b"}}));
  KafkaSourceOptions o;
  o.bootstrap = bootstrap();
  o.topic = topic;
  KafkaSource source(o);
  ASSERT_OK(source.Open());
  std::vector<std::string> values;
  ASSERT_OK(ReadUntil(source, values, 2, std::chrono::seconds(10)));
  ASSERT_OK(DeleteKafkaTopics(bootstrap(), {topic}));
  const auto start = std::chrono::steady_clock::now();
  absl::Status st = ReadUntil(source, values, 3, std::chrono::seconds(30));
  std::cerr << "after the delete, in "
            << std::chrono::duration_cast<std::chrono::milliseconds>(
                   std::chrono::steady_clock::now() - start)
                   .count()
            << " ms: " << st << "\n";
  EXPECT_TRUE(absl::IsNotFound(st)) << st;
  EXPECT_THAT(st.message(), HasSubstr("kafka topic doomed on "));
}

}  // namespace
}  // namespace caravela
