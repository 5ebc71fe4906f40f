// `caravela submit JOB.yaml`: submits a job to the coordinator and prints its
// id, or every error of an invalid job with its YAML path (exit 2).
#include <cstdio>
#include <fstream>
#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "cli/command_support.h"
#include "cli/commands.h"
#include "common/job_spec.h"
#include "common/key_groups.h"
#include "proto/grpc_support.h"

namespace caravela {
namespace {

struct SubmitFlags {
  std::string job_file;
  int parallelism = 0;  // 0: the spec's
  std::string from_savepoint;
  ClientFlags client;
};

// The errors of `errors` under "<file>: N errors", as the coordinator's are.
void PrintErrors(const std::string& file, int n, const std::function<void(int)>& print) {
  std::fprintf(stderr, "%s: %d error%s\n", file.c_str(), n, n == 1 ? "" : "s");
  for (int i = 0; i < n; ++i) print(i);
}

int RunSubmit(JobClient& client, const SubmitFlags& f) {
  std::ifstream in(f.job_file, std::ios::binary);
  std::stringstream buffer;
  buffer << in.rdbuf();
  const std::string yaml = buffer.str();
  // The job's limits before it is sent: a message above the coordinator's
  // gRPC limit would fail with a transport error instead.
  if (const std::vector<SpecError> limits = CheckJobLimits(yaml); !limits.empty()) {
    PrintErrors(f.job_file, static_cast<int>(limits.size()), [&](int i) {
      std::fprintf(stderr, "  %s: %s\n", limits[i].path.c_str(), limits[i].message.c_str());
    });
    return 2;
  }
  absl::StatusOr<v1::SubmitJobResponse> r = client.Submit(yaml, f.parallelism, f.from_savepoint);
  if (!r.ok()) return Fail(r.status());
  if (f.client.json) {
    std::printf("%s\n", ProtoJson(*r).c_str());
  } else if (r->job_id().empty()) {
    PrintErrors(f.job_file, r->errors_size(), [&](int i) {
      std::fprintf(stderr, "  %s: %s\n", r->errors(i).path().c_str(),
                   r->errors(i).message().c_str());
    });
  } else {
    std::printf("%s\n", r->job_id().c_str());
  }
  return r->job_id().empty() ? 2 : 0;
}

}  // namespace

Command AddSubmitCommand(CLI::App& app) {
  auto f = std::make_shared<SubmitFlags>();
  CLI::App* cmd = app.add_subcommand(
      "submit", "Submit a job YAML to the coordinator; prints its id (exit 2: invalid job)");
  cmd->add_option("job", f->job_file, "Job YAML")->required()->check(CLI::ExistingFile);
  cmd->add_option("--parallelism", f->parallelism, "Tasks per stage (default: the spec's)")
      ->check(CLI::Range(1, kMaxMaxParallelism));
  cmd->add_option("--from-savepoint", f->from_savepoint,
                  "Start from this savepoint (a directory on the coordinator, as given to "
                  "`caravela savepoint`); any parallelism");
  AddClientOptions(cmd, &f->client);
  return {cmd, [cmd, f] {
            InheritClientFlags(*cmd, &f->client);
            // Importing a savepoint copies its state before the answer.
            const int timeout_ms = f->from_savepoint.empty() ? 10000 : 600000;
            return WithJobClient(f->client, timeout_ms,
                                 [&](JobClient& client) { return RunSubmit(client, *f); });
          }};
}

}  // namespace caravela
