// `caravela local`: a whole cluster on this machine. The embedded broker and
// a coordinator run in this process, N `caravela worker` child processes
// beside it; until SIGINT or SIGTERM, then the workers are stopped too.
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "cli/command_support.h"
#include "cli/commands.h"
#include "coordinator/coordinator.h"
#include "worker/connectors/embedded_broker.h"
#include "worker/exchange/exchange.h"
#include "worker/runtime/job_runner.h"

extern char** environ;  // posix_spawn: the workers inherit the environment

namespace caravela {
namespace {

struct LocalFlags {
  // Its --listen, --http and --allow-path, with the coordinator's defaults.
  CoordinatorOptions coordinator;
  int workers = 2;
  int slots = 4;
  std::string data_dir = "caravela-local";
  std::string shared_dir;  // default <data_dir>/shared
};

int RunLocal(const CLI::App& cmd, LocalFlags& f) {
  // Not given, the coordinator's (CARAVELA_LISTEN, CARAVELA_HTTP,
  // CARAVELA_ALLOW_PATH, or a [coordinator] section of --config).
  InheritOption(cmd, "--listen", {"coordinator"}, &f.coordinator.listen);
  InheritOption(cmd, "--http", {"coordinator"}, &f.coordinator.http_listen);
  InheritOption(cmd, "--allow-path", {"coordinator"}, &f.coordinator.allowed_paths);
  absl::StatusOr<std::unique_ptr<EmbeddedBroker>> broker =
      EmbeddedBroker::Start(0, EmbeddedBroker::kAutoCreatePartitions);
  if (!broker.ok()) return Fail(broker.status());
  CoordinatorOptions co;
  co.listen = f.coordinator.listen;
  co.data_dir = f.data_dir + "/coordinator";
  co.http_listen = f.coordinator.http_listen;
  co.allowed_paths = f.coordinator.allowed_paths;
  // The workers' shared directory: where jobs' relative paths resolve.
  if (f.shared_dir.empty()) f.shared_dir = f.data_dir + "/shared";
  {
    std::error_code ec;
    std::filesystem::create_directories(f.shared_dir, ec);
    f.shared_dir = std::filesystem::absolute(f.shared_dir).lexically_normal().string();
  }
  co.allowed_paths.push_back(f.shared_dir);
  // Jobs that name no Kafka cluster use this broker; it serves no
  // CreateTopics to the worker processes, so the exchange topics of a job
  // with Kafka exchanges (spec.exchange: kafka) are created here.
  const std::string bootstrap = (*broker)->bootstrap();
  co.prepare_job = [bootstrap](const JobSpec& spec, const JobPlan& plan) -> absl::Status {
    if (spec.exchange != "kafka" || !JobKafkaBootstrap(spec, "").empty()) {
      return absl::OkStatus();
    }
    for (const ExchangePlan& ex : plan.exchanges) {
      RETURN_IF_ERROR(EnsureExchangeTopic(bootstrap, ex.topic, ex.partitions));
    }
    return absl::OkStatus();
  };
  absl::StatusOr<std::unique_ptr<Coordinator>> c = Coordinator::Start(co);
  if (!c.ok()) return Fail(c.status());
  std::vector<pid_t> pids;
  for (int i = 0; i < f.workers; ++i) {
    const std::string data = absl::StrCat(f.data_dir, "/worker-", i);
    std::vector<std::string> args = {"caravela",      "worker",
                                     "--coordinator", (*c)->grpc_address(),
                                     "--data-dir",    data,
                                     "--bootstrap",   bootstrap,
                                     "--slots",       std::to_string(f.slots),
                                     "--shared-dir",  f.shared_dir};
    for (const std::string& p : f.coordinator.allowed_paths) {
      args.push_back("--allow-path");
      args.push_back(p);
    }
    std::vector<char*> argv;
    argv.reserve(args.size() + 1);
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    pid_t pid = -1;
    if (posix_spawn(&pid, "/proc/self/exe", nullptr, nullptr, argv.data(), environ) != 0) {
      std::fprintf(stderr, "error: cannot start worker %d\n", i);
      for (pid_t p : pids) ::kill(p, SIGINT);  // all leave: no handover
      return 1;
    }
    pids.push_back(pid);
  }
  std::printf(
      "caravela local: broker=%s coordinator=%s http=%s workers=%d data-dir=%s shared-dir=%s\n",
      (*broker)->bootstrap().c_str(), (*c)->grpc_address().c_str(),
      (*c)->http_address().empty() ? "off" : (*c)->http_address().c_str(), f.workers,
      f.data_dir.c_str(), f.shared_dir.c_str());
  std::fflush(stdout);
  CatchStopSignals(OnSigterm::kStop);
  while (!StopRequested()) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  for (pid_t p : pids) ::kill(p, SIGINT);  // all leave: no handover
  for (pid_t p : pids) ::waitpid(p, nullptr, 0);
  (*c)->Shutdown();
  return 0;
}

}  // namespace

Command AddLocalCommand(CLI::App& app) {
  auto f = std::make_shared<LocalFlags>();
  CLI::App* cmd = app.add_subcommand(
      "local",
      "A whole cluster on this machine: the embedded Kafka broker and a coordinator in\n"
      "this process, N worker processes; prints the addresses; runs until Ctrl-C.");
  cmd->add_option("--workers", f->workers, "Worker processes")
      ->check(CLI::Range(0, 64))
      ->capture_default_str();
  cmd->add_option("--listen", f->coordinator.listen, "Coordinator gRPC HOST:PORT (port 0: any)")
      ->capture_default_str();
  cmd->add_option("--slots", f->slots, "Tasks each worker can run")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  cmd->add_option("--http", f->coordinator.http_listen,
                  "Coordinator HTTP HOST:PORT (/healthz, /api/v1/; default none)");
  cmd->add_option("--allow-path", f->coordinator.allowed_paths,
                  "Another absolute directory jobs may read and write files in (repeatable; "
                  "besides the shared directory)");
  cmd->add_option("--data-dir", f->data_dir, "Coordinator and worker data")->capture_default_str();
  cmd->add_option("--shared-dir", f->shared_dir,
                  "The workers' shared directory: jobs' relative file paths (inputs, outputs,\n"
                  "dead letters) resolve against it (default <data-dir>/shared)");
  return {cmd, [cmd, f] { return RunLocal(*cmd, *f); }};
}

}  // namespace caravela
