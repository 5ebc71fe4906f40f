// HttpServer: the small read-only HTTP side of Caravela's processes (SPEC §8,
// §9): the coordinator's JSON API and health, later `/metrics` and the
// dashboard. A thin layer over cpp-httplib (Debian's libcpp-httplib):
// routes by regular expression, an optional bearer token on every route not
// marked public (401 before the handler runs, constant-time compare), GET
// only. Port 0 picks a free port.
//
// Slow clients: each connection has a thread of its own (the pool grows up
// to kMaxHttpThreads) and kReadTimeoutSeconds for each read, so connections
// that send nothing or trickle hold only their own threads and /healthz
// still answers at once. Beyond kMaxHttpThreads connections at a time the
// rest wait their turn: limit connections per client in front of it (an
// ingress or NetworkPolicy) where the port is exposed to untrusted clients.
//
// Threading: handlers run on the server's worker threads; they must be
// thread-safe. Start/Stop from one thread.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace httplib {
class Server;
}  // namespace httplib

namespace caravela {

inline constexpr size_t kMaxHttpThreads = 256;
inline constexpr int kReadTimeoutSeconds = 5;

// Whether `header` is "Bearer <token>", compared in constant time (also
// used for the gRPC "authorization" metadata).
bool BearerMatches(std::string_view header, std::string_view token);

struct HttpResponse {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
};

struct HttpRoute {
  std::string pattern;     // a regular expression over the path, e.g. "/api/v1/jobs/([^/]+)"
  bool is_public = false;  // served without the token (health probes)
  // Called with the pattern's capture groups.
  std::function<HttpResponse(const std::vector<std::string>& captures)> handler;
};

class HttpServer {
 public:
  // Binds `listen` (HOST:PORT) and serves `routes` on a thread of its own.
  // `token` non-empty: "Authorization: Bearer <token>" required on every
  // route that is not public. InvalidArgument for a bad address,
  // Unavailable if the port cannot be bound.
  static absl::StatusOr<std::unique_ptr<HttpServer>> Start(const std::string& listen,
                                                           const std::string& token,
                                                           const std::vector<HttpRoute>& routes);
  ~HttpServer();
  // "HOST:PORT" with the port actually bound.
  const std::string& address() const { return address_; }
  void Stop();

 private:
  HttpServer() = default;
  std::unique_ptr<httplib::Server> server_;
  std::string address_;
  struct Thread;
  std::unique_ptr<Thread> thread_;
};

// A JSON error body: {"error": "..."}.
HttpResponse HttpError(int status, std::string_view message);

// GET /metrics: `text()` in the Prometheus text exposition format 0.0.4.
HttpRoute MetricsRoute(std::function<std::string()> text);
// GET /healthz (public, for probes): {"status":"SERVING"}.
HttpRoute HealthRoute();

}  // namespace caravela
