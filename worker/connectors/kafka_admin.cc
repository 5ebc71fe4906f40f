#include "worker/connectors/kafka_admin.h"

#include <memory>
#include <optional>

#include "absl/strings/str_cat.h"
#include "worker/connectors/kafka_source.h"

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
struct DeleteTopicDeleter {
  void operator()(rd_kafka_DeleteTopic_t* t) const { rd_kafka_DeleteTopic_destroy(t); }
};
struct AdminOptionsDeleter {
  void operator()(rd_kafka_AdminOptions_t* o) const { rd_kafka_AdminOptions_destroy(o); }
};
using HandlePtr = std::unique_ptr<rd_kafka_t, HandleDeleter>;

absl::StatusOr<HandlePtr> AdminClient(const std::string& bootstrap) {
  ASSIGN_OR_RETURN(KafkaConfPtr conf, NewKafkaConf({{"bootstrap.servers", bootstrap},
                                                    {"client.id", "caravela-admin"},
                                                    {"allow.auto.create.topics", "false"}}));
  ASSIGN_OR_RETURN(rd_kafka_t * rk, NewKafkaClient(KafkaClientType::kProducer, std::move(conf),
                                                   "kafka admin client"));
  return HandlePtr(rk);
}

std::unique_ptr<rd_kafka_AdminOptions_t, AdminOptionsDeleter> Options(rd_kafka_t* rk,
                                                                      rd_kafka_admin_op_t op,
                                                                      int timeout_ms) {
  char err[512];
  std::unique_ptr<rd_kafka_AdminOptions_t, AdminOptionsDeleter> options(
      rd_kafka_AdminOptions_new(rk, op));
  (void)rd_kafka_AdminOptions_set_request_timeout(options.get(), timeout_ms, err, sizeof(err));
  (void)rd_kafka_AdminOptions_set_operation_timeout(options.get(), timeout_ms, err, sizeof(err));
  return options;
}

}  // namespace

absl::StatusOr<std::optional<int>> ExistingTopicPartitions(rd_kafka_t* rk,
                                                           const std::string& bootstrap,
                                                           const std::string& topic) {
  const rd_kafka_metadata_t* md = nullptr;
  rd_kafka_resp_err_t err = rd_kafka_metadata(rk, /*all_topics=*/1, nullptr, &md, kTimeoutMs);
  if (err != RD_KAFKA_RESP_ERR_NO_ERROR) {
    return absl::UnavailableError(absl::StrCat("kafka topic ", topic, ": metadata from ", bootstrap,
                                               ": ", rd_kafka_err2str(err)));
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

absl::StatusOr<rd_kafka_resp_err_t> AdminCreateTopic(rd_kafka_t* rk, const std::string& topic,
                                                     int partitions, int timeout_ms,
                                                     std::string* message) {
  char err[512];
  std::unique_ptr<rd_kafka_NewTopic_t, NewTopicDeleter> new_topic(rd_kafka_NewTopic_new(
      topic.c_str(), partitions, /*replication_factor=*/-1, err, sizeof(err)));
  if (new_topic == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("kafka topic ", topic, ": ", err));
  }
  auto options = Options(rk, RD_KAFKA_ADMIN_OP_CREATETOPICS, timeout_ms);
  std::unique_ptr<rd_kafka_queue_t, QueueDeleter> queue(rd_kafka_queue_new(rk));
  rd_kafka_NewTopic_t* topics[] = {new_topic.get()};
  rd_kafka_CreateTopics(rk, topics, 1, options.get(), queue.get());
  std::unique_ptr<rd_kafka_event_t, EventDeleter> event(
      rd_kafka_queue_poll(queue.get(), 2 * timeout_ms + 1000));
  if (event == nullptr) {
    return absl::DeadlineExceededError(
        absl::StrCat("kafka topic ", topic, ": CreateTopics got no answer"));
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
        absl::StrCat("kafka topic ", topic, ": CreateTopics returned ", count, " results"));
  }
  rd_kafka_resp_err_t code = rd_kafka_topic_result_error(results[0]);
  if (const char* s = rd_kafka_topic_result_error_string(results[0]); s != nullptr) *message = s;
  if (message->empty()) *message = rd_kafka_err2str(code);
  return code;
}

absl::Status CreateKafkaTopic(const std::string& bootstrap, const std::string& topic,
                              int partitions) {
  ASSIGN_OR_RETURN(HandlePtr rk, AdminClient(bootstrap));
  ASSIGN_OR_RETURN(std::optional<int> existing,
                   ExistingTopicPartitions(rk.get(), bootstrap, topic));
  if (existing.has_value()) {
    return absl::AlreadyExistsError(absl::StrCat("kafka topic ", topic, " exists on ", bootstrap,
                                                 " (", *existing, " partitions)"));
  }
  std::string message;
  ASSIGN_OR_RETURN(rd_kafka_resp_err_t code,
                   AdminCreateTopic(rk.get(), topic, partitions, kTimeoutMs, &message));
  if (code == RD_KAFKA_RESP_ERR_TOPIC_ALREADY_EXISTS) {
    return absl::AlreadyExistsError(
        absl::StrCat("kafka topic ", topic, " exists on ", bootstrap, ": ", message));
  }
  if (code != RD_KAFKA_RESP_ERR_NO_ERROR) {
    return absl::UnavailableError(absl::StrCat("kafka topic ", topic, ": create with ", partitions,
                                               " partitions on ", bootstrap, ": ", message));
  }
  // Listed once the controller's metadata reached the broker that answers.
  ASSIGN_OR_RETURN(int have, AwaitTopicPartitions(rk.get(), bootstrap, topic,
                                                  /*name_topic=*/false, kTimeoutMs));
  (void)have;
  return absl::OkStatus();
}

absl::Status DeleteKafkaTopics(const std::string& bootstrap,
                               const std::vector<std::string>& topics) {
  if (topics.empty()) return absl::OkStatus();
  ASSIGN_OR_RETURN(HandlePtr rk, AdminClient(bootstrap));
  std::vector<std::unique_ptr<rd_kafka_DeleteTopic_t, DeleteTopicDeleter>> owned;
  std::vector<rd_kafka_DeleteTopic_t*> dels;
  for (const std::string& t : topics) {
    owned.emplace_back(rd_kafka_DeleteTopic_new(t.c_str()));
    dels.push_back(owned.back().get());
  }
  auto options = Options(rk.get(), RD_KAFKA_ADMIN_OP_DELETETOPICS, kTimeoutMs);
  std::unique_ptr<rd_kafka_queue_t, QueueDeleter> queue(rd_kafka_queue_new(rk.get()));
  rd_kafka_DeleteTopics(rk.get(), dels.data(), dels.size(), options.get(), queue.get());
  std::unique_ptr<rd_kafka_event_t, EventDeleter> event(
      rd_kafka_queue_poll(queue.get(), 2 * kTimeoutMs + 1000));
  if (event == nullptr) {
    return absl::DeadlineExceededError(
        absl::StrCat("delete kafka topics on ", bootstrap, ": no answer"));
  }
  if (rd_kafka_event_error(event.get()) != RD_KAFKA_RESP_ERR_NO_ERROR) {
    return absl::UnavailableError(absl::StrCat("delete kafka topics on ", bootstrap, ": ",
                                               rd_kafka_event_error_string(event.get())));
  }
  const rd_kafka_DeleteTopics_result_t* result = rd_kafka_event_DeleteTopics_result(event.get());
  size_t count = 0;
  const rd_kafka_topic_result_t** results =
      result == nullptr ? nullptr : rd_kafka_DeleteTopics_result_topics(result, &count);
  for (size_t i = 0; i < count; ++i) {
    const rd_kafka_resp_err_t code = rd_kafka_topic_result_error(results[i]);
    if (code == RD_KAFKA_RESP_ERR_NO_ERROR || code == RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART) {
      continue;
    }
    const char* s = rd_kafka_topic_result_error_string(results[i]);
    return absl::UnavailableError(
        absl::StrCat("delete kafka topic ", rd_kafka_topic_result_name(results[i]), " on ",
                     bootstrap, ": ", s != nullptr ? s : rd_kafka_err2str(code)));
  }
  return absl::OkStatus();
}

}  // namespace caravela
