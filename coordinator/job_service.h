// JobService (proto/caravela/v1/job.proto) over the JobStore: validates
// submitted YAML with the same parser and planner as `caravela validate` /
// `caravela plan` and stores valid jobs as SUBMITTED; the Scheduler runs
// them on workers and adds the live task statuses to GetJob / ListJobs.
// RescaleJob and StopJobWithSavepoint go through the scheduler (a stopping
// checkpoint, then a new placement or a copy to the savepoint directory);
// SubmitJob with from_savepoint imports the savepoint into the job's
// checkpoint storage first (worker/checkpoint/job_savepoint.h).
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "caravela/v1/job.grpc.pb.h"
#include "common/time_util.h"
#include "coordinator/job_store.h"
#include "coordinator/scheduler.h"

namespace caravela {

class JobServiceImpl final : public v1::JobService::Service {
 public:
  // `token`: non-empty to require "authorization: Bearer <token>" on every
  // call (UNAUTHENTICATED before anything else). `clock` stamps jobs.
  // `allowed_paths`: absolute directories a job's files may lie in (besides
  // paths relative to the worker's data dir); see CheckAllowedPaths.
  // `scheduler` (may be null in tests: jobs are only stored) admits,
  // cancels and reports live state. `savepoint_root`: where savepoint
  // directories named by a relative path go (the coordinator's
  // <data-dir>/savepoints); absolute ones must lie under it or an allowed
  // path. Empty: only absolute, allowed ones.
  JobServiceImpl(JobStore* store, std::string token, const Clock* clock,
                 std::vector<std::string> allowed_paths = {}, Scheduler* scheduler = nullptr,
                 std::string savepoint_root = "");

  grpc::Status SubmitJob(grpc::ServerContext* context, const v1::SubmitJobRequest* request,
                         v1::SubmitJobResponse* response) override;
  grpc::Status GetJob(grpc::ServerContext* context, const v1::GetJobRequest* request,
                      v1::Job* response) override;
  grpc::Status ListJobs(grpc::ServerContext* context, const v1::ListJobsRequest* request,
                        v1::ListJobsResponse* response) override;
  grpc::Status CancelJob(grpc::ServerContext* context, const v1::CancelJobRequest* request,
                         v1::Job* response) override;
  grpc::Status StopJobWithSavepoint(grpc::ServerContext* context,
                                    const v1::StopJobWithSavepointRequest* request,
                                    v1::Job* response) override;
  grpc::Status RestartJob(grpc::ServerContext* context, const v1::RestartJobRequest* request,
                          v1::Job* response) override;
  grpc::Status RescaleJob(grpc::ServerContext* context, const v1::RescaleJobRequest* request,
                          v1::Job* response) override;

 private:
  grpc::Status Authorize(const grpc::ServerContext& context) const;
  // Authorize, then INVALID_ARGUMENT for an empty job id (not NOT_FOUND: the
  // call was malformed, no job was looked for).
  grpc::Status AuthorizeJobCall(const grpc::ServerContext& context,
                                const std::string& job_id) const;
  // The absolute directory a request's savepoint path names, or why it may
  // not be used (InvalidArgument, PermissionDenied).
  absl::StatusOr<std::string> SavepointPath(const std::string& requested) const;
  // Checks the savepoint at `dir` fits the job and imports it into the job's
  // checkpoint storage; validation errors go to `response`.
  grpc::Status FromSavepoint(const std::string& dir, const JobSpec& spec,
                             v1::SubmitJobResponse* response, v1::Job* job);

  JobStore* store_;
  std::string token_;
  const Clock* clock_;
  std::vector<std::string> allowed_paths_;
  Scheduler* scheduler_;
  std::string savepoint_root_;
  std::mutex mu_;  // serializes read-modify-write of a job
};

}  // namespace caravela
