// JobService (proto/caravela/v1/job.proto) over the JobStore: validates
// submitted YAML with the same parser and planner as `caravela validate` /
// `caravela plan` and stores valid jobs as SUBMITTED; the Scheduler runs
// them on workers and adds the live task statuses to GetJob / ListJobs.
// RescaleJob goes through the scheduler (a stopping checkpoint, then a new
// placement); StopJobWithSavepoint answers UNIMPLEMENTED (a later slice).
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
  // cancels and reports live state.
  JobServiceImpl(JobStore* store, std::string token, const Clock* clock,
                 std::vector<std::string> allowed_paths = {}, Scheduler* scheduler = nullptr);

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
  grpc::Status RescaleJob(grpc::ServerContext* context, const v1::RescaleJobRequest* request,
                          v1::Job* response) override;

 private:
  grpc::Status Authorize(const grpc::ServerContext& context) const;

  JobStore* store_;
  std::string token_;
  const Clock* clock_;
  std::vector<std::string> allowed_paths_;
  Scheduler* scheduler_;
  std::mutex mu_;  // serializes read-modify-write of a job
};

}  // namespace caravela
