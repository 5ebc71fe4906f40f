// `caravela savepoint ID DIR`: asks the coordinator to stop a running job
// with a savepoint in DIR, then waits until the job ended with it (exit 0)
// or went on without one (exit 1).
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "cli/command_support.h"
#include "cli/commands.h"
#include "common/time_util.h"
#include "coordinator/job_state.h"
#include "proto/grpc_support.h"

namespace caravela {
namespace {

struct SavepointFlags {
  std::string job_id;
  std::string dir;
  std::string wait = "10m";
  ClientFlags client;
};

int RunSavepoint(JobClient& client, const SavepointFlags& f) {
  const std::optional<int64_t> wait = ParseDuration(f.wait);
  if (!wait.has_value() || *wait < 0) {
    std::fprintf(stderr, "error: --wait %s: expected a duration such as 10m\n", f.wait.c_str());
    return 2;
  }
  const bool json = f.client.json;
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(*wait);
  absl::StatusOr<v1::Job> job = client.StopWithSavepoint(f.job_id, f.dir);
  // A job between two epochs (scheduling, recovering, rescaling) cannot take
  // the request yet; it runs again soon: ask again within --wait.
  while (!job.ok() && absl::IsFailedPrecondition(job.status()) &&
         std::chrono::steady_clock::now() < until) {
    absl::StatusOr<v1::Job> now = client.Get(f.job_id);
    if (!now.ok()) return Fail(now.status());
    const bool between_epochs = now->state() == v1::SCHEDULING || now->state() == v1::RECOVERING ||
                                (now->state() == v1::RUNNING && now->rescale_to() > 0);
    if (!between_epochs) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    job = client.StopWithSavepoint(f.job_id, f.dir);
  }
  if (!job.ok()) return Fail(job.status());
  const std::string dir = job->savepoint_to();
  if (!json) {
    std::fprintf(stderr, "job %s: stopping at its next checkpoint, then writing it to %s\n",
                 f.job_id.c_str(), dir.c_str());
  }
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
  if (json) std::printf("%s\n", ProtoJson(*job).c_str());
  if (job->state() == v1::FINISHED && job->savepoint() == dir) {
    if (!json) std::printf("%s\n", dir.c_str());
    return 0;
  }
  std::fprintf(stderr, "error: job %s is %s without the savepoint: %s\n", f.job_id.c_str(),
               JobStateName(job->state()).c_str(), job->message().c_str());
  return 1;
}

}  // namespace

Command AddSavepointCommand(CLI::App& app) {
  auto f = std::make_shared<SavepointFlags>();
  CLI::App* cmd = app.add_subcommand(
      "savepoint",
      "Stop a running job with a savepoint: its next checkpoint is its last (sinks publish it) "
      "and is copied to DIR; waits until written and prints DIR (exit 1: no savepoint, the "
      "job goes on). Start it again with `caravela submit JOB.yaml --from-savepoint DIR`");
  cmd->add_option("id", f->job_id, "Job id")->required();
  cmd->add_option("dir", f->dir,
                  "Directory on the coordinator's filesystem: a name (under its "
                  "<data-dir>/savepoints) or an absolute path under an --allow-path")
      ->required();
  cmd->add_option("--wait", f->wait,
                  "How long to wait for the savepoint (and, for a job between two epochs, "
                  "for it to run again first)")
      ->capture_default_str();
  AddClientOptions(cmd, &f->client);
  return {cmd, [cmd, f] {
            InheritClientFlags(*cmd, &f->client);
            return WithJobClient(f->client, 10000,
                                 [&](JobClient& client) { return RunSavepoint(client, *f); });
          }};
}

}  // namespace caravela
