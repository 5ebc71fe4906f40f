#include "worker/testing/test_kafka.h"

#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "worker/connectors/embedded_broker.h"
#include "worker/testing/apache_kafka.h"

namespace caravela {
namespace {

// `scripts/kafka libs` exits 0 when the jars scripts/install-deps caches
// are there.
bool ApacheKafkaInstalled() {
  const std::string cmd =
      absl::StrCat("'", CARAVELA_SOURCE_DIR, "/scripts/kafka' libs >/dev/null 2>&1");
  const int rc = std::system(cmd.c_str());
  return rc != -1 && WIFEXITED(rc) && WEXITSTATUS(rc) == 0;
}

}  // namespace

absl::StatusOr<TestKafka::Kind> TestKafka::Chosen(std::string* why) {
  const char* env = std::getenv("CARAVELA_TEST_KAFKA");
  const std::string want = env == nullptr ? "" : env;
  if (want == "apache" || want == "embedded") {
    if (why != nullptr) *why = "CARAVELA_TEST_KAFKA=" + want;
    return want == "apache" ? Kind::kApache : Kind::kEmbedded;
  }
  if (!want.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("CARAVELA_TEST_KAFKA=", want,
                     ": expected apache or embedded (unset: apache when "
                     "installed)"));
  }
  static const bool installed = ApacheKafkaInstalled();
  if (why != nullptr) {
    *why = installed ? "Apache Kafka is installed (CARAVELA_TEST_KAFKA unset)"
                     : "Apache Kafka is not installed (scripts/install-deps installs it); "
                       "CARAVELA_TEST_KAFKA unset";
  }
  return installed ? Kind::kApache : Kind::kEmbedded;
}

absl::StatusOr<std::unique_ptr<TestKafka>> TestKafka::Start(int default_partitions) {
  std::string why;
  ASSIGN_OR_RETURN(const Kind kind, Chosen(&why));
  std::unique_ptr<TestKafka> k(new TestKafka());
  k->kind_ = kind;
  k->default_partitions_ = default_partitions;
  if (kind == Kind::kApache) {
    ASSIGN_OR_RETURN(k->apache_, ApacheKafka::Start(1, default_partitions));
    k->bootstrap_ = k->apache_->bootstrap();
  } else {
    ASSIGN_OR_RETURN(k->embedded_, EmbeddedBroker::Start(0, default_partitions));
    k->bootstrap_ = k->embedded_->bootstrap();
  }
  static std::once_flag said;
  std::call_once(said, [&] {
    std::fprintf(stderr, "[test kafka] %s at %s: %s\n", k->name(), k->bootstrap_.c_str(),
                 why.c_str());
  });
  return k;
}

TestKafka::~TestKafka() = default;

absl::Status TestKafka::CreateTopic(const std::string& topic, int partitions) {
  if (partitions == 0) partitions = default_partitions_;
  if (apache_ != nullptr) return apache_->CreateTopic(topic, partitions);
  return embedded_->CreateTopic(topic, partitions);
}

}  // namespace caravela
