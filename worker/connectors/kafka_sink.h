// Kafka sink: produces each result as one record (key = the result's key,
// value = its JSON) to one topic.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>

#include "common/status.h"
#include "worker/connectors/sink.h"

typedef struct rd_kafka_s rd_kafka_t;
typedef struct rd_kafka_topic_s rd_kafka_topic_t;
typedef struct rd_kafka_message_s rd_kafka_message_t;

namespace caravela {

struct KafkaSinkOptions {
  std::string bootstrap;  // "host:port[,host:port...]"
  std::string topic;
  // How long a record may wait to be batched with others.
  int linger_ms = 5;
  // How long Open() waits for the topic's metadata before failing with
  // NotFound (topic missing, auto-creation off) or Unavailable (no broker).
  int open_timeout_ms = 10000;
  // How long Flush()/Close() wait for outstanding deliveries.
  int flush_timeout_ms = 30000;
  // Extra librdkafka producer properties, applied last (expert use, tests).
  std::map<std::string, std::string> config;
};

// Lifecycle: Open(), then Write()*/Flush()* from one thread, then Close().
// Not thread-safe. Destroying an open sink without Close() abandons records
// not yet delivered.
//
// Delivery: the producer is idempotent (no duplicates or reordering caused
// by retries), acks=all, and keyed records use the murmur2 partitioner, so
// a key lands on the same partition as with the Java client. An empty key is
// produced as a null key.
//
// Errors: Open() fails if the topic's metadata cannot be had in time.
// Write() fails only on a bad record (e.g. too large) or once a failure is
// sticky; it blocks while the local queue is full. Flush() returns
// DeadlineExceeded if deliveries are still outstanding after
// flush_timeout_ms, and Unavailable/Internal if any record written so far
// failed. A delivery failure is sticky: every later Write()/Flush() returns
// it, because records are lost and the caller must recover (e.g. restore the
// last checkpoint and replay).
class KafkaSink : public Sink {
 public:
  explicit KafkaSink(KafkaSinkOptions options);
  ~KafkaSink() override;
  KafkaSink(const KafkaSink&) = delete;
  KafkaSink& operator=(const KafkaSink&) = delete;

  absl::Status Open() override;
  absl::Status Write(std::string_view key, std::string_view json) override;
  absl::Status Flush() override;
  absl::Status Close() override;

  // Records acknowledged by the broker so far.
  int64_t delivered() const { return delivered_; }

 private:
  static void DeliveryReport(rd_kafka_t* rk, const rd_kafka_message_t* m, void* opaque);

  KafkaSinkOptions options_;
  rd_kafka_t* rk_ = nullptr;
  rd_kafka_topic_t* rkt_ = nullptr;
  int64_t delivered_ = 0;  // updated by DeliveryReport (on this thread)
  absl::Status failure_;   // first failed delivery (sticky)
};

}  // namespace caravela
