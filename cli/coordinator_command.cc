// `caravela coordinator`: the coordinator process (coordinator/coordinator.h)
// until SIGINT or SIGTERM.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "cli/command_support.h"
#include "cli/commands.h"
#include "common/time_util.h"
#include "coordinator/coordinator.h"

namespace caravela {
namespace {

struct CoordinatorFlags {
  CoordinatorOptions options;  // the token and worker timeout filled in from the two below
  std::string token_file;
  std::string worker_timeout = "10s";
  std::string max_restart_backoff = "1m";
};

int RunCoordinator(const CLI::App& cmd, CoordinatorFlags& f) {
  // Without its own, the worker's token file (a [worker] section of --config).
  InheritOption(cmd, "--token-file", {"worker"}, &f.token_file);
  if (!ReadToken(f.token_file, &f.options.token)) return 2;
  const std::optional<int64_t> timeout = ParseDuration(f.worker_timeout);
  if (!timeout.has_value() || *timeout <= 0) {
    std::fprintf(stderr, "error: --worker-timeout %s: expected a duration such as 10s\n",
                 f.worker_timeout.c_str());
    return 2;
  }
  f.options.worker_timeout_ms = *timeout;
  const std::optional<int64_t> backoff = ParseDuration(f.max_restart_backoff);
  if (!backoff.has_value() || *backoff < 0) {
    std::fprintf(stderr, "error: --max-restart-backoff %s: expected a duration such as 1m\n",
                 f.max_restart_backoff.c_str());
    return 2;
  }
  f.options.max_restart_backoff_ms = *backoff;
  absl::StatusOr<std::unique_ptr<Coordinator>> c = Coordinator::Start(f.options);
  if (!c.ok()) return Fail(c.status());
  std::printf("caravela coordinator: grpc=%s http=%s data-dir=%s auth=%s\n",
              (*c)->grpc_address().c_str(),
              (*c)->http_address().empty() ? "off" : (*c)->http_address().c_str(),
              f.options.data_dir.c_str(), f.options.token.empty() ? "off" : "token");
  std::fflush(stdout);
  CatchStopSignals(OnSigterm::kStop);
  std::atomic<bool> ended{false};
  std::thread watcher([&] {
    while (!StopRequested() && !ended.load()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    (*c)->Shutdown();
  });
  (*c)->Wait();
  ended = true;
  watcher.join();
  return 0;
}

}  // namespace

Command AddCoordinatorCommand(CLI::App& app) {
  auto f = std::make_shared<CoordinatorFlags>();
  CLI::App* cmd = app.add_subcommand(
      "coordinator",
      "Run the coordinator: the gRPC JobService over a durable job store; places the\n"
      "tasks of submitted jobs on workers, coordinates their checkpoints and restarts\n"
      "them from the last one when a worker dies; gRPC health and reflection. Prints\n"
      "one line with its address when ready; with --http, the web dashboard, the JSON API\n"
      "and /metrics.");
  cmd->add_option("--listen", f->options.listen, "gRPC HOST:PORT (port 0: any)")
      ->envname("CARAVELA_LISTEN")
      ->capture_default_str();
  cmd->add_option("--http", f->options.http_listen,
                  "HTTP HOST:PORT for the dashboard (/), the JSON API under /api/v1/, "
                  "/metrics and /healthz (port 0: any; default none)")
      ->envname("CARAVELA_HTTP");
  cmd->add_option("--data-dir", f->options.data_dir, "Job store directory")
      ->envname("CARAVELA_DATA_DIR")
      ->capture_default_str();
  cmd->add_option("--token-file", f->token_file, "Require this bearer token on every call")
      ->envname("CARAVELA_TOKEN_FILE");
  cmd->add_option("--storage", f->options.checkpoint_storage,
                  "Checkpoint storage URL every worker reaches, for jobs that name none\n"
                  "(default file://<data-dir>/checkpoints: one machine or a shared volume)")
      ->envname("CARAVELA_STORAGE");
  cmd->add_option("--tls-cert", f->options.tls_cert_file,
                  "PEM certificate chain: serve TLS (with --tls-key)")
      ->envname("CARAVELA_TLS_CERT");
  cmd->add_option("--tls-key", f->options.tls_key_file, "PEM private key")
      ->envname("CARAVELA_TLS_KEY");
  cmd->add_option(
         "--allow-path", f->options.allowed_paths,
         "An absolute directory submitted jobs may read and write files in, and savepoints\n"
         "may be written to or read from (repeatable; default none: only paths relative to the\n"
         "workers' shared directory, and savepoints under <data-dir>/savepoints)")
      ->envname("CARAVELA_ALLOW_PATH");
  cmd->add_option("--worker-timeout", f->worker_timeout,
                  "A worker without heartbeats for this long is dead (its lease)")
      ->envname("CARAVELA_WORKER_TIMEOUT")
      ->capture_default_str();
  cmd->add_option("--max-restarts", f->options.max_restarts,
                  "Restarts in a row without a completed checkpoint before a job is FAILED\n"
                  "(0: no limit). The first restart is at once, each further one waits twice\n"
                  "as long as the one before: 1s, 2s, 4s, ... up to --max-restart-backoff")
      ->envname("CARAVELA_MAX_RESTARTS")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_option("--max-restart-backoff", f->max_restart_backoff,
                  "The longest wait between two restarts in a row")
      ->envname("CARAVELA_MAX_RESTART_BACKOFF")
      ->capture_default_str();
  return {cmd, [cmd, f] { return RunCoordinator(*cmd, *f); }};
}

}  // namespace caravela
