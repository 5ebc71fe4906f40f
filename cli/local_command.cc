// `caravela local`: a whole cluster on this machine. The embedded broker (or,
// with --bootstrap, an existing Kafka) and a coordinator run in this
// process, N `caravela worker` child processes beside it (worker-<n> in the
// data directory, with their own /metrics); a worker that exits is logged
// and started again. Until SIGINT or SIGTERM, then the workers are stopped
// too; killed (SIGKILL), its workers leave by themselves (kLocalPidVariable).
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "cli/command_support.h"
#include "cli/commands.h"
#include "coordinator/coordinator.h"
#include "worker/connectors/embedded_broker.h"
#include "worker/connectors/kafka_properties.h"
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
  std::string token_file;
  // The workers' HTTP HOST:PORT; a port other than 0 is the first worker's,
  // the next ones count up. Empty: none.
  std::string worker_http = "127.0.0.1:0";
  // An existing Kafka (HOST:PORT[,...]) instead of the embedded broker.
  std::string bootstrap;
  std::vector<std::string> kafka_properties;  // KEY=VALUE, for every client
};

// The worker processes: started, watched, restarted when one exits.
class LocalWorkers {
 public:
  explicit LocalWorkers(std::vector<std::vector<std::string>> args) : args_(std::move(args)) {
    pids_.assign(args_.size(), -1);
    started_.assign(args_.size(), Clock::time_point());
    backoff_.assign(args_.size(), std::chrono::seconds(1));
  }
  ~LocalWorkers() { Stop(); }

  // Starts every worker; false (the error printed) when one cannot be.
  bool StartAll() {
    for (size_t i = 0; i < args_.size(); ++i) {
      if (!Spawn(i)) return false;
    }
    return true;
  }

  // Reaps the workers that exited and starts them again: at once after one
  // that ran for a minute, else after 1 s, 2 s, 4 s ... (up to 30 s) so
  // that one failing at startup does not spin.
  void Watch() {
    const Clock::time_point now = Clock::now();
    for (size_t i = 0; i < args_.size(); ++i) {
      if (pids_[i] > 0) {
        int status = 0;
        if (::waitpid(pids_[i], &status, WNOHANG) != pids_[i]) continue;
        std::fprintf(stderr, "caravela local: worker-%zu (pid %d) %s; starting it again\n", i + 1,
                     static_cast<int>(pids_[i]), Describe(status).c_str());
        pids_[i] = -1;
        const bool ran_long = now - started_[i] > std::chrono::minutes(1);
        backoff_[i] = ran_long ? std::chrono::seconds(0)
                               : std::min<std::chrono::seconds>(
                                     std::max(backoff_[i] * 2, std::chrono::seconds(1)),
                                     std::chrono::seconds(30));
        started_[i] = now;  // the restart waits from here
      }
      if (pids_[i] < 0 && now - started_[i] >= backoff_[i]) Spawn(i);
    }
  }

  // SIGINT to every worker (they leave at once: no handover), then waits.
  void Stop() {
    for (pid_t p : pids_) {
      if (p > 0) ::kill(p, SIGINT);
    }
    for (pid_t& p : pids_) {
      if (p > 0) ::waitpid(p, nullptr, 0);
      p = -1;
    }
  }

 private:
  using Clock = std::chrono::steady_clock;

  static std::string Describe(int status) {
    if (WIFSIGNALED(status)) return absl::StrCat("was killed by signal ", WTERMSIG(status));
    return absl::StrCat("exited with code ", WEXITSTATUS(status));
  }

  bool Spawn(size_t i) {
    std::vector<char*> argv;
    argv.reserve(args_[i].size() + 1);
    for (std::string& a : args_[i]) argv.push_back(a.data());
    argv.push_back(nullptr);
    // The environment, plus this process's pid: the worker leaves when this
    // process dies, however it dies (worker_command.cc).
    const std::string prefix = absl::StrCat(kLocalPidVariable, "=");
    std::vector<std::string> env_strings = {absl::StrCat(prefix, ::getpid())};
    for (char** e = environ; *e != nullptr; ++e) {
      if (!absl::StartsWith(*e, prefix)) env_strings.push_back(*e);
    }
    std::vector<char*> env;
    env.reserve(env_strings.size() + 1);
    for (std::string& e : env_strings) env.push_back(e.data());
    env.push_back(nullptr);
    pid_t pid = -1;
    if (posix_spawn(&pid, "/proc/self/exe", nullptr, nullptr, argv.data(), env.data()) != 0) {
      std::fprintf(stderr, "caravela local: cannot start worker-%zu\n", i + 1);
      started_[i] = Clock::now();
      return false;
    }
    pids_[i] = pid;
    started_[i] = Clock::now();
    return true;
  }

  std::vector<std::vector<std::string>> args_;
  std::vector<pid_t> pids_;
  std::vector<Clock::time_point> started_;
  std::vector<std::chrono::seconds> backoff_;
};

// The HTTP address of the `n`-th worker (0-based) for --worker-http `base`.
absl::StatusOr<std::string> WorkerHttp(const std::string& base, int n) {
  if (base.empty()) return std::string();
  const size_t colon = base.rfind(':');
  int port = 0;
  if (colon == std::string::npos || !absl::SimpleAtoi(base.substr(colon + 1), &port) || port < 0 ||
      port + n > 65535) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--worker-http ", base, ": expected HOST:PORT (port 0: any), e.g. 127.0.0.1:9100"));
  }
  return port == 0 ? base : absl::StrCat(base.substr(0, colon), ":", port + n);
}

int RunLocal(const CLI::App& cmd, LocalFlags& f) {
  // Not given, the coordinator's (CARAVELA_LISTEN, CARAVELA_HTTP,
  // CARAVELA_ALLOW_PATH, or a [coordinator] section of --config).
  InheritOption(cmd, "--listen", {"coordinator"}, &f.coordinator.listen);
  InheritOption(cmd, "--http", {"coordinator"}, &f.coordinator.http_listen);
  InheritOption(cmd, "--allow-path", {"coordinator"}, &f.coordinator.allowed_paths);
  InheritOption(cmd, "--token-file", {"coordinator", "worker"}, &f.token_file);
  // The worker's CARAVELA_KAFKA_PROPERTY (which the workers inherit too).
  InheritOption(cmd, "--kafka-property", {"worker"}, &f.kafka_properties);
  std::string token;
  if (!ReadToken(f.token_file, &token)) return 2;
  std::vector<std::string> worker_http(f.workers);
  for (int i = 0; i < f.workers; ++i) {
    absl::StatusOr<std::string> http = WorkerHttp(f.worker_http, i);
    if (!http.ok()) {
      std::fprintf(stderr, "error: %s\n", std::string(http.status().message()).c_str());
      return 2;
    }
    worker_http[i] = *std::move(http);
  }
  // This process's clients (the exchange topics below) and the workers'.
  if (absl::Status st = SetProcessKafkaProperties(f.kafka_properties); !st.ok()) {
    std::fprintf(stderr, "error: %s\n", std::string(st.message()).c_str());
    return 2;
  }
  // The embedded broker, unless the cluster uses an existing Kafka.
  std::unique_ptr<EmbeddedBroker> broker;
  std::string bootstrap = f.bootstrap;
  if (bootstrap.empty()) {
    absl::StatusOr<std::unique_ptr<EmbeddedBroker>> started =
        EmbeddedBroker::Start(0, EmbeddedBroker::kAutoCreatePartitions);
    if (!started.ok()) return Fail(started.status());
    broker = *std::move(started);
    bootstrap = broker->bootstrap();
  }
  CoordinatorOptions co;
  co.token = token;
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
  // Jobs that name no Kafka cluster use this one. The embedded broker serves
  // no CreateTopics to the worker processes, so the exchange topics of a job
  // with Kafka exchanges (spec.exchange: kafka) are created here, at submit.
  // An existing Kafka serves the workers' CreateTopics, but creating them
  // here too reports a problem (a topic with too few partitions, no rights
  // to create) when the job is submitted; with room for a rescale up to the
  // job's max_parallelism, as the workers would create them.
  const bool embedded = broker != nullptr;
  co.prepare_job = [bootstrap, embedded](const JobSpec& spec, const JobPlan& plan) -> absl::Status {
    if (spec.exchange != "kafka" || !JobKafkaBootstrap(spec, "").empty()) {
      return absl::OkStatus();
    }
    for (const ExchangePlan& ex : plan.exchanges) {
      RETURN_IF_ERROR(EnsureExchangeTopic(bootstrap, ex.topic, ex.partitions,
                                          embedded ? 0 : ex.CreatePartitions(plan)));
    }
    return absl::OkStatus();
  };
  absl::StatusOr<std::unique_ptr<Coordinator>> c = Coordinator::Start(co);
  if (!c.ok()) return Fail(c.status());
  // The workers reach the coordinator on loopback when it listens on every
  // interface (the image's CARAVELA_LISTEN=0.0.0.0:7400).
  std::string coordinator = (*c)->grpc_address();
  for (const char* any : {"0.0.0.0:", "[::]:"}) {
    if (coordinator.rfind(any, 0) == 0) {
      coordinator = "127.0.0.1:" + coordinator.substr(std::string(any).size());
    }
  }
  // Worker n asks for the id worker-<n> and keeps its data in worker-<n>
  // (once restarted after a kill it gets a new id: the old one was known).
  std::vector<std::vector<std::string>> worker_args;
  for (int i = 0; i < f.workers; ++i) {
    std::vector<std::string> args = {"caravela", "worker", "--coordinator", coordinator,
                                     "--data-dir", absl::StrCat(f.data_dir, "/worker-", i + 1),
                                     "--bootstrap", bootstrap, "--slots", std::to_string(f.slots),
                                     "--shared-dir", f.shared_dir, "--id",
                                     absl::StrCat("worker-", i + 1),
                                     // Not the coordinator's CARAVELA_LISTEN and
                                     // CARAVELA_HTTP, which they would inherit.
                                     "--listen", "127.0.0.1:0", "--http", worker_http[i]};
    for (const std::string& p : f.coordinator.allowed_paths) {
      args.push_back("--allow-path");
      args.push_back(p);
    }
    if (!f.token_file.empty()) {
      args.push_back("--token-file");
      args.push_back(std::filesystem::absolute(f.token_file).string());
    }
    for (const std::string& p : f.kafka_properties) {
      args.push_back("--kafka-property");
      args.push_back(p);
    }
    worker_args.push_back(std::move(args));
  }
  LocalWorkers workers(std::move(worker_args));
  if (!workers.StartAll()) return 1;  // the destructor stops those started
  // broker= is the Kafka the workers use; kafka= says whose it is.
  std::printf(
      "caravela local: broker=%s coordinator=%s http=%s workers=%d data-dir=%s shared-dir=%s "
      "kafka=%s\n",
      bootstrap.c_str(), (*c)->grpc_address().c_str(),
      (*c)->http_address().empty() ? "off" : (*c)->http_address().c_str(), f.workers,
      f.data_dir.c_str(), f.shared_dir.c_str(),
      embedded ? "embedded" : "existing (--bootstrap; no embedded broker)");
  std::fflush(stdout);
  CatchStopSignals(OnSigterm::kStop);
  while (!StopRequested()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    workers.Watch();
  }
  workers.Stop();
  (*c)->Shutdown();
  return 0;
}

}  // namespace

Command AddLocalCommand(CLI::App& app) {
  auto f = std::make_shared<LocalFlags>();
  CLI::App* cmd = app.add_subcommand(
      "local",
      "A whole cluster on this machine: the embedded Kafka broker (or, with --bootstrap,\n"
      "an existing Kafka) and a coordinator in this process, N worker processes; prints\n"
      "the addresses; runs until Ctrl-C.");
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
  cmd->add_option("--data-dir", f->data_dir,
                  "Coordinator and worker data (<data-dir>/coordinator, <data-dir>/worker-<n>)")
      ->capture_default_str();
  cmd->add_option("--token-file", f->token_file,
                  "File holding the bearer token every gRPC and HTTP call must carry "
                  "(default $CARAVELA_TOKEN_FILE; none: no auth)");
  cmd->add_option("--worker-http", f->worker_http,
                  "The workers' HTTP HOST:PORT for /metrics and /healthz: port 0 any, else the\n"
                  "first worker's port and the next ones count up (\"\": none)")
      ->capture_default_str();
  cmd->add_option("--bootstrap", f->bootstrap,
                  "An existing Kafka (HOST:PORT[,HOST:PORT...]) for the workers and the exchange\n"
                  "topics instead of the embedded broker, which is then not started");
  cmd->add_option("--kafka-property", f->kafka_properties,
                  "KEY=VALUE: a librdkafka property for every Kafka client of the cluster (the\n"
                  "workers' --kafka-property; repeatable), e.g. security.protocol=SASL_SSL");
  cmd->add_option("--shared-dir", f->shared_dir,
                  "The workers' shared directory: jobs' relative file paths (inputs, outputs,\n"
                  "dead letters) resolve against it (default <data-dir>/shared)");
  return {cmd, [cmd, f] { return RunLocal(*cmd, *f); }};
}

}  // namespace caravela
