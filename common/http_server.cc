#include "common/http_server.h"

#include <httplib.h>
#include <sys/socket.h>

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/record.h"  // AppendJsonString

namespace caravela {

bool BearerMatches(std::string_view header, std::string_view token) {
  constexpr std::string_view kPrefix = "Bearer ";
  if (token.empty() || header.size() != kPrefix.size() + token.size() ||
      header.substr(0, kPrefix.size()) != kPrefix) {
    return false;
  }
  unsigned char diff = 0;  // no early exit: the time does not depend on where it differs
  for (size_t i = 0; i < token.size(); ++i) {
    diff |= static_cast<unsigned char>(header[kPrefix.size() + i] ^ token[i]);
  }
  return diff == 0;
}

HttpResponse HttpError(int status, std::string_view message) {
  HttpResponse r;
  r.status = status;
  r.body = "{\"error\":";
  AppendJsonString(message, &r.body);
  r.body += "}\n";
  return r;
}

HttpRoute MetricsRoute(std::function<std::string()> text) {
  return {"/metrics", false, [text = std::move(text)](const std::vector<std::string>&) {
            HttpResponse r;
            r.content_type = "text/plain; version=0.0.4; charset=utf-8";
            r.body = text();
            return r;
          }};
}

HttpRoute HealthRoute() {
  return {"/healthz", true, [](const std::vector<std::string>&) {
            HttpResponse r;
            r.body = "{\"status\":\"SERVING\"}\n";
            return r;
          }};
}

namespace {

// cpp-httplib gives each connection a thread of its pool until the client
// closes it or a read times out, so a fixed pool of 8 lets 8 silent
// connections hold every thread and /healthz waits behind them. This pool
// grows a thread whenever none is idle, up to kMaxHttpThreads, so a slow
// client holds only its own threads while they wait out the read timeout.
// Threads stay once started (they sleep without work).
class ElasticTaskQueue : public httplib::TaskQueue {
 public:
  explicit ElasticTaskQueue(size_t max_threads) : max_threads_(max_threads) {}
  ~ElasticTaskQueue() override { shutdown(); }

  void enqueue(std::function<void()> fn) override {
    std::unique_lock<std::mutex> lock(mu_);
    jobs_.push_back(std::move(fn));
    if (idle_ < jobs_.size() && threads_.size() < max_threads_) {
      threads_.emplace_back([this] { Work(); });
    }
    lock.unlock();
    cv_.notify_one();
  }

  void shutdown() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (shutdown_) return;
      shutdown_ = true;
    }
    cv_.notify_all();
    for (std::thread& t : threads_) t.join();  // they finish the queued connections first
  }

 private:
  void Work() {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      ++idle_;
      cv_.wait(lock, [this] { return shutdown_ || !jobs_.empty(); });
      --idle_;
      if (jobs_.empty()) return;  // shut down and nothing left
      std::function<void()> fn = std::move(jobs_.front());
      jobs_.pop_front();
      lock.unlock();
      fn();
      lock.lock();
    }
  }

  const size_t max_threads_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> jobs_;
  std::vector<std::thread> threads_;  // appended under mu_; joined after shutdown_
  size_t idle_ = 0;
  bool shutdown_ = false;
};

// The listening socket, to give it a longer accept queue than the 5 that
// Debian's cpp-httplib 0.11 listens with (a burst of connections beyond it
// waits for SYN retries: a second or more).
class Server : public httplib::Server {
 public:
  int listening_fd() const { return svr_sock_; }
};

}  // namespace

struct HttpServer::Thread {
  std::thread t;
};

HttpServer::~HttpServer() { Stop(); }

void HttpServer::Stop() {
  if (server_ != nullptr) server_->stop();
  if (thread_ != nullptr && thread_->t.joinable()) thread_->t.join();
}

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(
    const std::string& listen, const std::string& token, const std::vector<HttpRoute>& routes) {
  const size_t colon = listen.rfind(':');
  int port = -1;
  if (colon == std::string::npos || !absl::SimpleAtoi(listen.substr(colon + 1), &port) ||
      port < 0 || port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("HTTP address \"", listen, "\": expected HOST:PORT (port 0: any free one)"));
  }
  const std::string host = listen.substr(0, colon);
  std::unique_ptr<HttpServer> s(new HttpServer());
  s->server_ = std::make_unique<Server>();
  s->server_->new_task_queue = [] { return new ElasticTaskQueue(kMaxHttpThreads); };
  // A client gets kReadTimeoutSeconds for each read of its request and for
  // the next request on a kept-alive connection; every route is a small GET.
  s->server_->set_read_timeout(kReadTimeoutSeconds, 0);
  s->server_->set_write_timeout(kReadTimeoutSeconds, 0);
  s->server_->set_keep_alive_timeout(kReadTimeoutSeconds);
  s->server_->set_payload_max_length(64 << 10);
  for (const HttpRoute& route : routes) {
    s->server_->Get(
        route.pattern, [route, token](const httplib::Request& req, httplib::Response& res) {
          HttpResponse out;
          if (!route.is_public && !token.empty() &&
              !BearerMatches(req.get_header_value("Authorization"), token)) {
            out = HttpError(401, "missing or wrong bearer token (Authorization: Bearer <token>)");
            res.set_header("WWW-Authenticate", "Bearer");
          } else {
            std::vector<std::string> captures;
            for (size_t i = 1; i < req.matches.size(); ++i)
              captures.push_back(req.matches[i].str());
            out = route.handler(captures);
          }
          res.status = out.status;
          res.set_content(out.body, out.content_type.c_str());
        });
  }
  s->server_->set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    const HttpResponse e = HttpError(res.status, absl::StrCat("no route ", req.path));
    res.set_content(e.body, e.content_type.c_str());
  });
  if (port == 0) {
    port = s->server_->bind_to_any_port(host);
    if (port < 0) {
      return absl::UnavailableError(absl::StrCat("HTTP: cannot bind ", listen));
    }
  } else if (!s->server_->bind_to_port(host, port)) {
    return absl::UnavailableError(
        absl::StrCat("HTTP: cannot bind ", listen, " (in use, or not an address of this host)"));
  }
  ::listen(static_cast<Server*>(s->server_.get())->listening_fd(), SOMAXCONN);
  s->address_ = absl::StrCat(host, ":", port);
  s->thread_ = std::make_unique<Thread>();
  httplib::Server* server = s->server_.get();
  s->thread_->t = std::thread([server] { server->listen_after_bind(); });
  return s;
}

}  // namespace caravela
