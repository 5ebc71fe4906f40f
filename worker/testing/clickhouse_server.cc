#include "worker/testing/clickhouse_server.h"

#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "worker/connectors/clickhouse_client.h"
#include "worker/testing/local_server.h"

namespace caravela {
namespace {

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
  ASSIGN_OR_RETURN(s->dir_, MakeServerDir("clickhouse"));
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
  RETURN_IF_ERROR(s->StartAgain());
  return s;
}

absl::Status ClickHouseServer::StartAgain() {
  if (pid_ > 0) return absl::FailedPreconditionError("clickhouse-server is running");
  ASSIGN_OR_RETURN(
      pid_, SpawnServer({Binary(), "--config-file=" + dir_ + "/config.xml"}, dir_ + "/stdout.log"));
  ClickHouseClientOptions o;
  o.url = url();
  o.retries = 0;
  ClickHouseClient client(o);
  return WaitUntilServing(&pid_, "clickhouse-server on " + url(), dir_, dir_ + "/server.err.log",
                          [&] { return client.Execute("SELECT 1").status(); });
}

void ClickHouseServer::Kill() { StopServer(&pid_, std::chrono::milliseconds(0)); }

absl::StatusOr<std::string> ClickHouseServer::Query(std::string_view sql) const {
  ClickHouseClientOptions o;
  o.url = url();
  o.retries = 2;
  ClickHouseClient client(o);
  return client.Execute(sql);
}

void ClickHouseServer::Stop() { StopServer(&pid_, std::chrono::seconds(10)); }

ClickHouseServer::~ClickHouseServer() {
  Stop();
  RemoveServerDir(dir_);
}

}  // namespace caravela
