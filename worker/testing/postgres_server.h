// A real, throwaway PostgreSQL server for tests (no mocks).
//
// PostgresServer::Start() runs the Debian packages' binaries
// (/usr/lib/postgresql/15/bin, or $CARAVELA_PG_BINDIR): a fresh cluster in a new
// temp directory (copied from a template that initdb makes once and leaves in
// the temp dir as caravela-pg-template-*, since initdb takes ~2 s), then
// `pg_ctl start -w` (returns once the server accepts connections)
// listening on 127.0.0.1 at a free port and on a unix socket in that directory,
// with fsync/synchronous_commit/full_page_writes off. Authentication is `trust`;
// the superuser is `caravela`. initdb refuses to run as root, so when the test
// runs as root the server binaries run as the `postgres` system user
// (`runuser -u postgres --`) and the directory is chown'ed to it.
// The destructor stops the server (immediate shutdown) and deletes the directory.
//
// If the binaries are missing, Start() fails with a message naming
// scripts/install-deps: tests must fail, not skip.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace caravela {

class PostgresServer {
 public:
  // How a SQL NULL appears in Query() results (COPY's text convention).
  static constexpr std::string_view kNull = "\\N";

  static absl::StatusOr<std::unique_ptr<PostgresServer>> Start();
  ~PostgresServer();
  PostgresServer(const PostgresServer&) = delete;
  PostgresServer& operator=(const PostgresServer&) = delete;

  int port() const { return port_; }
  const std::string& dir() const { return dir_; }
  // libpq key=value connection string over TCP to `dbname` as the superuser.
  std::string Dsn(std::string_view dbname = "postgres") const;

  // Runs SQL (simple query protocol: several statements allowed) on `dbname`,
  // each call on a new connection.
  absl::Status Exec(std::string_view sql, std::string_view dbname = "postgres") const;
  // Runs one query; rows of text values, NULL as kNull.
  absl::StatusOr<std::vector<std::vector<std::string>>> Query(
      std::string_view sql, std::string_view dbname = "postgres") const;
  // CREATE DATABASE `name` (a plain identifier).
  absl::Status CreateDatabase(std::string_view name) const;
  // Terminates every other client connection to `dbname` (pg_terminate_backend);
  // waits until they are gone (up to 10 s each); returns how many were
  // terminated. For testing reconnects.
  absl::StatusOr<int> TerminateConnections(std::string_view dbname = "postgres") const;

  // Stops the server (idempotent; the destructor calls it).
  absl::Status Stop();
  // Stops the server (immediate: no checkpoint, clients cut off) and starts
  // it again on the same port and data, as a crashed server comes back.
  absl::Status Restart();

 private:
  PostgresServer() = default;
  // pg_ctl start on `port` (the data directory exists).
  absl::Status StartOn(int port);

  std::string bin_dir_;
  std::string dir_;  // temp dir: data/ inside, unix socket and logs directly in it
  int port_ = 0;
  bool run_as_postgres_ = false;
  bool running_ = false;
};

}  // namespace caravela
