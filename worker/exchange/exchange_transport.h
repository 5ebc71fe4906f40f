// Internal to worker/exchange: the three transports behind ExchangeWriter and
// ExchangeReader (exchange.h). A transport moves whole messages (frames of
// one producer for one partition); the writer batches frames into messages
// and the reader splits them, the same for both.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
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
};

// `owned`: sorted, distinct partitions.
absl::StatusOr<std::unique_ptr<MessageIn>> OpenKafkaIn(const ExchangeReaderOptions& options,
                                                       const std::vector<int32_t>& owned);
absl::StatusOr<std::unique_ptr<MessageIn>> OpenMemoryIn(const ExchangeReaderOptions& options,
                                                        const std::vector<int32_t>& owned);
absl::StatusOr<std::unique_ptr<MessageIn>> OpenNetworkIn(const ExchangeReaderOptions& options,
                                                         const std::vector<int32_t>& owned);

}  // namespace caravela::exchange_internal
