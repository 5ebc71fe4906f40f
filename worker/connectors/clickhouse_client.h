// A small client of ClickHouse's HTTP interface on libcurl: one keep-alive
// connection, the statement in the `query` parameter, data (INSERT rows) in
// the POST body, HTTP basic auth.
//
// Retries: a request that fails to connect, times out, or is cut off (and a
// 503 from the server) is retried with exponential backoff (`retries` times,
// from `backoff_ms`, doubling, capped at 5 s). Callers retry only what is
// safe to repeat: the sink's INSERTs are (a revision written twice is the same
// row to a ReplacingMergeTree). An answer with an exception (HTTP 4xx/5xx) is
// not retried: its first line becomes the error, with the URL.
// Not thread-safe: one thread at a time (the sink's INSERTs run on a thread
// of their own, one at a time); retried() may be read from any thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "common/status.h"

namespace caravela {

struct ClickHouseClientOptions {
  std::string url;  // http://host:port (the HTTP interface)
  std::string user = "default";
  std::string password;
  int retries = 5;
  int64_t backoff_ms = 100;
  int64_t timeout_ms = 60000;  // per request
  int64_t connect_timeout_ms = 5000;
};

class ClickHouseClient {
 public:
  explicit ClickHouseClient(ClickHouseClientOptions options);
  ~ClickHouseClient();
  ClickHouseClient(const ClickHouseClient&) = delete;
  ClickHouseClient& operator=(const ClickHouseClient&) = delete;

  // Runs `query` with `data` as its input (INSERT ... FORMAT ...); returns
  // the response body. Unavailable when the server cannot be reached after
  // the retries; FailedPrecondition with the server's message otherwise
  // (Unauthenticated for a wrong user or password).
  absl::StatusOr<std::string> Execute(std::string_view query, std::string_view data = {});

  const std::string& url() const { return options_.url; }
  // Requests retried so far (connection errors, 503).
  int64_t retried() const { return retried_.load(); }

 private:
  struct Curl;
  ClickHouseClientOptions options_;
  std::unique_ptr<Curl> curl_;
  std::atomic<int64_t> retried_{0};
};

// `text` as a ClickHouse string literal ('...' with \ and ' escaped).
std::string ClickHouseQuote(std::string_view text);

}  // namespace caravela
