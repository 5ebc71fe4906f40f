// WorkerService (proto/caravela/v1/worker.proto) over the WorkerRegistry:
// registration, heartbeats (leases; task reports up, assignments down), the
// listing `caravela workers` shows.
#pragma once

#include <string>

#include "caravela/v1/worker.grpc.pb.h"
#include "common/metrics.h"
#include "coordinator/scheduler.h"
#include "coordinator/worker_registry.h"

namespace caravela {

class WorkerServiceImpl final : public v1::WorkerService::Service {
 public:
  // `scheduler` (may be null in tests) takes task reports and answers
  // assignments in heartbeats.
  WorkerServiceImpl(WorkerRegistry* registry, std::string token, Scheduler* scheduler = nullptr,
                    MetricsRegistry* metrics = nullptr);

  grpc::Status Register(grpc::ServerContext* context, const v1::RegisterRequest* request,
                        v1::RegisterResponse* response) override;
  grpc::Status Heartbeat(grpc::ServerContext* context, const v1::HeartbeatRequest* request,
                         v1::HeartbeatResponse* response) override;
  grpc::Status ListWorkers(grpc::ServerContext* context, const v1::ListWorkersRequest* request,
                           v1::ListWorkersResponse* response) override;

 private:
  WorkerRegistry* registry_;
  std::string token_;
  Scheduler* scheduler_;
  Counter* heartbeats_ = nullptr;     // coordinator_heartbeats_total
  Counter* registrations_ = nullptr;  // coordinator_registrations_total
};

}  // namespace caravela
