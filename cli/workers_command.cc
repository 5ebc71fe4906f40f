// `caravela workers`: the workers the coordinator knows (WorkerService).
#include <cstdio>
#include <memory>
#include <vector>

#include "caravela/v1/worker.pb.h"
#include "cli/command_support.h"
#include "cli/commands.h"
#include "proto/grpc_support.h"

namespace caravela {
namespace {

int RunWorkers(JobClient& client, bool json) {
  absl::StatusOr<std::vector<v1::WorkerInfo>> workers = client.Workers();
  if (!workers.ok()) return Fail(workers.status());
  if (json) {
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

}  // namespace

Command AddWorkersCommand(CLI::App& app) {
  auto f = std::make_shared<ClientFlags>();
  CLI::App* cmd = app.add_subcommand("workers", "List the workers the coordinator knows");
  AddClientOptions(cmd, f.get());
  return {cmd, [cmd, f] {
            InheritClientFlags(*cmd, f.get());
            return WithJobClient(*f, 10000,
                                 [&](JobClient& client) { return RunWorkers(client, f->json); });
          }};
}

}  // namespace caravela
