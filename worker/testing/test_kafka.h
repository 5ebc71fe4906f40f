// The Kafka a test talks to, chosen in one place for the whole suite:
// CARAVELA_TEST_KAFKA=apache (a real Apache Kafka, the ApacheKafka fixture,
// one broker) or embedded (librdkafka's mock cluster, EmbeddedBroker). Unset:
// apache when its jars are installed (`scripts/kafka libs` finds them),
// else embedded, saying so once on stderr (run scripts/install-deps for
// Apache Kafka). Any other value fails the suite.
//
// Both auto-create topics a producer names, with `default_partitions`
// partitions (the embedded broker always gives such topics 4: Start with 4
// for tests that run on both). Tests that need what only one of them does
// skip on the other with the reason (SkipUnlessApache / SkipUnlessEmbedded).
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "common/status.h"

namespace caravela {

class ApacheKafka;
class EmbeddedBroker;

class TestKafka {
 public:
  enum class Kind { kApache, kEmbedded };

  // What CARAVELA_TEST_KAFKA asks for, or the default; InvalidArgument for
  // a value that is neither. `why` (if not null) says how it was chosen.
  static absl::StatusOr<Kind> Chosen(std::string* why = nullptr);
  // Starts the chosen Kafka (Apache Kafka: ~4 s).
  static absl::StatusOr<std::unique_ptr<TestKafka>> Start(int default_partitions = 4);
  ~TestKafka();

  Kind kind() const { return kind_; }
  bool is_apache() const { return kind_ == Kind::kApache; }
  const char* name() const { return is_apache() ? "Apache Kafka" : "the embedded broker"; }
  const std::string& bootstrap() const { return bootstrap_; }
  // Creates `topic` with `partitions` partitions (0: the default), once
  // every partition has a leader. AlreadyExists if it exists.
  absl::Status CreateTopic(const std::string& topic, int partitions = 0);
  // The broker behind it (null when it is the other kind).
  ApacheKafka* apache() const { return apache_.get(); }
  EmbeddedBroker* embedded() const { return embedded_.get(); }

 private:
  TestKafka() = default;
  Kind kind_ = Kind::kEmbedded;
  int default_partitions_ = 4;
  std::string bootstrap_;
  std::unique_ptr<ApacheKafka> apache_;
  std::unique_ptr<EmbeddedBroker> embedded_;
};

// A GoogleTest fixture base with one TestKafka for the suites of a test
// binary (started by the first suite that needs it, stopped at exit: every
// test uses topics of its own): kafka_, bootstrap().
class KafkaSuiteTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    static std::unique_ptr<TestKafka> shared;
    if (shared == nullptr) {
      auto kafka = TestKafka::Start(4);
      ASSERT_TRUE(kafka.ok()) << kafka.status();
      shared = std::move(*kafka);
    }
    kafka_ = shared.get();
  }
  static const std::string& bootstrap() { return kafka_->bootstrap(); }

  static inline TestKafka* kafka_ = nullptr;
};

// In a test body: skip (with the reason) unless the suite runs on that Kafka.
#define CARAVELA_SKIP_UNLESS_APACHE_KAFKA(kafka, reason) \
  if (!(kafka)->is_apache())                             \
  GTEST_SKIP() << "needs Apache Kafka (CARAVELA_TEST_KAFKA=apache): " << (reason)
#define CARAVELA_SKIP_UNLESS_EMBEDDED_KAFKA(kafka, reason) \
  if ((kafka)->is_apache())                                \
  GTEST_SKIP() << "needs the embedded broker (CARAVELA_TEST_KAFKA=embedded): " << (reason)

}  // namespace caravela
