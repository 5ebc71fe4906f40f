// `caravela jobs`: the coordinator's jobs, one row each.
#include <cstdio>
#include <memory>
#include <vector>

#include "cli/command_support.h"
#include "cli/commands.h"
#include "proto/grpc_support.h"

namespace caravela {
namespace {

int RunJobs(JobClient& client, bool json) {
  absl::StatusOr<std::vector<v1::Job>> jobs = client.List();
  if (!jobs.ok()) return Fail(jobs.status());
  if (json) {
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

}  // namespace

Command AddJobsCommand(CLI::App& app) {
  auto f = std::make_shared<ClientFlags>();
  CLI::App* cmd = app.add_subcommand("jobs", "List the coordinator's jobs");
  AddClientOptions(cmd, f.get());
  return {cmd, [cmd, f] {
            InheritClientFlags(*cmd, f.get());
            return WithJobClient(*f, 10000,
                                 [&](JobClient& client) { return RunJobs(client, f->json); });
          }};
}

}  // namespace caravela
