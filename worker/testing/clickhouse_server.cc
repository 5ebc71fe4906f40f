#include "worker/testing/clickhouse_server.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "worker/connectors/clickhouse_client.h"
#include "worker/testing/local_port.h"

namespace caravela {
namespace {

namespace fs = std::filesystem;

std::string Binary() {
  const char* env = std::getenv("CARAVELA_CLICKHOUSE_SERVER");
  return env != nullptr && *env != '\0' ? env : "/usr/sbin/clickhouse-server";
}

}  // namespace

std::string ClickHouseServer::Missing() {
  if (access(Binary().c_str(), X_OK) == 0) return "";
  return absl::StrCat("ClickHouse server binary ", Binary(),
                      " not found: run scripts/install-deps (installs the Debian package "
                      "clickhouse-server), or set CARAVELA_CLICKHOUSE_SERVER");
}

std::string ClickHouseServer::url() const { return absl::StrCat("http://127.0.0.1:", port_); }

absl::StatusOr<std::unique_ptr<ClickHouseServer>> ClickHouseServer::Start() {
  if (std::string m = Missing(); !m.empty()) return absl::FailedPreconditionError(m);
  std::unique_ptr<ClickHouseServer> s(new ClickHouseServer());
  char tmpl[] = "/tmp/caravela-clickhouse-XXXXXX";
  if (mkdtemp(tmpl) == nullptr) return absl::InternalError("mkdtemp failed");
  s->dir_ = tmpl;
  ASSIGN_OR_RETURN(s->port_, FreeLoopbackPort());
  const std::string d = s->dir_;
  std::ofstream(d + "/config.xml") << absl::StrCat(
      "<?xml version=\"1.0\"?>\n<yandex>\n"
      "  <logger><level>warning</level><log>",
      d, "/server.log</log><errorlog>", d,
      "/server.err.log</errorlog></logger>\n"
      "  <http_port>",
      s->port_,
      "</http_port>\n  <listen_host>127.0.0.1</listen_host>\n"
      "  <path>",
      d, "/data/</path>\n  <tmp_path>", d, "/tmp/</tmp_path>\n  <user_files_path>", d,
      "/user_files/</user_files_path>\n  <format_schema_path>", d,
      "/format_schemas/</format_schema_path>\n  <users_config>", d,
      "/users.xml</users_config>\n"
      "  <default_profile>default</default_profile>\n"
      "  <default_database>default</default_database>\n"
      "  <mark_cache_size>67108864</mark_cache_size>\n"
      "</yandex>\n");
  const std::string user(kUser);
  const std::string password(kPassword);
  std::ofstream(d + "/users.xml") << absl::StrCat(
      "<?xml version=\"1.0\"?>\n<yandex>\n  <profiles><default/></profiles>\n  <users>\n"
      "    <default><password></password><networks><ip>127.0.0.1</ip></networks>"
      "<profile>default</profile><quota>default</quota></default>\n"
      "    <",
      user, "><password>", password, "</password><networks><ip>127.0.0.1</ip></networks>",
      "<profile>default</profile><quota>default</quota></", user,
      ">\n  </users>\n  <quotas><default/></quotas>\n</yandex>\n");
  const std::string binary = Binary();
  const std::string config = "--config-file=" + d + "/config.xml";
  const std::string out = d + "/stdout.log";
  s->pid_ = fork();
  if (s->pid_ < 0) return absl::InternalError("fork failed");
  if (s->pid_ == 0) {
    FILE* f = std::freopen(out.c_str(), "a", stdout);
    (void)f;
    dup2(1, 2);
    // Dies with the test, and holds none of its descriptors (a death test's
    // pipe held open would keep its parent waiting).
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    for (int fd = 3; fd < 1024; ++fd) close(fd);
    execl(binary.c_str(), binary.c_str(), config.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  ClickHouseClientOptions o;
  o.url = s->url();
  o.retries = 0;
  ClickHouseClient client(o);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (true) {
    if (client.Execute("SELECT 1").ok()) return s;
    int status = 0;
    if (waitpid(s->pid_, &status, WNOHANG) == s->pid_) {
      s->pid_ = -1;
      std::ifstream log(d + "/server.err.log");
      std::string text((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
      return absl::InternalError(absl::StrCat("clickhouse-server exited at start (logs in ", d,
                                              "): ", text.substr(0, 2000)));
    }
    if (std::chrono::steady_clock::now() > deadline) {
      return absl::DeadlineExceededError(absl::StrCat("clickhouse-server did not answer on ",
                                                      s->url(), " within 30 s (logs in ", d, ")"));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

absl::StatusOr<std::string> ClickHouseServer::Query(std::string_view sql) const {
  ClickHouseClientOptions o;
  o.url = url();
  o.retries = 2;
  ClickHouseClient client(o);
  return client.Execute(sql);
}

void ClickHouseServer::Stop() {
  if (pid_ <= 0) return;
  kill(pid_, SIGTERM);
  int status = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (waitpid(pid_, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      kill(pid_, SIGKILL);
      waitpid(pid_, &status, 0);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  pid_ = -1;
}

ClickHouseServer::~ClickHouseServer() {
  Stop();
  if (std::getenv("CARAVELA_KEEP_TEST_DIRS") == nullptr) {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
}

}  // namespace caravela
