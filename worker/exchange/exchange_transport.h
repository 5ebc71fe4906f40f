// Internal to worker/exchange: the three transports behind ExchangeWriter and
// ExchangeReader (exchange.h). A transport moves whole messages (frames of
// one producer for one partition); the writer batches frames into messages
// and the reader splits them, the same for both.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/status.h"
#include "worker/connectors/source.h"  // RawMessage
#include "worker/exchange/exchange.h"

namespace caravela::exchange_internal {

// Where a writer's messages go.
class MessageOut {
 public:
  virtual ~MessageOut() = default;
  // Sends *message (`frames` frames) to `partition`. May take the bytes:
  // *message is unspecified afterwards (the caller clears it; the memory
  // transport leaves a recycled buffer there). Errors are
  // sticky delivery failures or Aborted (flow control, memory queue).
  virtual absl::Status Send(int32_t partition, std::string* message, int frames) = 0;
  // Waits until everything sent was acknowledged (DeadlineExceeded after
  // timeout_ms).
  virtual absl::Status Flush(int timeout_ms) = 0;
};

absl::StatusOr<std::unique_ptr<MessageOut>> OpenKafkaOut(const ExchangeWriterOptions& options);
absl::StatusOr<std::unique_ptr<MessageOut>> OpenMemoryOut(const ExchangeWriterOptions& options);
absl::StatusOr<std::unique_ptr<MessageOut>> OpenNetworkOut(const ExchangeWriterOptions& options);

// Where a reader's messages come from: the owned partitions.
class MessageIn {
 public:
  virtual ~MessageIn() = default;
  // Calls `f` for up to `max_messages` messages, waiting up to `timeout_ms`
  // for the first. Returns how many. The payload lives until `f` returns.
  virtual absl::StatusOr<int> Poll(int max_messages, int timeout_ms,
                                   const std::function<void(const RawMessage&)>& f) = 0;
  // Known unread input (Kafka: messages; memory: frames).
  virtual int64_t Backlog() const = 0;
  // Partitions of the exchange.
  virtual int PartitionCount() const = 0;
  // True when every frame delivered was already checked (written in this
  // process, or validated on arrival by the network exchange): the reader
  // then skips validating packed records.
  virtual bool validated() const { return false; }
};

// How the two queue transports (memory, network) read their owned queues:
// pops up to `max_messages` round-robin, starting one queue later each call
// (*next), with `pop(i, max, wait_ms, &popped)` appending queue i's messages
// and `partition(i)` naming it; waits up to `timeout_ms` on a lone queue
// and naps 1 ms when several are all empty. Then hands each message to `f`
// and to `done` (recycle it, grant its credit). Returns how many.
// `Message` has `bytes` and `offset`.
template <typename Message, typename Pop, typename PartitionOf, typename Done>
int PollQueues(size_t queues, size_t* next, int max_messages, int timeout_ms, Pop pop,
               PartitionOf partition, const std::function<void(const RawMessage&)>& f, Done done,
               std::vector<Message>* popped, std::vector<int32_t>* partition_of) {
  popped->clear();
  partition_of->clear();
  for (size_t i = 0; i < queues && static_cast<int>(popped->size()) < max_messages; ++i) {
    const size_t q = (*next + i) % queues;
    pop(q, max_messages - static_cast<int>(popped->size()), queues == 1 ? timeout_ms : 0, popped);
    partition_of->resize(popped->size(), partition(q));
  }
  *next = (*next + 1) % queues;
  if (popped->empty() && queues > 1 && timeout_ms > 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(std::min(timeout_ms, 1)));
  }
  for (size_t i = 0; i < popped->size(); ++i) {
    RawMessage m;
    m.payload = (*popped)[i].bytes;
    m.partition = (*partition_of)[i];
    m.offset = (*popped)[i].offset;
    f(m);
    done((*popped)[i]);
  }
  const int n = static_cast<int>(popped->size());
  popped->clear();
  partition_of->clear();
  return n;
}

// `owned`: sorted, distinct partitions.
absl::StatusOr<std::unique_ptr<MessageIn>> OpenKafkaIn(const ExchangeReaderOptions& options,
                                                       const std::vector<int32_t>& owned);
absl::StatusOr<std::unique_ptr<MessageIn>> OpenMemoryIn(const ExchangeReaderOptions& options,
                                                        const std::vector<int32_t>& owned);
absl::StatusOr<std::unique_ptr<MessageIn>> OpenNetworkIn(const ExchangeReaderOptions& options,
                                                         const std::vector<int32_t>& owned);

}  // namespace caravela::exchange_internal
