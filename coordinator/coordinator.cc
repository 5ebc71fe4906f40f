#include "coordinator/coordinator.h"

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/time_util.h"
#include "coordinator/job_service.h"
#include "coordinator/job_store.h"
#include "coordinator/worker_registry.h"
#include "coordinator/worker_service.h"
#include "proto/grpc_credentials.h"
#include "spdlog/spdlog.h"

namespace caravela {

struct Coordinator::Impl {
  CoordinatorOptions options;
  std::unique_ptr<JobStore> store;
  SystemClock clock;
  std::unique_ptr<JobServiceImpl> jobs;
  std::unique_ptr<WorkerRegistry> workers;
  std::unique_ptr<WorkerServiceImpl> worker_service;
  std::unique_ptr<grpc::Server> server;
  std::string address;
  std::atomic<bool> stop{false};
  std::thread expirer;  // declares silent workers dead
};

Coordinator::~Coordinator() {
  if (impl_ == nullptr) return;
  impl_->stop = true;
  if (impl_->expirer.joinable()) impl_->expirer.join();
  if (impl_->server != nullptr) impl_->server->Shutdown();
}

absl::StatusOr<std::unique_ptr<Coordinator>> Coordinator::Start(const CoordinatorOptions& options) {
  std::unique_ptr<Coordinator> c(new Coordinator());
  c->impl_ = std::make_unique<Impl>();
  Impl& im = *c->impl_;
  im.options = options;
  const size_t colon = options.listen.rfind(':');
  if (colon == std::string::npos || colon == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--listen ", options.listen, ": expected HOST:PORT (port 0: any free one)"));
  }
  ASSIGN_OR_RETURN(im.store, JobStore::Open(options.data_dir + "/jobs"));
  im.jobs = std::make_unique<JobServiceImpl>(im.store.get(), options.token, &im.clock,
                                             options.allowed_paths);
  im.workers = std::make_unique<WorkerRegistry>(&im.clock, options.worker_timeout_ms);
  im.worker_service = std::make_unique<WorkerServiceImpl>(im.workers.get(), options.token);

  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  int port = 0;
  ASSIGN_OR_RETURN(std::shared_ptr<grpc::ServerCredentials> credentials,
                   ServerCredentials(options.tls_cert_file, options.tls_key_file));
  builder.AddListeningPort(options.listen, credentials, &port);
  builder.SetMaxReceiveMessageSize(options.max_message_bytes);
  builder.RegisterService(im.jobs.get());
  builder.RegisterService(im.worker_service.get());
  im.server = builder.BuildAndStart();
  if (im.server == nullptr || port == 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", options.listen, " (in use, or not an address here?)"));
  }
  im.address = absl::StrCat(options.listen.substr(0, colon), ":", port);
  im.server->GetHealthCheckService()->SetServingStatus(true);
  im.expirer = std::thread([&im] {
    while (!im.stop.load()) {
      for (const std::string& id : im.workers->ExpireSilent()) {
        SubsystemLogger("coordinator")
            ->warn("worker {} is dead: no heartbeat for {} ms", id, im.options.worker_timeout_ms);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  });
  return c;
}

const std::string& Coordinator::grpc_address() const { return impl_->address; }

void Coordinator::Wait() { impl_->server->Wait(); }

void Coordinator::Shutdown() { impl_->server->Shutdown(); }

}  // namespace caravela
