// `caravela health [HOST:PORT]`: the grpc.health.v1 answer of a coordinator
// or worker (no token needed), for container health checks and scripts.
#include <cstdio>
#include <memory>
#include <string>

#include "cli/command_support.h"
#include "cli/commands.h"
#include "coordinator/job_client.h"

namespace caravela {
namespace {

struct HealthFlags {
  std::string address;      // the positional ADDRESS
  std::string coordinator;  // --coordinator, used without ADDRESS
  std::string tls_ca;
};

int RunHealth(const CLI::App& cmd, HealthFlags& f) {
  // Not given, the worker's (CARAVELA_COORDINATOR, CARAVELA_TLS_CA, or a
  // [worker] section of --config).
  InheritOption(cmd, "--coordinator", {"worker"}, &f.coordinator);
  InheritOption(cmd, "--tls-ca", {"worker"}, &f.tls_ca);
  const std::string address = f.address.empty() ? CoordinatorAddress(f.coordinator) : f.address;
  JobClient client(address, "", 3000, f.tls_ca);
  absl::StatusOr<std::string> status = client.Health();
  if (!status.ok()) return Fail(status.status());
  std::printf("%s %s\n", address.c_str(), status->c_str());
  return *status == "SERVING" ? 0 : 1;
}

}  // namespace

Command AddHealthCommand(CLI::App& app) {
  auto f = std::make_shared<HealthFlags>();
  CLI::App* cmd = app.add_subcommand(
      "health",
      "Ask a coordinator or worker for its gRPC health (grpc.health.v1, no token needed); "
      "prints ADDRESS SERVING and exits 0, else 1 (container health checks)");
  cmd->add_option("address", f->address,
                  "HOST:PORT of its gRPC service (default: the coordinator's)");
  cmd->add_option("--coordinator", f->coordinator, "Same as ADDRESS");
  cmd->add_option("--tls-ca", f->tls_ca, "PEM file of the roots to trust: talk TLS");
  return {cmd, [cmd, f] { return RunHealth(*cmd, *f); }};
}

}  // namespace caravela
