// A real, throwaway ClickHouse server for tests (no mocks).
//
// ClickHouseServer::Start() runs the Debian package's clickhouse-server
// (/usr/sbin/clickhouse-server, or $CARAVELA_CLICKHOUSE_SERVER) with a minimal
// XML config in a new temp directory: the HTTP interface only, on 127.0.0.1 at
// a free port, data under the directory, two users: `default` (no password)
// and `caravela` with password `secret` (for authentication tests). Start()
// returns once GET /ping answers; the destructor stops the server (SIGTERM,
// then SIGKILL after 10 s) and deletes the directory. It runs as root.
//
// Missing(): the binary is not installed. Tests then skip with that message
// (the rule for ClickHouse); scripts/install-deps installs it.
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>
#include <string_view>

#include "common/status.h"

namespace caravela {

class ClickHouseServer {
 public:
  static constexpr std::string_view kUser = "caravela";
  static constexpr std::string_view kPassword = "secret";

  // Non-empty: why no server can start here (the binary is missing).
  static std::string Missing();
  static absl::StatusOr<std::unique_ptr<ClickHouseServer>> Start();
  ~ClickHouseServer();
  ClickHouseServer(const ClickHouseServer&) = delete;
  ClickHouseServer& operator=(const ClickHouseServer&) = delete;

  int port() const { return port_; }
  const std::string& dir() const { return dir_; }
  std::string url() const;
  // Runs `sql` as `default`; the response body (TabSeparated unless the
  // query names a FORMAT).
  absl::StatusOr<std::string> Query(std::string_view sql) const;

  void Stop();
  // SIGKILL, as a crashed server (idempotent); StartAgain() starts it on the
  // same port, config and data and returns once it answers.
  void Kill();
  absl::Status StartAgain();

 private:
  ClickHouseServer() = default;
  std::string dir_;
  int port_ = 0;
  pid_t pid_ = -1;
};

}  // namespace caravela
