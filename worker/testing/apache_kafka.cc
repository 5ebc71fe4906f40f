#include "worker/testing/apache_kafka.h"

#include <librdkafka/rdkafka.h>
#include <signal.h>
#include <sys/wait.h>

#include <cstdlib>
#include <fstream>
#include <iterator>
#include <set>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "worker/connectors/kafka_source.h"
#include "worker/testing/local_server.h"

namespace caravela {
namespace {

constexpr int kRequestTimeoutMs = 10000;

struct HandleDeleter {
  void operator()(rd_kafka_t* rk) const { rd_kafka_destroy(rk); }
};
using HandlePtr = std::unique_ptr<rd_kafka_t, HandleDeleter>;
struct MetadataDeleter {
  void operator()(const rd_kafka_metadata_t* md) const { rd_kafka_metadata_destroy(md); }
};
using MetadataPtr = std::unique_ptr<const rd_kafka_metadata_t, MetadataDeleter>;
struct QueueDeleter {
  void operator()(rd_kafka_queue_t* q) const { rd_kafka_queue_destroy(q); }
};
struct EventDeleter {
  void operator()(rd_kafka_event_t* e) const { rd_kafka_event_destroy(e); }
};
struct NewTopicDeleter {
  void operator()(rd_kafka_NewTopic_t* t) const { rd_kafka_NewTopic_destroy(t); }
};
struct AdminOptionsDeleter {
  void operator()(rd_kafka_AdminOptions_t* o) const { rd_kafka_AdminOptions_destroy(o); }
};

std::string ReadText(const std::string& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// The end of a log: where a failing script or JVM says why.
std::string Tail(const std::string& text, size_t n = 3000) {
  return text.size() <= n ? text : "..." + text.substr(text.size() - n);
}

// A client for Metadata and Admin requests. Quiet: probing a broker that is
// not up yet must not fill the test's log with connection errors.
absl::StatusOr<HandlePtr> NewClient(const std::string& bootstrap) {
  ASSIGN_OR_RETURN(KafkaConfPtr conf, NewKafkaConf({{"bootstrap.servers", bootstrap},
                                                    {"client.id", "caravela-test-apache-kafka"},
                                                    {"log_level", "0"},
                                                    {"reconnect.backoff.ms", "50"},
                                                    {"reconnect.backoff.max.ms", "500"}}));
  ASSIGN_OR_RETURN(rd_kafka_t * rk, NewKafkaClient(KafkaClientType::kProducer, std::move(conf),
                                                   "Apache Kafka test client"));
  return HandlePtr(rk);
}

// Metadata of every topic (an all-topics request never auto-creates one).
absl::StatusOr<MetadataPtr> AllTopics(rd_kafka_t* rk, int timeout_ms) {
  const rd_kafka_metadata_t* md = nullptr;
  const rd_kafka_resp_err_t err = rd_kafka_metadata(rk, /*all_topics=*/1, nullptr, &md, timeout_ms);
  if (err != RD_KAFKA_RESP_ERR_NO_ERROR) {
    return absl::UnavailableError(absl::StrCat("metadata: ", rd_kafka_err2str(err)));
  }
  return MetadataPtr(md);
}

const rd_kafka_metadata_topic_t* FindTopic(const rd_kafka_metadata_t* md,
                                           const std::string& topic) {
  for (int t = 0; t < md->topic_cnt; ++t) {
    if (topic == md->topics[t].topic) return &md->topics[t];
  }
  return nullptr;
}

}  // namespace

absl::StatusOr<std::unique_ptr<ApacheKafka>> ApacheKafka::Start(int brokers, int default_partitions,
                                                                std::chrono::seconds timeout) {
  if (brokers != 1 && brokers != 3) {
    return absl::InvalidArgumentError(absl::StrCat("ApacheKafka: 1 or 3 brokers, not ", brokers));
  }
  if (default_partitions < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("ApacheKafka: default_partitions must be positive, not ", default_partitions));
  }
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::unique_ptr<ApacheKafka> k(new ApacheKafka());
  ASSIGN_OR_RETURN(k->dir_, MakeServerDir("kafka"));
  // scripts/kafka writes the configuration, picks the ports and formats the
  // storage; it fails naming scripts/install-deps when the jars are missing.
  const std::string script = std::string(CARAVELA_SOURCE_DIR) + "/scripts/kafka";
  const std::string prepare_log = k->dir_ + "/prepare.log";
  const std::string cmd =
      absl::StrCat("'", script, "' prepare --brokers ", brokers, " --partitions ",
                   default_partitions, " --dir '", k->dir_, "' > '", prepare_log, "' 2>&1");
  const int rc = std::system(cmd.c_str());
  if (rc != 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "Apache Kafka: scripts/kafka prepare failed (exit ", WIFEXITED(rc) ? WEXITSTATUS(rc) : -1,
        "; run scripts/install-deps if the jars or java are missing): ",
        Tail(ReadText(prepare_log))));
  }
  k->bootstrap_ = std::string(absl::StripAsciiWhitespace(ReadText(k->dir_ + "/bootstrap")));
  const std::vector<std::string> addresses = absl::StrSplit(k->bootstrap_, ',');
  if (static_cast<int>(addresses.size()) != brokers) {
    return absl::InternalError(absl::StrCat("Apache Kafka: scripts/kafka prepare wrote bootstrap '",
                                            k->bootstrap_, "' for ", brokers, " broker(s)"));
  }
  for (int i = 0; i < brokers; ++i) {
    Broker b;
    b.address = addresses[i];
    const std::string bdir = absl::StrCat(k->dir_, "/broker-", i + 1);
    b.log = bdir + "/kafka.log";
    std::ifstream in(bdir + "/command");
    for (std::string line; std::getline(in, line);) {
      if (!line.empty()) b.argv.push_back(line);
    }
    if (b.argv.empty()) {
      return absl::InternalError(absl::StrCat("Apache Kafka: no command in ", bdir, "/command"));
    }
    k->brokers_.push_back(std::move(b));
  }
  for (int i = 0; i < brokers; ++i) RETURN_IF_ERROR(k->Spawn(i));
  for (int i = 0; i < brokers; ++i) RETURN_IF_ERROR(k->WaitUntilServing(i, deadline));
  // Every broker serves; wait until the metadata a client gets lists them all.
  ASSIGN_OR_RETURN(HandlePtr rk, NewClient(k->bootstrap_));
  while (true) {
    absl::StatusOr<MetadataPtr> md = AllTopics(rk.get(), 2000);
    if (md.ok() && (*md)->broker_cnt == brokers) break;
    if (std::chrono::steady_clock::now() > deadline) {
      return absl::DeadlineExceededError(absl::StrCat(
          "Apache Kafka in ", k->dir_, ": metadata does not list all ", brokers, " brokers after ",
          timeout.count(),
          " s: ", md.ok() ? absl::StrCat((*md)->broker_cnt, " listed") : md.status().ToString()));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return k;
}

ApacheKafka::~ApacheKafka() {
  for (int i = 0; i < brokers(); ++i) Kill(i);
  RemoveServerDir(dir_);
}

absl::Status ApacheKafka::Spawn(int i) {
  Broker& b = brokers_.at(i);
  ASSIGN_OR_RETURN(b.pid, SpawnServer(b.argv, b.log));
  b.paused = false;
  return absl::OkStatus();
}

absl::Status ApacheKafka::WaitUntilServing(int i, std::chrono::steady_clock::time_point deadline) {
  Broker& b = brokers_.at(i);
  const std::string what = absl::StrCat("Apache Kafka broker ", i, " (", b.address, ")");
  std::string last = "no answer yet";
  while (true) {
    // A client that knows only this broker: the answer comes from it. It
    // opens its listener once the controller has unfenced it.
    ASSIGN_OR_RETURN(HandlePtr rk, NewClient(b.address));
    const rd_kafka_metadata_t* md = nullptr;
    const rd_kafka_resp_err_t err = rd_kafka_metadata(rk.get(), 0, nullptr, &md, 1000);
    if (err == RD_KAFKA_RESP_ERR_NO_ERROR) {
      const bool self = md->orig_broker_id == i + 1;
      last = absl::StrCat("answered as broker ", md->orig_broker_id);
      rd_kafka_metadata_destroy(md);
      if (self) return absl::OkStatus();
    } else {
      last = rd_kafka_err2str(err);
    }
    int status = 0;
    if (b.pid > 0 && waitpid(b.pid, &status, WNOHANG) == b.pid) {
      b.pid = -1;
      return absl::InternalError(
          absl::StrCat(what, " exited at start (files in ", dir_, "): ", Tail(ReadText(b.log))));
    }
    if (std::chrono::steady_clock::now() > deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat(what, " does not serve metadata (files in ", dir_, "): ", last));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
}

void ApacheKafka::Stop(int i) {
  Broker& b = brokers_.at(i);
  if (b.pid <= 0) return;
  if (b.paused) kill(b.pid, SIGCONT);
  b.paused = false;
  StopServer(&b.pid, std::chrono::seconds(15));
}

void ApacheKafka::Kill(int i) {
  Broker& b = brokers_.at(i);
  StopServer(&b.pid, std::chrono::milliseconds(0));
  b.paused = false;
}

absl::Status ApacheKafka::Pause(int i) {
  Broker& b = brokers_.at(i);
  if (b.pid <= 0)
    return absl::FailedPreconditionError(absl::StrCat("broker ", i, " is not running"));
  if (kill(b.pid, SIGSTOP) != 0) return absl::InternalError(absl::StrCat("SIGSTOP broker ", i));
  b.paused = true;
  return absl::OkStatus();
}

absl::Status ApacheKafka::Resume(int i) {
  Broker& b = brokers_.at(i);
  if (b.pid <= 0)
    return absl::FailedPreconditionError(absl::StrCat("broker ", i, " is not running"));
  if (kill(b.pid, SIGCONT) != 0) return absl::InternalError(absl::StrCat("SIGCONT broker ", i));
  b.paused = false;
  return absl::OkStatus();
}

absl::Status ApacheKafka::StartAgain(int i, std::chrono::seconds timeout) {
  if (running(i)) return absl::FailedPreconditionError(absl::StrCat("broker ", i, " is running"));
  RETURN_IF_ERROR(Spawn(i));
  return WaitUntilServing(i, std::chrono::steady_clock::now() + timeout);
}

std::string ApacheKafka::ServingBootstrap() const {
  std::vector<std::string> addresses;
  for (const Broker& b : brokers_) {
    if (b.pid > 0 && !b.paused) addresses.push_back(b.address);
  }
  return addresses.empty() ? bootstrap_ : absl::StrJoin(addresses, ",");
}

absl::Status ApacheKafka::CreateTopic(const std::string& topic, int partitions,
                                      int replication_factor, int min_insync_replicas,
                                      const std::map<std::string, std::string>& configs) {
  const std::string what = absl::StrCat("create topic ", topic);
  ASSIGN_OR_RETURN(HandlePtr rk, NewClient(ServingBootstrap()));
  char err[512];
  std::unique_ptr<rd_kafka_NewTopic_t, NewTopicDeleter> new_topic(rd_kafka_NewTopic_new(
      topic.c_str(), partitions, replication_factor > 0 ? replication_factor : brokers(), err,
      sizeof(err)));
  if (new_topic == nullptr) return absl::InvalidArgumentError(absl::StrCat(what, ": ", err));
  std::map<std::string, std::string> all = configs;
  if (min_insync_replicas > 0) all["min.insync.replicas"] = std::to_string(min_insync_replicas);
  for (const auto& [name, value] : all) {
    if (rd_kafka_NewTopic_set_config(new_topic.get(), name.c_str(), value.c_str()) !=
        RD_KAFKA_RESP_ERR_NO_ERROR) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": config ", name, "=", value));
    }
  }
  std::unique_ptr<rd_kafka_AdminOptions_t, AdminOptionsDeleter> options(
      rd_kafka_AdminOptions_new(rk.get(), RD_KAFKA_ADMIN_OP_CREATETOPICS));
  (void)rd_kafka_AdminOptions_set_request_timeout(options.get(), kRequestTimeoutMs, err,
                                                  sizeof(err));
  (void)rd_kafka_AdminOptions_set_operation_timeout(options.get(), kRequestTimeoutMs, err,
                                                    sizeof(err));
  std::unique_ptr<rd_kafka_queue_t, QueueDeleter> queue(rd_kafka_queue_new(rk.get()));
  rd_kafka_NewTopic_t* topics[] = {new_topic.get()};
  rd_kafka_CreateTopics(rk.get(), topics, 1, options.get(), queue.get());
  std::unique_ptr<rd_kafka_event_t, EventDeleter> event(
      rd_kafka_queue_poll(queue.get(), 2 * kRequestTimeoutMs + 1000));
  if (event == nullptr) return absl::DeadlineExceededError(absl::StrCat(what, ": no answer"));
  if (rd_kafka_event_error(event.get()) != RD_KAFKA_RESP_ERR_NO_ERROR) {
    return absl::UnavailableError(
        absl::StrCat(what, ": ", rd_kafka_event_error_string(event.get())));
  }
  size_t count = 0;
  const rd_kafka_CreateTopics_result_t* result = rd_kafka_event_CreateTopics_result(event.get());
  const rd_kafka_topic_result_t** results =
      result == nullptr ? nullptr : rd_kafka_CreateTopics_result_topics(result, &count);
  if (count != 1) {
    return absl::InternalError(absl::StrCat(what, ": ", count, " results"));
  }
  const rd_kafka_resp_err_t code = rd_kafka_topic_result_error(results[0]);
  if (code != RD_KAFKA_RESP_ERR_NO_ERROR) {
    const char* message = rd_kafka_topic_result_error_string(results[0]);
    const std::string text =
        absl::StrCat(what, ": ", message != nullptr ? message : rd_kafka_err2str(code));
    if (code == RD_KAFKA_RESP_ERR_TOPIC_ALREADY_EXISTS) return absl::AlreadyExistsError(text);
    return absl::InvalidArgumentError(text);
  }
  return WaitForLeaders(topic, partitions);
}

absl::Status ApacheKafka::WaitForLeaders(const std::string& topic, int partitions,
                                         std::chrono::seconds timeout) const {
  std::set<int> serving;  // node ids
  for (int i = 0; i < brokers(); ++i) {
    if (brokers_[i].pid > 0 && !brokers_[i].paused) serving.insert(i + 1);
  }
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  ASSIGN_OR_RETURN(HandlePtr rk, NewClient(ServingBootstrap()));
  std::string missing;
  while (true) {
    absl::StatusOr<MetadataPtr> md = AllTopics(rk.get(), 2000);
    if (!md.ok()) {
      missing = md.status().ToString();
    } else if (const rd_kafka_metadata_topic_t* t = FindTopic(md->get(), topic); t == nullptr) {
      missing = "the topic is not in the metadata";
    } else if (t->err != RD_KAFKA_RESP_ERR_NO_ERROR) {
      missing = rd_kafka_err2str(t->err);
    } else if (t->partition_cnt == 0 || (partitions > 0 && t->partition_cnt != partitions)) {
      missing = absl::StrCat(t->partition_cnt, " partitions");
    } else {
      missing.clear();
      for (int p = 0; p < t->partition_cnt; ++p) {
        const rd_kafka_metadata_partition_t& part = t->partitions[p];
        if (part.err != RD_KAFKA_RESP_ERR_NO_ERROR || !serving.contains(part.leader)) {
          absl::StrAppend(&missing, missing.empty() ? "" : ", ", "partition ", part.id, " leader ",
                          part.leader, " (", rd_kafka_err2str(part.err), ")");
        }
      }
      if (missing.empty()) return absl::OkStatus();
    }
    if (std::chrono::steady_clock::now() > deadline) {
      return absl::DeadlineExceededError(absl::StrCat("topic ", topic, " has no leaders on ",
                                                      "running brokers after ", timeout.count(),
                                                      " s: ", missing));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

absl::StatusOr<int> ApacheKafka::Leader(const std::string& topic, int partition) const {
  ASSIGN_OR_RETURN(HandlePtr rk, NewClient(ServingBootstrap()));
  ASSIGN_OR_RETURN(MetadataPtr md, AllTopics(rk.get(), kRequestTimeoutMs));
  const rd_kafka_metadata_topic_t* t = FindTopic(md.get(), topic);
  if (t == nullptr) return absl::NotFoundError(absl::StrCat("topic ", topic, " not found"));
  for (int p = 0; p < t->partition_cnt; ++p) {
    if (t->partitions[p].id == partition) {
      if (t->partitions[p].leader < 1) {
        return absl::UnavailableError(
            absl::StrCat("partition ", partition, " of ", topic, " has no leader"));
      }
      return t->partitions[p].leader - 1;
    }
  }
  return absl::NotFoundError(absl::StrCat("topic ", topic, " has no partition ", partition));
}

}  // namespace caravela
