// Exchanges (SPEC §8): records cross from one stage's tasks to the next
// stage's tasks through a transport, never through a home-made protocol:
//  * Kafka: a topic `caravela.<job>.<operator>` on the job's cluster (tasks in
//    different processes; `caravela run --exchange kafka`);
//  * memory: a MemoryExchange, bounded queues inside one process (the default
//    of `caravela run`, whose tasks all share the process).
// Both carry the same messages, so the reader's logic (per-channel
// watermarks, barrier alignment, epochs) is one. This header is the whole API
// the task runtime uses: the frame codec, the writer (one per producing task
// and exchange) and the reader (one per consuming task and exchange), plus
// in-process flow control for Kafka.
//
// A message (a Kafka message value, or one queue entry) carries one or more
// frames of one producer for one partition, each preceded by its length
// (varint). Writers batch frames per partition up to batch_bytes, so the
// transport's cost is paid per message, not per record.
//
// Frames:
//   byte 0      type: 'S' record run, 'R' record, 'W' watermark marker,
//               'B' barrier
//   varint      epoch (the job's restore epoch; readers drop older ones)
//   varint      producer task index (0 .. producers-1)
//   'S':  varint input index of the consuming operator, then one or more
//         records back to back, each: zigzag-varint deltas (to the run's
//         previous record; the first to 0) of event_time and arrival,
//         zigzag-varint origin partition, zigzag-varint delta of the origin
//         offset (the record's where it was read), then Record::PackTo bytes
//         (native layout: every process of a job runs the same binary on the
//         same architecture; the bytes say their own size). Writers put a
//         partition's consecutive records of one input in one run, so the
//         frame header and length are paid per batch, not per record; the
//         run's length prefix is a 4-byte (padded) varint, patched when the
//         run closes.
//   'R':  one record: varint input, zigzag-varint event_time, arrival,
//         origin partition and origin offset, then Record::PackTo bytes
//         (written for a record too large for a run; still read)
//   'W':  zigzag-varint watermark (kMaxTime: the producer's input ended),
//         one byte idle flag
//   'B':  varint checkpoint id, then a flags byte 1 if the checkpoint ends
//         the job (a stop or a savepoint; absent otherwise)
//
// Guarantees the runtime builds on:
//  * Per partition, a writer's frames are read in the order written (one
//    idempotent producer per writer and explicit partitions on Kafka; one
//    FIFO queue per partition in memory).
//  * Watermark of a reader = min over (owned partition, producer) channels
//    that are not idle of the last marker; kMinTime for a channel without a
//    marker yet; idle when every channel is idle. Never decreases. A channel
//    at kMaxTime (its producer ended) is never idle, so the watermark reaches
//    kMaxTime once every producer ended.
//  * Barrier alignment: once barrier n arrived on a channel, later frames of
//    that channel are held back (buffered, not delivered) until barrier n
//    arrived on every channel; then AlignedBarrier() returns n. After the task
//    snapshotted, ReleaseBarrier() lets the held frames through (in order).
//    (Barriers already released or older than n are ignored; a newer one
//    abandons n and aligns on it.) The first barrier of a checkpoint to
//    arrive also goes to ExchangeReaderOptions::on_barrier: the consuming
//    task's worker learns of the checkpoint from its producers, not only
//    from its coordinator (JobCheckpoints::SawBarrier).
//  * Frames of an older epoch are dropped (counted); a frame of a newer epoch
//    means this reader was fenced: Poll fails with FailedPrecondition.
//  * An offset no longer in the log fails Poll with DataLoss naming the
//    topic, partition and offsets (never a silent skip).
//
// Threading: a writer or a reader is used by one task thread. FlowControl and
// MemoryExchange are shared by every writer and reader of one exchange in one
// process.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/key_groups.h"
#include "common/record.h"
#include "common/status.h"
#include "common/time_util.h"
#include "worker/operators/output.h"

namespace spdlog {
class logger;
}  // namespace spdlog

namespace caravela {

class NetworkExchange;  // network_exchange.h

// ---- Codec -------------------------------------------------------------------

struct ExchangeFrame {
  enum class Type : uint8_t { kRecordRun = 'S', kRecord = 'R', kWatermark = 'W', kBarrier = 'B' };
  Type type = Type::kRecord;
  int64_t epoch = 0;
  int32_t producer = 0;
  // kRecord and kRecordRun
  int32_t input = 0;
  // kRecord
  int64_t event_time = 0;
  int64_t arrival = 0;
  int32_t origin_partition = 0;  // Record::partition and offset at the writer
  int64_t origin_offset = 0;
  // kRecord: Record::PackTo bytes; kRecordRun: the run's records (both may
  // be unaligned).
  std::string_view packed;
  // kWatermark
  int64_t watermark = 0;
  bool idle = false;
  // kBarrier; `stop`: the checkpoint ends the job (a stop or savepoint)
  int64_t checkpoint_id = 0;
  bool stop = false;
};

// Each Encode* replaces *out with one frame (no length prefix).
void EncodeRecordFrame(int64_t epoch, int32_t producer, int32_t input, const Record& r,
                       std::string* out);
void EncodeWatermarkFrame(int64_t epoch, int32_t producer, int64_t watermark, bool idle,
                          std::string* out);
void EncodeBarrierFrame(int64_t epoch, int32_t producer, int64_t checkpoint_id, std::string* out,
                        bool stop = false);
// A run of records ('S' frame) being written at the end of a message.
struct RecordRun {
  size_t start = std::string::npos;  // offset of its length prefix; npos: no open run
  int32_t input = 0;
  // The run's previous record (the deltas' base).
  int64_t event_time = 0;
  int64_t arrival = 0;
  int64_t offset = 0;
};
// Appends `r` to the open run at the end of `message` when it is of
// `input`; else closes that run and opens a new one (or, for a record too
// large for a run, appends an 'R' frame). Returns the frames it added (0 or
// 1). Nothing else may be appended to `message` until CloseRecordRun.
int AppendToRecordRun(int64_t epoch, int32_t producer, int32_t input, const Record& r,
                      RecordRun* run, std::string* message);
// Closes the open run (writes its length); no-op without one.
void CloseRecordRun(RecordRun* run, std::string* message);
// Reads the records of a kRecordRun frame that DecodeFrame accepted.
class RecordRunReader {
 public:
  explicit RecordRunReader(const ExchangeFrame& f) : in_(f.packed) {}
  // Fills `r` (fields, event_time, arrival) and the record's origin from the
  // next record; false at the end of the run.
  bool Next(Record* r, int32_t* origin_partition, int64_t* origin_offset);
  // The records of the run left (walking their sizes, nothing unpacked).
  int Count() const;

 private:
  std::string_view in_;
  size_t pos_ = 0;
  uint64_t event_time_ = 0, arrival_ = 0, offset_ = 0;  // running sums (mod 2^64)
};
// Each Append* appends one frame with its length prefix to a message.
void AppendRecordFrame(int64_t epoch, int32_t producer, int32_t input, const Record& r,
                       std::string* message);
void AppendWatermarkFrame(int64_t epoch, int32_t producer, int64_t watermark, bool idle,
                          std::string* message);
void AppendBarrierFrame(int64_t epoch, int32_t producer, int64_t checkpoint_id,
                        std::string* message, bool stop = false);
// InvalidArgument on truncated or unknown bytes, trailing bytes after a
// marker or barrier, or a packed record that is not well formed (sizes, node
// types, key and string bounds, subtree nesting are checked, so a frame that
// decodes can be unpacked and read safely). `packed` points into `bytes`.
// `trusted`: the bytes come from this process (MemoryExchange): the packed
// record is not validated (the header still is).
absl::StatusOr<ExchangeFrame> DecodeFrame(std::string_view bytes, bool trusted = false);
// The frame of `message` at *pos (advanced past it); InvalidArgument on a
// length prefix that is truncated or runs past the end, or a frame that does
// not decode. Call while *pos < message.size().
absl::StatusOr<ExchangeFrame> NextFrame(std::string_view message, size_t* pos,
                                        bool trusted = false);
// The whole frames of `message` (walking the length prefixes only, without
// decoding them; a truncated tail is not counted).
int CountFrames(std::string_view message);
// Checks a message that arrived from another process before anyone reads
// it: exactly `frames` frames, each decoding (packed records validated) and
// of `producer` and `epoch` (a frame of another epoch on a stream would
// fence or be dropped by the reader). InvalidArgument naming the first fault.
absl::Status ValidateMessage(std::string_view message, int32_t producer, int64_t epoch, int frames);
// The exchange subsystem's logger ("exchange").
std::shared_ptr<spdlog::logger> ExchangeLogger();
// Fills `r` (fields, event_time, arrival) from a record frame that
// DecodeFrame accepted (`packed` may be unaligned).
void UnpackRecordFrame(const ExchangeFrame& f, Record* r);

// The partition a writer sends `r` to: the consuming task that owns its key
// group (common/key_groups.h: ExchangeKeyHash(r, key) mod max_parallelism,
// in the ranges of `partitions` tasks; partitions <= max_parallelism); 0 for
// an empty key.
int32_t ExchangePartition(const Record& r, const std::vector<FieldPath>& key, int partitions,
                          int max_parallelism, std::string* scratch);

// ---- Topics ------------------------------------------------------------------

// Creates `topic` with `partitions` partitions on `bootstrap` if it does not
// exist (Kafka Admin API); FailedPrecondition naming the topic and both
// counts if it exists with fewer partitions (more are fine: the first
// `partitions` are used, so a job rescaled to fewer tasks keeps its topics); Unavailable if the
// cluster cannot be reached or the creation fails. The embedded broker
// (librdkafka's mock cluster) serves no CreateTopics: if it runs in this
// process the topic is created through it (CreateTopicOnEmbeddedBroker); one
// in another process never answers the Admin request (Unavailable after
// 10 s, asking to create the topic up front).
//
// A topic it creates gets max(partitions, create_partitions) partitions: the
// runtime passes the job's max_parallelism, so that a later rescale to any
// task count up to it finds enough partitions (exchange records are not
// state: a new epoch's readers start at the log end, so only the count
// matters).
absl::Status EnsureExchangeTopic(const std::string& bootstrap, const std::string& topic,
                                 int partitions, int create_partitions = 0);

// ---- Flow control ------------------------------------------------------------

// Keeps writers from outrunning readers past what the broker keeps (the
// embedded broker holds ~5 MiB per partition and drops older records). Bytes
// written and read per partition of one exchange, in one process; a writer
// waits while written - read > limit on the partition it writes (so at most
// limit + one frame per concurrent writer is outstanding). Every frame counts
// (records, markers, barriers); readers count a frame when they consume it
// from Kafka, also when it is then held back by alignment or dropped.
// Only share one between writers and readers that are all in this process and
// read everything written (readers opened before the writers write, one
// instance per run): a reader elsewhere never reports its reads and the
// writers would wait forever. Thread-safe.
class ExchangeFlowControl {
 public:
  ExchangeFlowControl(int partitions, int64_t limit_bytes);
  void Wrote(int partition, int64_t bytes);
  void Read(int partition, int64_t bytes);
  int64_t Outstanding(int partition) const;
  int64_t limit() const { return limit_; }
  // Ends every wait for good (a task of the job failed, so a reader may never
  // read again): writers waiting now or later return Aborted.
  void Abort() { aborted_.store(true, std::memory_order_relaxed); }
  bool aborted() const { return aborted_.load(std::memory_order_relaxed); }

 private:
  int64_t limit_;
  std::atomic<bool> aborted_{false};
  std::unique_ptr<std::atomic<int64_t>[]> written_, read_;
  int partitions_;
};

// ---- In-memory transport -----------------------------------------------------

// An exchange whose producers and consumers share this process: one bounded
// FIFO queue of messages per partition. A writer waits while its partition
// holds more than `limit_bytes` (so memory stays bounded and a fast stage
// cannot run away from a slow one); a reader waits for messages up to its
// timeout. One reader per partition (Pop takes the messages). Offsets are
// message sequence numbers per partition, from 0. Thread-safe.
class MemoryExchange {
 public:
  MemoryExchange(std::string name, int partitions, int64_t limit_bytes);
  const std::string& name() const { return name_; }
  int partitions() const { return static_cast<int>(queues_.size()); }
  int64_t limit() const { return limit_; }

  struct Message {
    std::string bytes;
    int64_t offset = 0;
    int frames = 0;
  };
  // Appends `bytes` (`frames` frames) to `partition`'s queue, waiting while
  // the queue is over the limit. Aborted after Abort(); OutOfRange for a bad
  // partition.
  absl::Status Push(int partition, std::string bytes, int frames);
  // Moves up to `max` messages of `partition` into *out (appended), waiting
  // up to `timeout_ms` for the first. Returns how many.
  int Pop(int partition, int max, int timeout_ms, std::vector<Message>* out);
  // Frames queued in `partition`; bytes queued.
  int64_t Backlog(int partition) const;
  int64_t QueuedBytes(int partition) const;
  // Message buffers go round: readers give back what they read, writers take
  // a spare one (cleared, its capacity kept; empty if none) instead of
  // allocating fresh pages for every message.
  void Recycle(std::string buffer);
  std::string TakeBuffer();
  // Ends every wait for good (a task of the job failed): writers waiting now
  // or later return Aborted; readers stop waiting.
  void Abort();
  bool aborted() const { return aborted_.load(std::memory_order_relaxed); }

 private:
  struct Queue {
    mutable std::mutex mu;
    std::condition_variable data;   // a reader waits for messages
    std::condition_variable space;  // writers wait for room
    std::deque<Message> messages;
    int64_t bytes = 0;
    int64_t frames = 0;
    int64_t next_offset = 0;
  };
  std::string name_;
  int64_t limit_;
  std::atomic<bool> aborted_{false};
  std::vector<std::unique_ptr<Queue>> queues_;
  std::mutex spare_mu_;
  std::vector<std::string> spare_;
};

// ---- Writer ------------------------------------------------------------------

struct ExchangeWriterOptions {
  // Transport: `memory` when set, else `network` when set, else Kafka at
  // `bootstrap`. `topic` names the exchange (and its Kafka topic).
  MemoryExchange* memory = nullptr;
  // Network: the gRPC address (HOST:PORT) of the worker running each
  // consuming task (index = partition), and the job's id (streams name it).
  NetworkExchange* network = nullptr;
  std::vector<std::string> peers;
  std::string job_id;
  std::string bootstrap;
  std::string topic;
  int partitions = 1;
  // The job's key groups (spec.max_parallelism, >= partitions): records go
  // to the partition of the consuming task that owns their key group.
  int max_parallelism = kDefaultMaxParallelism;
  // This task's index among all tasks writing this topic (the runtime numbers
  // the tasks of the producing stages consecutively, stages in id order).
  int32_t producer = 0;
  int64_t epoch = 0;
  // Per input index of the consuming operator: the key paths hashed
  // (ExchangeKeyHash) to pick the partition. Empty paths: partition 0.
  std::vector<std::vector<FieldPath>> keys;
  ExchangeFlowControl* flow = nullptr;  // optional (Kafka)
  // Kafka, readers in other processes: when non-empty, the consumer group
  // the readers commit their positions to; the writer waits while more than
  // `flow_limit_bytes` of its own messages on a partition are beyond the
  // group's committed offset (what the readers have not read yet).
  std::string flow_group;
  int64_t flow_limit_bytes = 1 << 20;
  // Kafka: the producer's compression.codec ("lz4"); empty: none.
  std::string compression;
  // Set by the runtime when the job stops: a writer waiting on readers gives
  // up (Aborted). May be null.
  const std::atomic<bool>* cancel = nullptr;
  // A partition's buffered frames are sent once they reach this size (and
  // on markers, barriers, SendBuffered and Flush).
  int64_t batch_bytes = 64 * 1024;
};

class ExchangeWriter {
 public:
  static absl::StatusOr<std::unique_ptr<ExchangeWriter>> Open(ExchangeWriterOptions options);
  virtual ~ExchangeWriter() = default;
  // Encodes `r` for operator input `input` into its partition's buffer
  // (sent when the buffer is full: non-blocking but for flow control and a
  // full producer queue). Errors are delivery failures reported so far
  // (sticky: frames were lost, restore the job), or a message the producer
  // refuses (larger than message.max.bytes, 1 MB).
  // An input without key paths in `keys` goes to partition 0.
  virtual absl::Status Write(int input, const Record& r) = 0;
  // A watermark marker on every partition, sent with what is buffered (the
  // runtime calls it when the watermark moved, at most every 200 ms, and on
  // idleness changes).
  virtual absl::Status WriteWatermark(int64_t watermark, bool idle) = 0;
  // Barrier `checkpoint_id` on every partition, after every record written
  // so far; sent at once. `stop`: the checkpoint ends the job.
  virtual absl::Status WriteBarrier(int64_t checkpoint_id, bool stop = false) = 0;
  // Sends every partition's buffered frames (the runtime calls it at the end
  // of each step, so a record waits at most one step in the buffer).
  virtual absl::Status SendBuffered() = 0;
  // Sends what is buffered and waits until everything sent was acknowledged
  // by the broker (DeadlineExceeded if not within timeout_ms). The
  // destructor does not flush: unflushed frames are dropped.
  virtual absl::Status Flush(int timeout_ms) = 0;
  // Records and bytes handed to the transport (not counting buffered ones).
  virtual int64_t records_written() const = 0;
  virtual int64_t bytes_written() const = 0;
  // Time the writing thread spent in the transport's send, in ns: waiting
  // for credit (network), for flow control or a full producer queue
  // (Kafka, memory), plus the hand-over itself (microseconds). What the
  // task's back-pressure costs it.
  virtual int64_t send_wait_ns() const = 0;
};

// ---- Reader ------------------------------------------------------------------

struct ExchangeReaderOptions {
  // Transport: `memory` when set, else `network` (an inbox per owned
  // partition on this process's NetworkExchange, for `job_id`), else Kafka
  // at `bootstrap` (see the writer).
  MemoryExchange* memory = nullptr;
  NetworkExchange* network = nullptr;
  std::string job_id;
  std::string bootstrap;
  std::string topic;
  std::vector<int32_t> partitions;  // owned partitions
  int producers = 1;                // tasks writing this topic (producer ids 0 .. producers-1)
  int64_t epoch = 0;
  // Where reading starts: "latest" (the log end at Open: restores open every
  // reader before any writer of the new epoch writes) or "earliest".
  // (Kafka; a memory reader gets everything pushed since the exchange was made.)
  std::string start = "latest";
  // Records keep the partition and offset they had at the writer (where
  // they were read from their source) instead of the exchange's.
  bool origin = false;
  ExchangeFlowControl* flow = nullptr;  // optional (Kafka)
  // Kafka: when non-empty, the reader commits its positions to this consumer
  // group (at most every 20 ms) for the writers' flow control.
  std::string flow_group;
  // Called on the reading thread with the first barrier of each checkpoint
  // newer than any seen (its id, and whether it ends the job).
  std::function<void(int64_t checkpoint_id, bool stop)> on_barrier;
};

// One (owned partition, producer) channel of a reader: its last watermark
// marker (kMinTime before the first) and idle flag, for status reports
// ("which producer holds the watermark back").
struct ExchangeChannelStatus {
  int32_t partition = 0;
  int32_t producer = 0;
  int64_t watermark = kMinTime;
  bool idle = false;
};

class ExchangeReader {
 public:
  static absl::StatusOr<std::unique_ptr<ExchangeReader>> Open(ExchangeReaderOptions options);
  virtual ~ExchangeReader() = default;
  // Reads messages until about `max_frames` frames were read (whole
  // messages: it may be more), waiting at most `timeout_ms` for the first;
  // appends records of the current epoch that are not held back by alignment to
  // (*by_input)[frame.input] (grown as needed; Record::partition is the exchange partition, offset
  // its message's offset). Returns the number of records appended. Frames released by
  // ReleaseBarrier() come first (they count against max_frames; no waiting then). Reading the
  // transport goes on while aligned (every frame is then held), so writers blocked by flow control
  // never wait on a snapshot. A barrier older than the one being aligned is ignored; a newer one
  // abandons the older alignment (that producer skipped the checkpoint) and aligns on the newer
  // one. Errors: DataLoss (offset out of the log), FailedPrecondition (a newer epoch: fenced),
  // InvalidArgument (a frame that does not decode, or an unknown producer; names topic, partition
  // and offset).
  virtual absl::StatusOr<int> Poll(int max_frames, int timeout_ms,
                                   std::vector<RecordBatch>* by_input) = 0;
  virtual int64_t watermark() const = 0;
  virtual bool idle() const = 0;
  // True once every channel sent watermark kMaxTime (every producer ended).
  virtual bool finished() const = 0;
  // n once barrier n arrived on every channel (and ReleaseBarrier not called).
  virtual std::optional<int64_t> AlignedBarrier() const = 0;
  virtual void ReleaseBarrier() = 0;
  // Barrier alignment, in ns of the steady clock: from the first barrier of
  // a checkpoint blocking a channel until ReleaseBarrier (the time some of
  // this reader's input was held back), summed over released checkpoints,
  // and for the last released one; and of that, the part until every
  // channel was aligned (the skew between the producers' barriers).
  struct AlignmentTimes {
    int64_t total_ns = 0;
    int64_t last_ns = 0;
    int64_t last_skew_ns = 0;
    int64_t last_id = 0;
  };
  virtual AlignmentTimes alignment_times() const = 0;
  // Known unread input over the owned partitions (Kafka: messages of the
  // consumer lag; memory: frames queued), plus frames read but held back by
  // alignment (a record run is one frame). 0 means nothing is waiting.
  virtual int64_t Backlog() const = 0;
  // Records, markers and barriers of an older epoch dropped.
  virtual int64_t dropped_old_epoch() const = 0;
  // Every channel, by partition then producer.
  virtual std::vector<ExchangeChannelStatus> Channels() const = 0;
};

}  // namespace caravela
