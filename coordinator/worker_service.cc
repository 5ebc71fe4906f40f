#include "coordinator/worker_service.h"

#include <utility>

#include "common/logging.h"
#include "coordinator/auth.h"
#include "spdlog/spdlog.h"

namespace caravela {

WorkerServiceImpl::WorkerServiceImpl(WorkerRegistry* registry, std::string token,
                                     Scheduler* scheduler, MetricsRegistry* metrics)
    : registry_(registry), token_(std::move(token)), scheduler_(scheduler) {
  if (metrics != nullptr) {
    heartbeats_ = metrics->Get("coordinator_heartbeats_total");
    registrations_ = metrics->Get("coordinator_registrations_total");
  }
}

grpc::Status WorkerServiceImpl::Register(grpc::ServerContext* context,
                                         const v1::RegisterRequest* request,
                                         v1::RegisterResponse* response) {
  if (grpc::Status a = CheckToken(*context, token_); !a.ok()) return a;
  if (request->slots() < 1) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "a worker needs at least 1 slot");
  }
  absl::StatusOr<v1::RegisterResponse> registered = registry_->Register(*request);
  if (!registered.ok()) {
    SubsystemLogger("coordinator")
        ->warn("worker at {} refused: {}", request->address(),
               std::string(registered.status().message()));
    return ToGrpc(registered.status());
  }
  *response = *std::move(registered);
  if (registrations_ != nullptr) registrations_->Add();
  SubsystemLogger("coordinator")
      ->info("worker {} registered ({} slots, {})", response->worker_id(), request->slots(),
             request->address());
  return grpc::Status::OK;
}

grpc::Status WorkerServiceImpl::Heartbeat(grpc::ServerContext* context,
                                          const v1::HeartbeatRequest* request,
                                          v1::HeartbeatResponse* response) {
  if (grpc::Status a = CheckToken(*context, token_); !a.ok()) return a;
  response->set_unknown_worker(!registry_->Heartbeat(*request));
  if (heartbeats_ != nullptr) heartbeats_->Add();
  response->set_lease_ms(registry_->lease_ms());
  if (!response->unknown_worker() && scheduler_ != nullptr) {
    scheduler_->OnHeartbeat(*request, response);
  }
  return grpc::Status::OK;
}

grpc::Status WorkerServiceImpl::ListWorkers(grpc::ServerContext* context,
                                            const v1::ListWorkersRequest* /*request*/,
                                            v1::ListWorkersResponse* response) {
  if (grpc::Status a = CheckToken(*context, token_); !a.ok()) return a;
  for (v1::WorkerInfo& w : registry_->List()) *response->add_workers() = std::move(w);
  return grpc::Status::OK;
}

}  // namespace caravela
