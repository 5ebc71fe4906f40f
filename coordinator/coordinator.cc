#include "coordinator/coordinator.h"

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/time_util.h"
#include "coordinator/job_service.h"
#include "coordinator/job_store.h"

namespace caravela {

struct Coordinator::Impl {
  CoordinatorOptions options;
  std::unique_ptr<JobStore> store;
  SystemClock clock;
  std::unique_ptr<JobServiceImpl> jobs;
  std::unique_ptr<grpc::Server> server;
  std::string address;
};

Coordinator::~Coordinator() {
  if (impl_ != nullptr && impl_->server != nullptr) impl_->server->Shutdown();
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
  im.jobs = std::make_unique<JobServiceImpl>(im.store.get(), options.token, &im.clock);

  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(options.listen, grpc::InsecureServerCredentials(), &port);
  builder.SetMaxReceiveMessageSize(options.max_message_bytes);
  builder.RegisterService(im.jobs.get());
  im.server = builder.BuildAndStart();
  if (im.server == nullptr || port == 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", options.listen, " (in use, or not an address here?)"));
  }
  im.address = absl::StrCat(options.listen.substr(0, colon), ":", port);
  im.server->GetHealthCheckService()->SetServingStatus(true);
  return c;
}

const std::string& Coordinator::grpc_address() const { return impl_->address; }

void Coordinator::Wait() { impl_->server->Wait(); }

void Coordinator::Shutdown() { impl_->server->Shutdown(); }

}  // namespace caravela
