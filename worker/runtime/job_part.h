// JobPart: the tasks of one job, at one epoch, that this process runs for a
// coordinator (SPEC §8 "Services"): the worker side of a distributed job.
// The coordinator (coordinator/scheduler.h) plays the part JobRunner plays
// in one process: it assigns tasks, starts them once every task of the epoch
// is ready, triggers job-wide checkpoints and says when they are complete.
//
// Lifecycle, driven by the worker agent from the coordinator's answers:
//   Start()   parses the job, plans it, creates the exchange topics and the
//             assigned tasks on a thread of its own (restoring the job's last
//             complete checkpoint); each task then reports kReady. Exchange
//             readers are opened here, at the topics' log end, so the job
//             starts only when every task of the epoch, on every worker, is
//             ready (nothing of the new epoch is written before).
//   Run()     lets the tasks run, one thread each.
//   Signal()  forwards the job-wide checkpoint signals (JobCheckpoints).
//   Stop()    ends every task now (another epoch, a canceled job, a lost
//             lease) and waits for them; the destructor stops too.
// States() is what the heartbeat reports. Exchanges stream between workers
// over gRPC (`network`, the worker's NetworkExchange, peers from the
// assignment's task addresses), or go through Kafka topics when the job says
// `spec.exchange: kafka` (or the worker has no NetworkExchange).
//
// Threading: every method is thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/metrics.h"
#include "common/status.h"
#include "worker/runtime/pipeline.h"
#include "worker/runtime/task.h"

namespace caravela {

class NetworkExchange;

// Whether a part that failed to start with `st` fails the same way on any
// restart: the job's spec or files are wrong for this worker (invalid,
// refused, missing, unsupported), not the moment.
bool IsPermanentFailure(const absl::Status& st);

struct JobPartOptions {
  std::string job_id;    // the coordinator's id; checkpoints live under <storage>/<job_id>
  std::string job_name;  // its metadata.name (metrics label job_name)
  std::string yaml;
  int64_t epoch = 1;
  int parallelism = 1;
  std::vector<int> tasks;  // global task ids of the job's plan
  int64_t restore_checkpoint = 0;
  int restore_parallelism = 0;  // the checkpoint's, if not `parallelism` (a rescale)
  // Shared checkpoint storage URL when the job names none (the job's tasks
  // run on several machines: the worker's own data dir will not do).
  std::string checkpoint_storage;
  // The directory all workers share (absolute; empty: none): relative
  // file paths of the job resolve against it, its default dead letter goes
  // to <shared_dir>/<job_id>/, and files may lie in it. Without one, a job
  // with relative file paths is refused (each worker's disk is its own).
  std::string shared_dir;
  // Other directories files of the job may lie in (CheckAllowedPaths).
  std::vector<std::string> allowed_paths;
  // The worker's network exchange (null: exchanges go through Kafka), and
  // the gRPC address of the worker running each global task id of the epoch.
  NetworkExchange* network = nullptr;
  std::vector<std::string> task_addresses;
};

class JobPart {
 public:
  enum class Phase { kPreparing, kReady, kRunning, kDrained, kDone, kFailed };
  struct TaskState {
    int task = 0;
    Phase phase = Phase::kPreparing;
    int64_t stored_checkpoint = 0;
    int64_t next_checkpoint = 0;
    std::string error;
    bool permanent = false;  // the error recurs on any restart (IsPermanentFailure)
    int64_t records_in = 0;
    int64_t records_out = 0;
    int64_t watermark_ms = 0;
    int64_t consumer_lag = 0;
    int64_t stop_checkpoint = 0;  // the stopping checkpoint triggered here, 0: none
    std::vector<Task::PartitionStatus> partitions;
    Task::Activity activity;
    int64_t state_bytes = 0;
  };

  // `options.data_dir` is the worker's; the part keeps its state under
  // <data_dir>/<job_id>. `metrics` is shared by every part of the worker.
  static std::unique_ptr<JobPart> Start(JobPartOptions part, RunOptions options,
                                        MetricsRegistry* metrics);
  ~JobPart();

  const std::string& job_id() const;
  // The worker's registry under this job's labels (job_id, job_name); its
  // series leave the worker's /metrics with the part.
  MetricsRegistry* metrics() const;
  int64_t epoch() const;
  void Run();
  void Signal(int64_t trigger, bool stop_at_trigger, int64_t completed, bool finish);
  std::vector<TaskState> States() const;
  void Stop();

  struct Impl;

 private:
  JobPart() = default;
  std::unique_ptr<Impl> impl_;
};

}  // namespace caravela
