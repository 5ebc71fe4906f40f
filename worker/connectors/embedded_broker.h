// An in-process Kafka-protocol broker for demos, tests and `caravela run`
// without a bootstrap: librdkafka's mock cluster (one broker, loopback only,
// in memory). Not a production broker; see README.md "Kafka" for its limits.
#pragma once

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/status.h"

typedef struct rd_kafka_s rd_kafka_t;
typedef struct rd_kafka_mock_cluster_s rd_kafka_mock_cluster_t;

namespace caravela {

class LoopbackForwarder;

// Lifecycle: Start() runs the broker on librdkafka's background threads; the
// destructor stops it (clients still connected see the connection drop). The
// destructor may block up to 1 s (a librdkafka 2.0.2 shutdown race).
// Thread-safe: CreateTopic() may be called from any thread.
class EmbeddedBroker {
 public:
  // Partitions librdkafka 2.0.2's mock cluster gives to a topic auto-created
  // by a client request (Metadata/Produce); the mock has no setting for it.
  static constexpr int kAutoCreatePartitions = 4;

  // Starts the broker. `port` 0 picks any free loopback port. A non-zero
  // `port` is served by a loopback TCP forwarder to the mock broker (which
  // can only bind an ephemeral port): clients bootstrap on `port`, then
  // follow the broker address advertised in Metadata (127.0.0.1:<ephemeral>),
  // which works for every client on this host. `default_partitions` is the
  // partition count of CreateTopic(topic) without a count.
  // Errors: InvalidArgument (bad arguments), Unavailable (port taken, mock
  // cluster failed to start).
  static absl::StatusOr<std::unique_ptr<EmbeddedBroker>> Start(int port, int default_partitions);
  ~EmbeddedBroker();
  EmbeddedBroker(const EmbeddedBroker&) = delete;
  EmbeddedBroker& operator=(const EmbeddedBroker&) = delete;

  // "127.0.0.1:PORT": the address clients bootstrap from.
  const std::string& bootstrap() const { return bootstrap_; }
  // The mock broker's own (advertised) address; equals bootstrap() when
  // Start() was given port 0.
  const std::string& advertised() const { return advertised_; }
  int default_partitions() const { return default_partitions_; }

  // How busy the mock cluster's thread was over the last watch interval
  // (CPU seconds per second, 0..1; -1 before the first). librdkafka 2.0.2's
  // mock scans a partition's log from its start on every fetch and produce,
  // so a sustained stream makes it slower as the log grows (up to its
  // ~5 MiB per partition): at 5,000 records/s it falls behind after about
  // 20 s and everything it serves waits (docs/benchmarks.md "The embedded
  // broker's ceiling"). A watch samples it every 5 s and logs a warning
  // (at most once a minute) when it is busy more than 60 % of the time.
  double busy_fraction() const { return busy_.load(); }

  // Creates `topic` with `partitions` partitions (replication factor 1).
  // AlreadyExists if the topic exists (also if a client auto-created it).
  absl::Status CreateTopic(const std::string& topic, int partitions);
  absl::Status CreateTopic(const std::string& topic) {
    return CreateTopic(topic, default_partitions_);
  }

 private:
  EmbeddedBroker() = default;

  rd_kafka_t* rk_ = nullptr;  // dummy handle that owns the mock cluster
  rd_kafka_mock_cluster_t* cluster_ = nullptr;
  int mock_port_ = 0;
  std::unique_ptr<LoopbackForwarder> forwarder_;
  std::string bootstrap_;
  std::string advertised_;
  int default_partitions_ = kAutoCreatePartitions;
  std::atomic<double> busy_{-1};
  std::mutex watch_mu_;
  std::condition_variable watch_cv_;
  bool stopping_ = false;
  std::thread watch_;
  void Watch();
};

// CPU seconds (user + system) of this process's threads named "rdk:mock"
// (librdkafka's mock clusters), from /proc/self/task; -1 if there is none.
double MockThreadCpuSeconds();

// Creates `topic` on the EmbeddedBroker running in this process that serves
// `bootstrap` (its bootstrap() or advertised() address is one of the
// comma-separated addresses), as CreateTopic() does. NotFound if no broker of
// this process serves that address. The mock cluster serves no CreateTopics
// request, so this is how EnsureExchangeTopic() (worker/exchange) creates
// topics with a chosen partition count on an in-process broker. Thread-safe;
// a broker being destroyed is waited for or not found.
absl::Status CreateTopicOnEmbeddedBroker(const std::string& bootstrap, const std::string& topic,
                                         int partitions);

// `caravela broker`: starts an EmbeddedBroker on `port` (0 = any), creates
// `topics` with `partitions` partitions each (a topic given as NAME:N gets N
// partitions instead), prints
//   caravela broker listening on 127.0.0.1:PORT (N partitions per new topic)
// to stdout, flushes, and blocks until SIGINT or SIGTERM, then stops.
// The mock cluster auto-creates every other topic with kAutoCreatePartitions,
// so `partitions` other than that needs `topics` (InvalidArgument otherwise,
// rather than a silent mismatch) and the line then ends
//   (N partitions for topics a,b; 4 for auto-created topics)
// Blocks SIGINT/SIGTERM in the calling thread (restored on return); call it
// before starting other threads, or have them block those signals too.
absl::Status RunBrokerCommand(int port, int partitions,
                              const std::vector<std::string>& topics = {});

}  // namespace caravela
