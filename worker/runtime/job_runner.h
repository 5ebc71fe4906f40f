// JobRunner: runs one job in this process as the tasks of its plan (SPEC §8):
// plans the job (common/job_plan.h), creates the exchange topics, starts one
// thread per task and coordinates job-wide checkpoints (JobCheckpoints):
// triggers checkpoint n every spec.checkpoint.interval, and once every task
// stored n writes the job's commit record `<job>/job-checkpoint` (the commit
// point: sinks publish n only after it) and tells the tasks to commit.
//
// Restore: every start takes a new epoch (`<job>/epoch`, +1, written before
// anything runs) and restores every task to the job's last complete
// checkpoint; exchange readers start at the log end (records of older epochs
// are never read: everything before the checkpoint's barriers is in the
// restored state, everything after is produced again with the new epoch).
//
// A job whose every stage has one task runs as one standalone Task on the
// calling thread, without exchanges (the single-task path, unchanged).
//
// Threading: Create and Run from one thread; Run blocks until the job ends.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "common/job_plan.h"
#include "common/job_spec.h"
#include "common/metrics.h"
#include "common/status.h"
#include "worker/runtime/pipeline.h"
#include "worker/runtime/task.h"

namespace caravela {

class JobRunner {
 public:
  ~JobRunner();
  static absl::StatusOr<std::unique_ptr<JobRunner>> Create(const JobSpec& spec,
                                                           const RunOptions& options,
                                                           MetricsRegistry* metrics);
  absl::Status Run();

  const JobPlan& plan() const { return plan_; }
  int task_count() const { return static_cast<int>(tasks_.size()); }
  Task& task(int i) { return *tasks_[i]; }
  int64_t records_in() const;
  int64_t records_out() const;

  struct Impl;

 private:
  // Runs a parallel job whose sources all have arrival fields: every task on
  // this thread, in lockstep in arrival order (Task::Replay*).
  absl::Status RunReplay();
  // --from-savepoint: checks the job savepoint fits and imports it into the
  // job's checkpoint storage, to restore from (rescaling if its parallelism
  // differs).
  absl::Status ImportSavepoint(const std::string& storage_url);

 public:
 private:
  JobRunner() = default;
  // Declaration order is destruction order reversed: tasks go first, then
  // the plan they point into, then the broker, flow controls and signals.
  std::unique_ptr<Impl> impl_;
  JobPlan plan_;
  std::vector<std::unique_ptr<Task>> tasks_;
};

// Partition counts of the job's partitioned-log sources (SourceKind::
// PartitionCount: Kafka asks the brokers, waiting for missing topics like a
// Kafka source does). Other sources (files) are not listed.
absl::StatusOr<SourcePartitions> QuerySourcePartitions(const JobSpec& spec,
                                                       const std::string& embedded_bootstrap);

// The Kafka cluster that carries a job's exchanges: the first bootstrap its
// sources, then its sinks, name; else `embedded_bootstrap` (may be empty).
std::string JobKafkaBootstrap(const JobSpec& spec, const std::string& embedded_bootstrap);

}  // namespace caravela
