// `caravela worker`: a worker process (worker/agent/worker_agent.h) until
// SIGINT (stops its tasks at once) or SIGTERM (hands them over first).
#include <sys/prctl.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "cli/command_support.h"
#include "cli/commands.h"
#include "common/time_util.h"
#include "worker/agent/worker_agent.h"
#include "worker/connectors/kafka_properties.h"

namespace caravela {
namespace {

struct WorkerFlags {
  // The coordinator resolved by CoordinatorAddress and the token filled in
  // from token_file when it runs.
  WorkerAgentOptions agent;
  std::string token_file;
  std::string drain_timeout = "25s";
  std::vector<std::string> kafka_properties;  // KEY=VALUE
};

int RunWorker(const CLI::App& cmd, WorkerFlags& f) {
  // Started by `caravela local`: leave at once (SIGINT) when it dies, however
  // it dies, rather than stay behind looking for its coordinator.
  if (const char* local = std::getenv(kLocalPidVariable); local != nullptr) {
    ::prctl(PR_SET_PDEATHSIG, SIGINT);
    if (std::to_string(::getppid()) != local) return 1;  // it died before the prctl
    ::unsetenv(kLocalPidVariable);
  }
  // Without its own, the coordinator's token file (a [coordinator] section of
  // --config).
  InheritOption(cmd, "--token-file", {"coordinator"}, &f.token_file);
  if (!ReadToken(f.token_file, &f.agent.token)) return 2;
  f.agent.coordinator = CoordinatorAddress(f.agent.coordinator);
  if (!f.agent.shared_dir.empty()) {
    std::error_code ec;
    f.agent.shared_dir = std::filesystem::absolute(f.agent.shared_dir).lexically_normal().string();
    std::filesystem::create_directories(f.agent.shared_dir, ec);
    if (ec) {
      std::fprintf(stderr, "error: --shared-dir %s: %s\n", f.agent.shared_dir.c_str(),
                   ec.message().c_str());
      return 2;
    }
  }
  {
    // Made now, so that one it cannot write stops it before it registers.
    std::error_code ec;
    std::filesystem::create_directories(f.agent.data_dir, ec);
    if (ec) {
      std::fprintf(stderr, "error: --data-dir %s: %s\n", f.agent.data_dir.c_str(),
                   ec.message().c_str());
      return 2;
    }
  }
  for (const std::string& p : f.agent.allowed_paths) {
    if (!std::filesystem::path(p).is_absolute()) {
      std::fprintf(stderr, "error: --allow-path %s: give an absolute directory\n", p.c_str());
      return 2;
    }
  }
  // Before any Kafka client exists: every client of this process gets them.
  if (absl::Status st = SetProcessKafkaProperties(f.kafka_properties); !st.ok()) {
    std::fprintf(stderr, "error: %s\n", std::string(st.message()).c_str());
    return 2;
  }
  f.agent.on_registered = [coordinator = f.agent.coordinator](const std::string& id) {
    std::printf("caravela worker: id=%s coordinator=%s\n", id.c_str(), coordinator.c_str());
    std::fflush(stdout);
  };
  absl::StatusOr<std::unique_ptr<WorkerAgent>> agent = WorkerAgent::Start(f.agent);
  if (!agent.ok()) return Fail(agent.status());
  std::printf("caravela worker: grpc=%s http=%s slots=%d data-dir=%s shared-dir=%s\n",
              (*agent)->address().c_str(),
              (*agent)->http_address().empty() ? "off" : (*agent)->http_address().c_str(),
              f.agent.slots, f.agent.data_dir.c_str(),
              f.agent.shared_dir.empty() ? "none" : f.agent.shared_dir.c_str());
  std::fflush(stdout);
  // SIGTERM (Kubernetes, systemd): hand the tasks over, then leave.
  // SIGINT (Ctrl-C): stop at once.
  CatchStopSignals(OnSigterm::kDrain);
  while (!StopRequested() && !DrainRequested()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    if (absl::Status failed = (*agent)->Failure(); !failed.ok()) {
      (*agent)->Stop();
      return Fail(failed);
    }
  }
  if (DrainRequested() && !StopRequested()) {
    const std::optional<int64_t> drain = ParseDuration(f.drain_timeout);
    (*agent)->Drain(drain.value_or(25000));
  } else {
    (*agent)->Stop();
  }
  return 0;
}

}  // namespace

Command AddWorkerCommand(CLI::App& app) {
  auto f = std::make_shared<WorkerFlags>();
  CLI::App* cmd = app.add_subcommand(
      "worker",
      "Run a worker: registers with the coordinator, heartbeats within its lease and\n"
      "runs the tasks the coordinator assigns it (one thread each; all of them stop when\n"
      "the lease is lost); serves gRPC health and the exchange streams between workers.\n"
      "Prints its id and address.");
  cmd->add_option("--coordinator", f->agent.coordinator,
                  "Coordinator HOST:PORT (default $CARAVELA_COORDINATOR)")
      ->envname("CARAVELA_COORDINATOR");
  cmd->add_option("--listen", f->agent.listen,
                  "The worker's gRPC HOST:PORT (port 0: any): health, and the network exchange's "
                  "streams from other workers")
      ->envname("CARAVELA_LISTEN")
      ->capture_default_str();
  cmd->add_option("--id", f->agent.requested_id,
                  "The id to ask the coordinator for (worker-<n>); given when no worker had it\n"
                  "since the coordinator started, else it names this worker anew")
      ->check([](const std::string& id) -> std::string {
        int64_t n = 0;
        if (id.rfind("worker-", 0) == 0 && absl::SimpleAtoi(id.substr(7), &n) && n > 0) return "";
        return "expected worker-<n> with n >= 1, e.g. worker-2";
      })
      ->envname("CARAVELA_WORKER_ID");
  cmd->add_option("--advertise", f->agent.advertise,
                  "HOST:PORT other workers reach --listen at (default: the bound address; "
                  "0.0.0.0 becomes the host name), e.g. $(POD_IP):7401 on Kubernetes")
      ->envname("CARAVELA_ADVERTISE");
  cmd->add_option("--data-dir", f->agent.data_dir, "State and checkpoint scratch")
      ->envname("CARAVELA_DATA_DIR")
      ->capture_default_str();
  cmd->add_option("--slots", f->agent.slots, "Tasks it can run")
      ->envname("CARAVELA_SLOTS")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  cmd->add_option("--drain-timeout", f->drain_timeout,
                  "On SIGTERM: how long to wait for its tasks to move to other workers through a "
                  "checkpoint before stopping them (SIGINT stops at once)")
      ->envname("CARAVELA_DRAIN_TIMEOUT")
      ->capture_default_str();
  cmd->add_option("--token-file", f->token_file,
                  "File holding the bearer token the coordinator requires")
      ->envname("CARAVELA_TOKEN_FILE");
  cmd->add_option("--http", f->agent.http_listen,
                  "HOST:PORT for /metrics (its tasks' counters) and /healthz (port 0: any)")
      ->envname("CARAVELA_HTTP");
  cmd->add_option("--bootstrap", f->agent.bootstrap,
                  "Kafka bootstrap for jobs that name none (sources, sinks, exchanges)")
      ->envname("CARAVELA_BOOTSTRAP");
  cmd->add_option("--kafka-property", f->kafka_properties,
                  "KEY=VALUE: a librdkafka property for every Kafka client of the worker\n"
                  "(repeatable; e.g. security.protocol=SASL_SSL). A job's kafka.properties win\n"
                  "over it; keys Caravela sets for its guarantees are refused. The variable\n"
                  "holds one KEY=VALUE a line")
      ->envname("CARAVELA_KAFKA_PROPERTY")
      ->delimiter('\n');
  cmd->add_option("--shared-dir", f->agent.shared_dir,
                  "A directory every worker mounts at the same path (NFS, a shared volume):\n"
                  "jobs' relative file paths resolve against it and their default dead letter\n"
                  "goes to <shared-dir>/<job id>/. Without one, jobs with relative file paths\n"
                  "are refused")
      ->envname("CARAVELA_SHARED_DIR");
  cmd->add_option("--allow-path", f->agent.allowed_paths,
                  "Another absolute directory jobs may read and write files in (repeatable;\n"
                  "it must be the same on every worker)")
      ->envname("CARAVELA_ALLOW_PATH");
  cmd->add_option("--tls-ca", f->agent.tls_ca,
                  "PEM file of the roots to trust: talk TLS to the coordinator (and, with\n"
                  "--tls-cert, to the other workers)")
      ->envname("CARAVELA_TLS_CA");
  cmd->add_option("--tls-cert", f->agent.tls_cert,
                  "PEM certificate chain: serve TLS (health, exchange streams) with --tls-key;\n"
                  "the worker then reaches its peers over TLS too, trusting --tls-ca")
      ->envname("CARAVELA_TLS_CERT");
  cmd->add_option("--tls-key", f->agent.tls_key, "PEM private key of --tls-cert")
      ->envname("CARAVELA_TLS_KEY");
  return {cmd, [cmd, f] { return RunWorker(*cmd, *f); }};
}

}  // namespace caravela
