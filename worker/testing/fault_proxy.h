// A TCP proxy on 127.0.0.1 that injects HTTP server errors (the fault
// campaign's S3 faults, issue 31): it passes bytes both ways to an upstream
// port until SetFailing(true); then the connections open at that moment are
// cut (a request mid-upload fails), and every new connection gets
// "500 Internal Server Error" to its first request and is closed, until
// SetFailing(false). Header-only, for tests.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <list>
#include <mutex>
#include <string>
#include <thread>

namespace caravela {

class FaultProxy {
 public:
  explicit FaultProxy(int upstream_port) : upstream_port_(upstream_port) {
    listen_fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a = Loopback(0);
    if (bind(listen_fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 ||
        listen(listen_fd_, SOMAXCONN) != 0) {
      close(listen_fd_);
      listen_fd_ = -1;
      return;
    }
    socklen_t len = sizeof(a);
    getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    accept_thread_ = std::thread([this] { AcceptLoop(); });
  }
  ~FaultProxy() {
    stop_ = true;
    if (accept_thread_.joinable()) accept_thread_.join();
    if (listen_fd_ >= 0) close(listen_fd_);
    std::lock_guard<std::mutex> lock(mu_);
    for (std::thread& t : connections_) t.join();
  }
  FaultProxy(const FaultProxy&) = delete;
  FaultProxy& operator=(const FaultProxy&) = delete;

  // 0 if the proxy could not listen.
  int port() const { return port_; }
  void SetFailing(bool failing) {
    if (failing && !failing_) ++generation_;
    failing_ = failing;
  }
  // Requests answered 500 and connections cut so far.
  int64_t errors_answered() const { return errors_answered_; }
  int64_t connections_cut() const { return connections_cut_; }

 private:
  static sockaddr_in Loopback(int port) {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    return a;
  }
  static bool WriteAll(int fd, const char* p, size_t n) {
    while (n > 0) {
      const ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
      if (w <= 0) return false;
      p += w;
      n -= static_cast<size_t>(w);
    }
    return true;
  }

  void AcceptLoop() {
    while (!stop_) {
      pollfd p{listen_fd_, POLLIN, 0};
      if (poll(&p, 1, 100) <= 0) continue;
      const int client = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (client < 0) continue;
      std::lock_guard<std::mutex> lock(mu_);
      connections_.emplace_back([this, client] {
        if (failing_) {
          AnswerError(client);
        } else {
          Pipe(client);
        }
        close(client);
      });
    }
  }

  // Reads the request's head (what arrives within 2 s) and answers 500.
  void AnswerError(int client) {
    std::string head;
    char buf[4096];
    while (head.find("\r\n\r\n") == std::string::npos && head.size() < 65536) {
      pollfd p{client, POLLIN, 0};
      if (poll(&p, 1, 2000) <= 0) break;
      const ssize_t n = recv(client, buf, sizeof(buf), 0);
      if (n <= 0) break;
      head.append(buf, static_cast<size_t>(n));
    }
    static constexpr char kBody[] =
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>InternalError</Code>"
        "<Message>injected by the fault proxy</Message></Error>";
    const std::string response =
        std::string("HTTP/1.1 500 Internal Server Error\r\n") +
        "Content-Type: application/xml\r\nContent-Length: " + std::to_string(sizeof(kBody) - 1) +
        "\r\nConnection: close\r\n\r\n" + kBody;
    if (WriteAll(client, response.data(), response.size())) ++errors_answered_;
  }

  // Copies bytes both ways until either side closes, the proxy stops, or a
  // failure begins.
  void Pipe(int client) {
    const int upstream = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a = Loopback(upstream_port_);
    if (connect(upstream, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
      close(upstream);
      return;
    }
    const int64_t generation = generation_;
    char buf[65536];
    pollfd p[2] = {{client, POLLIN, 0}, {upstream, POLLIN, 0}};
    while (!stop_) {
      if (generation_ != generation) {
        ++connections_cut_;
        break;
      }
      if (poll(p, 2, 100) < 0) break;
      bool closed = false;
      for (int i = 0; i < 2 && !closed; ++i) {
        if (p[i].revents == 0) continue;
        const ssize_t n = recv(p[i].fd, buf, sizeof(buf), 0);
        closed = n <= 0 || !WriteAll(p[1 - i].fd, buf, static_cast<size_t>(n));
      }
      if (closed) break;
    }
    close(upstream);
  }

  const int upstream_port_;
  int listen_fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false}, failing_{false};
  std::atomic<int64_t> generation_{0}, errors_answered_{0}, connections_cut_{0};
  std::mutex mu_;
  std::list<std::thread> connections_;  // joined at the end
  std::thread accept_thread_;
};

}  // namespace caravela
