// `caravela rescale ID N`: changes a running job's tasks per stage (it stops
// at a checkpoint and resumes with N tasks); prints the job as it is then.
#include <memory>
#include <string>

#include "cli/command_support.h"
#include "cli/commands.h"
#include "common/key_groups.h"

namespace caravela {
namespace {

struct RescaleFlags {
  std::string job_id;
  int parallelism = 0;
  ClientFlags client;
};

}  // namespace

Command AddRescaleCommand(CLI::App& app) {
  auto f = std::make_shared<RescaleFlags>();
  CLI::App* cmd = app.add_subcommand(
      "rescale",
      "Change a running job's tasks per stage: it stops at a checkpoint and resumes with N "
      "tasks, each taking its keys' state from the old tasks");
  cmd->add_option("id", f->job_id, "Job id")->required();
  cmd->add_option("parallelism", f->parallelism,
                  "New tasks per stage: 1 to the job's spec.max_parallelism (default 128), "
                  "within the cluster's free slots (the coordinator checks both)")
      ->required()
      ->check(CLI::Range(1, kMaxMaxParallelism));
  AddClientOptions(cmd, &f->client);
  return {cmd, [cmd, f] {
            InheritClientFlags(*cmd, &f->client);
            return WithJobClient(f->client, 10000, [&](JobClient& client) {
              return PrintJobResult(client.Rescale(f->job_id, f->parallelism), f->client.json);
            });
          }};
}

}  // namespace caravela
