// ExchangeWriter (exchange.h): frames batched per partition into messages,
// handed to a transport (exchange_transport.h: Kafka or memory).
#include <chrono>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/failpoint.h"
#include "common/job_plan.h"
#include "worker/exchange/exchange.h"
#include "worker/exchange/exchange_transport.h"

namespace caravela {
namespace {

using exchange_internal::MessageOut;

class BatchingExchangeWriter final : public ExchangeWriter {
 public:
  explicit BatchingExchangeWriter(ExchangeWriterOptions options) : options_(std::move(options)) {}

  absl::Status Open() {
    const ExchangeWriterOptions& o = options_;
    if (o.partitions < 1 || o.producer < 0) {
      return absl::InvalidArgumentError(absl::StrCat("exchange writer ", o.topic,
                                                     ": bad partitions ", o.partitions,
                                                     " or producer ", o.producer));
    }
    if (o.memory != nullptr) {
      ASSIGN_OR_RETURN(out_, exchange_internal::OpenMemoryOut(o));
    } else if (o.network != nullptr) {
      ASSIGN_OR_RETURN(out_, exchange_internal::OpenNetworkOut(o));
    } else {
      ASSIGN_OR_RETURN(out_, exchange_internal::OpenKafkaOut(o));
    }
    buffers_.resize(static_cast<size_t>(o.partitions));
    runs_.resize(static_cast<size_t>(o.partitions));
    frames_.assign(static_cast<size_t>(o.partitions), 0);
    records_buffered_.assign(static_cast<size_t>(o.partitions), 0);
    for (std::string& b : buffers_) b.reserve(Reserve());
    return absl::OkStatus();
  }

  absl::Status Write(int input, const Record& r) override {
    RETURN_IF_ERROR(failure_);
    if (input < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("exchange writer ", options_.topic, ": input ", input));
    }
    static const std::vector<FieldPath> kNoKey;
    const int32_t partition = ExchangePartition(
        r, static_cast<size_t>(input) < options_.keys.size() ? options_.keys[input] : kNoKey,
        options_.partitions, options_.max_parallelism, &key_scratch_);
    std::string& buffer = buffers_[partition];
    frames_[partition] +=
        AppendToRecordRun(options_.epoch, options_.producer, input, r, &runs_[partition], &buffer);
    ++records_buffered_[partition];
    if (static_cast<int64_t>(buffer.size()) >= options_.batch_bytes) {
      return SendPartition(partition);
    }
    return absl::OkStatus();
  }

  absl::Status WriteWatermark(int64_t watermark, bool idle) override {
    RETURN_IF_ERROR(failure_);
    for (int32_t p = 0; p < options_.partitions; ++p) {
      CloseRecordRun(&runs_[p], &buffers_[p]);
      AppendWatermarkFrame(options_.epoch, options_.producer, watermark, idle, &buffers_[p]);
      ++frames_[p];
    }
    return SendBuffered();
  }

  absl::Status WriteBarrier(int64_t checkpoint_id, bool stop) override {
    RETURN_IF_ERROR(failure_);
    for (int32_t p = 0; p < options_.partitions; ++p) {
      CloseRecordRun(&runs_[p], &buffers_[p]);
      AppendBarrierFrame(options_.epoch, options_.producer, checkpoint_id, &buffers_[p], stop);
      ++frames_[p];
    }
    return SendBuffered();
  }

  absl::Status SendBuffered() override {
    RETURN_IF_ERROR(failure_);
    for (int32_t p = 0; p < options_.partitions; ++p) {
      if (!buffers_[p].empty()) RETURN_IF_ERROR(SendPartition(p));
    }
    return absl::OkStatus();
  }

  absl::Status Flush(int timeout_ms) override {
    RETURN_IF_ERROR(SendBuffered());
    return out_->Flush(timeout_ms);
  }

  int64_t records_written() const override { return records_; }
  int64_t bytes_written() const override { return bytes_; }
  int64_t send_wait_ns() const override { return send_wait_ns_; }

 private:
  size_t Reserve() const { return static_cast<size_t>(options_.batch_bytes) + 4096; }

  absl::Status SendPartition(int32_t partition) {
    std::string& buffer = buffers_[partition];
    CloseRecordRun(&runs_[partition], &buffer);
    const auto size = static_cast<int64_t>(buffer.size());
    const auto t0 = std::chrono::steady_clock::now();
    absl::Status st = out_->Send(partition, &buffer, frames_[partition]);
    send_wait_ns_ +=
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0)
            .count();
    if (!st.ok()) {
      failure_ = st;  // frames are lost: the job restores its last checkpoint
      return st;
    }
    bytes_ += size;
    records_ += records_buffered_[partition];
    records_buffered_[partition] = 0;
    buffer.clear();
    if (buffer.capacity() < Reserve()) buffer.reserve(Reserve());
    frames_[partition] = 0;
    Failpoint("exchange.after_write");  // crash tests: mid-exchange write
    return absl::OkStatus();
  }

  ExchangeWriterOptions options_;
  std::unique_ptr<MessageOut> out_;
  std::vector<std::string> buffers_;       // per partition: frames not sent yet
  std::vector<RecordRun> runs_;            // per partition: the open record run
  std::vector<int> frames_;                // per partition: frames in the buffer
  std::vector<int64_t> records_buffered_;  // per partition: records in the buffer
  absl::Status failure_;                   // sticky
  std::string key_scratch_;
  int64_t records_ = 0;
  int64_t bytes_ = 0;
  int64_t send_wait_ns_ = 0;
};

}  // namespace

int32_t ExchangePartition(const Record& r, const std::vector<FieldPath>& key, int partitions,
                          int max_parallelism, std::string* scratch) {
  if (key.empty() || partitions <= 1) return 0;
  return static_cast<int32_t>(
      TaskOfKeyHash(ExchangeKeyHash(r, key, scratch), max_parallelism, partitions));
}

absl::StatusOr<std::unique_ptr<ExchangeWriter>> ExchangeWriter::Open(
    ExchangeWriterOptions options) {
  auto writer = std::make_unique<BatchingExchangeWriter>(std::move(options));
  RETURN_IF_ERROR(writer->Open());
  return writer;
}

}  // namespace caravela
