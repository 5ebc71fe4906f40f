// One writer per output: what a job's sinks write that no other running job
// may write (SinkKind::Output: a file, a PostgreSQL or ClickHouse table, a
// Kafka topic written exactly-once). A job that names an output twice is
// invalid (`caravela validate`); the coordinator refuses to submit or
// restart a job whose outputs a running job writes (coordinator/scheduler.h),
// and a file sink refuses at preparation an output another job's fence holds
// (worker/connectors/file_connectors.h). docs/semantics.md "One writer per
// output".
#pragma once

#include <string>
#include <vector>

#include "common/job_spec.h"

namespace caravela {

struct JobOutput {
  std::string yaml_path;  // "spec.sinks[1].file"
  std::string output;     // SinkKind::Output, e.g. "file out/revenue.jsonl"
};

// The outputs of the job's sinks that one job at a time may write, in sink
// order (a sink that writes none is left out), then its dead letter's file
// when the job names one.
std::vector<JobOutput> JobOutputs(const JobSpec& spec);

// An error per sink that writes an output an earlier sink of the job writes.
std::vector<SpecError> CheckOwnOutputs(const JobSpec& spec);

// A job that writes outputs: its id, and its outputs (JobOutputs).
struct OutputWriter {
  std::string job_id;
  std::string state;  // for the message, e.g. "RUNNING"
  std::vector<JobOutput> outputs;
};

// An error per output of `spec` that one of `running` writes, naming the
// output and that job.
std::vector<SpecError> CheckOutputsFree(const JobSpec& spec,
                                        const std::vector<OutputWriter>& running);

}  // namespace caravela
