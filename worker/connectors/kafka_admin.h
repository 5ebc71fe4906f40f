// Topics through librdkafka's Admin API, on a Kafka that serves it (Apache
// Kafka and compatible services; not the embedded broker, whose mock
// cluster answers no CreateTopics: EnsureExchangeTopic creates exchange
// topics there through the in-process broker). Every client gets the
// process's Kafka properties (NewKafkaConf), so this works on a secured
// cluster too.
#pragma once

#include <librdkafka/rdkafka.h>

#include <optional>
#include <string>
#include <vector>

#include "common/status.h"

namespace caravela {

// The partition count of `topic` from an all-topics Metadata request
// (naming the topic would auto-create it on brokers that speak only
// Metadata < v4, such as the mock cluster); nullopt if it does not exist.
// Unavailable (naming `bootstrap`) if no broker answers.
absl::StatusOr<std::optional<int>> ExistingTopicPartitions(rd_kafka_t* rk,
                                                           const std::string& bootstrap,
                                                           const std::string& topic);

// CreateTopics for one topic on the cluster of `rk` (replication factor -1:
// the broker's default.replication.factor). Returns the broker's error code
// for the topic (NO_ERROR, TOPIC_ALREADY_EXISTS, ...) with its message in
// `message`; a status error when the request itself failed (no answer in
// time: DeadlineExceeded naming `topic`).
absl::StatusOr<rd_kafka_resp_err_t> AdminCreateTopic(rd_kafka_t* rk, const std::string& topic,
                                                     int partitions, int timeout_ms,
                                                     std::string* message);

// Creates `topic` with `partitions` partitions on `bootstrap` and waits until
// its metadata lists it. AlreadyExists (with its partition count) if it
// exists; Unavailable (naming topic and cluster) if it cannot be created.
absl::Status CreateKafkaTopic(const std::string& bootstrap, const std::string& topic,
                              int partitions);

// Deletes `topics` on `bootstrap` (those that do not exist are fine).
absl::Status DeleteKafkaTopics(const std::string& bootstrap,
                               const std::vector<std::string>& topics);

}  // namespace caravela
