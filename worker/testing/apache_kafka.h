// A real, throwaway Apache Kafka cluster for tests (KRaft, no mocks).
//
// ApacheKafka::Start(n) (n = 1 or 3) has `scripts/kafka prepare` write the
// configuration into a new temp directory /tmp/caravela-kafka-XXXXXX and
// format the storage (the one source of the broker settings: free loopback
// ports, internal topics replicated 1/1 on one broker and 3/min ISR 2 on
// three, transactions on, topics auto-created by producers, a broker fenced
// 6 s after its last heartbeat; deploy/kafka/README.md), then runs each
// broker (`java ... kafka.Kafka server.properties`, the jars that
// scripts/install-deps caches from Maven Central) as a child process of the
// test, and returns once every broker serves metadata. One broker is a
// combined broker + controller; three are three combined nodes forming a
// 3-voter controller quorum, so one broker down leaves a quorum.
//
// Brokers are named by index 0..n-1 (node id = index + 1). For fault tests:
// Stop(i) (SIGTERM: a controlled shutdown), Kill(i) (SIGKILL, as a crash),
// Pause(i) / Resume(i) (SIGSTOP / SIGCONT) and StartAgain(i) (same ports and
// data; returns once it serves metadata). The destructor SIGKILLs every
// broker and deletes the directory (kept with CARAVELA_KEEP_TEST_DIRS).
// Brokers die with the thread that started them (PR_SET_PDEATHSIG): start
// and restart them from the test's main thread.
//
// If java or the jars are missing, Start() fails with a message naming
// scripts/install-deps: tests fail, they do not skip.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"

namespace caravela {

class ApacheKafka {
 public:
  // Starts `brokers` (1 or 3) brokers; up to `timeout` for all to serve.
  // `default_partitions`: the partitions of a topic a producer auto-creates
  // (num.partitions; the embedded broker gives such topics 4).
  static absl::StatusOr<std::unique_ptr<ApacheKafka>> Start(
      int brokers = 1, int default_partitions = 1,
      std::chrono::seconds timeout = std::chrono::seconds(90));
  ~ApacheKafka();
  ApacheKafka(const ApacheKafka&) = delete;
  ApacheKafka& operator=(const ApacheKafka&) = delete;

  // "127.0.0.1:P1[,127.0.0.1:P2,...]": every broker, running or not.
  const std::string& bootstrap() const { return bootstrap_; }
  int brokers() const { return static_cast<int>(brokers_.size()); }
  // "127.0.0.1:P" of broker `i`; its node id is i + 1.
  const std::string& address(int i) const { return brokers_.at(i).address; }
  const std::string& dir() const { return dir_; }
  // The broker's log (stdout and stderr of its JVM).
  std::string log(int i) const { return brokers_.at(i).log; }
  // -1 when not running.
  pid_t pid(int i) const { return brokers_.at(i).pid; }
  bool running(int i) const { return brokers_.at(i).pid > 0; }

  // SIGTERM (a paused broker is resumed first so that it sees it): a
  // controlled shutdown that moves its leaderships away; SIGKILL after 15 s.
  // Idempotent.
  void Stop(int i);
  // SIGKILL, as a crash (idempotent). Its leaderships move once the
  // controller fences it (6 s without a heartbeat).
  void Kill(int i);
  // SIGSTOP / SIGCONT. A paused broker is fenced after 6 s as a dead one is.
  absl::Status Pause(int i);
  absl::Status Resume(int i);
  // Starts a stopped or killed broker again on its ports and data; returns
  // once it serves metadata. FailedPrecondition if it is running.
  absl::Status StartAgain(int i, std::chrono::seconds timeout = std::chrono::seconds(60));

  // Creates `topic` through the Admin API (CreateTopics) with `partitions`
  // partitions, `replication_factor` replicas (0: one per broker) and, when
  // `min_insync_replicas` > 0, that min.insync.replicas; `configs` are more
  // topic configs. Returns once every partition has a leader
  // (WaitForLeaders). AlreadyExists if the topic exists.
  absl::Status CreateTopic(const std::string& topic, int partitions, int replication_factor = 0,
                           int min_insync_replicas = 0,
                           const std::map<std::string, std::string>& configs = {});
  // Waits until `topic` has `partitions` partitions (0: any number) and each
  // has a leader that is a broker running and not paused (after Kill(i):
  // until its leaderships moved). DeadlineExceeded names what is missing.
  absl::Status WaitForLeaders(const std::string& topic, int partitions = 0,
                              std::chrono::seconds timeout = std::chrono::seconds(30)) const;
  // The index of the broker leading partition `partition` of `topic` (from
  // the cluster's metadata; it may still name a broker just killed).
  absl::StatusOr<int> Leader(const std::string& topic, int partition) const;

 private:
  struct Broker {
    std::string address;            // 127.0.0.1:PORT
    std::vector<std::string> argv;  // the java command line (scripts/kafka prepare)
    std::string log;
    pid_t pid = -1;
    bool paused = false;
  };

  ApacheKafka() = default;
  absl::Status Spawn(int i);
  // Until broker `i` answers a Metadata request itself, or its process exits.
  absl::Status WaitUntilServing(int i, std::chrono::steady_clock::time_point deadline);
  // The addresses of the brokers running and not paused.
  std::string ServingBootstrap() const;

  std::string dir_;
  std::string bootstrap_;
  std::vector<Broker> brokers_;
};

}  // namespace caravela
