// ExchangeWriter (exchange.h): one idempotent librdkafka producer per writer,
// explicit partitions.
#include <librdkafka/rdkafka.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/failpoint.h"
#include "common/job_plan.h"
#include "spdlog/spdlog.h"
#include "worker/connectors/kafka_source.h"
#include "worker/exchange/exchange.h"

namespace caravela {
namespace {

// Serve delivery reports every this many frames (rd_kafka_poll is cheap but
// not free).
constexpr int kPollEvery = 256;

class KafkaExchangeWriter final : public ExchangeWriter {
 public:
  explicit KafkaExchangeWriter(ExchangeWriterOptions options) : options_(std::move(options)) {}

  ~KafkaExchangeWriter() override {
    // Frames not flushed are dropped (the runtime flushes before a checkpoint
    // and at the end; anything else is recovered from the last checkpoint).
    if (rkt_ != nullptr) rd_kafka_topic_destroy(rkt_);
    if (rk_ != nullptr) rd_kafka_destroy(rk_);
  }

  absl::Status Open() {
    const ExchangeWriterOptions& o = options_;
    if (o.bootstrap.empty() || o.topic.empty()) {
      return absl::InvalidArgumentError("exchange writer needs a bootstrap and a topic");
    }
    if (o.partitions < 1 || o.producer < 0) {
      return absl::InvalidArgumentError(absl::StrCat("exchange writer ", o.topic,
                                                     ": bad partitions ", o.partitions,
                                                     " or producer ", o.producer));
    }
    ASSIGN_OR_RETURN(KafkaConfPtr conf,
                     NewKafkaConf({
                         {"bootstrap.servers", o.bootstrap},
                         {"client.id", absl::StrCat("caravela-exchange-", o.producer)},
                         // Per-partition order and no duplicates on retries.
                         {"enable.idempotence", "true"},
                         {"acks", "all"},
                         {"linger.ms", "5"},
                         {"batch.num.messages", "10000"},
                         {"batch.size", "1000000"},
                         {"queue.buffering.max.messages", "200000"},
                         {"queue.buffering.max.kbytes", "262144"},
                         {"allow.auto.create.topics", "false"},
                     }));
    rd_kafka_conf_set_dr_msg_cb(conf.get(), &KafkaExchangeWriter::DeliveryReport);
    rd_kafka_conf_set_opaque(conf.get(), this);
    char err[512];
    rk_ = rd_kafka_new(RD_KAFKA_PRODUCER, conf.get(), err, sizeof(err));
    if (rk_ == nullptr) return absl::InvalidArgumentError(absl::StrCat("kafka producer: ", err));
    (void)conf.release();  // owned by rk_ now

    // The topic must exist (EnsureExchangeTopic) with the expected count:
    // list all topics first, since naming a missing topic auto-creates it on
    // the mock cluster (with the wrong count).
    ASSIGN_OR_RETURN(int partitions, AwaitTopicPartitions(rk_, o.bootstrap, o.topic,
                                                          /*name_topic=*/false, 10000));
    if (partitions != o.partitions) {
      return absl::FailedPreconditionError(absl::StrCat("exchange topic ", o.topic, " has ",
                                                        partitions, " partitions, the writer ",
                                                        "expects ", o.partitions));
    }
    rkt_ = rd_kafka_topic_new(rk_, o.topic.c_str(), nullptr);
    if (rkt_ == nullptr) {
      return absl::InternalError(
          absl::StrCat("exchange topic ", o.topic, ": ", rd_kafka_err2str(rd_kafka_last_error())));
    }
    // Now that it exists, fetch it by name: librdkafka then knows its leaders
    // and sends the first frames at once instead of after its 1 s refresh.
    RETURN_IF_ERROR(
        AwaitTopicPartitions(rk_, o.bootstrap, o.topic, /*name_topic=*/true, 10000).status());
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
        options_.partitions, &key_scratch_);
    EncodeRecordFrame(options_.epoch, options_.producer, input, r, &frame_);
    RETURN_IF_ERROR(Produce(partition));
    Failpoint("exchange.after_write");  // crash tests: mid-exchange write
    ++records_;
    return absl::OkStatus();
  }

  absl::Status WriteWatermark(int64_t watermark, bool idle) override {
    RETURN_IF_ERROR(failure_);
    EncodeWatermarkFrame(options_.epoch, options_.producer, watermark, idle, &frame_);
    return ProduceEverywhere();
  }

  absl::Status WriteBarrier(int64_t checkpoint_id) override {
    RETURN_IF_ERROR(failure_);
    EncodeBarrierFrame(options_.epoch, options_.producer, checkpoint_id, &frame_);
    return ProduceEverywhere();
  }

  absl::Status Flush(int timeout_ms) override {
    rd_kafka_resp_err_t err = rd_kafka_flush(rk_, timeout_ms);  // serves delivery reports
    RETURN_IF_ERROR(failure_);
    if (err == RD_KAFKA_RESP_ERR__TIMED_OUT) {
      return absl::DeadlineExceededError(
          absl::StrCat("exchange writer ", options_.topic, ": ", rd_kafka_outq_len(rk_),
                       " frames not acknowledged after ", timeout_ms, " ms"));
    }
    return absl::OkStatus();
  }

  int64_t records_written() const override { return records_; }
  int64_t bytes_written() const override { return bytes_; }

 private:
  static void DeliveryReport(rd_kafka_t* rk, const rd_kafka_message_t* m, void* opaque) {
    auto* self = static_cast<KafkaExchangeWriter*>(opaque);
    if (m->err == RD_KAFKA_RESP_ERR_NO_ERROR || !self->failure_.ok()) return;
    // Frames are lost: sticky, the job restores from its last checkpoint.
    self->failure_ = absl::UnavailableError(
        absl::StrCat("exchange writer ", self->options_.topic, "[", m->partition, "] (producer ",
                     self->options_.producer, "): delivery failed: ", rd_kafka_err2str(m->err)));
    KafkaLogger()->error("{}", std::string(self->failure_.message()));
  }

  absl::Status ProduceEverywhere() {
    for (int32_t p = 0; p < options_.partitions; ++p) RETURN_IF_ERROR(Produce(p));
    return absl::OkStatus();
  }

  // Produces frame_ to `partition` after waiting for flow control.
  absl::Status Produce(int32_t partition) {
    const auto size = static_cast<int64_t>(frame_.size());
    if (ExchangeFlowControl* flow = options_.flow; flow != nullptr) {
      // No bound on the wait: the readers progress on their own threads.
      while (flow->Outstanding(partition) > flow->limit()) {
        if (flow->aborted()) {
          return absl::AbortedError(absl::StrCat("exchange writer ", options_.topic, "[", partition,
                                                 "]: flow control aborted"));
        }
        rd_kafka_poll(rk_, 0);
        RETURN_IF_ERROR(failure_);
        std::this_thread::sleep_for(std::chrono::microseconds(200));
      }
    }
    while (true) {
      const int produced =
          rd_kafka_produce(rkt_, partition, RD_KAFKA_MSG_F_COPY, frame_.data(), frame_.size(),
                           /*key=*/nullptr, 0, /*msg_opaque=*/nullptr);
      if (produced == 0) break;
      const rd_kafka_resp_err_t err = rd_kafka_last_error();
      if (err != RD_KAFKA_RESP_ERR__QUEUE_FULL) {
        char fatal[512];
        if (rd_kafka_fatal_error(rk_, fatal, sizeof(fatal)) != RD_KAFKA_RESP_ERR_NO_ERROR) {
          failure_ = absl::InternalError(
              absl::StrCat("exchange writer ", options_.topic, ": fatal: ", fatal));
          return failure_;
        }
        return absl::InvalidArgumentError(absl::StrCat("exchange writer ", options_.topic, "[",
                                                       partition, "]: frame of ", frame_.size(),
                                                       " bytes: ", rd_kafka_err2str(err)));
      }
      rd_kafka_poll(rk_, 10);  // full queue: serve delivery reports until there is room
      RETURN_IF_ERROR(failure_);
    }
    if (options_.flow != nullptr) options_.flow->Wrote(partition, size);
    bytes_ += size;
    if (++since_poll_ >= kPollEvery) {
      since_poll_ = 0;
      rd_kafka_poll(rk_, 0);
    }
    return failure_;
  }

  ExchangeWriterOptions options_;
  rd_kafka_t* rk_ = nullptr;
  rd_kafka_topic_t* rkt_ = nullptr;
  absl::Status failure_;  // first delivery failure (sticky)
  std::string frame_;
  std::string key_scratch_;
  int since_poll_ = 0;
  int64_t records_ = 0;
  int64_t bytes_ = 0;
};

}  // namespace

int32_t ExchangePartition(const Record& r, const std::vector<FieldPath>& key, int partitions,
                          std::string* scratch) {
  if (key.empty() || partitions <= 1) return 0;
  return static_cast<int32_t>(ExchangeKeyHash(r, key, scratch) % static_cast<uint64_t>(partitions));
}

absl::StatusOr<std::unique_ptr<ExchangeWriter>> ExchangeWriter::Open(
    ExchangeWriterOptions options) {
  auto writer = std::make_unique<KafkaExchangeWriter>(std::move(options));
  RETURN_IF_ERROR(writer->Open());
  return writer;
}

}  // namespace caravela
