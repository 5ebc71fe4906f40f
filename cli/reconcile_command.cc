// `caravela reconcile JOB.yaml`: recompute a job's window results from its
// raw input with no lateness cut-off and compare them with the FINAL results
// in one of its sinks (worker/reconcile/reconcile.h); --apply publishes the
// differences as higher FINAL revisions. Exit codes: 0 every window matches,
// 3 differences were found, 2 usage errors, 1 other failures.
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "common/job_spec.h"
#include "common/time_util.h"
#include "worker/connectors/kafka_properties.h"
#include "worker/reconcile/reconcile.h"
#include "worker/registry/builtin_kinds.h"

namespace caravela {
namespace {

struct ReconcileFlags {
  std::string job;
  std::string range;
  std::string sink;
  std::string bootstrap;
  std::string work_dir;
  std::vector<std::string> kafka_properties;  // KEY=VALUE, every Kafka client
  bool apply = false;
  bool json = false;
};

int RunReconcile(const ReconcileFlags& f) {
  ParseResult parsed = LoadJobSpec(f.job);
  if (!parsed.ok()) {
    std::fprintf(stderr, "%s: %zu error%s\n", f.job.c_str(), parsed.errors.size(),
                 parsed.errors.size() == 1 ? "" : "s");
    for (const auto& e : parsed.errors) std::fprintf(stderr, "  %s\n", e.ToString().c_str());
    return 2;
  }
  if (absl::Status st = SetProcessKafkaProperties(f.kafka_properties); !st.ok()) {
    std::fprintf(stderr, "error: %s\n", std::string(st.message()).c_str());
    return 2;
  }
  ReconcileOptions o;
  o.sink = f.sink;
  o.bootstrap = f.bootstrap;
  o.work_dir = f.work_dir;
  o.apply = f.apply;
  if (!f.range.empty()) {
    absl::StatusOr<std::pair<int64_t, int64_t>> r = ParseTimeRange(f.range, WallClockMs());
    if (!r.ok()) {
      std::fprintf(stderr, "error: %s\n", std::string(r.status().message()).c_str());
      return 2;
    }
    o.range_start = r->first;
    o.range_end = r->second;
  }
  absl::StatusOr<ReconcileReport> report = Reconcile(parsed.spec, o);
  if (!report.ok()) {
    std::fprintf(stderr, "error: %s\n", std::string(report.status().message()).c_str());
    return report.status().code() == absl::StatusCode::kInvalidArgument ? 2 : 1;
  }
  const std::string text = f.json ? report->ToJson() + "\n" : report->ToText();
  std::fputs(text.c_str(), stdout);
  return report->all_match() ? 0 : 3;
}

}  // namespace

Command AddReconcileCommand(CLI::App& app) {
  auto f = std::make_shared<ReconcileFlags>();
  CLI::App* cmd = app.add_subcommand(
      "reconcile",
      "Recompute a job's window results from its raw input (JSONL files, or Kafka topics\n"
      "from their earliest retained offset) with the same filters, dedup and aggregates\n"
      "but no lateness cut-off, and compare them with the FINAL results in one of its\n"
      "sinks, window by window. A join's rows are compared as a whole (report only).\n"
      "Exit 0: everything matches; 3: differences (listed); 2: usage errors; 1: other\n"
      "failures.");
  cmd->add_option("job", f->job, "Job YAML")->required()->check(CLI::ExistingFile);
  cmd->add_option("--range", f->range,
                  "Windows whose window_start is in [START, END), ISO-8601 UTC:\n"
                  "2026-10-01T00:00:00Z..2026-10-02T00:00:00Z (either side may be empty),\n"
                  "or yesterday / today (UTC days); for a join, only a window join's rows\n"
                  "can be selected");
  cmd->add_option("--sink", f->sink,
                  "The sink to read back: file:PATH, kafka:TOPIC, postgres:TABLE or\n"
                  "clickhouse:DB.TABLE (as in the metrics' sink label), or its index in\n"
                  "spec.sinks (default: the first sink of a window, else of a join)");
  cmd->add_flag("--apply", f->apply,
                "Publish each differing window through the sink as a higher revision with\n"
                "state FINAL and reconciled: true (window results only)");
  cmd->add_flag("--json", f->json, "Print the report as one JSON object");
  cmd->add_option("--bootstrap", f->bootstrap,
                  "Kafka broker (HOST:PORT) for the job's topics that name no bootstrap\n"
                  "(the embedded broker of the run that wrote them)");
  cmd->add_option("--kafka-property", f->kafka_properties,
                  "KEY=VALUE: a librdkafka property for every Kafka client (repeatable; e.g.\n"
                  "security.protocol=SASL_SSL); a job's kafka.properties win")
      ->envname("CARAVELA_KAFKA_PROPERTY")
      ->delimiter('\n');
  cmd->add_option("--work-dir", f->work_dir,
                  "Scratch directory of the recomputation (default: a temporary one)");
  return {cmd, [f] { return RunReconcile(*f); }};
}

}  // namespace caravela
