#include "worker/connectors/kafka_test_util.h"

#include <librdkafka/rdkafka.h>

#include <algorithm>
#include <chrono>
#include <memory>

#include "absl/strings/str_cat.h"
#include "worker/connectors/kafka_source.h"

namespace caravela {
namespace {

struct DeliveryTally {
  int64_t failed = 0;
  rd_kafka_resp_err_t first_error = RD_KAFKA_RESP_ERR_NO_ERROR;
};

void CountDelivery(rd_kafka_t*, const rd_kafka_message_t* m, void* opaque) {
  auto* tally = static_cast<DeliveryTally*>(opaque);
  if (m->err != RD_KAFKA_RESP_ERR_NO_ERROR) {
    if (tally->failed++ == 0) tally->first_error = m->err;
  }
}

struct RdKafkaDeleter {
  void operator()(rd_kafka_t* rk) const { rd_kafka_destroy(rk); }
};

}  // namespace

absl::Status ProduceRecords(const std::string& bootstrap, const std::string& topic,
                            const std::vector<KafkaTestRecord>& records, int timeout_ms) {
  ASSIGN_OR_RETURN(KafkaConfPtr conf, NewKafkaConf({{"bootstrap.servers", bootstrap},
                                                    {"client.id", "caravela-test-producer"},
                                                    {"enable.idempotence", "true"},
                                                    {"linger.ms", "5"},
                                                    {"partitioner", "murmur2_random"}}));
  DeliveryTally tally;
  rd_kafka_conf_set_dr_msg_cb(conf.get(), CountDelivery);
  rd_kafka_conf_set_opaque(conf.get(), &tally);
  char err[512];
  std::unique_ptr<rd_kafka_t, RdKafkaDeleter> rk(
      rd_kafka_new(RD_KAFKA_PRODUCER, conf.get(), err, sizeof(err)));
  if (rk == nullptr) return absl::InvalidArgumentError(absl::StrCat("kafka producer: ", err));
  (void)conf.release();  // owned by rk now
  // Topic metadata first: records then go out at once (see KafkaSink::Open).
  RETURN_IF_ERROR(
      AwaitTopicPartitions(rk.get(), bootstrap, topic, /*name_topic=*/true, timeout_ms).status());
  for (const KafkaTestRecord& r : records) {
    while (true) {
      rd_kafka_resp_err_t perr;
      const int32_t partition = r.partition < 0 ? RD_KAFKA_PARTITION_UA : r.partition;
      if (r.key.empty()) {
        perr = rd_kafka_producev(
            rk.get(), RD_KAFKA_V_TOPIC(topic.c_str()), RD_KAFKA_V_PARTITION(partition),
            RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
            RD_KAFKA_V_VALUE(r.null_value ? nullptr : const_cast<char*>(r.value.data()),
                             r.null_value ? 0 : r.value.size()),
            RD_KAFKA_V_END);
      } else {
        perr = rd_kafka_producev(
            rk.get(), RD_KAFKA_V_TOPIC(topic.c_str()), RD_KAFKA_V_PARTITION(partition),
            RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
            RD_KAFKA_V_KEY(const_cast<char*>(r.key.data()), r.key.size()),
            RD_KAFKA_V_VALUE(r.null_value ? nullptr : const_cast<char*>(r.value.data()),
                             r.null_value ? 0 : r.value.size()),
            RD_KAFKA_V_END);
      }
      if (perr == RD_KAFKA_RESP_ERR_NO_ERROR) break;
      if (perr != RD_KAFKA_RESP_ERR__QUEUE_FULL) {
        return absl::InvalidArgumentError(
            absl::StrCat("produce to ", topic, ": ", rd_kafka_err2str(perr)));
      }
      rd_kafka_poll(rk.get(), 50);
    }
  }
  if (rd_kafka_flush(rk.get(), timeout_ms) != RD_KAFKA_RESP_ERR_NO_ERROR) {
    return absl::UnavailableError(absl::StrCat("produce to ", topic, ": ",
                                               rd_kafka_outq_len(rk.get()),
                                               " records undelivered after ", timeout_ms, " ms"));
  }
  if (tally.failed > 0) {
    return absl::UnavailableError(
        absl::StrCat("produce to ", topic, ": ", tally.failed,
                     " deliveries failed, first: ", rd_kafka_err2str(tally.first_error)));
  }
  return absl::OkStatus();
}

absl::Status ProduceLines(const std::string& bootstrap, const std::string& topic,
                          const std::vector<std::pair<int32_t, std::string>>& msgs,
                          int timeout_ms) {
  std::vector<KafkaTestRecord> records;
  records.reserve(msgs.size());
  for (const auto& [partition, value] : msgs) records.push_back({partition, "", value});
  return ProduceRecords(bootstrap, topic, records, timeout_ms);
}

absl::StatusOr<std::vector<KafkaConsumedRecord>> ConsumeAll(const std::string& bootstrap,
                                                            const std::string& topic,
                                                            int timeout_ms) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  KafkaSourceOptions options;
  options.bootstrap = bootstrap;
  options.topic = topic;
  options.start = "earliest";
  options.open_timeout_ms = std::min(timeout_ms, 2000);
  KafkaSource source(options);
  RETURN_IF_ERROR(source.Open());
  // The end offsets now: the high watermarks, or under read_committed
  // (librdkafka's default) the last stable offsets. The positions pass the
  // markers of transactions, so a topic written transactionally ends too.
  RETURN_IF_ERROR(source.StopAtCurrentEnd());
  std::vector<KafkaConsumedRecord> out;
  while (!source.Exhausted()) {
    if (std::chrono::steady_clock::now() >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat("consume ", topic, ": read ", out.size(),
                                                      " records, more expected after ", timeout_ms,
                                                      " ms"));
    }
    ASSIGN_OR_RETURN(int n, source.Poll(1000, 100, [&](const RawMessage& m) {
      out.push_back({m.partition, m.offset, m.key.data() != nullptr, std::string(m.key),
                     std::string(m.payload)});
    }));
    (void)n;
  }
  std::stable_sort(out.begin(), out.end(), [](const auto& a, const auto& b) {
    return a.partition != b.partition ? a.partition < b.partition : a.offset < b.offset;
  });
  return out;
}

absl::StatusOr<std::vector<std::string>> ConsumeAllValues(const std::string& bootstrap,
                                                          const std::string& topic,
                                                          int timeout_ms) {
  ASSIGN_OR_RETURN(std::vector<KafkaConsumedRecord> records,
                   ConsumeAll(bootstrap, topic, timeout_ms));
  std::vector<std::string> values;
  values.reserve(records.size());
  for (auto& r : records) values.push_back(std::move(r.value));
  return values;
}

absl::StatusOr<std::vector<int64_t>> CommittedOffsets(const std::string& bootstrap,
                                                      const std::string& group,
                                                      const std::string& topic, int partitions) {
  ASSIGN_OR_RETURN(KafkaConfPtr conf, NewKafkaConf({{"bootstrap.servers", bootstrap},
                                                    {"group.id", group},
                                                    {"enable.auto.commit", "false"}}));
  char err[512];
  rd_kafka_t* rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf.get(), err, sizeof(err));
  if (rk == nullptr) return absl::InvalidArgumentError(err);
  (void)conf.release();
  rd_kafka_topic_partition_list_t* list = rd_kafka_topic_partition_list_new(partitions);
  for (int p = 0; p < partitions; ++p) rd_kafka_topic_partition_list_add(list, topic.c_str(), p);
  const rd_kafka_resp_err_t e = rd_kafka_committed(rk, list, 10000);
  std::vector<int64_t> out;
  for (int p = 0; p < list->cnt; ++p) {
    out.push_back(list->elems[p].offset < 0 ? -1 : list->elems[p].offset);
  }
  rd_kafka_topic_partition_list_destroy(list);
  rd_kafka_consumer_close(rk);
  rd_kafka_destroy(rk);
  if (e != RD_KAFKA_RESP_ERR_NO_ERROR) {
    return absl::UnavailableError(
        absl::StrCat("committed offsets of ", group, ": ", rd_kafka_err2str(e)));
  }
  return out;
}

}  // namespace caravela
