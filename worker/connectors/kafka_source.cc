#include "worker/connectors/kafka_source.h"

#include <librdkafka/rdkafka.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/logging.h"
#include "spdlog/spdlog.h"
#include "worker/connectors/kafka_admin.h"
#include "worker/connectors/kafka_properties.h"

namespace caravela {
namespace {

// fetch.wait.max.ms of sources and exchange readers (see Open): 100, or
// $CARAVELA_KAFKA_FETCH_WAIT_MS when it is a number from 1 to 1000.
std::string FetchWaitMs() {
  const char* env = std::getenv("CARAVELA_KAFKA_FETCH_WAIT_MS");
  int ms = 0;
  if (env != nullptr && absl::SimpleAtoi(env, &ms) && ms >= 1 && ms <= 1000) {
    return std::to_string(ms);
  }
  return "100";
}

void LogCallback(const rd_kafka_t* rk, int level, const char* fac, const char* buf) {
  spdlog::level::level_enum lvl = spdlog::level::debug;
  if (level <= 2) {
    lvl = spdlog::level::critical;
  } else if (level == 3) {
    lvl = spdlog::level::err;
  } else if (level == 4) {
    lvl = spdlog::level::warn;
  } else if (level == 5) {
    lvl = spdlog::level::info;
  }
  // The mock broker (Metadata v2) cannot honour allow.auto.create.topics;
  // the source never names a missing topic in a request, so this is noise.
  if (lvl == spdlog::level::warn && std::strcmp(fac, "AUTOCREATE") == 0) {
    lvl = spdlog::level::debug;
  }
  KafkaLogger()->log(lvl, "[{}] {}: {}", rd_kafka_name(rk), fac, buf);
}

bool IsTopicPending(rd_kafka_resp_err_t err) {
  return err == RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART ||
         err == RD_KAFKA_RESP_ERR_LEADER_NOT_AVAILABLE || err == RD_KAFKA_RESP_ERR__TIMED_OUT ||
         err == RD_KAFKA_RESP_ERR__UNKNOWN_TOPIC || err == RD_KAFKA_RESP_ERR__TRANSPORT;
}

// Errors of a partition whose leader is not (yet) known or serving.
bool IsLeaderPending(rd_kafka_resp_err_t err) {
  return err == RD_KAFKA_RESP_ERR_NOT_LEADER_FOR_PARTITION ||
         err == RD_KAFKA_RESP_ERR_LEADER_NOT_AVAILABLE ||
         err == RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART ||
         err == RD_KAFKA_RESP_ERR__UNKNOWN_PARTITION;
}

// What librdkafka reports for the partitions of a topic that is gone (and,
// for a moment, of one whose leaders move).
bool IsTopicGone(rd_kafka_resp_err_t err) {
  return err == RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART ||
         err == RD_KAFKA_RESP_ERR__UNKNOWN_PARTITION || err == RD_KAFKA_RESP_ERR__UNKNOWN_TOPIC;
}

int RemainingMs(std::chrono::steady_clock::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                  deadline - std::chrono::steady_clock::now())
                  .count();
  return static_cast<int>(std::max<int64_t>(left, 0));
}

}  // namespace

std::shared_ptr<spdlog::logger> KafkaLogger() {
  static const std::shared_ptr<spdlog::logger> logger = SubsystemLogger("kafka");
  return logger;
}

void KafkaConfDeleter::operator()(rd_kafka_conf_t* conf) const { rd_kafka_conf_destroy(conf); }

absl::Status SetKafkaConf(rd_kafka_conf_t* conf, const std::string& name,
                          const std::string& value) {
  char err[512];
  if (rd_kafka_conf_set(conf, name.c_str(), value.c_str(), err, sizeof(err)) != RD_KAFKA_CONF_OK) {
    return absl::InvalidArgumentError(
        IsSecretKafkaProperty(name)
            ? absl::StrCat("kafka client property ", name, ": refused (value not shown)")
            : absl::StrCat("kafka client property ", name, "=", value, ": ", err));
  }
  return absl::OkStatus();
}

absl::StatusOr<KafkaConfPtr> NewKafkaConf(
    const std::vector<std::pair<std::string, std::string>>& props) {
  KafkaConfPtr conf(rd_kafka_conf_new());
  rd_kafka_conf_set_log_cb(conf.get(), LogCallback);
  for (const auto& [name, value] : props) RETURN_IF_ERROR(SetKafkaConf(conf.get(), name, value));
  // The process's (caravela worker --kafka-property): after Caravela's own.
  for (const auto& [name, value] : ProcessKafkaProperties()) {
    RETURN_IF_ERROR(SetKafkaConf(conf.get(), name, value));
  }
  return conf;
}

absl::StatusOr<rd_kafka_t*> NewKafkaClient(KafkaClientType type, KafkaConfPtr conf,
                                           std::string_view what) {
  char err[512];
  rd_kafka_t* rk =
      rd_kafka_new(type == KafkaClientType::kConsumer ? RD_KAFKA_CONSUMER : RD_KAFKA_PRODUCER,
                   conf.get(), err, sizeof(err));
  if (rk == nullptr) {
    const std::string message = absl::StrCat(std::string(what), ": ", err);
    return rd_kafka_last_error() == RD_KAFKA_RESP_ERR__INVALID_ARG
               ? absl::InvalidArgumentError(message)
               : absl::UnavailableError(message);
  }
  (void)conf.release();  // owned by rk now
  return rk;
}

absl::StatusOr<int> AwaitTopicPartitions(rd_kafka_t* rk, const std::string& bootstrap,
                                         const std::string& topic, bool name_topic,
                                         int timeout_ms) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  rd_kafka_topic_t* rkt = name_topic ? rd_kafka_topic_new(rk, topic.c_str(), nullptr) : nullptr;
  rd_kafka_resp_err_t last = RD_KAFKA_RESP_ERR_NO_ERROR;
  bool answered = false;  // some broker returned metadata
  int partitions = 0;
  while (true) {
    const rd_kafka_metadata_t* md = nullptr;
    rd_kafka_resp_err_t err =
        rd_kafka_metadata(rk, name_topic ? 0 : 1, rkt, &md, std::max(RemainingMs(deadline), 1));
    if (err == RD_KAFKA_RESP_ERR_NO_ERROR) {
      answered = true;
      last = RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART;
      for (int i = 0; i < md->topic_cnt; ++i) {
        if (topic == md->topics[i].topic) {
          last = md->topics[i].err;
          if (last == RD_KAFKA_RESP_ERR_NO_ERROR) partitions = md->topics[i].partition_cnt;
        }
      }
      rd_kafka_metadata_destroy(md);
    } else if (!answered) {
      last = err;
    }
    if (partitions > 0 || RemainingMs(deadline) == 0 || !IsTopicPending(last)) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(std::min(50, RemainingMs(deadline))));
  }
  if (rkt != nullptr) rd_kafka_topic_destroy(rkt);
  if (partitions > 0) return partitions;
  std::string where =
      absl::StrCat("kafka topic ", topic, " on ", bootstrap, ": ", rd_kafka_err2str(last));
  if (answered && IsTopicPending(last)) {
    return absl::NotFoundError(absl::StrCat(where, " (waited ", timeout_ms, " ms)"));
  }
  return absl::UnavailableError(where);
}

KafkaSource::KafkaSource(KafkaSourceOptions options) : options_(std::move(options)) {}

KafkaSource::~KafkaSource() {
  if (follow_ != nullptr) rd_kafka_topic_partition_list_destroy(follow_);
  if (queue_ != nullptr) rd_kafka_queue_destroy(queue_);
  if (rk_ != nullptr && topic_gone_) {
    // librdkafka 2.0.2 hangs in rd_kafka_destroy (a broker thread never
    // ends; measured on Apache Kafka 4.3.2, > 4 min, unassigning first does
    // not help) once a topic assigned to the consumer was deleted: the
    // client is let go on a thread of its own, so that the task fails
    // instead of hanging.
    KafkaLogger()->warn("source {}: its topic was deleted; closing the client in the background",
                        options_.topic);
    std::thread([rk = rk_] {
      rd_kafka_consumer_close(rk);
      rd_kafka_destroy(rk);
    }).detach();
    rk_ = nullptr;
  }
  if (rk_ != nullptr) {
    rd_kafka_consumer_close(rk_);
    rd_kafka_destroy(rk_);
  }
}

absl::Status KafkaSource::Open() {
  if (rk_ != nullptr) return absl::FailedPreconditionError("KafkaSource::Open called twice");
  if (options_.bootstrap.empty() || options_.topic.empty()) {
    return absl::InvalidArgumentError("kafka source needs a bootstrap and a topic");
  }
  if (options_.start != "earliest" && options_.start != "latest") {
    return absl::InvalidArgumentError(absl::StrCat("kafka source ", options_.topic,
                                                   ": start must be earliest or latest, got \"",
                                                   options_.start, "\""));
  }
  const std::vector<std::pair<std::string, std::string>> props = {
      {"bootstrap.servers", options_.bootstrap},
      {"client.id", "caravela-source"},
      // Offsets belong to the engine. librdkafka's assign() still wants a
      // group.id (the task passes caravela-<job> in options.config, which
      // comes after these); the group never joins or rebalances, and only
      // CommitOffsets commits to it (after a complete checkpoint, for lag
      // tools).
      {"group.id", "caravela-source"},
      {"enable.auto.commit", "false"},
      {"enable.auto.offset.store", "false"},
      {"enable.partition.eof", "false"},
      // A position outside the log is data loss: surface it, never reset.
      {"auto.offset.reset", "error"},
      {"allow.auto.create.topics", "false"},
      // How long the broker holds a fetch that found nothing new. Real
      // Kafka answers as soon as data arrives; the embedded (mock) broker
      // only when the wait ends, so there this is on every record's path:
      // a passthrough job at 2,000 records/s had p50 61 ms / p99 126 ms end
      // to end with 100 ms, p50 13 ms / p99 57 ms with 10 ms
      // (bench/latency_bench, which sets 10). But the mock broker scans its
      // message sets on every fetch: with 10 ms the Kafka-exchange kill loop
      // test made no checkpoint in 20 runs on a loaded 2-core machine. So
      // 100 ms stays the default; CARAVELA_KAFKA_FETCH_WAIT_MS overrides it.
      {"fetch.wait.max.ms", FetchWaitMs()},
  };
  ASSIGN_OR_RETURN(KafkaConfPtr conf, NewKafkaConf(props));
  for (const auto& [name, value] : options_.config) {
    RETURN_IF_ERROR(SetKafkaConf(conf.get(), name, value));
  }
  // Client-level errors (a deleted topic's partitions come this way, not as
  // messages) are served by the polls on the task thread.
  rd_kafka_conf_set_opaque(conf.get(), this);
  rd_kafka_conf_set_error_cb(conf.get(),
                             [](rd_kafka_t*, int err, const char* reason, void* opaque) {
                               static_cast<KafkaSource*>(opaque)->OnClientError(err, reason);
                             });
  ASSIGN_OR_RETURN(rk_,
                   NewKafkaClient(KafkaClientType::kConsumer, std::move(conf), "kafka consumer"));
  rd_kafka_poll_set_consumer(rk_);

  // All-topics metadata: naming the topic in a request would auto-create it
  // on brokers that speak only Metadata < v4 (such as the mock cluster).
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(options_.open_timeout_ms);
  ASSIGN_OR_RETURN(int partitions,
                   AwaitTopicPartitions(rk_, options_.bootstrap, options_.topic,
                                        /*name_topic=*/false, options_.open_timeout_ms));

  for (const auto& [p, offset] : options_.start_offsets) {
    if (p < 0 || p >= partitions) {
      return absl::InvalidArgumentError(absl::StrCat("kafka topic ", options_.topic, " has ",
                                                     partitions, " partitions; no partition ", p));
    }
  }
  owned_.assign(partitions, options_.partitions.empty());
  for (int32_t p : options_.partitions) {
    if (p < 0 || p >= partitions) {
      return absl::InvalidArgumentError(absl::StrCat("kafka topic ", options_.topic, " has ",
                                                     partitions, " partitions; cannot read ",
                                                     "partition ", p));
    }
    owned_[p] = true;
  }

  // Concrete start offsets, so that Positions() and Backlog() are exact
  // before the first record arrives. "latest" is the end offset queried here,
  // at Open(), not librdkafka's logical OFFSET_END (resolved later, at the
  // first fetch).
  positions_.assign(partitions, 0);
  high_.assign(partitions, 0);
  rd_kafka_topic_partition_list_t* assignment = rd_kafka_topic_partition_list_new(partitions);
  for (int32_t p = 0; p < partitions; ++p) {
    if (!owned_[p]) continue;
    int64_t low = 0;
    int64_t high = 0;
    rd_kafka_resp_err_t qerr = rd_kafka_query_watermark_offsets(
        rk_, options_.topic.c_str(), p, &low, &high, std::max(RemainingMs(deadline), 1000));
    // A topic just created (an exchange topic of 128 partitions on Apache
    // Kafka) is listed before each partition's leader serves it, and a
    // leader may be moving: ask again until the open deadline.
    while (IsLeaderPending(qerr) && RemainingMs(deadline) > 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(std::min(100, RemainingMs(deadline))));
      qerr = rd_kafka_query_watermark_offsets(rk_, options_.topic.c_str(), p, &low, &high,
                                              std::max(RemainingMs(deadline), 1000));
    }
    if (qerr != RD_KAFKA_RESP_ERR_NO_ERROR) {
      rd_kafka_topic_partition_list_destroy(assignment);
      return absl::UnavailableError(absl::StrCat("kafka ", options_.topic, "[", p,
                                                 "]: watermarks: ", rd_kafka_err2str(qerr)));
    }
    int64_t start = options_.start == "earliest" ? low : high;
    if (auto it = options_.start_offsets.find(p); it != options_.start_offsets.end()) {
      start = it->second;
      if (start < low || start > high) {
        rd_kafka_topic_partition_list_destroy(assignment);
        return absl::DataLossError(absl::StrCat(
            "kafka ", options_.topic, "[", p, "]: start offset ", start, " is outside the log [",
            low, ", ", high, ")",
            start < low ? " (records were deleted by retention)" : " (topic recreated?)"));
      }
    }
    positions_[p] = start;
    high_[p] = high;
    rd_kafka_topic_partition_list_add(assignment, options_.topic.c_str(), p)->offset = start;
  }
  const int assignment_size = assignment->cnt;
  rd_kafka_resp_err_t aerr = rd_kafka_assign(rk_, assignment);
  rd_kafka_topic_partition_list_destroy(assignment);
  if (aerr != RD_KAFKA_RESP_ERR_NO_ERROR) {
    return absl::InternalError(absl::StrCat("kafka assign: ", rd_kafka_err2str(aerr)));
  }
  queue_ = rd_kafka_queue_get_consumer(rk_);
  KafkaLogger()->info("source {} on {}: {} of {} partitions from offsets [{}]", options_.topic,
                      options_.bootstrap, assignment_size, partitions,
                      absl::StrJoin(Positions(), ","));
  return absl::OkStatus();
}

absl::StatusOr<bool> KafkaSource::Handle(rd_kafka_message_t* m,
                                         const std::function<void(const RawMessage&)>& f) {
  if (m->err != RD_KAFKA_RESP_ERR_NO_ERROR) {
    if (m->err == RD_KAFKA_RESP_ERR__PARTITION_EOF) return false;
    if (m->err == RD_KAFKA_RESP_ERR__AUTO_OFFSET_RESET ||
        m->err == RD_KAFKA_RESP_ERR_OFFSET_OUT_OF_RANGE) {
      return absl::DataLossError(absl::StrCat("kafka ", options_.topic, "[", m->partition,
                                              "]: ", rd_kafka_message_errstr(m)));
    }
    char fatal[512];
    if (m->err == RD_KAFKA_RESP_ERR__FATAL ||
        rd_kafka_fatal_error(rk_, fatal, sizeof(fatal)) != RD_KAFKA_RESP_ERR_NO_ERROR) {
      return absl::InternalError(
          absl::StrCat("kafka source ", options_.topic, ": fatal: ", rd_kafka_message_errstr(m)));
    }
    if (IsTopicGone(m->err)) RETURN_IF_ERROR(CheckTopicExists(m->partition));
    if (logged_errors_.insert(m->err).second) {
      KafkaLogger()->warn("source {}: {} (retrying; logged once until records flow again)",
                          options_.topic, rd_kafka_message_errstr(m));
    }
    return false;
  }
  const int32_t p = m->partition;
  if (p < 0 || p >= static_cast<int32_t>(positions_.size()) || !owned_[p]) {
    return false;  // not assigned
  }
  if (stopping_ && m->offset >= stop_at_[p]) return false;  // after the end
  RawMessage raw;
  if (m->payload != nullptr) raw.payload = {static_cast<const char*>(m->payload), m->len};
  raw.tombstone = m->payload == nullptr;
  if (m->key != nullptr) raw.key = {static_cast<const char*>(m->key), m->key_len};
  raw.partition = p;
  raw.offset = m->offset;
  rd_kafka_timestamp_type_t ts_type;
  int64_t ts = rd_kafka_message_timestamp(m, &ts_type);
  raw.timestamp_ms = ts_type == RD_KAFKA_TIMESTAMP_NOT_AVAILABLE ? -1 : ts;
  f(raw);
  positions_[p] = m->offset + 1;
  high_[p] = std::max(high_[p], positions_[p]);
  if (stopping_ && positions_[p] >= stop_at_[p]) Pause(p);
  if (!logged_errors_.empty()) {
    logged_errors_.clear();
    KafkaLogger()->info("source {}: records flow again", options_.topic);
  }
  return true;
}

absl::StatusOr<int> KafkaSource::Poll(int max_messages, int timeout_ms,
                                      const std::function<void(const RawMessage&)>& f) {
  if (rk_ == nullptr) return absl::FailedPreconditionError("KafkaSource::Poll before Open");
  if (max_messages <= 0 || Exhausted()) return 0;
  rd_kafka_message_t* first = rd_kafka_consumer_poll(rk_, timeout_ms);
  if (topic_error_) {
    topic_error_ = false;
    if (first != nullptr) rd_kafka_message_destroy(first);
    RETURN_IF_ERROR(CheckTopicExists(-1));
    return 0;
  }
  if (first == nullptr) {
    FollowConsumerPositions();
    return 0;
  }
  int delivered = 0;
  absl::StatusOr<bool> handled = Handle(first, f);
  rd_kafka_message_destroy(first);
  if (!handled.ok()) return handled.status();
  delivered += *handled ? 1 : 0;

  // Drain what is already queued, without waiting.
  batch_.resize(static_cast<size_t>(std::min(max_messages, 4096)));
  while (delivered < max_messages) {
    const size_t want = std::min<size_t>(batch_.size(), max_messages - delivered);
    ssize_t n = rd_kafka_consume_batch_queue(queue_, 0, batch_.data(), want);
    if (n <= 0) break;
    absl::Status status;
    for (ssize_t i = 0; i < n; ++i) {
      if (status.ok()) {
        handled = Handle(batch_[i], f);
        if (handled.ok()) {
          delivered += *handled ? 1 : 0;
        } else {
          status = handled.status();
        }
      }
      rd_kafka_message_destroy(batch_[i]);
    }
    if (!status.ok()) return status;
    if (static_cast<size_t>(n) < want) break;
  }
  if (delivered < max_messages) FollowConsumerPositions();
  return delivered;
}

void KafkaSource::OnClientError(int err, const char* reason) {
  if (IsTopicGone(static_cast<rd_kafka_resp_err_t>(err))) topic_error_ = true;
  if (logged_errors_.insert(err).second) {
    KafkaLogger()->warn("source {}: {} (retrying; logged once until records flow again)",
                        options_.topic, reason);
  }
}

absl::Status KafkaSource::CheckTopicExists(int32_t partition) {
  // librdkafka says "Unknown topic or partition" for a deleted topic and,
  // briefly, for one whose leaders move: ask the cluster (all topics; at
  // most once a second).
  const auto now = std::chrono::steady_clock::now();
  if (now < next_topic_check_) return absl::OkStatus();
  next_topic_check_ = now + std::chrono::seconds(1);
  absl::StatusOr<std::optional<int>> count =
      ExistingTopicPartitions(rk_, options_.bootstrap, options_.topic);
  if (!count.ok() || count->has_value()) return absl::OkStatus();  // no answer, or it is there
  topic_gone_ = true;
  std::vector<std::string> at;
  for (size_t p = 0; p < positions_.size(); ++p) {
    if (owned_[p]) at.push_back(absl::StrCat(p, ":", positions_[p]));
  }
  return absl::NotFoundError(
      absl::StrCat("kafka topic ", options_.topic, " on ", options_.bootstrap,
                   " was deleted while the source read it (",
                   partition >= 0 ? absl::StrCat("partition ", partition, " reported it; ") : "",
                   "positions partition:next offset ", absl::StrJoin(at, ","),
                   "); a topic created again under that name is another log: start the job anew"));
}

void KafkaSource::FollowConsumerPositions() {
  // librdkafka's application position is the offset after the last message
  // it handed out (all handled above) or after a transaction's commit or
  // abort marker it consumed without handing it out (control records are
  // never delivered). Past the end a bounded source stops at, nothing was
  // delivered: the position is that end.
  if (follow_ == nullptr) {
    follow_ = rd_kafka_topic_partition_list_new(static_cast<int>(positions_.size()));
    for (int32_t p = 0; p < static_cast<int32_t>(positions_.size()); ++p) {
      if (owned_[p]) rd_kafka_topic_partition_list_add(follow_, options_.topic.c_str(), p);
    }
  }
  if (follow_->cnt == 0 || rd_kafka_position(rk_, follow_) != RD_KAFKA_RESP_ERR_NO_ERROR) return;
  for (int i = 0; i < follow_->cnt; ++i) {
    const rd_kafka_topic_partition_t& e = follow_->elems[i];
    const int32_t p = e.partition;
    int64_t at = e.offset;
    if (e.err != RD_KAFKA_RESP_ERR_NO_ERROR || at < 0) continue;  // nothing consumed yet
    if (stopping_) at = std::min(at, stop_at_[p]);
    if (at <= positions_[p]) continue;
    positions_[p] = at;
    high_[p] = std::max(high_[p], at);
    if (stopping_ && positions_[p] >= stop_at_[p]) Pause(p);
  }
}

absl::Status KafkaSource::StopAtCurrentEnd() {
  if (rk_ == nullptr) return absl::FailedPreconditionError("StopAtCurrentEnd before Open");
  if (stopping_) return absl::OkStatus();
  std::vector<int64_t> ends(positions_.size());
  for (int32_t p = 0; p < static_cast<int32_t>(ends.size()); ++p) {
    if (!owned_[p]) continue;  // nothing to read there: its end is 0 as its position
    int64_t low = 0;
    rd_kafka_resp_err_t err =
        rd_kafka_query_watermark_offsets(rk_, options_.topic.c_str(), p, &low, &ends[p], 10000);
    if (err != RD_KAFKA_RESP_ERR_NO_ERROR) {
      return absl::UnavailableError(
          absl::StrCat("kafka ", options_.topic, "[", p, "]: end offset: ", rd_kafka_err2str(err)));
    }
    high_[p] = std::max(high_[p], ends[p]);
  }
  stop_at_ = std::move(ends);
  stopping_ = true;
  for (int32_t p = 0; p < static_cast<int32_t>(positions_.size()); ++p) {
    if (owned_[p] && positions_[p] >= stop_at_[p]) Pause(p);
  }
  KafkaLogger()->info("source {}: stopping at end offsets [{}]", options_.topic,
                      absl::StrJoin(stop_at_, ","));
  return absl::OkStatus();
}

std::vector<int64_t> KafkaSource::Positions() const {
  std::vector<int64_t> out = positions_;
  for (size_t p = 0; p < out.size(); ++p) {
    if (!owned_[p]) out[p] = -1;
  }
  return out;
}

bool KafkaSource::Exhausted() const {
  if (!stopping_) return false;
  for (size_t p = 0; p < positions_.size(); ++p) {
    if (positions_[p] < stop_at_[p]) return false;
  }
  return true;
}

void KafkaSource::Pause(int32_t partition) {
  rd_kafka_topic_partition_list_t* list = rd_kafka_topic_partition_list_new(1);
  rd_kafka_topic_partition_list_add(list, options_.topic.c_str(), partition);
  rd_kafka_pause_partitions(rk_, list);  // best effort: only saves fetching
  rd_kafka_topic_partition_list_destroy(list);
}

int64_t KafkaSource::Backlog(int32_t partition) const {
  if (rk_ == nullptr || partition < 0 || partition >= static_cast<int32_t>(positions_.size()) ||
      !owned_[partition]) {
    return 0;
  }
  int64_t low = RD_KAFKA_OFFSET_INVALID;
  int64_t high = RD_KAFKA_OFFSET_INVALID;
  rd_kafka_get_watermark_offsets(rk_, options_.topic.c_str(), partition, &low, &high);
  high = std::max(high, high_[partition]);
  if (stopping_) high = stop_at_[partition];  // nothing after it is delivered
  return std::max<int64_t>(high - positions_[partition], 0);
}

int64_t KafkaSource::HighWatermark(int32_t partition) const {
  // rk_ and owned_ are fixed once Open() returned; librdkafka's cached
  // watermarks are thread-safe to read.
  if (rk_ == nullptr || partition < 0 || partition >= static_cast<int32_t>(owned_.size()) ||
      !owned_[partition]) {
    return -1;
  }
  int64_t low = RD_KAFKA_OFFSET_INVALID;
  int64_t high = RD_KAFKA_OFFSET_INVALID;
  rd_kafka_get_watermark_offsets(rk_, options_.topic.c_str(), partition, &low, &high);
  return high >= 0 ? high : -1;
}

absl::Status KafkaSource::CommitOffsets(const std::vector<int64_t>& next_offsets) {
  if (rk_ == nullptr) return absl::FailedPreconditionError("kafka source not open");
  rd_kafka_topic_partition_list_t* list = rd_kafka_topic_partition_list_new(4);
  for (size_t p = 0; p < next_offsets.size() && p < owned_.size(); ++p) {
    if (!owned_[p] || next_offsets[p] < 0) continue;
    rd_kafka_topic_partition_list_add(list, options_.topic.c_str(), static_cast<int32_t>(p))
        ->offset = next_offsets[p];
  }
  const rd_kafka_resp_err_t err =
      list->cnt > 0 ? rd_kafka_commit(rk_, list, /*async=*/1) : RD_KAFKA_RESP_ERR_NO_ERROR;
  rd_kafka_topic_partition_list_destroy(list);
  if (err != RD_KAFKA_RESP_ERR_NO_ERROR) {
    return absl::UnavailableError(
        absl::StrCat("kafka ", options_.topic, ": committing positions: ", rd_kafka_err2str(err)));
  }
  return absl::OkStatus();
}

absl::Status ForEachKafkaMessage(const std::string& bootstrap, const std::string& topic,
                                 int open_timeout_ms,
                                 const std::function<void(const RawMessage&)>& f,
                                 const std::map<std::string, std::string>& properties) {
  KafkaSourceOptions o;
  o.config = properties;
  o.bootstrap = bootstrap;
  o.topic = topic;
  o.start = "earliest";
  o.open_timeout_ms = open_timeout_ms;
  // A bounded read: an empty partition's fetch should not wait long (the
  // mock broker answers it only when the wait ends).
  o.config["fetch.wait.max.ms"] = "5";
  KafkaSource source(o);
  absl::Status st = source.Open();
  if (st.ok()) st = source.StopAtCurrentEnd();
  while (st.ok() && !source.Exhausted()) st = source.Poll(10000, 100, f).status();
  if (st.ok()) return st;
  return absl::Status(st.code(),
                      absl::StrCat("kafka ", topic, " at ", bootstrap, ": ", st.message()));
}

}  // namespace caravela
