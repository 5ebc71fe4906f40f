#include "coordinator/job_service.h"

#include <filesystem>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/job_plan.h"
#include "common/job_spec.h"
#include "common/logging.h"
#include "coordinator/auth.h"
#include "coordinator/job_state.h"
#include "spdlog/spdlog.h"
#include "worker/checkpoint/job_savepoint.h"
#include "worker/registry/builtin_kinds.h"

namespace caravela {
namespace {

std::shared_ptr<spdlog::logger> Log() {
  static const std::shared_ptr<spdlog::logger> log = SubsystemLogger("coordinator");
  return log;
}

}  // namespace

JobServiceImpl::JobServiceImpl(JobStore* store, std::string token, const Clock* clock,
                               std::vector<std::string> allowed_paths, Scheduler* scheduler,
                               std::string savepoint_root)
    : store_(store),
      token_(std::move(token)),
      clock_(clock),
      allowed_paths_(std::move(allowed_paths)),
      scheduler_(scheduler),
      savepoint_root_(std::move(savepoint_root)) {}

absl::StatusOr<std::string> JobServiceImpl::SavepointPath(const std::string& requested) const {
  std::string path = requested;
  if (absl::StartsWith(path, "file://")) path = path.substr(7);
  if (path.empty()) return absl::InvalidArgumentError("no savepoint directory given");
  std::filesystem::path p = std::filesystem::path(path).lexically_normal();
  if (p.is_relative()) {
    if (savepoint_root_.empty() || *p.begin() == "..") {
      return absl::InvalidArgumentError(
          absl::StrCat("savepoint directory ", requested,
                       ": give an absolute path under an allowed one, or a name relative to the "
                       "coordinator's savepoint directory (no \"..\")"));
    }
    return (std::filesystem::path(savepoint_root_) / p).lexically_normal().string();
  }
  std::vector<std::string> allowed = allowed_paths_;
  if (!savepoint_root_.empty()) allowed.push_back(savepoint_root_);
  if (!PathUnder(p.string(), allowed)) {
    return absl::PermissionDeniedError(
        absl::StrCat("savepoint directory ", requested,
                     " is outside the directories this coordinator allows (--allow-path",
                     savepoint_root_.empty() ? "" : absl::StrCat(", or ", savepoint_root_), ")"));
  }
  return p.string();
}

grpc::Status JobServiceImpl::FromSavepoint(const std::string& requested, const JobSpec& spec,
                                           v1::SubmitJobResponse* response, v1::Job* job) {
  auto add_error = [&](const std::string& path, const std::string& message) {
    v1::ValidationError* ve = response->add_errors();
    ve->set_path(path);
    ve->set_message(message);
  };
  absl::StatusOr<std::string> dir = SavepointPath(requested);
  if (!dir.ok()) {
    add_error("from_savepoint", std::string(dir.status().message()));
    return grpc::Status::OK;
  }
  absl::StatusOr<JobSavepoint> sp = ReadJobSavepoint(*dir);
  if (!sp.ok()) {
    add_error("from_savepoint", std::string(sp.status().message()));
    return grpc::Status::OK;
  }
  for (const SpecError& e : CheckSavepointFits(*sp, *dir, spec)) add_error(e.path, e.message);
  if (response->errors_size() > 0) return grpc::Status::OK;
  if (scheduler_ == nullptr) {
    return grpc::Status(grpc::StatusCode::UNIMPLEMENTED, "this coordinator runs no scheduler");
  }
  const std::string storage = JobInstanceStorage(scheduler_->CheckpointStorageFor(spec), job->id());
  if (absl::Status st = ImportJobSavepoint(*dir, *sp, storage); !st.ok()) {
    return ToGrpc(absl::Status(st.code(), absl::StrCat("importing the savepoint in ", *dir,
                                                       " into ", storage, ": ", st.message())));
  }
  job->set_last_checkpoint(sp->checkpoint_id());
  job->set_checkpoint_parallelism(sp->parallelism());
  // Above the epochs the savepoint's job wrote with: its revisions supersede.
  job->set_epoch(sp->epoch());
  job->set_savepoint(*dir);
  return grpc::Status::OK;
}

grpc::Status JobServiceImpl::Authorize(const grpc::ServerContext& context) const {
  return CheckToken(context, token_);
}

grpc::Status JobServiceImpl::AuthorizeJobCall(const grpc::ServerContext& context,
                                              const std::string& job_id) const {
  if (grpc::Status a = Authorize(context); !a.ok()) return a;
  if (job_id.empty()) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        "job_id is empty: name a job (ListJobs, or `caravela jobs`, lists them)");
  }
  return grpc::Status::OK;
}

grpc::Status JobServiceImpl::SubmitJob(grpc::ServerContext* context,
                                       const v1::SubmitJobRequest* request,
                                       v1::SubmitJobResponse* response) {
  if (grpc::Status a = Authorize(*context); !a.ok()) return a;
  auto add_error = [&](const std::string& path, const std::string& message) {
    v1::ValidationError* ve = response->add_errors();
    ve->set_path(path);
    ve->set_message(message);
  };
  if (request->parallelism() < 0) {
    add_error("parallelism",
              absl::StrCat("expected 0 (the spec's) or 1 to the job's spec.max_parallelism, got ",
                           request->parallelism()));
    return grpc::Status::OK;
  }
  ParseResult parsed = ParseJobSpec(request->yaml());
  for (const SpecError& e : parsed.errors) add_error(e.path, e.message);
  if (!parsed.ok()) return grpc::Status::OK;
  if (request->parallelism() > parsed.spec.max_parallelism) {
    add_error("parallelism",
              absl::StrCat("expected 0 (the spec's) or 1 to the job's spec.max_parallelism (",
                           parsed.spec.max_parallelism, "), got ", request->parallelism()));
    return grpc::Status::OK;
  }
  // YAML from the network is untrusted: its files stay where workers allow.
  for (const SpecError& e : CheckAllowedPaths(parsed.spec, allowed_paths_)) {
    add_error(e.path, e.message);
  }
  if (response->errors_size() > 0) return grpc::Status::OK;
  const int parallelism =
      request->parallelism() > 0 ? request->parallelism() : parsed.spec.parallelism;
  if (std::string why = WhyNotClusterParallelism(parsed.spec, parallelism); !why.empty()) {
    add_error("spec.parallelism", why);
    return grpc::Status::OK;
  }
  // The plan's own checks (Kafka partition counts are checked when it runs).
  absl::StatusOr<JobPlan> plan = PlanClusterJob(parsed.spec, parallelism);
  if (!plan.ok()) {
    for (absl::string_view line : absl::StrSplit(plan.status().message(), '\n')) {
      add_error("spec", std::string(line));
    }
    return grpc::Status::OK;
  }
  if (scheduler_ != nullptr) {
    // Before an id is taken; Submit checks again under its lock.
    v1::Job candidate;
    candidate.set_name(parsed.spec.name);
    candidate.set_yaml(request->yaml());
    for (const SpecError& e : scheduler_->CheckAdmission(candidate)) add_error(e.path, e.message);
    if (response->errors_size() > 0) return grpc::Status::OK;
  }
  absl::StatusOr<std::string> id = store_->NewId(parsed.spec.name);
  if (!id.ok()) return ToGrpc(id.status());
  v1::Job job;
  job.set_id(*id);
  if (!request->from_savepoint().empty()) {
    grpc::Status st = FromSavepoint(request->from_savepoint(), parsed.spec, response, &job);
    if (!st.ok() || response->errors_size() > 0) return st;
  }
  job.set_name(parsed.spec.name);
  job.set_state(v1::SUBMITTED);
  job.set_parallelism(parallelism);
  job.set_yaml(request->yaml());
  job.set_submitted_at_ms(clock_->NowMs());
  job.set_updated_at_ms(job.submitted_at_ms());
  job.set_stages(static_cast<int32_t>(plan->stages.size()));
  job.set_exchanges(static_cast<int32_t>(plan->exchanges.size()));
  if (absl::Status st = scheduler_ != nullptr ? scheduler_->Submit(job) : store_->Put(job);
      !st.ok()) {
    if (absl::IsFailedPrecondition(st)) {  // a job admitted since CheckAdmission
      add_error("spec", std::string(st.message()));
      return grpc::Status::OK;
    }
    return ToGrpc(st);
  }
  Log()->info(
      "job {} submitted (parallelism {}, {} tasks in {} stages){}", job.id(), parallelism,
      plan->total_tasks(), plan->stages.size(),
      job.savepoint().empty() ? "" : absl::StrCat(", from the savepoint in ", job.savepoint()));
  response->set_job_id(job.id());
  return grpc::Status::OK;
}

grpc::Status JobServiceImpl::GetJob(grpc::ServerContext* context, const v1::GetJobRequest* request,
                                    v1::Job* response) {
  if (grpc::Status a = AuthorizeJobCall(*context, request->job_id()); !a.ok()) return a;
  absl::StatusOr<v1::Job> job = store_->Get(request->job_id());
  if (!job.ok()) return ToGrpc(job.status());
  *response = std::move(*job);
  if (scheduler_ != nullptr) scheduler_->FillLive(response);
  return grpc::Status::OK;
}

grpc::Status JobServiceImpl::ListJobs(grpc::ServerContext* context,
                                      const v1::ListJobsRequest* /*request*/,
                                      v1::ListJobsResponse* response) {
  if (grpc::Status a = Authorize(*context); !a.ok()) return a;
  absl::StatusOr<std::vector<v1::Job>> jobs = store_->List();
  if (!jobs.ok()) return ToGrpc(jobs.status());
  for (v1::Job& j : *jobs) {
    j.clear_yaml();  // the listing stays small; GetJob has it
    if (scheduler_ != nullptr) scheduler_->FillLive(&j);
    *response->add_jobs() = std::move(j);
  }
  return grpc::Status::OK;
}

grpc::Status JobServiceImpl::CancelJob(grpc::ServerContext* context,
                                       const v1::CancelJobRequest* request, v1::Job* response) {
  if (grpc::Status a = AuthorizeJobCall(*context, request->job_id()); !a.ok()) return a;
  if (scheduler_ != nullptr) {
    absl::StatusOr<v1::Job> job = scheduler_->Cancel(request->job_id(), "canceled by a user");
    if (!job.ok()) return ToGrpc(job.status());
    *response = std::move(*job);
    return grpc::Status::OK;
  }
  std::lock_guard<std::mutex> lock(mu_);
  absl::StatusOr<v1::Job> job = store_->Get(request->job_id());
  if (!job.ok()) return ToGrpc(job.status());
  if (absl::Status st = Transition(*job, v1::CANCELED, clock_->NowMs(), "canceled by a user");
      !st.ok()) {
    return ToGrpc(st);
  }
  if (absl::Status st = store_->Put(*job); !st.ok()) return ToGrpc(st);
  Log()->info("job {} canceled", job->id());
  *response = std::move(*job);
  return grpc::Status::OK;
}

grpc::Status JobServiceImpl::StopJobWithSavepoint(grpc::ServerContext* context,
                                                  const v1::StopJobWithSavepointRequest* request,
                                                  v1::Job* response) {
  if (grpc::Status a = AuthorizeJobCall(*context, request->job_id()); !a.ok()) return a;
  if (scheduler_ == nullptr) {
    return grpc::Status(grpc::StatusCode::UNIMPLEMENTED, "this coordinator runs no scheduler");
  }
  absl::StatusOr<std::string> dir = SavepointPath(request->savepoint_dir());
  if (!dir.ok()) return ToGrpc(dir.status());
  absl::StatusOr<v1::Job> job = scheduler_->StopWithSavepoint(request->job_id(), *dir);
  if (!job.ok()) return ToGrpc(job.status());
  *response = std::move(*job);
  scheduler_->FillLive(response);
  return grpc::Status::OK;
}

grpc::Status JobServiceImpl::RestartJob(grpc::ServerContext* context,
                                        const v1::RestartJobRequest* request, v1::Job* response) {
  if (grpc::Status a = AuthorizeJobCall(*context, request->job_id()); !a.ok()) return a;
  if (scheduler_ == nullptr) {
    return grpc::Status(grpc::StatusCode::UNIMPLEMENTED, "this coordinator runs no scheduler");
  }
  absl::StatusOr<v1::Job> job = scheduler_->Restart(request->job_id(), request->parallelism());
  if (!job.ok()) return ToGrpc(job.status());
  *response = std::move(*job);
  return grpc::Status::OK;
}

grpc::Status JobServiceImpl::RescaleJob(grpc::ServerContext* context,
                                        const v1::RescaleJobRequest* request, v1::Job* response) {
  if (grpc::Status a = AuthorizeJobCall(*context, request->job_id()); !a.ok()) return a;
  if (scheduler_ == nullptr) {
    return grpc::Status(grpc::StatusCode::UNIMPLEMENTED, "this coordinator runs no scheduler");
  }
  absl::StatusOr<v1::Job> job = scheduler_->Rescale(request->job_id(), request->parallelism());
  if (!job.ok()) return ToGrpc(job.status());
  *response = std::move(*job);
  scheduler_->FillLive(response);
  return grpc::Status::OK;
}

}  // namespace caravela
