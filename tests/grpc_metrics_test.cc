// gRPC request metrics (proto/grpc_support.h, issue 11): a real server from
// StartGrpcServer on loopback and a channel from CreateGrpcChannel count
// every call by method and status code, with its latency, in their
// registries.
#include <gmock/gmock.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <memory>
#include <string>

#include "caravela/v1/worker.grpc.pb.h"
#include "common/metrics.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "proto/grpc_support.h"
#include "worker/testing/status_testing.h"

namespace caravela {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
namespace health = ::grpc::health::v1;

constexpr char kCheck[] = R"(method="/grpc.health.v1.Health/Check")";

class GrpcMetricsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<GrpcServer> server =
        StartGrpcServer("127.0.0.1:0", grpc::InsecureServerCredentials(), {&workers_},
                        kDefaultGrpcMessageBytes, &server_m_);
    ASSERT_OK(server.status());
    server_ = std::move(server->server);
    channel_ = CreateGrpcChannel(server->address, grpc::InsecureChannelCredentials(), &client_m_);
    stub_ = health::Health::NewStub(channel_);
  }
  void TearDown() override {
    if (server_ != nullptr) server_->Shutdown();
  }

  grpc::Status Check(const std::string& service) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    health::HealthCheckRequest request;
    request.set_service(service);
    health::HealthCheckResponse response;
    return stub_->Check(&context, request, &response);
  }

  // A service with synchronous methods (all UNIMPLEMENTED): a server needs
  // one to start (the caravela binary has the reflection service).
  v1::WorkerService::Service workers_;
  MetricsRegistry server_m_, client_m_;
  std::unique_ptr<grpc::Server> server_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<health::Health::Stub> stub_;
};

TEST_F(GrpcMetricsTest, ServerAndClientCountCallsByMethodAndCode) {
  const grpc::Status serving = Check("");
  ASSERT_TRUE(serving.ok()) << serving.error_message();
  const grpc::Status unknown = Check("no.such.Service");
  EXPECT_EQ(unknown.error_code(), grpc::StatusCode::NOT_FOUND) << unknown.error_message();

  for (const MetricsRegistry* m : {&server_m_, &client_m_}) {
    const std::string side = m == &server_m_ ? "server" : "client";
    SCOPED_TRACE(side);
    EXPECT_EQ(m->Value("grpc_" + side + "_handled_total", std::string(kCheck) + R"(,code="OK")"),
              1);
    EXPECT_EQ(
        m->Value("grpc_" + side + "_handled_total", std::string(kCheck) + R"(,code="NOT_FOUND")"),
        1);
    const Histogram* h = m->FindHistogram("grpc_" + side + "_handling_ms", kCheck);
    ASSERT_NE(h, nullptr);
    EXPECT_EQ(h->count(), 2);
    EXPECT_EQ(h->bounds(), GrpcLatencyBucketsMs());
  }

  const std::string text = server_m_.ToPrometheusText("caravela_");
  EXPECT_THAT(text, HasSubstr("# TYPE caravela_grpc_server_handled_total counter"));
  EXPECT_THAT(
      text,
      HasSubstr(
          R"(caravela_grpc_server_handled_total{method="/grpc.health.v1.Health/Check",code="OK"} 1)"));
  EXPECT_THAT(text, HasSubstr("# TYPE caravela_grpc_server_handling_seconds histogram"));
  EXPECT_THAT(
      text,
      HasSubstr(
          R"(caravela_grpc_server_handling_seconds_count{method="/grpc.health.v1.Health/Check"} 2)"));
  EXPECT_THAT(
      text,
      HasSubstr(
          R"(caravela_grpc_server_handling_seconds_bucket{method="/grpc.health.v1.Health/Check",le="+Inf"} 2)"));
}

// A method this binary does not know is counted as method="unknown", not
// under the name the client sent (the method label stays a fixed set).
TEST_F(GrpcMetricsTest, UnknownMethodsShareOneLabel) {
  grpc::GenericStub generic(channel_);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  grpc::Slice empty("");
  grpc::ByteBuffer request(&empty, 1), response;
  std::promise<grpc::Status> done;
  generic.UnaryCall(&context, "/no.such.Service/Method", {}, &request, &response,
                    [&done](grpc::Status st) { done.set_value(std::move(st)); });
  EXPECT_EQ(done.get_future().get().error_code(), grpc::StatusCode::UNIMPLEMENTED);
  EXPECT_EQ(
      server_m_.Value("grpc_server_handled_total", R"(method="unknown",code="UNIMPLEMENTED")"), 1);
  const std::string text = server_m_.ToPrometheusText();
  EXPECT_THAT(text, Not(HasSubstr("no.such.Service"))) << text;
}

}  // namespace
}  // namespace caravela
