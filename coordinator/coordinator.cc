#include "coordinator/coordinator.h"

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/time_util.h"
#include "coordinator/job_service.h"
#include "coordinator/job_store.h"
#include "coordinator/scheduler.h"
#include "coordinator/worker_registry.h"
#include "coordinator/worker_service.h"
#include "proto/grpc_support.h"
#include "spdlog/spdlog.h"

namespace caravela {

struct Coordinator::Impl {
  CoordinatorOptions options;
  std::unique_ptr<JobStore> store;
  SystemClock clock;
  std::unique_ptr<JobServiceImpl> jobs;
  std::unique_ptr<WorkerRegistry> workers;
  std::unique_ptr<Scheduler> scheduler;
  std::unique_ptr<WorkerServiceImpl> worker_service;
  std::unique_ptr<grpc::Server> server;
  std::string address;
  std::atomic<bool> stop{false};
  std::thread ticker;  // Scheduler::Tick every 50 ms
};

Coordinator::~Coordinator() {
  if (impl_ == nullptr) return;
  impl_->stop = true;
  if (impl_->ticker.joinable()) impl_->ticker.join();
  if (impl_->server != nullptr) impl_->server->Shutdown();
}

absl::StatusOr<std::unique_ptr<Coordinator>> Coordinator::Start(const CoordinatorOptions& options) {
  std::unique_ptr<Coordinator> c(new Coordinator());
  c->impl_ = std::make_unique<Impl>();
  Impl& im = *c->impl_;
  im.options = options;
  ASSIGN_OR_RETURN(im.store, JobStore::Open(options.data_dir + "/jobs"));
  im.workers = std::make_unique<WorkerRegistry>(&im.clock, options.worker_timeout_ms);
  SchedulerOptions so;
  so.checkpoint_storage = options.checkpoint_storage;
  so.prepare_job = options.prepare_job;
  if (so.checkpoint_storage.empty()) {
    so.checkpoint_storage =
        "file://" + std::filesystem::absolute(options.data_dir + "/checkpoints").string();
  }
  im.scheduler = std::make_unique<Scheduler>(im.store.get(), im.workers.get(), &im.clock, so);
  RETURN_IF_ERROR(im.scheduler->AdoptStored());
  im.jobs = std::make_unique<JobServiceImpl>(im.store.get(), options.token, &im.clock,
                                             options.allowed_paths, im.scheduler.get());
  im.worker_service =
      std::make_unique<WorkerServiceImpl>(im.workers.get(), options.token, im.scheduler.get());

  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  ASSIGN_OR_RETURN(std::shared_ptr<grpc::ServerCredentials> credentials,
                   ServerCredentials(options.tls_cert_file, options.tls_key_file));
  ASSIGN_OR_RETURN(GrpcServer server, StartGrpcServer(options.listen, std::move(credentials),
                                                      {im.jobs.get(), im.worker_service.get()},
                                                      options.max_message_bytes));
  im.server = std::move(server.server);
  im.address = std::move(server.address);
  im.ticker = std::thread([&im] {
    while (!im.stop.load()) {
      im.scheduler->Tick();
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  });
  return c;
}

const std::string& Coordinator::grpc_address() const { return impl_->address; }

void Coordinator::Wait() { impl_->server->Wait(); }

void Coordinator::Shutdown() { impl_->server->Shutdown(); }

}  // namespace caravela
