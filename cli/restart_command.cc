// `caravela restart ID [--parallelism N]`: starts a FAILED or CANCELED job
// again from its last complete checkpoint (a new epoch); prints the job.
#include <memory>
#include <string>

#include "cli/command_support.h"
#include "cli/commands.h"
#include "common/key_groups.h"

namespace caravela {
namespace {

struct RestartFlags {
  std::string job_id;
  int parallelism = 0;
  ClientFlags client;
};

}  // namespace

Command AddRestartCommand(CLI::App& app) {
  auto f = std::make_shared<RestartFlags>();
  CLI::App* cmd = app.add_subcommand(
      "restart",
      "Start a FAILED or CANCELED job again from its last complete checkpoint (from the\n"
      "beginning if it has none), with a new epoch: fix what made it fail, then restart it");
  cmd->add_option("id", f->job_id, "Job id")->required();
  cmd->add_option("--parallelism", f->parallelism,
                  "Tasks per stage from now on (default: the job's), 1 to its "
                  "spec.max_parallelism")
      ->check(CLI::Range(1, kMaxMaxParallelism));
  AddClientOptions(cmd, &f->client);
  return {cmd, [cmd, f] {
            InheritClientFlags(*cmd, &f->client);
            return WithJobClient(f->client, 10000, [&](JobClient& client) {
              return PrintJobResult(client.Restart(f->job_id, f->parallelism), f->client.json);
            });
          }};
}

}  // namespace caravela
