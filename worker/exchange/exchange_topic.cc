// EnsureExchangeTopic (exchange.h): the Kafka Admin API, or the in-process
// embedded broker's own call, since its mock cluster serves no CreateTopics.
#include <librdkafka/rdkafka.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"
#include "worker/connectors/embedded_broker.h"
#include "worker/connectors/kafka_admin.h"
#include "worker/connectors/kafka_source.h"
#include "worker/exchange/exchange.h"

namespace caravela {
namespace {

constexpr int kTimeoutMs = 10000;

struct HandleDeleter {
  void operator()(rd_kafka_t* rk) const { rd_kafka_destroy(rk); }
};

// A topic with more partitions than the consuming stage has tasks serves it:
// writers use partitions [0, want) only (a job rescaled to fewer tasks keeps
// its topics).
absl::Status CheckCount(const std::string& topic, int want, int have) {
  if (have >= want) return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrCat("exchange topic ", topic, " exists with ", have, " partitions, but ", want,
                   " are needed (add partitions, e.g. kafka-topics --alter --partitions ", want,
                   ", or delete it)"));
}

}  // namespace

absl::Status EnsureExchangeTopic(const std::string& bootstrap, const std::string& topic,
                                 int partitions, int create_partitions) {
  if (bootstrap.empty() || topic.empty()) {
    return absl::InvalidArgumentError("exchange topic needs a bootstrap and a topic name");
  }
  if (partitions < 1 || partitions > 10000) {
    return absl::InvalidArgumentError(
        absl::StrCat("exchange topic ", topic, ": partitions must be 1..10000, got ", partitions));
  }
  ASSIGN_OR_RETURN(KafkaConfPtr conf, NewKafkaConf({{"bootstrap.servers", bootstrap},
                                                    {"client.id", "caravela-exchange-admin"},
                                                    {"allow.auto.create.topics", "false"}}));
  ASSIGN_OR_RETURN(rd_kafka_t * client, NewKafkaClient(KafkaClientType::kProducer, std::move(conf),
                                                       "kafka admin client"));
  std::unique_ptr<rd_kafka_t, HandleDeleter> rk(client);

  ASSIGN_OR_RETURN(std::optional<int> existing,
                   ExistingTopicPartitions(rk.get(), bootstrap, topic));
  if (existing.has_value()) return CheckCount(topic, partitions, *existing);
  // Created with room for a later rescale (the job's max_parallelism).
  const int create = std::min(std::max(partitions, create_partitions), 10000);

  // The embedded broker (librdkafka's mock cluster) serves no CreateTopics
  // (librdkafka's Admin API waits for a controller the mock never names): if
  // it runs in this process, create the topic through it.
  if (absl::Status created = CreateTopicOnEmbeddedBroker(bootstrap, topic, create);
      !absl::IsNotFound(created)) {
    if (!created.ok() && !absl::IsAlreadyExists(created)) return created;
  } else {
    std::string message;
    ASSIGN_OR_RETURN(rd_kafka_resp_err_t code,
                     AdminCreateTopic(rk.get(), topic, create, kTimeoutMs, &message));
    if (code == RD_KAFKA_RESP_ERR__TIMED_OUT) {
      return absl::UnavailableError(absl::StrCat(
          "exchange topic ", topic, ": create with ", create, " partitions on ", bootstrap, ": ",
          message, " (a broker without CreateTopics, such as an embedded broker of ",
          "another process, never answers: create the topic up front, e.g. caravela broker ",
          "--partitions ", create, " --topic ", topic, ")"));
    }
    if (code != RD_KAFKA_RESP_ERR_NO_ERROR &&
        code != RD_KAFKA_RESP_ERR_TOPIC_ALREADY_EXISTS) {  // created meanwhile by another task
      return absl::UnavailableError(absl::StrCat("exchange topic ", topic, ": create with ", create,
                                                 " partitions on ", bootstrap, ": ", message));
    }
  }
  // Read the count back: the topic may have been created meanwhile (by
  // another task, or auto-created by a client naming it) with another count.
  ASSIGN_OR_RETURN(int have, AwaitTopicPartitions(rk.get(), bootstrap, topic,
                                                  /*name_topic=*/false, kTimeoutMs));
  RETURN_IF_ERROR(CheckCount(topic, partitions, have));
  ExchangeLogger()->info("exchange topic {} on {}: {} partitions", topic, bootstrap, have);
  return absl::OkStatus();
}

}  // namespace caravela
