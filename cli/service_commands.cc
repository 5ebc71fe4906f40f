#include "cli/service_commands.h"

#include <spawn.h>
#include <sys/wait.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/time_util.h"
#include "coordinator/coordinator.h"
#include "coordinator/job_client.h"
#include "coordinator/job_state.h"
#include "proto/grpc_support.h"
#include "worker/agent/worker_agent.h"
#include "worker/connectors/embedded_broker.h"
#include "worker/exchange/exchange.h"
#include "worker/runtime/job_runner.h"

extern char** environ;  // posix_spawn: the workers inherit the environment

namespace caravela {
namespace {

struct Flags {
  // coordinator
  CoordinatorOptions coordinator;
  std::string token_file;
  std::string tls_ca;
  // clients
  std::string address;
  std::string job_file;
  std::string job_id;
  int parallelism = 0;
  bool json = false;
  CLI::App* coordinator_cmd = nullptr;
  CLI::App* submit = nullptr;
  CLI::App* jobs = nullptr;
  CLI::App* job = nullptr;
  CLI::App* cancel = nullptr;
  CLI::App* rescale = nullptr;
  int rescale_to = 0;
  CLI::App* savepoint = nullptr;
  CLI::App* health = nullptr;
  std::string health_address;
  std::string savepoint_dir;
  std::string from_savepoint;
  std::string wait = "10m";
  // workers
  std::string worker_timeout = "10s";
  WorkerAgentOptions worker;
  std::string worker_data_dir = "caravela-worker";
  std::string drain_timeout = "25s";
  CLI::App* worker_cmd = nullptr;
  CLI::App* workers = nullptr;
  // local
  int local_workers = 2;
  int local_slots = 4;
  std::string local_dir = "caravela-local";
  CLI::App* local = nullptr;
};

Flags& F() {
  static Flags flags;
  return flags;
}

std::atomic<bool> g_stop{false};
void OnStop(int) { g_stop = true; }
std::atomic<bool> g_term{false};
void OnTerm(int) { g_term = true; }

// The token from --token-file, else $CARAVELA_TOKEN; empty for none.
bool ReadToken(std::string* token) {
  if (!F().token_file.empty()) {
    std::ifstream in(F().token_file);
    if (!in) {
      std::fprintf(stderr, "error: cannot read --token-file %s\n", F().token_file.c_str());
      return false;
    }
    std::stringstream ss;
    ss << in.rdbuf();
    *token = std::string(absl::StripAsciiWhitespace(ss.str()));
    return true;
  }
  if (const char* t = std::getenv("CARAVELA_TOKEN"); t != nullptr) *token = t;
  return true;
}

int Fail(const absl::Status& st) {
  std::fprintf(stderr, "error: %s\n", std::string(st.message()).c_str());
  if (absl::IsUnauthenticated(st)) return 3;
  return 1;
}

int CoordinatorCommand() {
  Flags& f = F();
  if (!ReadToken(&f.coordinator.token)) return 2;
  const std::optional<int64_t> timeout = ParseDuration(f.worker_timeout);
  if (!timeout.has_value() || *timeout <= 0) {
    std::fprintf(stderr, "error: --worker-timeout %s: expected a duration such as 10s\n",
                 f.worker_timeout.c_str());
    return 2;
  }
  f.coordinator.worker_timeout_ms = *timeout;
  absl::StatusOr<std::unique_ptr<Coordinator>> c = Coordinator::Start(f.coordinator);
  if (!c.ok()) return Fail(c.status());
  std::printf("caravela coordinator: grpc=%s http=%s data-dir=%s auth=%s\n",
              (*c)->grpc_address().c_str(),
              (*c)->http_address().empty() ? "off" : (*c)->http_address().c_str(),
              f.coordinator.data_dir.c_str(), f.coordinator.token.empty() ? "off" : "token");
  std::fflush(stdout);
  std::signal(SIGINT, OnStop);
  std::signal(SIGTERM, OnStop);
  std::thread watcher([&] {
    while (!g_stop.load()) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    (*c)->Shutdown();
  });
  (*c)->Wait();
  g_stop = true;
  watcher.join();
  return 0;
}

std::string Address() {
  if (!F().address.empty()) return F().address;
  if (const char* a = std::getenv("CARAVELA_COORDINATOR"); a != nullptr && *a != '\0') return a;
  return "127.0.0.1:7400";
}

void PrintJobRow(const v1::Job& j) {
  std::printf("%-28s %-11s %11d %6d %5lld  %s\n", j.id().c_str(), JobStateName(j.state()).c_str(),
              j.parallelism(), j.stages(), static_cast<long long>(j.epoch()), j.message().c_str());
}

// `caravela savepoint ID DIR`: asks for the stop, then waits until the job
// ended with its savepoint (exit 0) or went on without one (exit 1).
int SavepointCommand(JobClient& client) {
  Flags& f = F();
  const std::optional<int64_t> wait = ParseDuration(f.wait);
  if (!wait.has_value() || *wait < 0) {
    std::fprintf(stderr, "error: --wait %s: expected a duration such as 10m\n", f.wait.c_str());
    return 2;
  }
  absl::StatusOr<v1::Job> job = client.StopWithSavepoint(f.job_id, f.savepoint_dir);
  if (!job.ok()) return Fail(job.status());
  const std::string dir = job->savepoint_to();
  if (!f.json) {
    std::fprintf(stderr, "job %s: stopping at its next checkpoint, then writing it to %s\n",
                 f.job_id.c_str(), dir.c_str());
  }
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(*wait);
  while (job->savepoint_to() == dir && !IsFinal(job->state())) {
    if (std::chrono::steady_clock::now() >= until) {
      std::fprintf(stderr,
                   "error: job %s has not finished its savepoint after %s (%s); it goes on: "
                   "watch `caravela job %s`\n",
                   f.job_id.c_str(), f.wait.c_str(), job->message().c_str(), f.job_id.c_str());
      return 1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    job = client.Get(f.job_id);
    if (!job.ok()) return Fail(job.status());
  }
  if (f.json) std::printf("%s\n", ProtoJson(*job).c_str());
  if (job->state() == v1::FINISHED && job->savepoint() == dir) {
    if (!f.json) std::printf("%s\n", dir.c_str());
    return 0;
  }
  std::fprintf(stderr, "error: job %s is %s without the savepoint: %s\n", f.job_id.c_str(),
               JobStateName(job->state()).c_str(), job->message().c_str());
  return 1;
}

int ClientCommand() {
  Flags& f = F();
  std::string token;
  if (!ReadToken(&token)) return 2;
  // Importing a savepoint copies its state before the answer.
  JobClient client(Address(), token, f.from_savepoint.empty() ? 10000 : 600000, f.tls_ca);
  if (*f.savepoint) return SavepointCommand(client);
  if (*f.submit) {
    std::ifstream in(f.job_file);
    std::stringstream yaml;
    yaml << in.rdbuf();
    absl::StatusOr<v1::SubmitJobResponse> r =
        client.Submit(yaml.str(), f.parallelism, f.from_savepoint);
    if (!r.ok()) return Fail(r.status());
    if (f.json) {
      std::printf("%s\n", ProtoJson(*r).c_str());
    } else if (r->job_id().empty()) {
      std::fprintf(stderr, "%s: %d error%s\n", f.job_file.c_str(), r->errors_size(),
                   r->errors_size() == 1 ? "" : "s");
      for (const v1::ValidationError& e : r->errors()) {
        std::fprintf(stderr, "  %s: %s\n", e.path().c_str(), e.message().c_str());
      }
    } else {
      std::printf("%s\n", r->job_id().c_str());
    }
    return r->job_id().empty() ? 2 : 0;
  }
  if (*f.jobs) {
    absl::StatusOr<std::vector<v1::Job>> jobs = client.List();
    if (!jobs.ok()) return Fail(jobs.status());
    if (f.json) {
      v1::ListJobsResponse r;
      for (const v1::Job& j : *jobs) *r.add_jobs() = j;
      std::printf("%s\n", ProtoJson(r).c_str());
      return 0;
    }
    std::printf("%-28s %-11s %11s %6s %5s  %s\n", "JOB", "STATE", "PARALLELISM", "STAGES", "EPOCH",
                "MESSAGE");
    for (const v1::Job& j : *jobs) PrintJobRow(j);
    return 0;
  }
  absl::StatusOr<v1::Job> job = *f.job       ? client.Get(f.job_id)
                                : *f.rescale ? client.Rescale(f.job_id, f.rescale_to)
                                             : client.Cancel(f.job_id);
  if (!job.ok()) return Fail(job.status());
  if (f.json) {
    std::printf("%s\n", ProtoJson(*job).c_str());
    return 0;
  }
  PrintJobRow(*job);
  if (*f.job && job->tasks_size() > 0) {
    // Per task: where it runs and how far it is (live from heartbeats).
    std::printf("last checkpoint %lld\n", static_cast<long long>(job->last_checkpoint()));
    std::printf("%5s %5s %5s  %-12s %-15s %12s %12s %10s %10s  %-24s %s\n", "TASK", "STAGE",
                "INDEX", "WORKER", "STATE", "RECORDS_IN", "RECORDS_OUT", "LAG", "CHECKPOINT",
                "WATERMARK", "PARTITIONS");
    for (int g = 0; g < job->tasks_size(); ++g) {
      const v1::TaskStatus& t = job->tasks(g);
      // "purchases:0,3 shipments:0,3": the source partitions it reads.
      std::string parts;
      std::string last;
      for (const v1::SourcePartitionStatus& p : t.sources()) {
        const bool same = p.source() == last;
        absl::StrAppend(&parts, same ? "," : (parts.empty() ? "" : " "),
                        same ? "" : p.source() + ":", p.partition());
        last = p.source();
      }
      std::printf(
          "%5d %5d %5d  %-12s %-15s %12lld %12lld %10lld %10lld  %-24s %s%s%s\n", g, t.stage(),
          t.index(), t.worker().c_str(), t.state().c_str(), static_cast<long long>(t.records_in()),
          static_cast<long long>(t.records_out()), static_cast<long long>(t.consumer_lag()),
          static_cast<long long>(t.last_checkpoint()),
          t.state() == "ASSIGNED" ? "" : FormatWatermark(t.watermark_ms()).c_str(),
          parts.empty() ? "-" : parts.c_str(), t.error().empty() ? "" : "  ", t.error().c_str());
    }
  }
  return 0;
}

int WorkerCommand() {
  Flags& f = F();
  if (!ReadToken(&f.worker.token)) return 2;
  f.worker.coordinator = Address();
  f.worker.tls_ca = f.tls_ca;
  f.worker.data_dir = f.worker_data_dir;
  for (const std::string& p : f.worker.allowed_paths) {
    if (!std::filesystem::path(p).is_absolute()) {
      std::fprintf(stderr, "error: --allow-path %s: give an absolute directory\n", p.c_str());
      return 2;
    }
  }
  f.worker.on_registered = [&](const std::string& id) {
    std::printf("caravela worker: id=%s coordinator=%s\n", id.c_str(),
                f.worker.coordinator.c_str());
    std::fflush(stdout);
  };
  absl::StatusOr<std::unique_ptr<WorkerAgent>> agent = WorkerAgent::Start(f.worker);
  if (!agent.ok()) return Fail(agent.status());
  std::printf("caravela worker: grpc=%s http=%s slots=%d data-dir=%s\n",
              (*agent)->address().c_str(),
              (*agent)->http_address().empty() ? "off" : (*agent)->http_address().c_str(),
              f.worker.slots, f.worker_data_dir.c_str());
  std::fflush(stdout);
  // SIGTERM (Kubernetes, systemd): hand the tasks over, then leave.
  // SIGINT (Ctrl-C): stop at once.
  std::signal(SIGINT, OnStop);
  std::signal(SIGTERM, OnTerm);
  while (!g_stop.load() && !g_term.load()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  if (g_term.load() && !g_stop.load()) {
    const std::optional<int64_t> drain = ParseDuration(f.drain_timeout);
    (*agent)->Drain(drain.value_or(25000));
  } else {
    (*agent)->Stop();
  }
  return 0;
}

// `caravela health [HOST:PORT]`: the grpc.health.v1 answer of a coordinator
// or worker (no token needed), for container health checks and scripts.
int HealthCommand() {
  Flags& f = F();
  const std::string address = f.health_address.empty() ? Address() : f.health_address;
  JobClient client(address, "", 3000, f.tls_ca);
  absl::StatusOr<std::string> status = client.Health();
  if (!status.ok()) return Fail(status.status());
  std::printf("%s %s\n", address.c_str(), status->c_str());
  return *status == "SERVING" ? 0 : 1;
}

int WorkersCommand() {
  Flags& f = F();
  std::string token;
  if (!ReadToken(&token)) return 2;
  JobClient client(Address(), token, 10000, f.tls_ca);
  absl::StatusOr<std::vector<v1::WorkerInfo>> workers = client.Workers();
  if (!workers.ok()) return Fail(workers.status());
  if (f.json) {
    v1::ListWorkersResponse r;
    for (const v1::WorkerInfo& w : *workers) *r.add_workers() = w;
    std::printf("%s\n", ProtoJson(r).c_str());
    return 0;
  }
  std::printf("%-12s %-6s %5s %5s  %-22s %s\n", "WORKER", "STATE", "SLOTS", "TASKS", "ADDRESS",
              "HOST");
  for (const v1::WorkerInfo& w : *workers) {
    std::printf("%-12s %-6s %5d %5d  %-22s %s\n", w.id().c_str(),
                v1::WorkerState_Name(w.state()).c_str(), w.slots(), w.running_tasks(),
                w.address().c_str(), w.host().c_str());
  }
  return 0;
}

// `caravela local`: the embedded broker and a coordinator in this process,
// N `caravela worker` child processes; until Ctrl-C or SIGTERM, then the
// workers are stopped too.
int LocalCommand() {
  Flags& f = F();
  absl::StatusOr<std::unique_ptr<EmbeddedBroker>> broker =
      EmbeddedBroker::Start(0, EmbeddedBroker::kAutoCreatePartitions);
  if (!broker.ok()) return Fail(broker.status());
  CoordinatorOptions co;
  co.listen = f.coordinator.listen;
  co.data_dir = f.local_dir + "/coordinator";
  co.http_listen = f.coordinator.http_listen;
  co.allowed_paths = f.coordinator.allowed_paths;
  // Jobs that name no Kafka cluster use this broker; it serves no
  // CreateTopics to the worker processes, so the exchange topics are
  // created here.
  const std::string bootstrap = (*broker)->bootstrap();
  co.prepare_job = [bootstrap](const JobSpec& spec, const JobPlan& plan) -> absl::Status {
    if (!JobKafkaBootstrap(spec, "").empty()) return absl::OkStatus();
    for (const ExchangePlan& ex : plan.exchanges) {
      RETURN_IF_ERROR(EnsureExchangeTopic(bootstrap, ex.topic, ex.partitions));
    }
    return absl::OkStatus();
  };
  absl::StatusOr<std::unique_ptr<Coordinator>> c = Coordinator::Start(co);
  if (!c.ok()) return Fail(c.status());
  std::vector<pid_t> pids;
  for (int i = 0; i < f.local_workers; ++i) {
    const std::string data = absl::StrCat(f.local_dir, "/worker-", i);
    std::vector<std::string> args = {
        "caravela",    "worker",  "--coordinator", (*c)->grpc_address(),         "--data-dir", data,
        "--bootstrap", bootstrap, "--slots",       std::to_string(f.local_slots)};
    for (const std::string& p : co.allowed_paths) {
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
  std::printf("caravela local: broker=%s coordinator=%s http=%s workers=%d data-dir=%s\n",
              (*broker)->bootstrap().c_str(), (*c)->grpc_address().c_str(),
              (*c)->http_address().empty() ? "off" : (*c)->http_address().c_str(), f.local_workers,
              f.local_dir.c_str());
  std::fflush(stdout);
  std::signal(SIGINT, OnStop);
  std::signal(SIGTERM, OnStop);
  while (!g_stop.load()) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  for (pid_t p : pids) ::kill(p, SIGINT);  // all leave: no handover
  for (pid_t p : pids) ::waitpid(p, nullptr, 0);
  (*c)->Shutdown();
  return 0;
}

void AddClientOptions(CLI::App* cmd) {
  cmd->add_option("--coordinator", F().address,
                  "Coordinator HOST:PORT (default $CARAVELA_COORDINATOR, else 127.0.0.1:7400)");
  cmd->add_option("--token-file", F().token_file,
                  "File holding the bearer token (default $CARAVELA_TOKEN)");
  cmd->add_flag("--json", F().json, "Print JSON (proto3 JSON mapping) for scripts");
  cmd->add_option("--tls-ca", F().tls_ca,
                  "PEM file of the roots to trust: talk TLS to the coordinator");
}

}  // namespace

void AddServiceCommands(CLI::App& app) {
  Flags& f = F();
  f.coordinator_cmd = app.add_subcommand(
      "coordinator",
      "Run the coordinator: the gRPC JobService over a durable job store; places the\n"
      "tasks of submitted jobs on workers, coordinates their checkpoints and restarts\n"
      "them from the last one when a worker dies; gRPC health and reflection. Prints\n"
      "one line with its address when ready; with --http, the web dashboard, the JSON API\n"
      "and /metrics.");
  f.coordinator_cmd->add_option("--listen", f.coordinator.listen, "gRPC HOST:PORT (port 0: any)")
      ->envname("CARAVELA_LISTEN")
      ->capture_default_str();
  f.coordinator_cmd
      ->add_option("--http", f.coordinator.http_listen,
                   "HTTP HOST:PORT for the dashboard (/), the JSON API under /api/v1/, "
                   "/metrics and /healthz (port 0: any; default none)")
      ->envname("CARAVELA_HTTP");
  f.coordinator_cmd->add_option("--data-dir", f.coordinator.data_dir, "Job store directory")
      ->envname("CARAVELA_DATA_DIR")
      ->capture_default_str();
  f.coordinator_cmd
      ->add_option("--token-file", f.token_file, "Require this bearer token on every call")
      ->envname("CARAVELA_TOKEN_FILE");
  f.coordinator_cmd
      ->add_option("--storage", f.coordinator.checkpoint_storage,
                   "Checkpoint storage URL every worker reaches, for jobs that name none\n"
                   "(default file://<data-dir>/checkpoints: one machine or a shared volume)")
      ->envname("CARAVELA_STORAGE");
  f.coordinator_cmd
      ->add_option("--tls-cert", f.coordinator.tls_cert_file,
                   "PEM certificate chain: serve TLS (with --tls-key)")
      ->envname("CARAVELA_TLS_CERT");
  f.coordinator_cmd->add_option("--tls-key", f.coordinator.tls_key_file, "PEM private key")
      ->envname("CARAVELA_TLS_KEY");
  f.coordinator_cmd
      ->add_option(
          "--allow-path", f.coordinator.allowed_paths,
          "An absolute directory submitted jobs may read and write files in, and savepoints\n"
          "may be written to or read from (repeatable; default none: only paths relative to a\n"
          "worker's data directory, and savepoints under <data-dir>/savepoints)")
      ->envname("CARAVELA_ALLOW_PATH");
  f.coordinator_cmd
      ->add_option("--worker-timeout", f.worker_timeout,
                   "A worker without heartbeats for this long is dead (its lease)")
      ->envname("CARAVELA_WORKER_TIMEOUT")
      ->capture_default_str();

  f.worker_cmd = app.add_subcommand(
      "worker",
      "Run a worker: registers with the coordinator, heartbeats within its lease and\n"
      "runs the tasks the coordinator assigns it (one thread each; all of them stop when\n"
      "the lease is lost); serves gRPC health. Prints its id and address.");
  f.worker_cmd
      ->add_option("--coordinator", f.address,
                   "Coordinator HOST:PORT (default $CARAVELA_COORDINATOR)")
      ->envname("CARAVELA_COORDINATOR");
  f.worker_cmd->add_option("--listen", f.worker.listen, "The worker's gRPC HOST:PORT (port 0: any)")
      ->envname("CARAVELA_LISTEN")
      ->capture_default_str();
  f.worker_cmd->add_option("--data-dir", f.worker_data_dir, "State and checkpoint scratch")
      ->envname("CARAVELA_DATA_DIR")
      ->capture_default_str();
  f.worker_cmd->add_option("--slots", f.worker.slots, "Tasks it can run")
      ->envname("CARAVELA_SLOTS")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  f.worker_cmd
      ->add_option("--drain-timeout", f.drain_timeout,
                   "On SIGTERM: how long to wait for its tasks to move to other workers through a "
                   "checkpoint before stopping them (SIGINT stops at once)")
      ->envname("CARAVELA_DRAIN_TIMEOUT")
      ->capture_default_str();
  f.worker_cmd
      ->add_option("--token-file", f.token_file,
                   "File holding the bearer token (default $CARAVELA_TOKEN)")
      ->envname("CARAVELA_TOKEN_FILE");
  f.worker_cmd
      ->add_option("--http", f.worker.http_listen,
                   "HOST:PORT for /metrics (its tasks' counters) and /healthz (port 0: any)")
      ->envname("CARAVELA_HTTP");
  f.worker_cmd
      ->add_option("--bootstrap", f.worker.bootstrap,
                   "Kafka bootstrap for jobs that name none (sources, sinks, exchanges)")
      ->envname("CARAVELA_BOOTSTRAP");
  f.worker_cmd
      ->add_option(
          "--allow-path", f.worker.allowed_paths,
          "An absolute directory jobs may read and write files in (repeatable; default: the\n"
          "data directory). Relative paths of a job are resolved against <data-dir>/<job id>.")
      ->envname("CARAVELA_ALLOW_PATH");
  f.worker_cmd
      ->add_option("--tls-ca", f.tls_ca,
                   "PEM file of the roots to trust: talk TLS to the coordinator")
      ->envname("CARAVELA_TLS_CA");
  f.local = app.add_subcommand(
      "local",
      "A whole cluster on this machine: the embedded Kafka broker and a coordinator in\n"
      "this process, N worker processes; prints the addresses; runs until Ctrl-C.");
  f.local->add_option("--workers", f.local_workers, "Worker processes")
      ->check(CLI::Range(0, 64))
      ->capture_default_str();
  f.local->add_option("--listen", f.coordinator.listen, "Coordinator gRPC HOST:PORT (port 0: any)")
      ->capture_default_str();
  f.local->add_option("--slots", f.local_slots, "Tasks each worker can run")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  f.local->add_option("--http", f.coordinator.http_listen,
                      "Coordinator HTTP HOST:PORT (/healthz, /api/v1/; default none)");
  f.local->add_option("--allow-path", f.coordinator.allowed_paths,
                      "An absolute directory jobs may read and write files in (repeatable; "
                      "default: only each worker's data directory)");
  f.local->add_option("--data-dir", f.local_dir, "Coordinator and worker data")
      ->capture_default_str();
  f.health = app.add_subcommand(
      "health",
      "Ask a coordinator or worker for its gRPC health (grpc.health.v1, no token needed); "
      "prints ADDRESS SERVING and exits 0, else 1 (container health checks)");
  f.health->add_option("address", f.health_address,
                       "HOST:PORT of its gRPC service (default: the coordinator's)");
  f.health->add_option("--coordinator", f.address, "Same as ADDRESS");
  f.health->add_option("--tls-ca", f.tls_ca, "PEM file of the roots to trust: talk TLS");
  f.workers = app.add_subcommand("workers", "List the workers the coordinator knows");
  AddClientOptions(f.workers);

  f.submit = app.add_subcommand(
      "submit", "Submit a job YAML to the coordinator; prints its id (exit 2: invalid job)");
  f.submit->add_option("job", f.job_file, "Job YAML")->required()->check(CLI::ExistingFile);
  f.submit->add_option("--parallelism", f.parallelism, "Tasks per stage (default: the spec's)")
      ->check(CLI::Range(1, 1 << 20));
  f.submit->add_option("--from-savepoint", f.from_savepoint,
                       "Start from this savepoint (a directory on the coordinator, as given to "
                       "`caravela savepoint`); any parallelism");
  AddClientOptions(f.submit);
  f.jobs = app.add_subcommand("jobs", "List the coordinator's jobs");
  AddClientOptions(f.jobs);
  f.job = app.add_subcommand("job", "Show one job");
  f.job->add_option("id", f.job_id, "Job id")->required();
  AddClientOptions(f.job);
  f.cancel = app.add_subcommand("cancel", "Cancel a job");
  f.cancel->add_option("id", f.job_id, "Job id")->required();
  AddClientOptions(f.cancel);
  f.rescale = app.add_subcommand(
      "rescale",
      "Change a running job's tasks per stage: it stops at a checkpoint and resumes with N "
      "tasks, each taking its keys' state from the old tasks");
  f.rescale->add_option("id", f.job_id, "Job id")->required();
  f.rescale->add_option("parallelism", f.rescale_to, "New tasks per stage")
      ->required()
      ->check(CLI::Range(1, 1024));
  AddClientOptions(f.rescale);
  f.savepoint = app.add_subcommand(
      "savepoint",
      "Stop a running job with a savepoint: its next checkpoint is its last (sinks publish it) "
      "and is copied to DIR; waits until written and prints DIR (exit 1: no savepoint, the "
      "job goes on). Start it again with `caravela submit JOB.yaml --from-savepoint DIR`");
  f.savepoint->add_option("id", f.job_id, "Job id")->required();
  f.savepoint
      ->add_option("dir", f.savepoint_dir,
                   "Directory on the coordinator's filesystem: a name (under its "
                   "<data-dir>/savepoints) or an absolute path under an --allow-path")
      ->required();
  f.savepoint->add_option("--wait", f.wait, "How long to wait for the savepoint")
      ->capture_default_str();
  AddClientOptions(f.savepoint);
}

int RunServiceCommands() {
  Flags& f = F();
  if (*f.coordinator_cmd) return CoordinatorCommand();
  if (*f.worker_cmd) return WorkerCommand();
  if (*f.workers) return WorkersCommand();
  if (*f.health) return HealthCommand();
  if (*f.local) return LocalCommand();
  if (*f.submit || *f.jobs || *f.job || *f.cancel || *f.rescale || *f.savepoint) {
    return ClientCommand();
  }
  return -1;
}

}  // namespace caravela
