// `caravela submit JOB.yaml`: submits a job to the coordinator and prints its
// id, or every error of an invalid job with its YAML path (exit 2).
#include <cstdio>
#include <fstream>
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

int RunSubmit(JobClient& client, const SubmitFlags& f) {
  std::ifstream in(f.job_file, std::ios::binary);
  std::stringstream buffer;
  buffer << in.rdbuf();
  const std::string yaml = buffer.str();
  // The job's limits before it is sent (a message above the coordinator's
  // gRPC limit would fail with a transport error instead), answered as the
  // coordinator answers an invalid job.
  absl::StatusOr<v1::SubmitJobResponse> r;
  if (const std::vector<SpecError> limits = CheckJobLimits(yaml); !limits.empty()) {
    r.emplace();
    for (const SpecError& e : limits) {
      v1::ValidationError* ve = r->add_errors();
      ve->set_path(e.path);
      ve->set_message(e.message);
    }
  } else {
    r = client.Submit(yaml, f.parallelism, f.from_savepoint);
  }
  if (!r.ok()) return Fail(r.status());
  if (f.client.json) {
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
