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
#include "worker/connectors/kafka_source.h"
#include "worker/exchange/exchange.h"

namespace caravela {
namespace {

constexpr int kTimeoutMs = 10000;

struct HandleDeleter {
  void operator()(rd_kafka_t* rk) const { rd_kafka_destroy(rk); }
};
struct QueueDeleter {
  void operator()(rd_kafka_queue_t* q) const { rd_kafka_queue_destroy(q); }
};
struct EventDeleter {
  void operator()(rd_kafka_event_t* e) const { rd_kafka_event_destroy(e); }
};
struct NewTopicDeleter {
  void operator()(rd_kafka_NewTopic_t* t) const { rd_kafka_NewTopic_destroy(t); }
};
struct AdminOptionsDeleter {
  void operator()(rd_kafka_AdminOptions_t* o) const { rd_kafka_AdminOptions_destroy(o); }
};

// The topic's partition count from an all-topics Metadata request (naming
// the topic would auto-create it on brokers that speak only Metadata < v4,
// such as the mock cluster); nullopt if it does not exist.
absl::StatusOr<std::optional<int>> ExistingPartitions(rd_kafka_t* rk, const std::string& bootstrap,
                                                      const std::string& topic) {
  const rd_kafka_metadata_t* md = nullptr;
  rd_kafka_resp_err_t err = rd_kafka_metadata(rk, /*all_topics=*/1, nullptr, &md, kTimeoutMs);
  if (err != RD_KAFKA_RESP_ERR_NO_ERROR) {
    return absl::UnavailableError(absl::StrCat("exchange topic ", topic, ": metadata from ",
                                               bootstrap, ": ", rd_kafka_err2str(err)));
  }
  std::optional<int> partitions;
  for (int i = 0; i < md->topic_cnt; ++i) {
    if (topic == md->topics[i].topic && md->topics[i].err == RD_KAFKA_RESP_ERR_NO_ERROR &&
        md->topics[i].partition_cnt > 0) {
      partitions = md->topics[i].partition_cnt;
    }
  }
  rd_kafka_metadata_destroy(md);
  return partitions;
}

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

// CreateTopics through the Admin API; the result error code of the topic.
absl::StatusOr<rd_kafka_resp_err_t> AdminCreate(rd_kafka_t* rk, const std::string& topic,
                                                int partitions, std::string* message) {
  char err[512];
  std::unique_ptr<rd_kafka_NewTopic_t, NewTopicDeleter> new_topic(rd_kafka_NewTopic_new(
      topic.c_str(), partitions, /*replication_factor=*/-1, err, sizeof(err)));
  if (new_topic == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("exchange topic ", topic, ": ", err));
  }
  std::unique_ptr<rd_kafka_AdminOptions_t, AdminOptionsDeleter> options(
      rd_kafka_AdminOptions_new(rk, RD_KAFKA_ADMIN_OP_CREATETOPICS));
  (void)rd_kafka_AdminOptions_set_request_timeout(options.get(), kTimeoutMs, err, sizeof(err));
  (void)rd_kafka_AdminOptions_set_operation_timeout(options.get(), kTimeoutMs, err, sizeof(err));
  std::unique_ptr<rd_kafka_queue_t, QueueDeleter> queue(rd_kafka_queue_new(rk));
  rd_kafka_NewTopic_t* topics[] = {new_topic.get()};
  rd_kafka_CreateTopics(rk, topics, 1, options.get(), queue.get());
  std::unique_ptr<rd_kafka_event_t, EventDeleter> event(
      rd_kafka_queue_poll(queue.get(), 2 * kTimeoutMs + 1000));
  if (event == nullptr) {
    return absl::DeadlineExceededError(
        absl::StrCat("exchange topic ", topic, ": CreateTopics got no answer"));
  }
  if (rd_kafka_event_error(event.get()) != RD_KAFKA_RESP_ERR_NO_ERROR) {
    *message = rd_kafka_event_error_string(event.get());
    return rd_kafka_event_error(event.get());
  }
  const rd_kafka_CreateTopics_result_t* result = rd_kafka_event_CreateTopics_result(event.get());
  size_t count = 0;
  const rd_kafka_topic_result_t** results =
      result == nullptr ? nullptr : rd_kafka_CreateTopics_result_topics(result, &count);
  if (count != 1) {
    return absl::InternalError(
        absl::StrCat("exchange topic ", topic, ": CreateTopics returned ", count, " results"));
  }
  rd_kafka_resp_err_t code = rd_kafka_topic_result_error(results[0]);
  if (const char* s = rd_kafka_topic_result_error_string(results[0]); s != nullptr) *message = s;
  if (message->empty()) *message = rd_kafka_err2str(code);
  return code;
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

  ASSIGN_OR_RETURN(std::optional<int> existing, ExistingPartitions(rk.get(), bootstrap, topic));
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
    ASSIGN_OR_RETURN(rd_kafka_resp_err_t code, AdminCreate(rk.get(), topic, create, &message));
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
