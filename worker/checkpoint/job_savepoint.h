// Job savepoints (docs/semantics.md "Savepoints"): a self-contained copy of
// one job-wide complete checkpoint in a directory of its own, written when a
// job stops with a savepoint (`caravela savepoint ID DIR`) and imported into
// checkpoint storage when a job starts from it (`caravela submit
// --from-savepoint DIR`). The copy outlives the job's checkpoint GC and can
// move to another cluster; a job started from it may have another
// parallelism (the tasks then gather their keys, task_rescale.cc).
//
// Layout (see JobSavepoint in proto/caravela/v1/checkpoint.proto):
//
//   DIR/state/<job>/task-<g>/chk-<n>.manifest   every task's manifest and
//   DIR/state/<job>/task-<g>/shared/...         the files it lists, under
//   DIR/state/<job>/task-<g>/chk-<n>/...        their checkpoint-storage keys
//   DIR/job-savepoint.json                      written last: the commit point
//
// Threading: free functions, no shared state; each call opens its storages.
#pragma once

#include <string>
#include <vector>

#include "caravela/v1/checkpoint.pb.h"
#include "common/job_spec.h"
#include "common/status.h"

namespace caravela {

using JobSavepoint = ::caravela::v1::JobSavepoint;

// Where one submitted job keeps its checkpoints in the cluster: a
// directory of its own under the storage (`<storage_url>/<job_id>`), so a
// job submitted again under the same name starts fresh (unless from a
// savepoint, which is imported there).
std::string JobInstanceStorage(const std::string& storage_url, const std::string& job_id);

struct JobCheckpointRef {
  std::string storage_url;  // the job's checkpoint storage (JobInstanceStorage)
  std::string job_name;
  std::string job_id;   // recorded in the savepoint, for people
  int tasks = 0;        // global task ids 0..tasks-1
  int parallelism = 0;  // tasks per stage when it was taken
  int64_t checkpoint_id = 0;
};

// Copies checkpoint `from.checkpoint_id` of every task into `dir` (a local
// path or file:// URL; created if missing) and writes job-savepoint.json
// last. AlreadyExists if `dir` holds a savepoint already; DataLoss naming
// the task and key when a task's part of the checkpoint is missing or
// truncated in storage.
absl::StatusOr<JobSavepoint> WriteJobSavepoint(const JobCheckpointRef& from,
                                               const std::string& dir);

// Reads job-savepoint.json and checks that every task's manifest and every
// file it lists are present with their sizes. NotFound when `dir` holds no
// savepoint, DataLoss when it is incomplete, FailedPrecondition for a newer
// layout.
absl::StatusOr<JobSavepoint> ReadJobSavepoint(const std::string& dir);

// Why the savepoint (read from `dir`) cannot start a job of `spec`, one
// error per reason with its YAML path: another job's name, another job
// graph (JobGraphHash), no spec.checkpoint. Empty if it can.
std::vector<SpecError> CheckSavepointFits(const JobSavepoint& savepoint, const std::string& dir,
                                          const JobSpec& spec);

// Copies the savepoint's state into checkpoint storage `storage_url` under
// the same keys, so that tasks restore checkpoint `checkpoint_id` from it
// as from any other (shared files already there with the right size are
// not copied again).
absl::Status ImportJobSavepoint(const std::string& dir, const JobSavepoint& savepoint,
                                const std::string& storage_url);

}  // namespace caravela
