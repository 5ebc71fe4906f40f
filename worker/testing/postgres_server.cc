#include "worker/testing/postgres_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <libpq-fe.h>
#include <netinet/in.h>
#include <pwd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "worker/testing/local_server.h"
#include "worker/testing/operator_harness.h"

namespace caravela {
namespace {

namespace fs = std::filesystem;

// This abseil build does not alias absl::string_view to std::string_view.
absl::string_view Sv(std::string_view s) { return absl::string_view(s.data(), s.size()); }

constexpr char kDefaultBinDir[] = "/usr/lib/postgresql/15/bin";

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The last `n` lines of `text`, for error messages.
std::string Tail(const std::string& text, int n) {
  size_t pos = text.size();
  while (n-- > 0 && pos > 0) {
    pos = text.rfind('\n', pos - 1);
    if (pos == std::string::npos) return text;
  }
  return text.substr(pos + 1);
}

// Runs argv[0] (PATH lookup) in `cwd` with stdout+stderr appended to `log`;
// returns its exit code (127 if it could not be started).
int Run(const std::vector<std::string>& argv, const std::string& cwd, const std::string& log) {
  pid_t pid = fork();
  if (pid < 0) return 127;
  if (pid == 0) {
    int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0666);
    if (fd >= 0) {
      dup2(fd, 1);
      dup2(fd, 2);
      close(fd);
    }
    if (chdir(cwd.c_str()) != 0) _exit(126);
    setenv("LC_ALL", "C", 1);
    std::vector<char*> args;
    args.reserve(argv.size() + 1);
    for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execvp(args[0], args.data());
    _exit(127);
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

struct ConnDeleter {
  void operator()(PGconn* c) const { PQfinish(c); }
};
struct ResultDeleter {
  void operator()(PGresult* r) const { PQclear(r); }
};
using Conn = std::unique_ptr<PGconn, ConnDeleter>;
using Result = std::unique_ptr<PGresult, ResultDeleter>;

std::string Trimmed(const char* msg) {
  std::string s = msg == nullptr ? "" : msg;
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

absl::StatusOr<Conn> Connect(const std::string& dsn) {
  Conn c(PQconnectdb(dsn.c_str()));
  if (PQstatus(c.get()) != CONNECTION_OK) {
    return absl::UnavailableError(
        absl::StrCat("connect to ", dsn, ": ", Trimmed(PQerrorMessage(c.get()))));
  }
  return c;
}

}  // namespace

absl::StatusOr<std::unique_ptr<PostgresServer>> PostgresServer::Start() {
  std::unique_ptr<PostgresServer> s(new PostgresServer());
  const char* env_bin = std::getenv("CARAVELA_PG_BINDIR");
  s->bin_dir_ = env_bin != nullptr && *env_bin != '\0' ? env_bin : kDefaultBinDir;
  for (const char* b : {"initdb", "pg_ctl", "postgres"}) {
    std::string p = absl::StrCat(s->bin_dir_, "/", b);
    if (access(p.c_str(), X_OK) != 0) {
      return absl::FailedPreconditionError(absl::StrCat(
          "PostgreSQL server binary ", p,
          " not found: run scripts/install-deps (installs the Debian package postgresql), "
          "or set CARAVELA_PG_BINDIR to the directory holding initdb, pg_ctl and postgres"));
    }
  }

  s->run_as_postgres_ = getuid() == 0;
  // As root, the server runs as `postgres`, which must reach the directory:
  // use /tmp rather than a TMPDIR that may sit under /root.
  std::string base = s->run_as_postgres_ ? "/tmp" : fs::temp_directory_path().string();
  std::string templ = base + "/caravela-pg-XXXXXX";
  if (mkdtemp(templ.data()) == nullptr) {
    return absl::InternalError(absl::StrCat("mkdtemp ", templ, ": ", std::strerror(errno)));
  }
  s->dir_ = templ;
  uid_t server_uid = getuid();
  gid_t server_gid = getgid();
  if (s->run_as_postgres_) {
    passwd* pw = getpwnam("postgres");
    if (pw == nullptr) {
      return absl::FailedPreconditionError(
          "running as root, but there is no `postgres` system user to run the PostgreSQL "
          "server as (initdb refuses root): run scripts/install-deps (the Debian package "
          "postgresql creates it)");
    }
    server_uid = pw->pw_uid;
    server_gid = pw->pw_gid;
    if (chown(s->dir_.c_str(), pw->pw_uid, pw->pw_gid) != 0) {
      return absl::InternalError(
          absl::StrCat("chown ", s->dir_, " to postgres: ", std::strerror(errno)));
    }
  }
  auto as_server_user = [&](std::vector<std::string> argv) {
    if (!s->run_as_postgres_) return argv;
    std::vector<std::string> out = {"runuser", "-u", "postgres", "--"};
    out.insert(out.end(), argv.begin(), argv.end());
    return out;
  };

  // initdb takes ~2 s, most of a server's start: it runs once into a template
  // cluster kept in `base` (per server user and binary directory), which each
  // server copies. Concurrent test processes race benignly: each builds its own
  // candidate and the first rename wins.
  const std::string tmpl =
      absl::StrCat(base, "/caravela-pg-template-", s->run_as_postgres_ ? "postgres" : "uid",
                   getuid(), "-", std::hash<std::string>()(s->bin_dir_) % 1000000007);
  if (access((tmpl + "/data/PG_VERSION").c_str(), F_OK) != 0) {
    std::string cand = base + "/caravela-pg-template-tmp-XXXXXX";
    if (mkdtemp(cand.data()) == nullptr) {
      return absl::InternalError(absl::StrCat("mkdtemp ", cand, ": ", std::strerror(errno)));
    }
    if (s->run_as_postgres_ && chown(cand.c_str(), server_uid, server_gid) != 0) {
      std::string err = std::strerror(errno);
      RemoveTree(cand);
      return absl::InternalError(absl::StrCat("chown ", cand, " to postgres: ", err));
    }
    const std::string initdb_log = s->dir_ + "/initdb.log";
    int rc =
        Run(as_server_user({s->bin_dir_ + "/initdb", "-D", cand + "/data", "-U", "caravela", "-A",
                            "trust", "-E", "UTF8", "--locale=C", "--no-sync", "--no-instructions"}),
            s->dir_, initdb_log);
    if (rc != 0) {
      RemoveTree(cand);
      return absl::InternalError(absl::StrCat("initdb -D ", cand, "/data exited with ", rc, ":\n",
                                              Tail(ReadFile(initdb_log), 15)));
    }
    if (rename(cand.c_str(), tmpl.c_str()) != 0) RemoveTree(cand);  // another process won
  }
  const std::string data = s->dir_ + "/data";
  const std::string cp_log = s->dir_ + "/cp.log";
  int rc = Run(as_server_user({"cp", "-a", tmpl + "/data", data}), s->dir_, cp_log);
  if (rc != 0) {
    return absl::InternalError(absl::StrCat("cp -a ", tmpl, "/data ", data, " exited with ", rc,
                                            ": ", ReadFile(cp_log),
                                            " (delete the template directory to rebuild it)"));
  }

  // The free port may be taken between FreeLoopbackPort() and the server's bind: retry.
  std::string last_error;
  for (int attempt = 0; attempt < 5; ++attempt) {
    ASSIGN_OR_RETURN(int port, FreeLoopbackPort());
    absl::Status started = s->StartOn(port);
    if (started.ok()) return s;
    last_error = std::string(started.message());
    if (last_error.find("could not bind") == std::string::npos &&
        last_error.find("already in use") == std::string::npos) {
      break;
    }
  }
  return absl::InternalError(last_error);
}

absl::Status PostgresServer::StartOn(int port) {
  const std::string server_log = dir_ + "/server.log";
  const std::string ctl_log = dir_ + "/pg_ctl.log";
  const std::string opts =
      absl::StrCat("-p ", port, " -k ", dir_,
                   " -c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=off"
                   " -c full_page_writes=off -c max_connections=40 -c shared_buffers=16MB");
  std::vector<std::string> argv = {bin_dir_ + "/pg_ctl",
                                   "-D",
                                   dir_ + "/data",
                                   "-l",
                                   server_log,
                                   "-w",
                                   "-t",
                                   "60",
                                   "-o",
                                   opts,
                                   "start"};
  if (run_as_postgres_) argv.insert(argv.begin(), {"runuser", "-u", "postgres", "--"});
  const int rc = Run(argv, dir_, ctl_log);
  if (rc != 0) {
    return absl::InternalError(absl::StrCat("pg_ctl start exited with ", rc, ":\n",
                                            Tail(ReadFile(ctl_log), 5), "\nserver log:\n",
                                            Tail(ReadFile(server_log), 15)));
  }
  port_ = port;
  running_ = true;
  return absl::OkStatus();
}

absl::Status PostgresServer::Restart() {
  RETURN_IF_ERROR(Stop());
  return StartOn(port_);
}

PostgresServer::~PostgresServer() {
  (void)Stop();
  if (!dir_.empty()) RemoveTree(dir_);
}

absl::Status PostgresServer::Stop() {
  if (!running_) return absl::OkStatus();
  running_ = false;
  std::vector<std::string> argv = {bin_dir_ + "/pg_ctl", "-D", dir_ + "/data", "-m",
                                   "immediate",          "-w", "stop"};
  if (run_as_postgres_) argv.insert(argv.begin(), {"runuser", "-u", "postgres", "--"});
  std::string log = dir_ + "/pg_ctl.log";
  int rc = Run(argv, dir_, log);
  if (rc != 0) {
    return absl::InternalError(
        absl::StrCat("pg_ctl stop exited with ", rc, ":\n", Tail(ReadFile(log), 5)));
  }
  return absl::OkStatus();
}

std::string PostgresServer::Dsn(std::string_view dbname) const {
  return absl::StrCat("host=127.0.0.1 port=", port_, " dbname=", Sv(dbname), " user=caravela");
}

absl::Status PostgresServer::Exec(std::string_view sql, std::string_view dbname) const {
  ASSIGN_OR_RETURN(Conn c, Connect(Dsn(dbname)));
  Result r(PQexec(c.get(), std::string(sql).c_str()));
  ExecStatusType st = PQresultStatus(r.get());
  if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK) {
    return absl::InternalError(absl::StrCat(Sv(sql), ": ", Trimmed(PQresultErrorMessage(r.get()))));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::vector<std::string>>> PostgresServer::Query(
    std::string_view sql, std::string_view dbname) const {
  ASSIGN_OR_RETURN(Conn c, Connect(Dsn(dbname)));
  Result r(PQexec(c.get(), std::string(sql).c_str()));
  if (PQresultStatus(r.get()) != PGRES_TUPLES_OK) {
    return absl::InternalError(absl::StrCat(Sv(sql), ": ", Trimmed(PQresultErrorMessage(r.get()))));
  }
  std::vector<std::vector<std::string>> rows(PQntuples(r.get()));
  for (int i = 0; i < PQntuples(r.get()); ++i) {
    for (int j = 0; j < PQnfields(r.get()); ++j) {
      rows[i].emplace_back(PQgetisnull(r.get(), i, j) ? std::string(kNull)
                                                      : std::string(PQgetvalue(r.get(), i, j)));
    }
  }
  return rows;
}

absl::Status PostgresServer::CreateDatabase(std::string_view name) const {
  return Exec(absl::StrCat("CREATE DATABASE \"", Sv(name), "\""));
}

absl::StatusOr<int> PostgresServer::TerminateConnections(std::string_view dbname) const {
  ASSIGN_OR_RETURN(
      auto rows,
      Query(absl::StrCat("SELECT count(*) FILTER (WHERE pg_terminate_backend(pid, 10000)) FROM "
                         "pg_stat_activity WHERE pid <> pg_backend_pid() AND datname = '",
                         Sv(dbname), "' AND backend_type = 'client backend'"),
            dbname));
  return std::atoi(rows.at(0).at(0).c_str());
}

}  // namespace caravela
