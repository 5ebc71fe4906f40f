// The Kafka transport (exchange_transport.h): one idempotent librdkafka
// producer per writer with explicit partitions; a KafkaSource over the owned
// partitions per reader. Flow control keeps writers within what the broker
// keeps: ExchangeFlowControl when both ends share this process; across
// processes, the readers' positions committed to a consumer group
// (`flow_group`), against which each writer counts its own delivered
// messages.
#include <librdkafka/rdkafka.h>

#include <chrono>
#include <deque>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"
#include "worker/connectors/kafka_source.h"
#include "worker/exchange/exchange.h"
#include "worker/exchange/exchange_transport.h"

namespace caravela::exchange_internal {
namespace {

class KafkaOut final : public MessageOut {
 public:
  explicit KafkaOut(const ExchangeWriterOptions& options)
      : topic_(options.topic),
        producer_(options.producer),
        flow_(options.flow),
        group_limit_(options.flow_limit_bytes),
        cancel_(options.cancel) {}

  ~KafkaOut() override {
    // Messages not flushed are dropped (the runtime flushes before a
    // checkpoint and at the end; anything else is recovered from the last
    // checkpoint).
    if (rkt_ != nullptr) rd_kafka_topic_destroy(rkt_);
    if (rk_ != nullptr) rd_kafka_destroy(rk_);
    if (group_rk_ != nullptr) {
      rd_kafka_consumer_close(group_rk_);
      rd_kafka_destroy(group_rk_);
    }
  }

  // Flow control by the readers' committed positions (see the file comment).
  absl::Status OpenGroup(const ExchangeWriterOptions& o) {
    ASSIGN_OR_RETURN(
        KafkaConfPtr conf,
        NewKafkaConf({{"bootstrap.servers", o.bootstrap},
                      {"client.id", absl::StrCat("caravela-exchange-flow-", o.producer)},
                      {"group.id", o.flow_group},
                      {"enable.auto.commit", "false"},
                      {"allow.auto.create.topics", "false"}}));
    ASSIGN_OR_RETURN(group_rk_, NewKafkaClient(KafkaClientType::kConsumer, std::move(conf),
                                               "kafka flow-control client"));
    unread_.assign(static_cast<size_t>(o.partitions), 0);
    committed_.assign(static_cast<size_t>(o.partitions), -1);
    delivered_.resize(static_cast<size_t>(o.partitions));
    return absl::OkStatus();
  }

  // Bytes of this writer's messages on `partition` the readers have not
  // read: not delivered yet, or at or after the group's committed offset.
  int64_t GroupOutstanding(int32_t partition) {
    auto& d = delivered_[partition];
    while (!d.empty() && d.front().first < committed_[partition]) {
      unread_[partition] -= d.front().second;
      d.pop_front();
    }
    return unread_[partition];
  }

  // Waits until the readers caught up enough on `partition`.
  absl::Status AwaitGroup(int32_t partition, int64_t size) {
    while (true) {
      rd_kafka_poll(rk_, 0);
      RETURN_IF_ERROR(failure_);
      if (cancel_ != nullptr && cancel_->load()) {
        return absl::AbortedError(
            absl::StrCat("exchange writer ", topic_, "[", partition, "]: the job stops"));
      }
      rd_kafka_topic_partition_list_t* list = rd_kafka_topic_partition_list_new(1);
      rd_kafka_topic_partition_list_add(list, topic_.c_str(), partition);
      const rd_kafka_resp_err_t err = rd_kafka_committed(group_rk_, list, 5000);
      const int64_t offset = list->elems[0].offset;
      rd_kafka_topic_partition_list_destroy(list);
      if (err == RD_KAFKA_RESP_ERR_NO_ERROR && offset > committed_[partition]) {
        committed_[partition] = offset;
      }
      if (GroupOutstanding(partition) + size <= group_limit_) return absl::OkStatus();
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  }

  absl::Status Open(const ExchangeWriterOptions& o) {
    if (o.bootstrap.empty() || o.topic.empty()) {
      return absl::InvalidArgumentError("exchange writer needs a bootstrap and a topic");
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
                         {"compression.codec", o.compression.empty() ? "none" : o.compression},
                     }));
    rd_kafka_conf_set_dr_msg_cb(conf.get(), &KafkaOut::DeliveryReport);
    rd_kafka_conf_set_opaque(conf.get(), this);
    ASSIGN_OR_RETURN(rk_,
                     NewKafkaClient(KafkaClientType::kProducer, std::move(conf), "kafka producer"));

    // The topic must exist (EnsureExchangeTopic) with at least the count:
    // list all topics first, since naming a missing topic auto-creates it on
    // the mock cluster (with the wrong count).
    ASSIGN_OR_RETURN(int partitions, AwaitTopicPartitions(rk_, o.bootstrap, o.topic,
                                                          /*name_topic=*/false, 10000));
    // More partitions than the consuming stage's tasks are fine (a job
    // rescaled to fewer tasks): the writer uses the first o.partitions.
    if (partitions < o.partitions) {
      return absl::FailedPreconditionError(absl::StrCat("exchange topic ", o.topic, " has ",
                                                        partitions, " partitions, the writer ",
                                                        "needs ", o.partitions));
    }
    if (!o.flow_group.empty()) RETURN_IF_ERROR(OpenGroup(o));
    rkt_ = rd_kafka_topic_new(rk_, o.topic.c_str(), nullptr);
    if (rkt_ == nullptr) {
      return absl::InternalError(
          absl::StrCat("exchange topic ", o.topic, ": ", rd_kafka_err2str(rd_kafka_last_error())));
    }
    // Now that it exists, fetch it by name: librdkafka then knows its leaders
    // and sends the first messages at once instead of after its 1 s refresh.
    RETURN_IF_ERROR(
        AwaitTopicPartitions(rk_, o.bootstrap, o.topic, /*name_topic=*/true, 10000).status());
    return absl::OkStatus();
  }

  absl::Status Send(int32_t partition, std::string* message, int /*frames*/) override {
    RETURN_IF_ERROR(failure_);
    const auto size = static_cast<int64_t>(message->size());
    if (flow_ != nullptr) {
      // No bound on the wait: the readers progress on their own threads.
      while (flow_->Outstanding(partition) > flow_->limit()) {
        if (flow_->aborted()) {
          return absl::AbortedError(
              absl::StrCat("exchange writer ", topic_, "[", partition, "]: flow control aborted"));
        }
        rd_kafka_poll(rk_, 0);
        RETURN_IF_ERROR(failure_);
        std::this_thread::sleep_for(std::chrono::microseconds(200));
      }
    }
    if (group_rk_ != nullptr && GroupOutstanding(partition) + size > group_limit_ &&
        GroupOutstanding(partition) > 0) {
      RETURN_IF_ERROR(AwaitGroup(partition, size));
    }
    while (true) {
      const int produced =
          rd_kafka_produce(rkt_, partition, RD_KAFKA_MSG_F_COPY, message->data(), message->size(),
                           /*key=*/nullptr, 0, /*msg_opaque=*/nullptr);
      if (produced == 0) break;
      const rd_kafka_resp_err_t err = rd_kafka_last_error();
      if (err != RD_KAFKA_RESP_ERR__QUEUE_FULL) {
        char fatal[512];
        if (rd_kafka_fatal_error(rk_, fatal, sizeof(fatal)) != RD_KAFKA_RESP_ERR_NO_ERROR) {
          failure_ =
              absl::InternalError(absl::StrCat("exchange writer ", topic_, ": fatal: ", fatal));
          return failure_;
        }
        return absl::InvalidArgumentError(absl::StrCat("exchange writer ", topic_, "[", partition,
                                                       "]: message of ", message->size(),
                                                       " bytes: ", rd_kafka_err2str(err)));
      }
      rd_kafka_poll(rk_, 10);  // full queue: serve delivery reports until there is room
      RETURN_IF_ERROR(failure_);
    }
    if (flow_ != nullptr) flow_->Wrote(partition, size);
    if (group_rk_ != nullptr) unread_[partition] += size;
    rd_kafka_poll(rk_, 0);  // delivery reports (cheap; once per message)
    return failure_;
  }

  absl::Status Flush(int timeout_ms) override {
    rd_kafka_resp_err_t err = rd_kafka_flush(rk_, timeout_ms);  // serves delivery reports
    RETURN_IF_ERROR(failure_);
    if (err == RD_KAFKA_RESP_ERR__TIMED_OUT) {
      return absl::DeadlineExceededError(
          absl::StrCat("exchange writer ", topic_, ": ", rd_kafka_outq_len(rk_),
                       " messages not acknowledged after ", timeout_ms, " ms"));
    }
    return absl::OkStatus();
  }

 private:
  static void DeliveryReport(rd_kafka_t* /*rk*/, const rd_kafka_message_t* m, void* opaque) {
    auto* self = static_cast<KafkaOut*>(opaque);
    if (self->group_rk_ != nullptr && m->partition >= 0 &&
        m->partition < static_cast<int32_t>(self->unread_.size())) {
      const auto size = static_cast<int64_t>(m->len);
      if (m->err == RD_KAFKA_RESP_ERR_NO_ERROR) {
        self->delivered_[m->partition].emplace_back(m->offset, size);
      } else {
        self->unread_[m->partition] -= size;  // lost: the job restores anyway
      }
    }
    if (m->err == RD_KAFKA_RESP_ERR_NO_ERROR || !self->failure_.ok()) return;
    // Frames are lost: sticky, the job restores from its last checkpoint.
    self->failure_ = absl::UnavailableError(
        absl::StrCat("exchange writer ", self->topic_, "[", m->partition, "] (producer ",
                     self->producer_, "): delivery failed: ", rd_kafka_err2str(m->err)));
    ExchangeLogger()->error("{}", std::string(self->failure_.message()));
  }

  std::string topic_;
  int32_t producer_;
  ExchangeFlowControl* flow_;
  // Group flow control (group_rk_ set), per partition: bytes produced and
  // not known read, the delivered (offset, bytes) among them, and the
  // group's last committed offset seen.
  rd_kafka_t* group_rk_ = nullptr;
  int64_t group_limit_;
  const std::atomic<bool>* cancel_;
  std::vector<int64_t> unread_;
  std::vector<std::deque<std::pair<int64_t, int64_t>>> delivered_;
  std::vector<int64_t> committed_;
  rd_kafka_t* rk_ = nullptr;
  rd_kafka_topic_t* rkt_ = nullptr;
  absl::Status failure_;  // first delivery failure (sticky)
};

class KafkaIn final : public MessageIn {
 public:
  KafkaIn(const ExchangeReaderOptions& options, std::vector<int32_t> owned)
      : flow_(options.flow), owned_(std::move(owned)) {
    KafkaSourceOptions so;
    so.bootstrap = options.bootstrap;
    so.topic = options.topic;
    so.partitions = owned_;
    so.start = options.start;
    // Latency matters more than fetch efficiency here: a fetch that finds no
    // data (the writer waits on flow control, or between steps) returns
    // after 5 ms instead of the source's 100 (the mock broker answers an
    // empty fetch only when its wait ends, not when data arrives).
    so.config = {{"fetch.wait.max.ms", "5"}};
    if (!options.flow_group.empty()) {
      so.config["group.id"] = options.flow_group;
      commits_ = true;
    }
    source_ = std::make_unique<KafkaSource>(std::move(so));
  }

  absl::Status Open() { return source_->Open(); }

  absl::StatusOr<int> Poll(int max_messages, int timeout_ms,
                           const std::function<void(const RawMessage&)>& f) override {
    if (commits_) {
      // The writers' flow control: what this reader has read, often enough.
      const auto now = std::chrono::steady_clock::now();
      if (now - last_commit_ >= std::chrono::milliseconds(20)) {
        std::vector<int64_t> positions = source_->Positions();
        if (positions != committed_) {
          RETURN_IF_ERROR(source_->CommitPositions());
          committed_ = std::move(positions);
        }
        last_commit_ = now;
      }
    }
    if (flow_ == nullptr) return source_->Poll(max_messages, timeout_ms, f);
    return source_->Poll(max_messages, timeout_ms, [&](const RawMessage& m) {
      flow_->Read(m.partition, static_cast<int64_t>(m.payload.size()));
      f(m);
    });
  }

  int64_t Backlog() const override {
    int64_t total = 0;
    for (int32_t p : owned_) total += source_->Backlog(p);
    return total;
  }

  int PartitionCount() const override { return source_->PartitionCount(); }

 private:
  ExchangeFlowControl* flow_;
  std::vector<int32_t> owned_;
  std::unique_ptr<KafkaSource> source_;
  bool commits_ = false;  // positions go to the flow-control group
  std::vector<int64_t> committed_;
  std::chrono::steady_clock::time_point last_commit_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<MessageOut>> OpenKafkaOut(const ExchangeWriterOptions& options) {
  auto out = std::make_unique<KafkaOut>(options);
  RETURN_IF_ERROR(out->Open(options));
  return out;
}

absl::StatusOr<std::unique_ptr<MessageIn>> OpenKafkaIn(const ExchangeReaderOptions& options,
                                                       const std::vector<int32_t>& owned) {
  auto in = std::make_unique<KafkaIn>(options, owned);
  RETURN_IF_ERROR(in->Open());
  return in;
}

}  // namespace caravela::exchange_internal
