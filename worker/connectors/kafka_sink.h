// Kafka sink: produces each result as one record to one topic (SPEC §7).
//
// Record shape: key = the result's key (the window key JSON; empty = null
// key), value = the snapshot JSON, headers `revision` (decimal text, when the
// record has one) and `state` (when it has one). Keyed records are
// partitioned by their key bytes with `murmur2_random`, the Java client's
// partitioner, so a key lands on the partition a Java producer (or Kafka
// Streams) would choose; null keys are spread by librdkafka.
//
// Modes (KafkaSinkOptions::mode):
//   kUpsert    - compaction-friendly: keyed records with a revision are
//                buffered until the next flush (Flush/PreCommit, or
//                `max_buffered_records`), and only the highest revision per
//                key is produced; the others are counted in superseded().
//   kChangelog - every record is produced at once, in order.
//   In both modes records without a key or without a revision are produced
//   at once, as they are.
//
// Exactly-once (KafkaSinkOptions::exactly_once): a transactional producer
// (transactional.id = options.transactional_id, idempotent). Open() calls
// init_transactions, which fences older producers with the same id (their
// open transaction is aborted by the broker), and begins a transaction; all
// writes go into it. PreCommit(id) produces a commit marker for `id` into
// the same transaction (see LastCommittedCheckpoint) and flushes; Commit(id)
// commits the transaction and begins the next one. A Write() after
// PreCommit(id) voids that pre-commit: Commit(id) then fails with
// FailedPrecondition, because it would commit records checkpoint `id`'s
// state does not include; the next PreCommit covers them.
// Close() aborts the open transaction: output after the last Commit belongs
// to no checkpoint. Destroying the sink without Close() leaves the
// transaction open until the next producer with the same id fences it (or
// the broker's transaction timeout aborts it).
//
// Without exactly_once: idempotent producer, acks=all, at-least-once;
// PreCommit = Flush, Commit/Recover do nothing, LastCommittedCheckpoint = -1.
// A replay re-produces records; readers that keep the highest revision per
// key are unaffected.
//
// Not thread-safe: one task thread.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/status.h"
#include "worker/connectors/sink.h"

typedef struct rd_kafka_s rd_kafka_t;
typedef struct rd_kafka_topic_s rd_kafka_topic_t;
typedef struct rd_kafka_message_s rd_kafka_message_t;

namespace caravela {

// `kafka: {topic, bootstrap, mode, exactly_once, linger, properties}`
// (kafka_sink_kind.cc).
struct KafkaSinkSpec {
  std::string topic;
  std::string bootstrap;  // empty: the embedded broker
  // mode: kChangelog (default) produces every revision, in order; kUpsert
  // produces only the highest revision per key within a flush
  // (compaction-friendly, for readers that only want the latest result).
  enum class Mode { kUpsert, kChangelog } mode = Mode::kChangelog;
  // A transactional producer whose transaction commits with each checkpoint
  // (needs spec.checkpoint.interval > 0). Default false: idempotent
  // producer, at-least-once.
  bool exactly_once = false;
  // The producer's linger.ms: how long a result may wait for others to
  // share its produce request (0: sent at once, more requests).
  int64_t linger_ms = 5;
  // librdkafka properties for this sink's clients (SASL, TLS, tuning),
  // checked when the job is parsed (kafka_properties.h).
  std::map<std::string, std::string> properties;
};

struct KafkaSinkOptions {
  std::string bootstrap;  // "host:port[,host:port...]"
  std::string topic;
  enum class Mode { kUpsert, kChangelog } mode = Mode::kUpsert;
  // Upsert: buffered keys that make Write() produce the buffer by itself.
  int max_buffered_records = 10000;

  // Exactly-once: Kafka transactions committed with each checkpoint.
  bool exactly_once = false;
  // Required with exactly_once; the factory uses
  // "caravela-<job>-sink<index>". Exactly one live sink may use an id.
  std::string transactional_id;
  // Where the commit markers go; empty: "<topic>.caravela-commits". Markers
  // use partition 0 only, key = transactional_id, value = the checkpoint id
  // (decimal text), header `epoch`. On a real cluster make it a compacted
  // topic with one partition (LastCommittedCheckpoint reads partition 0 from
  // its start).
  std::string commit_topic;
  // transaction.timeout.ms: the broker aborts a transaction open longer than
  // this, so it must exceed the checkpoint interval (plus the time to write
  // a checkpoint). Brokers cap it at transaction.max.timeout.ms (15 min).
  int transaction_timeout_ms = 60000;
  // The run's epoch (SinkContext.epoch), written as the markers' `epoch`
  // header for operators reading the commit topic.
  int64_t epoch = 0;

  // How long a record may wait to be batched with others.
  int linger_ms = 5;
  // How long Open() waits for the topic's metadata before failing with
  // NotFound (topic missing, auto-creation off) or Unavailable (no broker);
  // also the budget of init_transactions and of LastCommittedCheckpoint().
  int open_timeout_ms = 10000;
  // How long Flush()/Close()/PreCommit()/Commit() wait for outstanding
  // deliveries and transaction requests.
  int flush_timeout_ms = 30000;
  // Extra librdkafka producer properties, applied last (expert use, tests).
  std::map<std::string, std::string> config;
  // The job's kafka.properties: applied to every client of the sink (the
  // producer, after the process's properties; the reader of the commit
  // markers).
  std::map<std::string, std::string> properties;
};

// Errors: Open() fails if the topic's metadata cannot be had in time (and,
// with exactly_once, if init_transactions fails: FailedPrecondition if this
// producer is already fenced). WriteRecord() fails only on a bad record
// (e.g. too large), out of protocol order, or once a failure is sticky; it
// blocks while the local queue is full. Flush()/PreCommit() return
// DeadlineExceeded if deliveries are still outstanding after
// flush_timeout_ms, and Unavailable/Internal if any record written so far
// failed. A delivery failure is sticky: every later call returns it,
// because records are lost and the caller must recover (restore a
// checkpoint and replay).
// Commit() errors (exactly_once): FailedPrecondition "fenced" when a newer
// producer with the same transactional id took over (this instance must
// stop; sticky); Aborted when the broker aborted the transaction (its output
// is lost: restore LastCommittedCheckpoint() and replay; a new transaction
// is open); Internal for fatal producer errors (sticky).
class KafkaSink : public Sink {
 public:
  explicit KafkaSink(KafkaSinkOptions options);
  ~KafkaSink() override;
  KafkaSink(const KafkaSink&) = delete;
  KafkaSink& operator=(const KafkaSink&) = delete;

  absl::Status Open() override;
  absl::Status WriteRecord(const SinkRecord& r) override;
  // Produces the upsert buffer and waits until every record is delivered
  // (with exactly_once: delivered into the open transaction, not visible to
  // read_committed consumers until Commit()).
  absl::Status Flush() override;
  // Flush; with exactly_once also the commit marker of `checkpoint_id`.
  // Returns the sink state for the manifest: the transactional id with
  // exactly_once (Recover checks it), else empty.
  absl::StatusOr<std::string> PreCommit(int64_t checkpoint_id) override;
  // exactly_once: commits the transaction PreCommit(checkpoint_id) prepared
  // and begins the next one. FailedPrecondition if the last PreCommit was not
  // for `checkpoint_id`.
  absl::Status Commit(int64_t checkpoint_id) override;
  // exactly_once: sanity checks only (the broker aborted whatever was not
  // committed when Open() fenced the older producer): `state` must name this
  // sink's transactional id, and `checkpoint_id` must not be newer than
  // LastCommittedCheckpoint() (FailedPrecondition otherwise: the runtime
  // should have restored the older checkpoint).
  absl::Status Recover(int64_t checkpoint_id, std::string_view state) override;
  // exactly_once: the newest checkpoint whose transaction committed, read
  // from the commit topic with isolation.level=read_committed (last marker
  // with this sink's transactional id); 0 if none committed yet (checkpoint
  // ids start at 1: start from scratch). Call after Open() (which aborted
  // older transactions). Without exactly_once: -1 (not tracked).
  absl::StatusOr<int64_t> LastCommittedCheckpoint() override;
  absl::Status Close() override;

  // Records acknowledged by the broker so far (commit markers not counted;
  // with exactly_once they may still be uncommitted).
  int64_t delivered() const { return delivered_; }
  // Upsert: records not produced because a higher (or equal, later) revision
  // of the same key replaced them in the buffer.
  int64_t superseded() const { return superseded_; }
  // The commit topic in use (exactly_once).
  const std::string& commit_topic() const { return options_.commit_topic; }

 private:
  struct Pending {
    std::string key;
    std::string value;
    int64_t revision;
    std::string state;
  };
  enum class TxnState { kNone, kOpen, kPreCommitted };

  static void DeliveryReport(rd_kafka_t* rk, const rd_kafka_message_t* m, void* opaque);
  absl::Status Produce(rd_kafka_topic_t* rkt, int32_t partition, std::string_view key,
                       std::string_view value, int64_t revision, std::string_view state,
                       void* msg_opaque);
  absl::Status ProduceBuffered();
  absl::Status FlushProducer();
  absl::Status BeginTransaction();
  absl::StatusOr<int64_t> ReadLastMarker();
  std::string Where() const;

  KafkaSinkOptions options_;
  rd_kafka_t* rk_ = nullptr;
  rd_kafka_topic_t* rkt_ = nullptr;
  rd_kafka_topic_t* commit_rkt_ = nullptr;  // exactly_once
  int64_t delivered_ = 0;                   // updated by DeliveryReport (on this thread)
  int64_t superseded_ = 0;
  absl::Status failure_;  // first failed delivery or fatal error (sticky)
  // Upsert buffer: entries in first-seen order, index by key.
  std::vector<Pending> pending_;
  std::unordered_map<std::string, size_t> pending_index_;
  // exactly_once
  TxnState txn_ = TxnState::kNone;
  int64_t precommitted_id_ = -1;
  int64_t last_committed_ = -1;  // -1: not read yet
};

}  // namespace caravela
