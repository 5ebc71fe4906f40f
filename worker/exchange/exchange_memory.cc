// The in-memory transport (exchange.h MemoryExchange, exchange_transport.h):
// one bounded FIFO queue of messages per partition.
#include <algorithm>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "worker/exchange/exchange.h"
#include "worker/exchange/exchange_transport.h"

namespace caravela {

MemoryExchange::MemoryExchange(std::string name, int partitions, int64_t limit_bytes)
    : name_(std::move(name)), limit_(limit_bytes) {
  queues_.reserve(static_cast<size_t>(std::max(partitions, 0)));
  for (int p = 0; p < partitions; ++p) queues_.push_back(std::make_unique<Queue>());
}

absl::Status MemoryExchange::Push(int partition, std::string bytes, int frames) {
  if (partition < 0 || partition >= partitions()) {
    return absl::OutOfRangeError(
        absl::StrCat("exchange ", name_, ": partition ", partition, " of ", partitions()));
  }
  Queue& q = *queues_[partition];
  std::unique_lock<std::mutex> lock(q.mu);
  // Waits while over the limit: at most limit + one message per writer is queued.
  while (q.bytes > limit_ && !aborted()) q.space.wait(lock);
  if (aborted()) {
    return absl::AbortedError(
        absl::StrCat("exchange ", name_, "[", partition, "]: aborted (a task of the job failed)"));
  }
  const auto size = static_cast<int64_t>(bytes.size());
  q.messages.push_back(Message{std::move(bytes), q.next_offset++, frames});
  q.bytes += size;
  q.frames += frames;
  lock.unlock();
  q.data.notify_one();
  return absl::OkStatus();
}

int MemoryExchange::Pop(int partition, int max, int timeout_ms, std::vector<Message>* out) {
  if (partition < 0 || partition >= partitions() || max <= 0) return 0;
  Queue& q = *queues_[partition];
  std::unique_lock<std::mutex> lock(q.mu);
  if (q.messages.empty() && timeout_ms > 0) {
    q.data.wait_for(lock, std::chrono::milliseconds(timeout_ms),
                    [&] { return !q.messages.empty() || aborted(); });
  }
  int n = 0;
  while (n < max && !q.messages.empty()) {
    Message& m = q.messages.front();
    q.bytes -= static_cast<int64_t>(m.bytes.size());
    q.frames -= m.frames;
    out->push_back(std::move(m));
    q.messages.pop_front();
    ++n;
  }
  lock.unlock();
  if (n > 0) q.space.notify_all();
  return n;
}

int64_t MemoryExchange::Backlog(int partition) const {
  if (partition < 0 || partition >= partitions()) return 0;
  const Queue& q = *queues_[partition];
  std::lock_guard<std::mutex> lock(q.mu);
  return q.frames;
}

int64_t MemoryExchange::QueuedBytes(int partition) const {
  if (partition < 0 || partition >= partitions()) return 0;
  const Queue& q = *queues_[partition];
  std::lock_guard<std::mutex> lock(q.mu);
  return q.bytes;
}

void MemoryExchange::Recycle(std::string buffer) {
  buffer.clear();
  std::lock_guard<std::mutex> lock(spare_mu_);
  // Enough for every partition's writers and readers to swap without
  // allocating; beyond that, memory goes back to the allocator.
  if (spare_.size() < queues_.size() * 4 + 8) spare_.push_back(std::move(buffer));
}

std::string MemoryExchange::TakeBuffer() {
  std::lock_guard<std::mutex> lock(spare_mu_);
  if (spare_.empty()) return std::string();
  std::string buffer = std::move(spare_.back());
  spare_.pop_back();
  return buffer;
}

void MemoryExchange::Abort() {
  aborted_.store(true, std::memory_order_relaxed);
  for (auto& q : queues_) {
    // Taking the lock orders the flag before the waiters' next check.
    { std::lock_guard<std::mutex> lock(q->mu); }
    q->space.notify_all();
    q->data.notify_all();
  }
}

namespace exchange_internal {
namespace {

class MemoryOut final : public MessageOut {
 public:
  explicit MemoryOut(MemoryExchange* exchange) : exchange_(exchange) {}
  absl::Status Send(int32_t partition, std::string* message, int frames) override {
    absl::Status st = exchange_->Push(partition, std::move(*message), frames);
    *message = exchange_->TakeBuffer();
    return st;
  }
  absl::Status Flush(int /*timeout_ms*/) override { return absl::OkStatus(); }

 private:
  MemoryExchange* exchange_;
};

class MemoryIn final : public MessageIn {
 public:
  MemoryIn(MemoryExchange* exchange, std::vector<int32_t> owned)
      : exchange_(exchange), owned_(std::move(owned)) {}
  bool validated() const override { return true; }  // written by this process

  absl::StatusOr<int> Poll(int max_messages, int timeout_ms,
                           const std::function<void(const RawMessage&)>& f) override {
    return PollQueues(
        owned_.size(), &next_, max_messages, timeout_ms,
        [&](size_t q, int max, int wait, std::vector<MemoryExchange::Message>* out) {
          exchange_->Pop(owned_[q], max, wait, out);
        },
        [&](size_t q) { return owned_[q]; }, f,
        [&](MemoryExchange::Message& m) { exchange_->Recycle(std::move(m.bytes)); }, &popped_,
        &partition_of_);
  }

  int64_t Backlog() const override {
    int64_t total = 0;
    for (int32_t p : owned_) total += exchange_->Backlog(p);
    return total;
  }

  int PartitionCount() const override { return exchange_->partitions(); }

 private:
  MemoryExchange* exchange_;
  std::vector<int32_t> owned_;
  size_t next_ = 0;
  std::vector<MemoryExchange::Message> popped_;
  std::vector<int32_t> partition_of_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<MessageOut>> OpenMemoryOut(const ExchangeWriterOptions& options) {
  if (options.partitions != options.memory->partitions()) {
    return absl::FailedPreconditionError(
        absl::StrCat("exchange ", options.memory->name(), " has ", options.memory->partitions(),
                     " partitions, the writer expects ", options.partitions));
  }
  return std::make_unique<MemoryOut>(options.memory);
}

absl::StatusOr<std::unique_ptr<MessageIn>> OpenMemoryIn(const ExchangeReaderOptions& options,
                                                        const std::vector<int32_t>& owned) {
  for (int32_t p : owned) {
    if (p < 0 || p >= options.memory->partitions()) {
      return absl::InvalidArgumentError(absl::StrCat("exchange reader ", options.memory->name(),
                                                     ": partition ", p, " of ",
                                                     options.memory->partitions()));
    }
  }
  return std::make_unique<MemoryIn>(options.memory, owned);
}

}  // namespace exchange_internal
}  // namespace caravela
