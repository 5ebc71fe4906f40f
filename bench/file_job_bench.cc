// Bench (a): the hourly-revenue job on files with RocksDB state, in-process.
//
//   file -> dedup(event_id, 24h) -> tumbling 1h per country (sum amount,
//   count) -> file
//
//   file_job_bench --input /tmp/purchases.jsonl --work-dir /tmp/fjb
//                  [--memory-state] [--batch-size 1024] [--checkpoint-ms N]
//
// Prints events/s (input lines / wall time of Pipeline::Create + Run) and peak
// RSS. The work dir (state, outputs) is wiped first.
#include <cstdio>
#include <filesystem>
#include <string>

#include "absl/strings/str_cat.h"
#include "bench/bench_util.h"
#include "common/job_spec.h"
#include "worker/registry/builtin_kinds.h"
#include "worker/runtime/pipeline.h"

namespace {

std::string JobYaml(const std::string& input, const std::string& out_dir,
                    const std::string& checkpoint) {
  return absl::StrCat(R"(
apiVersion: caravela/v1
kind: Job
metadata: {name: bench-hourly-revenue}
spec:
)",
                      checkpoint, R"(
  sources:
    - name: purchases
      file: {path: )",
                      input, R"(}
      format: json
      event_time: {field: event_time, format: iso8601}
      watermark: {max_out_of_orderness: 5m}
)",
                      caravela::bench::kHourlyRevenueOperators, R"(  sinks:
    - {from: revenue, file: {path: )",
                      out_dir, R"(/revenue.jsonl}}
)",
                      caravela::bench::HourlyRevenueSideSinks(out_dir));
}

}  // namespace

int main(int argc, char** argv) {
  caravela::bench::Flags flags(argc, argv);
  std::string input = flags.Str("input");
  std::string work = flags.Str("work-dir", "/tmp/caravela-file-job-bench");
  if (input.empty()) {
    std::fprintf(stderr, "usage: file_job_bench --input FILE [--work-dir DIR] [--memory-state]\n");
    return 2;
  }
  input = std::filesystem::absolute(input).string();
  std::filesystem::remove_all(work);
  std::filesystem::create_directories(work);
  // --checkpoint-ms N: checkpoint every N ms of wall time into work/checkpoints
  // (the cost of checkpointing on steady-state throughput).
  const long long checkpoint_ms = flags.Int("checkpoint-ms", 0);
  std::string checkpoint;
  if (checkpoint_ms > 0) {
    checkpoint = absl::StrCat("  checkpoint: {interval: ", checkpoint_ms, "ms, storage: \"file://",
                              work, "/checkpoints\"}");
  }
  caravela::ParseResult parsed = caravela::ParseJobSpec(JobYaml(input, work + "/out", checkpoint));
  if (!parsed.ok()) {
    std::fprintf(stderr, "job spec: %s\n", parsed.errors[0].ToString().c_str());
    return 1;
  }
  caravela::RunOptions options;
  options.data_dir = work + "/data";
  options.in_memory_state = flags.Bool("memory-state");
  options.batch_size = static_cast<int>(flags.Int("batch-size", options.batch_size));
  options.progress_interval_ms = 0;

  double t0 = caravela::bench::NowSeconds();
  double c0 = caravela::bench::ThreadCpuSeconds();
  auto pipeline = caravela::Pipeline::Create(parsed.spec, options);
  if (!pipeline.ok()) {
    std::fprintf(stderr, "create: %s\n", std::string(pipeline.status().message()).c_str());
    return 1;
  }
  absl::Status st = (*pipeline)->Run();
  double secs = caravela::bench::NowSeconds() - t0;
  double thread_cpu = caravela::bench::ThreadCpuSeconds() - c0;
  if (!st.ok()) {
    std::fprintf(stderr, "run: %s\n", std::string(st.message()).c_str());
    return 1;
  }
  caravela::MetricsRegistry& m = (*pipeline)->metrics();
  long long in = m.Value("records_in_total", "source=\"purchases\"");
  uint64_t state_bytes = (*pipeline)->state().ApproximateBytes();
  std::fprintf(stderr, "%s\n", (*pipeline)->Summary().c_str());
  caravela::bench::PrintResult(
      absl::StrCat(options.in_memory_state ? "file_job_memory_state" : "file_job_rocksdb",
                   checkpoint_ms > 0 ? absl::StrCat("_checkpoint_", checkpoint_ms, "ms") : ""),
      in, secs,
      absl::StrCat("passed=", m.Value("dedup_passed_total", "op=\"unique\""),
                   " duplicates=", m.Value("dedup_duplicates_total", "op=\"unique\""),
                   " too_late=", m.Sum("too_late_total", "op=\"revenue\""),
                   " results=", m.Value("sink_records_total", "from=\"revenue\""),
                   " state_bytes=", state_bytes, " checkpoints=", m.Value("checkpoints_total"),
                   " checkpoint_uploaded_bytes=", m.Value("checkpoint_uploaded_bytes_total")),
      thread_cpu);
  return 0;
}
