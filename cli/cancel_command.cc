// `caravela cancel ID`: cancels a job; prints it as it is then.
#include <memory>
#include <string>

#include "cli/command_support.h"
#include "cli/commands.h"

namespace caravela {
namespace {

struct CancelFlags {
  std::string job_id;
  ClientFlags client;
};

}  // namespace

Command AddCancelCommand(CLI::App& app) {
  auto f = std::make_shared<CancelFlags>();
  CLI::App* cmd = app.add_subcommand("cancel", "Cancel a job");
  cmd->add_option("id", f->job_id, "Job id")->required();
  AddClientOptions(cmd, &f->client);
  return {cmd, [cmd, f] {
            InheritClientFlags(*cmd, &f->client);
            return WithJobClient(f->client, 10000, [&](JobClient& client) {
              return PrintJobResult(client.Cancel(f->job_id), f->client.json);
            });
          }};
}

}  // namespace caravela
