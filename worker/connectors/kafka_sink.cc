#include "worker/connectors/kafka_sink.h"

#include <librdkafka/rdkafka.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"
#include "worker/connectors/kafka_source.h"

namespace caravela {
namespace {

// msg_opaque of commit markers: their deliveries are not counted.
char kMarkerTag;

using Clock = std::chrono::steady_clock;

int RemainingMs(Clock::time_point deadline) {
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return static_cast<int>(std::max<int64_t>(ms, 0));
}

bool IsFenced(rd_kafka_resp_err_t code) {
  return code == RD_KAFKA_RESP_ERR__FENCED || code == RD_KAFKA_RESP_ERR_PRODUCER_FENCED ||
         code == RD_KAFKA_RESP_ERR_INVALID_PRODUCER_EPOCH;
}

struct ErrorDeleter {
  void operator()(rd_kafka_error_t* e) const { rd_kafka_error_destroy(e); }
};
using ErrorPtr = std::unique_ptr<rd_kafka_error_t, ErrorDeleter>;

struct HeadersDeleter {
  void operator()(rd_kafka_headers_t* h) const { rd_kafka_headers_destroy(h); }
};
using HeadersPtr = std::unique_ptr<rd_kafka_headers_t, HeadersDeleter>;

// `revision` (decimal) and `state` headers; null if the record has neither.
HeadersPtr RecordHeaders(int64_t revision, std::string_view state) {
  if (revision < 0 && state.empty()) return nullptr;
  HeadersPtr h(rd_kafka_headers_new(2));
  if (revision >= 0) {
    std::string r = std::to_string(revision);
    rd_kafka_header_add(h.get(), "revision", -1, r.data(), static_cast<ssize_t>(r.size()));
  }
  if (!state.empty()) {
    rd_kafka_header_add(h.get(), "state", -1, state.data(), static_cast<ssize_t>(state.size()));
  }
  return h;
}

}  // namespace

KafkaSink::KafkaSink(KafkaSinkOptions options) : options_(std::move(options)) {
  if (options_.exactly_once && options_.commit_topic.empty()) {
    options_.commit_topic = options_.topic + ".caravela-commits";
  }
}

KafkaSink::~KafkaSink() {
  if (rkt_ != nullptr) rd_kafka_topic_destroy(rkt_);
  if (commit_rkt_ != nullptr) rd_kafka_topic_destroy(commit_rkt_);
  if (rk_ != nullptr) rd_kafka_destroy(rk_);
}

std::string KafkaSink::Where() const {
  return options_.exactly_once ? absl::StrCat("kafka sink ", options_.topic, " (transactional.id ",
                                              options_.transactional_id, ")")
                               : absl::StrCat("kafka sink ", options_.topic);
}

void KafkaSink::DeliveryReport(rd_kafka_t* rk, const rd_kafka_message_t* m, void* opaque) {
  auto* self = static_cast<KafkaSink*>(opaque);
  if (m->err == RD_KAFKA_RESP_ERR_NO_ERROR) {
    if (m->_private != &kMarkerTag) ++self->delivered_;
    return;
  }
  if (self->failure_.ok()) {
    char fatal[512];
    rd_kafka_resp_err_t fatal_err = m->err == RD_KAFKA_RESP_ERR__FATAL
                                        ? rd_kafka_fatal_error(rk, fatal, sizeof(fatal))
                                        : RD_KAFKA_RESP_ERR_NO_ERROR;
    if (IsFenced(fatal_err)) {
      self->failure_ = absl::FailedPreconditionError(
          absl::StrCat(self->Where(),
                       ": fenced: a newer producer with the same transactional id "
                       "took over (",
                       fatal, "); this instance must stop"));
      return;
    }
    std::string msg = absl::StrCat(self->Where(), ": delivery failed: ", rd_kafka_err2str(m->err));
    self->failure_ =
        m->err == RD_KAFKA_RESP_ERR__FATAL ? absl::InternalError(msg) : absl::UnavailableError(msg);
  }
}

absl::Status KafkaSink::Open() {
  if (rk_ != nullptr) return absl::FailedPreconditionError("KafkaSink::Open called twice");
  if (options_.bootstrap.empty() || options_.topic.empty()) {
    return absl::InvalidArgumentError("kafka sink needs a bootstrap and a topic");
  }
  if (options_.exactly_once && options_.transactional_id.empty()) {
    return absl::InvalidArgumentError("kafka sink with exactly_once needs a transactional id");
  }
  std::vector<std::pair<std::string, std::string>> props = {
      {"bootstrap.servers", options_.bootstrap},
      {"client.id", "caravela-sink"},
      {"enable.idempotence", "true"},
      {"acks", "all"},
      {"linger.ms", std::to_string(options_.linger_ms)},
      {"batch.num.messages", "10000"},
      // Same key -> same partition as the Java client.
      {"partitioner", "murmur2_random"},
  };
  if (options_.exactly_once) {
    props.push_back({"transactional.id", options_.transactional_id});
    props.push_back({"transaction.timeout.ms", std::to_string(options_.transaction_timeout_ms)});
  }
  ASSIGN_OR_RETURN(KafkaConfPtr conf, NewKafkaConf(props));
  for (const auto& [name, value] : options_.properties) {
    RETURN_IF_ERROR(SetKafkaConf(conf.get(), name, value));
  }
  for (const auto& [name, value] : options_.config) {
    RETURN_IF_ERROR(SetKafkaConf(conf.get(), name, value));
  }
  rd_kafka_conf_set_dr_msg_cb(conf.get(), &KafkaSink::DeliveryReport);
  rd_kafka_conf_set_opaque(conf.get(), this);
  ASSIGN_OR_RETURN(rk_,
                   NewKafkaClient(KafkaClientType::kProducer, std::move(conf), "kafka producer"));
  rkt_ = rd_kafka_topic_new(rk_, options_.topic.c_str(), nullptr);
  if (rkt_ == nullptr) {
    return absl::InternalError(
        absl::StrCat(Where(), ": ", rd_kafka_err2str(rd_kafka_last_error())));
  }
  // Wait for the topic's metadata: records then go out at once instead of
  // waiting for librdkafka's periodic (1 s) refresh of unknown topics, and a
  // missing topic or unreachable broker fails here rather than at Flush().
  // (The request may auto-create the topic, as the first record would.)
  RETURN_IF_ERROR(AwaitTopicPartitions(rk_, options_.bootstrap, options_.topic, /*name_topic=*/true,
                                       options_.open_timeout_ms)
                      .status());
  if (!options_.exactly_once) {
    KafkaLogger()->info("sink {} on {} ({})", options_.topic, options_.bootstrap,
                        options_.mode == KafkaSinkOptions::Mode::kUpsert ? "upsert" : "changelog");
    return absl::OkStatus();
  }

  commit_rkt_ = rd_kafka_topic_new(rk_, options_.commit_topic.c_str(), nullptr);
  if (commit_rkt_ == nullptr) {
    return absl::InternalError(
        absl::StrCat(Where(), ": ", rd_kafka_err2str(rd_kafka_last_error())));
  }
  absl::Status commit_topic = AwaitTopicPartitions(rk_, options_.bootstrap, options_.commit_topic,
                                                   /*name_topic=*/true, options_.open_timeout_ms)
                                  .status();
  if (!commit_topic.ok()) {
    return absl::Status(
        commit_topic.code(),
        absl::StrCat(
            Where(), ": exactly_once needs the commit topic ", options_.commit_topic,
            " (create it with 1 partition, cleanup.policy=compact): ", commit_topic.message()));
  }
  // Fences older producers with this id; the broker aborts their open
  // transaction. Retriable errors (coordinator loading, ...) are retried.
  const auto deadline = Clock::now() + std::chrono::milliseconds(options_.open_timeout_ms);
  while (true) {
    ErrorPtr error(rd_kafka_init_transactions(rk_, std::max(RemainingMs(deadline), 1)));
    if (error == nullptr) break;
    const rd_kafka_resp_err_t code = rd_kafka_error_code(error.get());
    std::string msg =
        absl::StrCat(Where(), ": init_transactions: ", rd_kafka_error_string(error.get()));
    if (IsFenced(code)) return absl::FailedPreconditionError(absl::StrCat(msg, " (fenced)"));
    if (rd_kafka_error_is_retriable(error.get()) && RemainingMs(deadline) > 0) continue;
    if (rd_kafka_error_is_fatal(error.get())) {
      failure_ = absl::InternalError(msg);
      return failure_;
    }
    return code == RD_KAFKA_RESP_ERR__TIMED_OUT ? absl::DeadlineExceededError(msg)
                                                : absl::UnavailableError(msg);
  }
  RETURN_IF_ERROR(BeginTransaction());
  KafkaLogger()->info("sink {} on {} ({}, exactly-once, transactional.id {}, commits in {})",
                      options_.topic, options_.bootstrap,
                      options_.mode == KafkaSinkOptions::Mode::kUpsert ? "upsert" : "changelog",
                      options_.transactional_id, options_.commit_topic);
  return absl::OkStatus();
}

absl::Status KafkaSink::BeginTransaction() {
  ErrorPtr error(rd_kafka_begin_transaction(rk_));
  if (error != nullptr) {
    std::string msg =
        absl::StrCat(Where(), ": begin_transaction: ", rd_kafka_error_string(error.get()));
    if (IsFenced(rd_kafka_error_code(error.get()))) {
      failure_ = absl::FailedPreconditionError(absl::StrCat(msg, " (fenced)"));
    } else if (rd_kafka_error_is_fatal(error.get())) {
      failure_ = absl::InternalError(msg);
    } else {
      return absl::InternalError(msg);
    }
    return failure_;
  }
  txn_ = TxnState::kOpen;
  return absl::OkStatus();
}

absl::Status KafkaSink::Produce(rd_kafka_topic_t* rkt, int32_t partition, std::string_view key,
                                std::string_view value, int64_t revision, std::string_view state,
                                void* msg_opaque) {
  HeadersPtr headers = RecordHeaders(revision, state);
  if (msg_opaque == &kMarkerTag) {
    // Markers: the run's epoch, for people reading the commit topic.
    headers.reset(rd_kafka_headers_new(1));
    std::string e = std::to_string(options_.epoch);
    rd_kafka_header_add(headers.get(), "epoch", -1, e.data(), static_cast<ssize_t>(e.size()));
  }
  while (true) {
    rd_kafka_resp_err_t err = rd_kafka_producev(
        rk_, RD_KAFKA_V_RKT(rkt), RD_KAFKA_V_PARTITION(partition),
        RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
        RD_KAFKA_V_KEY(key.empty() ? nullptr : const_cast<char*>(key.data()), key.size()),
        RD_KAFKA_V_VALUE(const_cast<char*>(value.data()), value.size()),
        RD_KAFKA_V_HEADERS(headers.get()), RD_KAFKA_V_OPAQUE(msg_opaque), RD_KAFKA_V_END);
    if (err == RD_KAFKA_RESP_ERR_NO_ERROR) {
      (void)headers.release();  // owned by the message now
      return absl::OkStatus();
    }
    if (err == RD_KAFKA_RESP_ERR__FATAL) {
      RETURN_IF_ERROR(FlushProducer());  // sets failure_ from the fatal error
      return absl::InternalError(absl::StrCat(Where(), ": fatal producer error"));
    }
    if (err == RD_KAFKA_RESP_ERR__STATE) {
      return absl::FailedPreconditionError(
          absl::StrCat(Where(), ": no open transaction (", rd_kafka_err2str(err), ")"));
    }
    if (err != RD_KAFKA_RESP_ERR__QUEUE_FULL) {
      return absl::InvalidArgumentError(absl::StrCat(Where(), ": ", rd_kafka_err2str(err)));
    }
    // Backpressure: serve delivery reports until the queue has room.
    rd_kafka_poll(rk_, 100);
    RETURN_IF_ERROR(failure_);
  }
}

absl::Status KafkaSink::WriteRecord(const SinkRecord& r) {
  if (rk_ == nullptr) return absl::FailedPreconditionError("KafkaSink::Write before Open");
  RETURN_IF_ERROR(failure_);
  if (options_.exactly_once && txn_ == TxnState::kPreCommitted) {
    // The pre-commit is abandoned: Commit(precommitted_id_) would commit
    // records the checkpoint's state does not include. The next PreCommit
    // writes a newer marker into the same transaction.
    KafkaLogger()->warn("{}: write after PreCommit({}) without Commit: that pre-commit is void",
                        Where(), precommitted_id_);
    txn_ = TxnState::kOpen;
  }
  if (options_.mode == KafkaSinkOptions::Mode::kUpsert && !r.key.empty() && r.revision >= 0) {
    auto [it, inserted] = pending_index_.try_emplace(std::string(r.key), pending_.size());
    if (inserted) {
      pending_.push_back(
          {std::string(r.key), std::string(r.value), r.revision, std::string(r.state)});
    } else {
      Pending& p = pending_[it->second];
      ++superseded_;  // one of the two is never produced
      if (r.revision >= p.revision) {
        p.value.assign(r.value.data(), r.value.size());
        p.revision = r.revision;
        p.state.assign(r.state.data(), r.state.size());
      }
    }
    if (pending_.size() >= static_cast<size_t>(std::max(options_.max_buffered_records, 1))) {
      return ProduceBuffered();
    }
    return absl::OkStatus();
  }
  RETURN_IF_ERROR(
      Produce(rkt_, RD_KAFKA_PARTITION_UA, r.key, r.value, r.revision, r.state, nullptr));
  rd_kafka_poll(rk_, 0);  // serve delivery reports
  return failure_;
}

absl::Status KafkaSink::ProduceBuffered() {
  absl::Status first;
  for (const Pending& p : pending_) {
    absl::Status s =
        Produce(rkt_, RD_KAFKA_PARTITION_UA, p.key, p.value, p.revision, p.state, nullptr);
    if (!s.ok() && first.ok()) first = s;
    if (!failure_.ok()) break;
  }
  pending_.clear();
  pending_index_.clear();
  rd_kafka_poll(rk_, 0);
  RETURN_IF_ERROR(first);
  return failure_;
}

absl::Status KafkaSink::FlushProducer() {
  rd_kafka_resp_err_t err = rd_kafka_flush(rk_, options_.flush_timeout_ms);
  char fatal[512];
  rd_kafka_resp_err_t fatal_err = rd_kafka_fatal_error(rk_, fatal, sizeof(fatal));
  if (fatal_err != RD_KAFKA_RESP_ERR_NO_ERROR && failure_.ok()) {
    failure_ = IsFenced(fatal_err)
                   ? absl::FailedPreconditionError(absl::StrCat(
                         Where(),
                         ": fenced: a newer producer with the same transactional id took "
                         "over (",
                         fatal, "); this instance must stop"))
                   : absl::InternalError(absl::StrCat(Where(), ": fatal: ", fatal));
  }
  RETURN_IF_ERROR(failure_);
  if (err == RD_KAFKA_RESP_ERR__TIMED_OUT) {
    return absl::DeadlineExceededError(absl::StrCat(Where(), ": ", rd_kafka_outq_len(rk_),
                                                    " records undelivered after ",
                                                    options_.flush_timeout_ms, " ms"));
  }
  return absl::OkStatus();
}

absl::Status KafkaSink::Flush() {
  if (rk_ == nullptr) return absl::FailedPreconditionError("KafkaSink::Flush before Open");
  RETURN_IF_ERROR(failure_);
  RETURN_IF_ERROR(ProduceBuffered());
  return FlushProducer();
}

absl::StatusOr<std::string> KafkaSink::PreCommit(int64_t checkpoint_id) {
  if (!options_.exactly_once) {
    RETURN_IF_ERROR(Flush());
    return std::string();
  }
  if (rk_ == nullptr) return absl::FailedPreconditionError("KafkaSink::PreCommit before Open");
  RETURN_IF_ERROR(failure_);
  if (txn_ == TxnState::kNone) {
    return absl::FailedPreconditionError(absl::StrCat(Where(), ": no open transaction"));
  }
  RETURN_IF_ERROR(ProduceBuffered());
  // The marker commits (or aborts) atomically with the records.
  const std::string id = std::to_string(checkpoint_id);
  RETURN_IF_ERROR(Produce(commit_rkt_, 0, options_.transactional_id, id, -1, "", &kMarkerTag));
  RETURN_IF_ERROR(FlushProducer());
  txn_ = TxnState::kPreCommitted;
  precommitted_id_ = checkpoint_id;
  return options_.transactional_id;
}

absl::Status KafkaSink::Commit(int64_t checkpoint_id) {
  if (!options_.exactly_once) return absl::OkStatus();
  if (rk_ == nullptr) return absl::FailedPreconditionError("KafkaSink::Commit before Open");
  RETURN_IF_ERROR(failure_);
  if (txn_ != TxnState::kPreCommitted || precommitted_id_ != checkpoint_id) {
    return absl::FailedPreconditionError(absl::StrCat(
        Where(), ": Commit(", checkpoint_id, ") without a matching PreCommit (",
        txn_ == TxnState::kPreCommitted
            ? absl::StrCat("the last PreCommit was for ", precommitted_id_)
            : std::string("records were written since the last PreCommit, or none was made"),
        ")"));
  }
  const auto deadline = Clock::now() + std::chrono::milliseconds(options_.flush_timeout_ms);
  while (true) {
    ErrorPtr error(rd_kafka_commit_transaction(rk_, std::max(RemainingMs(deadline), 1)));
    if (error == nullptr) break;
    const rd_kafka_resp_err_t code = rd_kafka_error_code(error.get());
    std::string msg = absl::StrCat(Where(), ": commit of checkpoint ", checkpoint_id, ": ",
                                   rd_kafka_error_string(error.get()));
    if (IsFenced(code)) {
      failure_ = absl::FailedPreconditionError(
          absl::StrCat(msg,
                       " (fenced: a newer producer with the same transactional id took "
                       "over; this instance must stop)"));
      return failure_;
    }
    if (rd_kafka_error_is_fatal(error.get())) {
      failure_ = absl::InternalError(msg);
      return failure_;
    }
    if (rd_kafka_error_txn_requires_abort(error.get())) {
      ErrorPtr aborted(rd_kafka_abort_transaction(rk_, std::max(RemainingMs(deadline), 1)));
      if (aborted != nullptr) {
        failure_ = absl::InternalError(
            absl::StrCat(msg, "; abort failed too: ", rd_kafka_error_string(aborted.get())));
        return failure_;
      }
      txn_ = TxnState::kNone;
      RETURN_IF_ERROR(BeginTransaction());
      return absl::AbortedError(
          absl::StrCat(msg, " (transaction aborted; restore LastCommittedCheckpoint())"));
    }
    if (rd_kafka_error_is_retriable(error.get()) && RemainingMs(deadline) > 0) continue;
    return code == RD_KAFKA_RESP_ERR__TIMED_OUT ? absl::DeadlineExceededError(msg)
                                                : absl::UnavailableError(msg);
  }
  last_committed_ = checkpoint_id;
  precommitted_id_ = -1;
  txn_ = TxnState::kNone;
  return BeginTransaction();
}

absl::Status KafkaSink::Recover(int64_t checkpoint_id, std::string_view state) {
  if (!options_.exactly_once) return absl::OkStatus();
  if (!state.empty() && state != options_.transactional_id) {
    return absl::FailedPreconditionError(
        absl::StrCat(Where(), ": checkpoint ", checkpoint_id, " was written by transactional.id ",
                     std::string(state),
                     "; the sink's transactional id changed, so which of its output is "
                     "committed cannot be told"));
  }
  ASSIGN_OR_RETURN(int64_t committed, LastCommittedCheckpoint());
  if (checkpoint_id > committed) {
    return absl::FailedPreconditionError(
        absl::StrCat(Where(), ": restoring checkpoint ", checkpoint_id, " but only checkpoint ",
                     committed, " has committed Kafka output (restore that one and replay)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<int64_t> KafkaSink::LastCommittedCheckpoint() {
  if (!options_.exactly_once) return -1;
  if (rk_ == nullptr) {
    return absl::FailedPreconditionError("KafkaSink::LastCommittedCheckpoint before Open");
  }
  if (last_committed_ < 0) {
    ASSIGN_OR_RETURN(last_committed_, ReadLastMarker());
  }
  return last_committed_;
}

absl::StatusOr<int64_t> KafkaSink::ReadLastMarker() {
  const std::string where = absl::StrCat(Where(), ": reading commit topic ", options_.commit_topic);
  ASSIGN_OR_RETURN(KafkaConfPtr conf,
                   NewKafkaConf({{"bootstrap.servers", options_.bootstrap},
                                 {"client.id", "caravela-sink-commits"},
                                 // assign() only; nothing joins or commits.
                                 {"group.id", options_.transactional_id + "-commits-reader"},
                                 {"enable.auto.commit", "false"},
                                 {"isolation.level", "read_committed"},
                                 {"enable.partition.eof", "true"}}));
  for (const auto& [name, value] : options_.properties) {
    RETURN_IF_ERROR(SetKafkaConf(conf.get(), name, value));
  }
  ASSIGN_OR_RETURN(rd_kafka_t * c,
                   NewKafkaClient(KafkaClientType::kConsumer, std::move(conf), where));
  struct Closer {
    rd_kafka_t* c;
    ~Closer() {
      rd_kafka_consumer_close(c);
      rd_kafka_destroy(c);
    }
  } closer{c};
  rd_kafka_topic_partition_list_t* parts = rd_kafka_topic_partition_list_new(1);
  rd_kafka_topic_partition_list_add(parts, options_.commit_topic.c_str(), 0)->offset =
      RD_KAFKA_OFFSET_BEGINNING;
  rd_kafka_resp_err_t aerr = rd_kafka_assign(c, parts);
  rd_kafka_topic_partition_list_destroy(parts);
  if (aerr != RD_KAFKA_RESP_ERR_NO_ERROR) {
    return absl::InternalError(absl::StrCat(where, ": assign: ", rd_kafka_err2str(aerr)));
  }
  // Read to the end of what is committed (read_committed stops at the last
  // stable offset); the last marker with our key wins.
  int64_t last = 0;
  int64_t markers = 0;
  const auto deadline = Clock::now() + std::chrono::milliseconds(options_.open_timeout_ms);
  while (true) {
    if (RemainingMs(deadline) <= 0) {
      return absl::DeadlineExceededError(
          absl::StrCat(where, ": end not reached after ", options_.open_timeout_ms, " ms"));
    }
    rd_kafka_message_t* m = rd_kafka_consumer_poll(c, std::min(RemainingMs(deadline), 100));
    if (m == nullptr) continue;
    std::unique_ptr<rd_kafka_message_t, void (*)(rd_kafka_message_t*)> msg(
        m, rd_kafka_message_destroy);
    if (m->err == RD_KAFKA_RESP_ERR__PARTITION_EOF) break;
    if (m->err != RD_KAFKA_RESP_ERR_NO_ERROR) {
      if (m->err == RD_KAFKA_RESP_ERR__TRANSPORT || m->err == RD_KAFKA_RESP_ERR__ALL_BROKERS_DOWN) {
        continue;  // transient; librdkafka reconnects
      }
      return absl::UnavailableError(absl::StrCat(where, ": ", rd_kafka_message_errstr(m)));
    }
    std::string_view key(static_cast<const char*>(m->key), m->key == nullptr ? 0 : m->key_len);
    if (key != options_.transactional_id) continue;
    std::string_view value(static_cast<const char*>(m->payload),
                           m->payload == nullptr ? 0 : m->len);
    int64_t id = 0;
    if (!absl::SimpleAtoi(absl::string_view(value.data(), value.size()), &id) || id < 0) {
      return absl::DataLossError(absl::StrCat(where, ": bad marker at offset ", m->offset, ": \"",
                                              std::string(value), "\""));
    }
    last = id;
    ++markers;
  }
  KafkaLogger()->info("{}: last committed checkpoint {} ({} markers read)", Where(), last, markers);
  return last;
}

absl::Status KafkaSink::Close() {
  if (rk_ == nullptr) return absl::OkStatus();
  absl::Status status;
  if (options_.exactly_once) {
    // Output after the last Commit belongs to no checkpoint: abort it.
    if (failure_.ok() && txn_ != TxnState::kNone) {
      ErrorPtr error(rd_kafka_abort_transaction(rk_, options_.flush_timeout_ms));
      if (error != nullptr) {
        status = absl::UnavailableError(
            absl::StrCat(Where(), ": abort at Close: ", rd_kafka_error_string(error.get())));
      }
    }
    status.Update(failure_);
    pending_.clear();
    pending_index_.clear();
    txn_ = TxnState::kNone;
  } else {
    status = Flush();
  }
  rd_kafka_topic_destroy(rkt_);
  rkt_ = nullptr;
  if (commit_rkt_ != nullptr) rd_kafka_topic_destroy(commit_rkt_);
  commit_rkt_ = nullptr;
  rd_kafka_destroy(rk_);
  rk_ = nullptr;
  return status;
}

}  // namespace caravela
