// Raw sources: deliver undecoded messages (bytes + partition + offset). The
// runtime decodes each payload once, extracts event time and routes invalid
// records to `<source>.invalid`.
//
// Lifecycle: Open() once, then Poll() repeatedly from the task thread, then
// the destructor. Not thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace caravela {

struct RawMessage {
  std::string_view payload;
  std::string_view key;  // may be empty
  int32_t partition = 0;
  int64_t offset = 0;
  int64_t timestamp_ms = -1;  // broker/producer timestamp; -1 if none
  bool tombstone = false;     // a Kafka record with a null value (a deletion)
  // JsonDecoder::kPadding readable bytes follow the payload: it is decoded
  // in place, not copied.
  bool padded = false;
  // Not empty: the padded payloads of this poll lie in `block`, one per
  // line, delivered in order (a file source), and are decoded in one pass
  // (JsonDecoder::DecodeLine).
  std::string_view block;
};

class RawSource {
 public:
  virtual ~RawSource() = default;
  virtual absl::Status Open() = 0;
  // Number of partitions (known after Open).
  virtual int PartitionCount() const = 0;
  // Delivers up to `max_messages` messages to `f`, waiting at most `timeout_ms`
  // for the first one. Views are valid only during the call. Returns the
  // number delivered.
  virtual absl::StatusOr<int> Poll(int max_messages, int timeout_ms,
                                   const std::function<void(const RawMessage&)>& f) = 0;
  // True for file sources: the source ends.
  virtual bool Bounded() const = 0;
  // Bounded sources: everything was delivered.
  virtual bool Exhausted() const = 0;
  // Unread messages known to exist on `partition` (consumer lag); 0 if unknown.
  virtual int64_t Backlog(int32_t partition) const = 0;
  // The log end of `partition` as last seen by the client (Kafka: the high
  // watermark of the latest fetch response, which the client's background
  // fetcher keeps current while the task is busy); -1 if unknown or not
  // owned. Unlike the rest of this interface, callable from any thread
  // once Open() returned: lag reports use it while the task thread works.
  virtual int64_t HighWatermark(int32_t /*partition*/) const { return -1; }
  // Next offset to read per partition (for progress and, later, checkpoints).
  virtual std::vector<int64_t> Positions() const = 0;
  // Makes an unbounded source end: it delivers what exists now (the end
  // offsets are queried when this is called) and then reports Exhausted().
  // Used for `bounded: true` Kafka sources and to drain a demo.
  virtual absl::Status StopAtCurrentEnd() {
    return absl::UnimplementedError("this source cannot stop at its current end");
  }
  // Publishes `next_offsets` (per partition, -1: skip) where standard tools
  // read a consumer's progress (Kafka: the consumer group's committed
  // offsets), for lag monitoring only: the engine restores from its own
  // checkpoints. No-op by default.
  virtual absl::Status CommitOffsets(const std::vector<int64_t>& /*next_offsets*/) {
    return absl::OkStatus();
  }
  // What the source waits for before it can read anything ("waiting for
  // topic T on B"); empty when it reads.
  virtual std::string Waiting() const { return ""; }
};

// What a source kind's factory (SourceKind::Create, common/source_kind.h)
// needs besides the source's spec.
struct SourceContext {
  std::string job_name;
  // The engine's Kafka broker, for sources that name no bootstrap.
  std::string embedded_bootstrap;
  // The partitions this task reads (a partitioned log shared by the tasks
  // of a stage); empty: all of them, or, when the partition count is not
  // known yet (a topic that does not exist yet), those p with
  // p % share_tasks == share_index.
  std::vector<int32_t> partitions;
  int share_tasks = 1;
  int share_index = 0;
  // Where to start, per partition (a checkpoint's positions, RawSource::
  // Positions()); partitions without an entry start where the spec says.
  std::map<int32_t, int64_t> start_offsets;
};

}  // namespace caravela
