#include "worker/connectors/embedded_broker.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "spdlog/spdlog.h"
#include "worker/connectors/kafka_source.h"

namespace caravela {

// Accepts TCP connections on 127.0.0.1:listen_port and relays bytes both ways
// to 127.0.0.1:target_port, on one poll() thread with bounded buffers.
// Lifecycle: Start() spawns the thread; the destructor stops it and closes
// every connection. Not otherwise accessed across threads.
class LoopbackForwarder {
 public:
  static absl::StatusOr<std::unique_ptr<LoopbackForwarder>> Start(int listen_port, int target_port);
  ~LoopbackForwarder();

 private:
  struct Conn {
    int client = -1;
    int upstream = -1;
    std::string to_upstream;  // read from client, not yet sent upstream
    std::string to_client;
    bool client_eof = false;
    bool upstream_eof = false;
    bool dead = false;
  };
  static constexpr size_t kMaxBuffered = 1 << 20;

  LoopbackForwarder() = default;
  void Run();
  void Accept();
  // Moves bytes for one side of `c` (the side whose poll result is `revents`).
  static void Serve(Conn& c, bool client_side, short revents);

  int listen_fd_ = -1;
  int wake_[2] = {-1, -1};
  int target_port_ = 0;
  std::vector<std::unique_ptr<Conn>> conns_;
  std::thread thread_;
};

namespace {

sockaddr_in Loopback(int port) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  return addr;
}

void SetNonBlocking(int fd) { fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK); }

// Runs `op`, a blocking request served by the mock cluster's thread, while
// connecting to the mock broker's listener every 5 ms: librdkafka 2.0.2's
// mock thread sometimes misses the wake-up for a request and sleeps out a
// 1 s poll; activity on its listening socket ends that poll.
template <typename Op>
auto WithMockWakeups(int mock_port, Op op) -> decltype(op()) {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  std::thread waker([&] {
    std::unique_lock<std::mutex> lock(mu);
    while (!cv.wait_for(lock, std::chrono::milliseconds(5), [&] { return done; })) {
      int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
      if (fd < 0) continue;
      sockaddr_in addr = Loopback(mock_port);
      (void)!connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
      close(fd);
    }
  });
  auto result = op();
  {
    std::lock_guard<std::mutex> lock(mu);
    done = true;
  }
  cv.notify_one();
  waker.join();
  return result;
}

// The brokers running in this process, for CreateTopicOnEmbeddedBroker().
std::mutex& RegistryMutex() {
  static std::mutex mu;
  return mu;
}
std::vector<EmbeddedBroker*>& Registry() {
  static std::vector<EmbeddedBroker*> brokers;
  return brokers;
}

}  // namespace

absl::StatusOr<std::unique_ptr<LoopbackForwarder>> LoopbackForwarder::Start(int listen_port,
                                                                            int target_port) {
  std::unique_ptr<LoopbackForwarder> fwd(new LoopbackForwarder());
  fwd->target_port_ = target_port;
  fwd->listen_fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fwd->listen_fd_ < 0) return absl::UnavailableError(absl::StrCat("socket: ", strerror(errno)));
  int on = 1;
  setsockopt(fwd->listen_fd_, SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on));
  sockaddr_in addr = Loopback(listen_port);
  if (bind(fwd->listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      listen(fwd->listen_fd_, 64) != 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on 127.0.0.1:", listen_port, ": ", strerror(errno)));
  }
  if (pipe2(fwd->wake_, O_CLOEXEC | O_NONBLOCK) != 0) {
    return absl::UnavailableError(absl::StrCat("pipe: ", strerror(errno)));
  }
  fwd->thread_ = std::thread([f = fwd.get()] { f->Run(); });
  return fwd;
}

LoopbackForwarder::~LoopbackForwarder() {
  if (thread_.joinable()) {
    char byte = 1;
    (void)!write(wake_[1], &byte, 1);
    thread_.join();
  }
  for (auto& c : conns_) {
    close(c->client);
    close(c->upstream);
  }
  if (listen_fd_ >= 0) close(listen_fd_);
  if (wake_[0] >= 0) close(wake_[0]);
  if (wake_[1] >= 0) close(wake_[1]);
}

void LoopbackForwarder::Accept() {
  while (true) {
    int client = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (client < 0) return;  // EAGAIN, or a transient accept error
    int upstream = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr = Loopback(target_port_);
    if (upstream < 0 || connect(upstream, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
      KafkaLogger()->warn("broker forwarder: connect to 127.0.0.1:{}: {}", target_port_,
                          strerror(errno));
      if (upstream >= 0) close(upstream);
      close(client);
      continue;
    }
    SetNonBlocking(upstream);
    auto c = std::make_unique<Conn>();
    c->client = client;
    c->upstream = upstream;
    conns_.push_back(std::move(c));
  }
}

void LoopbackForwarder::Serve(Conn& c, bool client_side, short revents) {
  const int fd = client_side ? c.client : c.upstream;
  std::string& inbound = client_side ? c.to_upstream : c.to_client;
  std::string& outbound = client_side ? c.to_client : c.to_upstream;
  bool& eof = client_side ? c.client_eof : c.upstream_eof;

  if ((revents & (POLLIN | POLLHUP | POLLERR)) && !eof) {
    if (inbound.size() < kMaxBuffered) {
      char buf[64 * 1024];
      ssize_t n = recv(fd, buf, sizeof(buf), 0);
      if (n > 0) {
        inbound.append(buf, static_cast<size_t>(n));
      } else if (n == 0) {
        eof = true;
      } else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
        c.dead = true;
      }
    } else if (revents & (POLLHUP | POLLERR)) {
      c.dead = true;  // cannot drain: the peer is gone and our buffer is full
    }
  }
  if ((revents & POLLOUT) && !outbound.empty()) {
    ssize_t n = send(fd, outbound.data(), outbound.size(), MSG_NOSIGNAL);
    if (n > 0) {
      outbound.erase(0, static_cast<size_t>(n));
    } else if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
      c.dead = true;
    }
  }
  if ((revents & (POLLHUP | POLLERR)) && eof) c.dead = true;
}

void LoopbackForwarder::Run() {
  std::vector<pollfd> fds;
  while (true) {
    fds.clear();
    fds.push_back({wake_[0], POLLIN, 0});
    fds.push_back({listen_fd_, POLLIN, 0});
    for (auto& c : conns_) {
      short ce = 0;
      short ue = 0;
      if (!c->client_eof && c->to_upstream.size() < kMaxBuffered) ce |= POLLIN;
      if (!c->to_client.empty()) ce |= POLLOUT;
      if (!c->upstream_eof && c->to_client.size() < kMaxBuffered) ue |= POLLIN;
      if (!c->to_upstream.empty()) ue |= POLLOUT;
      fds.push_back({c->client, ce, 0});
      fds.push_back({c->upstream, ue, 0});
    }
    if (poll(fds.data(), fds.size(), -1) < 0) {
      if (errno == EINTR) continue;
      KafkaLogger()->error("broker forwarder: poll: {}", strerror(errno));
      return;
    }
    if (fds[0].revents != 0) return;  // stop requested
    const size_t existing = conns_.size();
    for (size_t i = 0; i < existing; ++i) {
      Conn& c = *conns_[i];
      if (fds[2 + 2 * i].revents != 0) Serve(c, /*client_side=*/true, fds[2 + 2 * i].revents);
      if (fds[3 + 2 * i].revents != 0) Serve(c, /*client_side=*/false, fds[3 + 2 * i].revents);
      // Kafka needs no half-close: once one side ended and what it sent was
      // passed on, the connection is over.
      if (c.dead || (c.client_eof && c.to_upstream.empty()) ||
          (c.upstream_eof && c.to_client.empty())) {
        close(c.client);
        close(c.upstream);
        c.client = c.upstream = -1;
      }
    }
    std::erase_if(conns_, [](const std::unique_ptr<Conn>& c) { return c->client < 0; });
    if (fds[1].revents & POLLIN) Accept();
  }
}

absl::StatusOr<std::unique_ptr<EmbeddedBroker>> EmbeddedBroker::Start(int port,
                                                                      int default_partitions) {
  if (port < 0 || port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("broker port must be 0..65535, got ", port));
  }
  if (default_partitions < 1 || default_partitions > 10000) {
    return absl::InvalidArgumentError(
        absl::StrCat("broker partitions must be 1..10000, got ", default_partitions));
  }
  std::unique_ptr<EmbeddedBroker> broker(new EmbeddedBroker());
  broker->default_partitions_ = default_partitions;
  // The handle only hosts the mock cluster; it never connects anywhere. Its
  // notice about the missing bootstrap.servers is noise (log_level 4).
  ASSIGN_OR_RETURN(KafkaConfPtr conf,
                   NewKafkaConf({{"client.id", "caravela-broker"}, {"log_level", "4"}}));
  char err[512];
  broker->rk_ = rd_kafka_new(RD_KAFKA_PRODUCER, conf.get(), err, sizeof(err));
  if (broker->rk_ == nullptr) {
    return absl::UnavailableError(absl::StrCat("embedded broker: ", err));
  }
  (void)conf.release();  // owned by rk_ now
  broker->cluster_ = rd_kafka_mock_cluster_new(broker->rk_, 1);
  if (broker->cluster_ == nullptr) {
    return absl::UnavailableError("embedded broker: librdkafka mock cluster failed to start");
  }
  broker->advertised_ = rd_kafka_mock_cluster_bootstraps(broker->cluster_);
  broker->bootstrap_ = broker->advertised_;
  const size_t colon = broker->advertised_.rfind(':');
  if (colon == std::string::npos ||
      !absl::SimpleAtoi(broker->advertised_.substr(colon + 1), &broker->mock_port_)) {
    return absl::InternalError(
        absl::StrCat("embedded broker: unexpected mock address ", broker->advertised_));
  }
  if (port != 0) {
    ASSIGN_OR_RETURN(broker->forwarder_, LoopbackForwarder::Start(port, broker->mock_port_));
    broker->bootstrap_ = absl::StrCat("127.0.0.1:", port);
  }
  KafkaLogger()->info("embedded broker: bootstrap {} (broker advertises {})", broker->bootstrap_,
                      broker->advertised_);
  broker->watch_ = std::thread([b = broker.get()] { b->Watch(); });
  {
    std::lock_guard<std::mutex> lock(RegistryMutex());
    Registry().push_back(broker.get());
  }
  return broker;
}

double MockThreadCpuSeconds() {
  double seconds = -1;
  std::error_code ec;
  for (const auto& task : std::filesystem::directory_iterator("/proc/self/task", ec)) {
    std::ifstream comm(task.path() / "comm");
    std::string name;
    if (!std::getline(comm, name) || name != "rdk:mock") continue;
    seconds = std::max(seconds, 0.0);
    std::ifstream stat(task.path() / "stat");
    std::string line;
    if (!std::getline(stat, line)) continue;
    // Fields after the command (which ends with the last ')'): state is 3,
    // utime 14 and stime 15.
    const size_t close = line.rfind(')');
    if (close == std::string::npos) continue;
    std::vector<std::string> f = absl::StrSplit(line.substr(close + 2), ' ');
    int64_t utime = 0, stime = 0;
    if (f.size() > 12 && absl::SimpleAtoi(f[11], &utime) && absl::SimpleAtoi(f[12], &stime)) {
      seconds += static_cast<double>(utime + stime) / static_cast<double>(sysconf(_SC_CLK_TCK));
    }
  }
  return seconds;
}

void EmbeddedBroker::Watch() {
  constexpr auto kInterval = std::chrono::seconds(5);
  auto t0 = std::chrono::steady_clock::now();
  auto last_warning = t0 - std::chrono::minutes(2);
  double cpu0 = std::max(MockThreadCpuSeconds(), 0.0);
  std::unique_lock<std::mutex> lock(watch_mu_);
  while (!watch_cv_.wait_for(lock, kInterval, [this] { return stopping_; })) {
    const auto t1 = std::chrono::steady_clock::now();
    const double cpu1 = std::max(MockThreadCpuSeconds(), 0.0);
    const double busy = (cpu1 - cpu0) / std::chrono::duration<double>(t1 - t0).count();
    busy_ = busy;
    KafkaLogger()->debug("embedded broker: busy {:.0f}% over {:.1f} s", 100 * busy,
                         std::chrono::duration<double>(t1 - t0).count());
    if (busy > 0.6 && t1 - last_warning > std::chrono::minutes(1)) {
      last_warning = t1;
      KafkaLogger()->warn(
          "embedded broker: busy {:.0f}% of the last {} s: librdkafka's mock cluster scans a "
          "partition's log on every fetch and produce, so it slows down as its logs grow, and "
          "every client of it waits (latency grows by seconds). For sustained streams use "
          "Apache Kafka: scripts/kafka start, then caravela local --bootstrap HOST:PORT "
          "(docs/benchmarks.md \"The embedded broker's ceiling\")",
          100 * busy, std::chrono::duration_cast<std::chrono::seconds>(kInterval).count());
    }
    t0 = t1;
    cpu0 = cpu1;
  }
}

EmbeddedBroker::~EmbeddedBroker() {
  {
    std::lock_guard<std::mutex> lock(watch_mu_);
    stopping_ = true;
  }
  watch_cv_.notify_all();
  if (watch_.joinable()) watch_.join();
  {
    std::lock_guard<std::mutex> lock(RegistryMutex());
    std::erase(Registry(), this);
  }
  forwarder_.reset();
  // librdkafka 2.0.2: this can take up to 1 s (the mock's internal broker
  // thread may handle its terminate op before the last reference is dropped,
  // and then sleeps out a 1 s wait).
  if (cluster_ != nullptr) rd_kafka_mock_cluster_destroy(cluster_);
  if (rk_ != nullptr) rd_kafka_destroy(rk_);
}

absl::Status EmbeddedBroker::CreateTopic(const std::string& topic, int partitions) {
  if (topic.empty()) return absl::InvalidArgumentError("topic name is empty");
  if (partitions < 1 || partitions > 10000) {
    return absl::InvalidArgumentError(
        absl::StrCat("topic ", topic, ": partitions must be 1..10000, got ", partitions));
  }
  rd_kafka_resp_err_t err = WithMockWakeups(mock_port_, [&] {
    return rd_kafka_mock_topic_create(cluster_, topic.c_str(), partitions, 1);
  });
  if (err == RD_KAFKA_RESP_ERR_TOPIC_ALREADY_EXISTS) {
    return absl::AlreadyExistsError(absl::StrCat("topic ", topic, " already exists"));
  }
  if (err != RD_KAFKA_RESP_ERR_NO_ERROR) {
    return absl::InternalError(absl::StrCat("create topic ", topic, ": ", rd_kafka_err2str(err)));
  }
  return absl::OkStatus();
}

absl::Status CreateTopicOnEmbeddedBroker(const std::string& bootstrap, const std::string& topic,
                                         int partitions) {
  std::lock_guard<std::mutex> lock(RegistryMutex());
  for (absl::string_view address : absl::StrSplit(bootstrap, ',', absl::SkipWhitespace())) {
    address = absl::StripAsciiWhitespace(address);
    for (EmbeddedBroker* broker : Registry()) {
      if (address == broker->bootstrap() || address == broker->advertised()) {
        return broker->CreateTopic(topic, partitions);
      }
    }
  }
  return absl::NotFoundError(absl::StrCat("no embedded broker of this process serves ", bootstrap));
}

absl::Status RunBrokerCommand(int port, int partitions, const std::vector<std::string>& topics) {
  if (partitions != EmbeddedBroker::kAutoCreatePartitions && topics.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the embedded broker (librdkafka 2.0.2 mock cluster) auto-creates every topic with ",
        EmbeddedBroker::kAutoCreatePartitions, " partitions and cannot be configured; for ",
        partitions, " partitions name the topics to create up front"));
  }
  sigset_t stop_signals;
  sigset_t old_mask;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  // Blocked before librdkafka starts its threads, so they inherit the mask
  // and sigwait() below is the only receiver.
  pthread_sigmask(SIG_BLOCK, &stop_signals, &old_mask);
  absl::Status status = [&]() -> absl::Status {
    ASSIGN_OR_RETURN(std::unique_ptr<EmbeddedBroker> broker,
                     EmbeddedBroker::Start(port, partitions));
    for (const std::string& topic : topics) {
      // NAME:N gives that topic N partitions (':' is not allowed in Kafka
      // topic names, so the suffix is unambiguous).
      const size_t colon = topic.rfind(':');
      int n = partitions;
      if (colon != std::string::npos &&
          !absl::SimpleAtoi(absl::string_view(topic).substr(colon + 1), &n)) {
        return absl::InvalidArgumentError(
            absl::StrCat("--topic ", topic, ": expected NAME or NAME:PARTITIONS"));
      }
      RETURN_IF_ERROR(broker->CreateTopic(topic.substr(0, colon), n));
    }
    if (partitions == EmbeddedBroker::kAutoCreatePartitions) {
      std::printf("caravela broker listening on %s (%d partitions per new topic)\n",
                  broker->bootstrap().c_str(), partitions);
    } else {
      std::printf(
          "caravela broker listening on %s (%d partitions for topics %s; %d for auto-created "
          "topics)\n",
          broker->bootstrap().c_str(), partitions, absl::StrJoin(topics, ",").c_str(),
          EmbeddedBroker::kAutoCreatePartitions);
    }
    std::fflush(stdout);
    int sig = 0;
    sigwait(&stop_signals, &sig);
    KafkaLogger()->info("embedded broker: {} received, stopping", strsignal(sig));
    return absl::OkStatus();
  }();
  pthread_sigmask(SIG_SETMASK, &old_mask, nullptr);
  return status;
}

}  // namespace caravela
