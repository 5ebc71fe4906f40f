// Kafka source: reads every partition of one topic (or a chosen subset) with
// explicit partition assignment. Offsets are owned by the engine (checkpoints), never by a
// consumer group: no group rebalancing; offsets are only committed to a group
// for monitoring (CommitOffsets, e.g. after each completed checkpoint).
//
// Also declares the small helpers shared by the Kafka connectors (logger,
// client configuration), see "Shared by the Kafka connectors" below.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "common/status.h"
#include "worker/connectors/source.h"

typedef struct rd_kafka_s rd_kafka_t;
typedef struct rd_kafka_conf_s rd_kafka_conf_t;
typedef struct rd_kafka_queue_s rd_kafka_queue_t;
typedef struct rd_kafka_message_s rd_kafka_message_t;
typedef struct rd_kafka_topic_partition_list_s rd_kafka_topic_partition_list_t;

namespace spdlog {
class logger;
}  // namespace spdlog

namespace caravela {

// A source's `kafka: {topic, bootstrap?, start?, bounded?, arrival_field?,
// isolation?, properties?}` (kafka_source_kind.cc).
struct KafkaSourceSpec {
  std::string topic;
  std::string bootstrap;           // empty: the embedded broker
  std::string start = "earliest";  // earliest | latest
  // Read only what exists when the job starts, then end (watermark +inf),
  // like a file: replays, reconciliation, benchmarks.
  bool bounded = false;
  // As for files: processing time follows this field (needs bounded: the
  // partitions are merged by it, ties by partition then offset).
  std::string arrival_field;
  // read_committed: records of committed transactions and non-transactional
  // ones, up to the last stable offset (an open transaction holds the reader
  // back); read_uncommitted: every record, aborted transactions included.
  // (docs/semantics.md "Reading transactional topics")
  std::string isolation = "read_committed";
  // librdkafka properties for this source's clients (SASL, TLS, tuning),
  // checked when the job is parsed (kafka_properties.h); applied after the
  // process's.
  std::map<std::string, std::string> properties;
};

struct KafkaSourceOptions {
  std::string bootstrap;  // "host:port[,host:port...]"
  std::string topic;
  // The partitions to assign and read (each in [0, partition count)); empty:
  // every partition. PartitionCount() stays the topic's partition count;
  // partitions not in the list are never read, their Backlog() is 0 and their
  // Positions() entry -1, and their `start_offsets` entries are ignored.
  std::vector<int32_t> partitions;
  // Where partitions without an entry in `start_offsets` begin: "earliest"
  // (the log start) or "latest" (the log end when Open() runs).
  std::string start = "earliest";
  // Explicit next offset to read, per partition (e.g. from a checkpoint's
  // Positions()). An offset outside the partition's current log range makes
  // Poll() fail with DataLoss (never a silent reset).
  std::map<int32_t, int64_t> start_offsets;
  // How long Open() waits for the topic to exist (it may be created by the
  // first producer) before failing with NotFound.
  int open_timeout_ms = 10000;
  // Extra librdkafka consumer properties, applied last (expert use, tests).
  std::map<std::string, std::string> config;
};

// Lifecycle: Open() once, then Poll()/Backlog()/Positions() from one thread
// (the task thread), then the destructor, which closes the consumer.
// Not thread-safe. librdkafka runs its own background threads internally.
//
// Errors: Open() returns InvalidArgument (bad options or client config),
// NotFound (topic missing after open_timeout_ms), Unavailable (no broker).
// Poll() returns DataLoss when a requested offset is no longer (or not yet)
// in the log, NotFound naming the topic when it was deleted (a permanent
// failure of the job), Internal on a fatal client error; transient broker errors are
// logged once per error code on the "kafka" logger and retried internally.
class KafkaSource : public RawSource {
 public:
  explicit KafkaSource(KafkaSourceOptions options);
  ~KafkaSource() override;
  KafkaSource(const KafkaSource&) = delete;
  KafkaSource& operator=(const KafkaSource&) = delete;

  absl::Status Open() override;
  int PartitionCount() const override { return static_cast<int>(positions_.size()); }
  absl::StatusOr<int> Poll(int max_messages, int timeout_ms,
                           const std::function<void(const RawMessage&)>& f) override;
  // False until StopAtCurrentEnd().
  bool Bounded() const override { return stopping_; }
  // After StopAtCurrentEnd(): every record before the end offsets it saw was
  // delivered.
  bool Exhausted() const override;
  // High watermark (last seen in a fetch response, or queried at Open())
  // minus the position; never blocks on the network.
  int64_t Backlog(int32_t partition) const override;
  int64_t HighWatermark(int32_t partition) const override;
  // Next offset per partition; -1 for partitions not assigned. It moves past
  // a transaction's commit or abort marker (never delivered) once the
  // consumer has passed it, so that Backlog() reaches 0 on a topic written
  // transactionally; a restore from it resumes right after the last record
  // delivered (or after a marker, which is never delivered anyway).
  std::vector<int64_t> Positions() const override;
  // Queries the partitions' current end offsets (under isolation.level
  // read_committed, librdkafka's default, the last stable offset: what
  // precedes the first open transaction); Poll() then delivers the
  // records before them and nothing after, and Exhausted() turns true once
  // they are all delivered (partitions that reach their end are paused).
  // Unavailable if the end offsets cannot be queried.
  absl::Status StopAtCurrentEnd() override;
  // Commits the assigned partitions' positions to the consumer group named
  // by the `group.id` in options.config (asynchronously; for others to read
  // the progress, e.g. exchange flow control; the engine never reads them).
  absl::Status CommitPositions() { return CommitOffsets(positions_); }
  // The same for explicit next offsets (a checkpoint's), assigned partitions
  // only.
  absl::Status CommitOffsets(const std::vector<int64_t>& next_offsets) override;

  const KafkaSourceOptions& options() const { return options_; }

 private:
  // Handles one message or consumer event; returns true if it was a record
  // delivered to `f`.
  absl::StatusOr<bool> Handle(rd_kafka_message_t* m,
                              const std::function<void(const RawMessage&)>& f);
  void Pause(int32_t partition);
  // NotFound naming the topic if the cluster no longer lists it (checked at
  // most once a second; OK when it is there or no broker answers).
  absl::Status CheckTopicExists(int32_t partition);
  // librdkafka's error callback (on the polling thread).
  void OnClientError(int err, const char* reason);
  // Moves positions_ up to librdkafka's position (past transaction markers)
  // once every message it handed out was handled.
  void FollowConsumerPositions();

  KafkaSourceOptions options_;
  rd_kafka_t* rk_ = nullptr;
  rd_kafka_queue_t* queue_ = nullptr;  // the consumer queue (batch reads)
  std::vector<int64_t> positions_;     // next offset per partition
  std::vector<bool> owned_;            // per partition: assigned and read
  std::vector<int64_t> high_;          // last known high watermark
  bool stopping_ = false;              // StopAtCurrentEnd() was called
  std::vector<int64_t> stop_at_;       // end offset per partition when stopping
  std::vector<rd_kafka_message_t*> batch_;
  rd_kafka_topic_partition_list_t* follow_ = nullptr;  // owned partitions, for rd_kafka_position
  absl::flat_hash_set<int> logged_errors_;             // error codes logged since last record
  std::chrono::steady_clock::time_point next_topic_check_;
  bool topic_error_ = false;  // the client said the topic or a partition is unknown
  bool topic_gone_ = false;   // and the cluster no longer lists the topic
};

// ---------------------------------------------------------------------------
// Shared by the Kafka connectors (source, sink, embedded broker, test utils).

// The "kafka" subsystem logger (created on first use; thread-safe).
std::shared_ptr<spdlog::logger> KafkaLogger();

// Owns a librdkafka configuration until it is handed to rd_kafka_new().
struct KafkaConfDeleter {
  void operator()(rd_kafka_conf_t* conf) const;
};
using KafkaConfPtr = std::unique_ptr<rd_kafka_conf_t, KafkaConfDeleter>;

// A new configuration whose librdkafka log lines go to KafkaLogger(), with
// `props` applied in order, then the process's properties (caravela worker
// --kafka-property, kafka_properties.h). InvalidArgument names the bad
// property.
absl::StatusOr<KafkaConfPtr> NewKafkaConf(
    const std::vector<std::pair<std::string, std::string>>& props);
// rd_kafka_new with `conf` (the client owns it once it exists). A failure
// names `what`: a configuration librdkafka refuses is InvalidArgument (a
// restart would fail the same way); anything else (its threads not starting
// in time on a loaded host, no thread or file to spare) is Unavailable, so
// the task is restarted.
enum class KafkaClientType { kProducer, kConsumer };
absl::StatusOr<rd_kafka_t*> NewKafkaClient(KafkaClientType type, KafkaConfPtr conf,
                                           std::string_view what);
// Waits up to `timeout_ms` until `topic` is in the cluster metadata and
// returns its partition count. `name_topic` asks for the topic by name (what
// a producer does; the broker may auto-create it) instead of listing all
// topics (never creates). NotFound if the topic is still missing, Unavailable
// if no broker answered.
// `bootstrap` only names the cluster in error messages.
absl::StatusOr<int> AwaitTopicPartitions(rd_kafka_t* rk, const std::string& bootstrap,
                                         const std::string& topic, bool name_topic, int timeout_ms);
// Sets one property; InvalidArgument names the bad property.
absl::Status SetKafkaConf(rd_kafka_conf_t* conf, const std::string& name, const std::string& value);

// Calls `f` with every message of `topic` from its start to its current end
// (a bounded read: `caravela reconcile` reading a sink or an audit trail
// back). `properties`: more librdkafka properties for its consumer (a
// sink's kafka.properties). Errors name the topic and the broker.
absl::Status ForEachKafkaMessage(const std::string& bootstrap, const std::string& topic,
                                 int open_timeout_ms,
                                 const std::function<void(const RawMessage&)>& f,
                                 const std::map<std::string, std::string>& properties = {});

}  // namespace caravela
