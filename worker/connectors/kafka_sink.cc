#include "worker/connectors/kafka_sink.h"

#include <librdkafka/rdkafka.h>

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"
#include "worker/connectors/kafka_source.h"

namespace caravela {

KafkaSink::KafkaSink(KafkaSinkOptions options) : options_(std::move(options)) {}

KafkaSink::~KafkaSink() {
  if (rkt_ != nullptr) rd_kafka_topic_destroy(rkt_);
  if (rk_ != nullptr) rd_kafka_destroy(rk_);
}

void KafkaSink::DeliveryReport(rd_kafka_t* rk, const rd_kafka_message_t* m, void* opaque) {
  auto* self = static_cast<KafkaSink*>(opaque);
  if (m->err == RD_KAFKA_RESP_ERR_NO_ERROR) {
    ++self->delivered_;
    return;
  }
  if (self->failure_.ok()) {
    std::string msg = absl::StrCat("kafka sink ", self->options_.topic,
                                   ": delivery failed: ", rd_kafka_err2str(m->err));
    self->failure_ =
        m->err == RD_KAFKA_RESP_ERR__FATAL ? absl::InternalError(msg) : absl::UnavailableError(msg);
  }
}

absl::Status KafkaSink::Open() {
  if (rk_ != nullptr) return absl::FailedPreconditionError("KafkaSink::Open called twice");
  if (options_.bootstrap.empty() || options_.topic.empty()) {
    return absl::InvalidArgumentError("kafka sink needs a bootstrap and a topic");
  }
  const std::vector<std::pair<std::string, std::string>> props = {
      {"bootstrap.servers", options_.bootstrap},
      {"client.id", "caravela-sink"},
      {"enable.idempotence", "true"},
      {"acks", "all"},
      {"linger.ms", std::to_string(options_.linger_ms)},
      {"batch.num.messages", "10000"},
      // Same key -> same partition as the Java client.
      {"partitioner", "murmur2_random"},
  };
  ASSIGN_OR_RETURN(KafkaConfPtr conf, NewKafkaConf(props));
  for (const auto& [name, value] : options_.config) {
    RETURN_IF_ERROR(SetKafkaConf(conf.get(), name, value));
  }
  rd_kafka_conf_set_dr_msg_cb(conf.get(), &KafkaSink::DeliveryReport);
  rd_kafka_conf_set_opaque(conf.get(), this);
  char err[512];
  rk_ = rd_kafka_new(RD_KAFKA_PRODUCER, conf.get(), err, sizeof(err));
  if (rk_ == nullptr) return absl::InvalidArgumentError(absl::StrCat("kafka producer: ", err));
  (void)conf.release();  // owned by rk_ now
  rkt_ = rd_kafka_topic_new(rk_, options_.topic.c_str(), nullptr);
  if (rkt_ == nullptr) {
    return absl::InternalError(
        absl::StrCat("kafka sink ", options_.topic, ": ", rd_kafka_err2str(rd_kafka_last_error())));
  }
  // Wait for the topic's metadata: records then go out at once instead of
  // waiting for librdkafka's periodic (1 s) refresh of unknown topics, and a
  // missing topic or unreachable broker fails here rather than at Flush().
  // (The request may auto-create the topic, as the first record would.)
  RETURN_IF_ERROR(AwaitTopicPartitions(rk_, options_.bootstrap, options_.topic, /*name_topic=*/true,
                                       options_.open_timeout_ms)
                      .status());
  KafkaLogger()->info("sink {} on {}", options_.topic, options_.bootstrap);
  return absl::OkStatus();
}

absl::Status KafkaSink::Write(std::string_view key, std::string_view json) {
  if (rk_ == nullptr) return absl::FailedPreconditionError("KafkaSink::Write before Open");
  RETURN_IF_ERROR(failure_);
  while (true) {
    rd_kafka_resp_err_t err;
    if (key.empty()) {
      err = rd_kafka_producev(rk_, RD_KAFKA_V_RKT(rkt_), RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
                              RD_KAFKA_V_VALUE(const_cast<char*>(json.data()), json.size()),
                              RD_KAFKA_V_END);
    } else {
      err = rd_kafka_producev(rk_, RD_KAFKA_V_RKT(rkt_), RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
                              RD_KAFKA_V_KEY(const_cast<char*>(key.data()), key.size()),
                              RD_KAFKA_V_VALUE(const_cast<char*>(json.data()), json.size()),
                              RD_KAFKA_V_END);
    }
    if (err == RD_KAFKA_RESP_ERR_NO_ERROR) break;
    if (err != RD_KAFKA_RESP_ERR__QUEUE_FULL) {
      return absl::InvalidArgumentError(
          absl::StrCat("kafka sink ", options_.topic, ": ", rd_kafka_err2str(err)));
    }
    // Backpressure: serve delivery reports until the queue has room.
    rd_kafka_poll(rk_, 100);
    RETURN_IF_ERROR(failure_);
  }
  rd_kafka_poll(rk_, 0);  // serve delivery reports
  return failure_;
}

absl::Status KafkaSink::Flush() {
  if (rk_ == nullptr) return absl::FailedPreconditionError("KafkaSink::Flush before Open");
  rd_kafka_resp_err_t err = rd_kafka_flush(rk_, options_.flush_timeout_ms);
  RETURN_IF_ERROR(failure_);
  if (err == RD_KAFKA_RESP_ERR__TIMED_OUT) {
    return absl::DeadlineExceededError(
        absl::StrCat("kafka sink ", options_.topic, ": ", rd_kafka_outq_len(rk_),
                     " records undelivered after ", options_.flush_timeout_ms, " ms"));
  }
  char fatal[512];
  if (rd_kafka_fatal_error(rk_, fatal, sizeof(fatal)) != RD_KAFKA_RESP_ERR_NO_ERROR) {
    failure_ = absl::InternalError(absl::StrCat("kafka sink ", options_.topic, ": fatal: ", fatal));
  }
  return failure_;
}

absl::Status KafkaSink::Close() {
  if (rk_ == nullptr) return absl::OkStatus();
  absl::Status status = Flush();
  rd_kafka_topic_destroy(rkt_);
  rkt_ = nullptr;
  rd_kafka_destroy(rk_);
  rk_ = nullptr;
  return status;
}

}  // namespace caravela
