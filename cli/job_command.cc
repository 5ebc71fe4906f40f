// `caravela job ID`: one job, and per task where it runs and how far it is
// (live from the workers' heartbeats).
#include <cstdio>
#include <filesystem>
#include <memory>
#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "cli/command_support.h"
#include "cli/commands.h"
#include "common/time_util.h"
#include "coordinator/job_state.h"
#include "worker/registry/builtin_kinds.h"

namespace caravela {
namespace {

struct JobFlags {
  std::string job_id;
  ClientFlags client;
};

void PrintTasks(const v1::Job& job) {
  std::printf("last checkpoint %lld\n", static_cast<long long>(job.last_checkpoint()));
  std::printf("%5s %5s %5s  %-12s %-15s %12s %12s %10s %10s  %-24s %s\n", "TASK", "STAGE", "INDEX",
              "WORKER", "STATE", "RECORDS_IN", "RECORDS_OUT", "LAG", "CHECKPOINT", "WATERMARK",
              "PARTITIONS");
  for (int g = 0; g < job.tasks_size(); ++g) {
    const v1::TaskStatus& t = job.tasks(g);
    // "purchases:0,3 shipments:0,3": the source partitions it reads.
    std::string parts;
    std::string last;
    for (const v1::SourcePartitionStatus& p : t.sources()) {
      const bool same = p.source() == last;
      absl::StrAppend(&parts, same ? "," : (parts.empty() ? "" : " "), same ? "" : p.source() + ":",
                      p.partition());
      last = p.source();
    }
    std::printf("%5d %5d %5d  %-12s %-15s %12lld %12lld %10lld %10lld  %-24s %s%s%s\n", g,
                t.stage(), t.index(), t.worker().c_str(), v1::TaskPhase_Name(t.state()).c_str(),
                static_cast<long long>(t.records_in()) +
                    static_cast<long long>(t.activity().exchange_records_in()),
                static_cast<long long>(t.records_out()), static_cast<long long>(t.consumer_lag()),
                static_cast<long long>(t.last_checkpoint()),
                t.state() == v1::TASK_ASSIGNED ? "" : FormatWatermark(t.watermark_ms()).c_str(),
                parts.empty() ? "-" : parts.c_str(), t.error().empty() ? "" : "  ",
                t.error().c_str());
    for (const std::string& w : t.activity().waiting()) std::printf("      %s\n", w.c_str());
    // Where its time went, since its epoch began (the last checkpoint's in
    // parentheses); only once there is something to say.
    const v1::TaskActivity& a = t.activity();
    if (a.alignment_ms() + a.backpressure_ms() + a.checkpoint_sync_ms() > 0) {
      std::printf(
          "      time ms: alignment %lld (last %lld, skew %lld)  back-pressure %lld  checkpoint "
          "sync %lld (last: state flush %lld, sink pre-commit %lld, snapshot %lld)\n",
          static_cast<long long>(a.alignment_ms()), static_cast<long long>(a.last_alignment_ms()),
          static_cast<long long>(a.last_alignment_skew_ms()),
          static_cast<long long>(a.backpressure_ms()),
          static_cast<long long>(a.checkpoint_sync_ms()),
          static_cast<long long>(a.last_state_flush_ms()),
          static_cast<long long>(a.last_sink_precommit_ms()),
          static_cast<long long>(a.last_snapshot_ms()));
    }
  }
}

// Where the job's results are: each sink, file paths resolved against the
// workers' shared directory (where a cluster job's relative paths go).
void PrintResults(JobClient& client, const v1::Job& job) {
  ParseResult parsed = ParseJobSpec(job.yaml());
  if (!parsed.ok()) return;
  std::set<std::string> shared;
  if (absl::StatusOr<std::vector<v1::WorkerInfo>> workers = client.Workers(); workers.ok()) {
    for (const v1::WorkerInfo& w : *workers) {
      if (!w.shared_dir().empty()) shared.insert(w.shared_dir());
    }
  }
  JobSpec spec = parsed.spec;
  std::string dead_letter = spec.dead_letter_path;
  if (shared.size() == 1) {
    spec.ResolvePaths(*shared.begin());
    dead_letter =
        spec.dead_letter_path.empty()
            ? (std::filesystem::path(*shared.begin()) / job.id() / "dead-letter.jsonl").string()
            : spec.dead_letter_path;
  }
  std::printf(
      "results%s:\n",
      shared.size() == 1
          ? absl::StrCat(" (the workers' shared directory is ", *shared.begin(), ")").c_str()
      : shared.empty() ? " (no worker has a shared directory)"
                       : " (the workers name different shared directories)");
  for (const SinkSpec& s : spec.sinks) {
    std::printf("  %-24s %s\n", s.from.c_str(), s.Label().c_str());
  }
  if (!dead_letter.empty()) std::printf("  %-24s file:%s\n", "(dead letter)", dead_letter.c_str());
  std::printf(
      "  (a file sink of a stage of several tasks writes part files beside its path:\n"
      "   <name>.part-<part>.<ext>)\n");
}

int RunJob(JobClient& client, const JobFlags& f) {
  absl::StatusOr<v1::Job> job = client.Get(f.job_id);
  const int rc = PrintJobResult(job, f.client.json);
  if (rc != 0 || f.client.json) return rc;
  if (job->state() == v1::FAILED || job->state() == v1::CANCELED) {
    // What the user can do about it.
    std::printf(
        "%s once the cause is fixed: caravela restart %s [--parallelism N] starts it %s\n",
        JobStateName(job->state()).c_str(), job->id().c_str(),
        job->last_checkpoint() > 0
            ? absl::StrCat("from checkpoint ", job->last_checkpoint(), " (new epoch)").c_str()
            : "from the beginning (no complete checkpoint)");
  }
  PrintResults(client, *job);
  if (job->tasks_size() > 0) PrintTasks(*job);
  return rc;
}

}  // namespace

Command AddJobCommand(CLI::App& app) {
  auto f = std::make_shared<JobFlags>();
  CLI::App* cmd = app.add_subcommand("job", "Show one job");
  cmd->add_option("id", f->job_id, "Job id")->required();
  AddClientOptions(cmd, &f->client);
  return {cmd, [cmd, f] {
            InheritClientFlags(*cmd, &f->client);
            return WithJobClient(f->client, 10000,
                                 [&](JobClient& client) { return RunJob(client, *f); });
          }};
}

}  // namespace caravela
