#include "coordinator/job_client.h"

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "proto/grpc_support.h"

namespace caravela {

JobClient::JobClient(const std::string& address, std::string token, int timeout_ms,
                     const std::string& tls_ca)
    : address_(address), token_(std::move(token)), timeout_ms_(timeout_ms) {
  absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> credentials =
      ChannelCredentials(tls_ca);
  init_ = credentials.status();
  channel_ = grpc::CreateChannel(
      address, credentials.ok() ? *credentials : grpc::InsecureChannelCredentials());
  stub_ = v1::JobService::NewStub(channel_);
}

void JobClient::Prepare(grpc::ClientContext* context) const {
  context->set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(timeout_ms_));
  if (!token_.empty()) context->AddMetadata("authorization", "Bearer " + token_);
}

absl::Status JobClient::FromGrpc(const grpc::Status& s) const {
  if (!init_.ok()) return init_;
  if (s.ok()) return absl::OkStatus();
  std::string message = s.error_message();
  if (s.error_code() == grpc::StatusCode::UNAVAILABLE ||
      s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
    message = absl::StrCat("cannot reach the coordinator at ", address_, ": ", message,
                           " (is it running? --coordinator or $CARAVELA_COORDINATOR)");
  }
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()), message);
}

absl::StatusOr<v1::SubmitJobResponse> JobClient::Submit(const std::string& yaml, int parallelism,
                                                        const std::string& from_savepoint) {
  grpc::ClientContext context;
  Prepare(&context);
  v1::SubmitJobRequest request;
  request.set_yaml(yaml);
  request.set_parallelism(parallelism);
  request.set_from_savepoint(from_savepoint);
  v1::SubmitJobResponse response;
  RETURN_IF_ERROR(FromGrpc(stub_->SubmitJob(&context, request, &response)));
  return response;
}

absl::StatusOr<v1::Job> JobClient::Get(const std::string& id) {
  grpc::ClientContext context;
  Prepare(&context);
  v1::GetJobRequest request;
  request.set_job_id(id);
  v1::Job job;
  RETURN_IF_ERROR(FromGrpc(stub_->GetJob(&context, request, &job)));
  return job;
}

absl::StatusOr<std::vector<v1::Job>> JobClient::List() {
  grpc::ClientContext context;
  Prepare(&context);
  v1::ListJobsResponse response;
  RETURN_IF_ERROR(FromGrpc(stub_->ListJobs(&context, v1::ListJobsRequest(), &response)));
  return std::vector<v1::Job>(response.jobs().begin(), response.jobs().end());
}

absl::StatusOr<v1::Job> JobClient::Cancel(const std::string& id) {
  grpc::ClientContext context;
  Prepare(&context);
  v1::CancelJobRequest request;
  request.set_job_id(id);
  v1::Job job;
  RETURN_IF_ERROR(FromGrpc(stub_->CancelJob(&context, request, &job)));
  return job;
}

absl::StatusOr<v1::Job> JobClient::Rescale(const std::string& id, int parallelism) {
  grpc::ClientContext context;
  Prepare(&context);
  v1::RescaleJobRequest request;
  request.set_job_id(id);
  request.set_parallelism(parallelism);
  v1::Job job;
  RETURN_IF_ERROR(FromGrpc(stub_->RescaleJob(&context, request, &job)));
  return job;
}

absl::StatusOr<v1::Job> JobClient::Restart(const std::string& id, int parallelism) {
  grpc::ClientContext context;
  Prepare(&context);
  v1::RestartJobRequest request;
  request.set_job_id(id);
  request.set_parallelism(parallelism);
  v1::Job job;
  RETURN_IF_ERROR(FromGrpc(stub_->RestartJob(&context, request, &job)));
  return job;
}

absl::StatusOr<v1::Job> JobClient::StopWithSavepoint(const std::string& id,
                                                     const std::string& dir) {
  grpc::ClientContext context;
  Prepare(&context);
  v1::StopJobWithSavepointRequest request;
  request.set_job_id(id);
  request.set_savepoint_dir(dir);
  v1::Job job;
  RETURN_IF_ERROR(FromGrpc(stub_->StopJobWithSavepoint(&context, request, &job)));
  return job;
}

absl::StatusOr<std::vector<v1::WorkerInfo>> JobClient::Workers() {
  auto workers = v1::WorkerService::NewStub(channel_);
  grpc::ClientContext context;
  Prepare(&context);
  v1::ListWorkersResponse response;
  RETURN_IF_ERROR(FromGrpc(workers->ListWorkers(&context, v1::ListWorkersRequest(), &response)));
  return std::vector<v1::WorkerInfo>(response.workers().begin(), response.workers().end());
}

absl::StatusOr<std::string> JobClient::Health(const std::string& service) {
  auto health = grpc::health::v1::Health::NewStub(channel_);
  grpc::ClientContext context;
  Prepare(&context);
  grpc::health::v1::HealthCheckRequest request;
  request.set_service(service);
  grpc::health::v1::HealthCheckResponse response;
  RETURN_IF_ERROR(FromGrpc(health->Check(&context, request, &response)));
  return grpc::health::v1::HealthCheckResponse::ServingStatus_Name(response.status());
}

}  // namespace caravela
