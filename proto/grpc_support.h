// Serving and calling the gRPC APIs of this directory: a server with the
// standard health service, and TLS credentials from certificate files (SPEC
// §8 "Services": optional TLS). Empty file names mean plaintext, for
// loopback and tests; errors name the file that could not be read. With a
// MetricsRegistry, servers and channels count their RPCs into it (issue 11):
//   grpc_server_handled_total{method,code}  grpc_server_handling_ms{method}
//   grpc_client_handled_total{method,code}  grpc_client_handling_ms{method}
// `method` is the full gRPC name ("/caravela.v1.JobService/SubmitJob";
// "unknown" for a method this binary has no descriptor of, so the label set
// stays fixed), `code` the status code's name ("OK", "NOT_FOUND"); the
// histograms hold the time from the call's start to its status
// (GrpcLatencyBucketsMs).
#pragma once

#include <google/protobuf/message.h>
#include <grpcpp/grpcpp.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace caravela {

class MetricsRegistry;

// The default limit of a received message (gRPC's own default).
inline constexpr int kDefaultGrpcMessageBytes = 4 << 20;

// Bucket bounds of grpc_{server,client}_handling_ms: 1 ms .. 10 s.
const std::vector<int64_t>& GrpcLatencyBucketsMs();

// Server credentials: TLS with the PEM certificate chain and private key,
// or insecure when both are empty (one without the other is an error).
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> ServerCredentials(
    const std::string& cert_file, const std::string& key_file);

// Channel credentials: TLS trusting the PEM roots in `ca_file` (the
// server's certificate must name the host or IP it is reached by), or
// insecure when `ca_file` is empty.
absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> ChannelCredentials(
    const std::string& ca_file);

// `m` as Caravela's JSON (docs/api.md; the CLI's --json and the HTTP API
// alike): the .proto's field names (snake_case); every field, zero and
// default ones too (a message field not set as its defaults, so a reader
// never meets a missing key); 64-bit integers as JSON numbers (ids, offsets,
// milliseconds since 1970 all stay below 2^53); INT64_MIN, the "unknown"
// of watermarks, as null; enums by name; non-finite doubles as null.
std::string ProtoJson(const google::protobuf::Message& m);

// A started server and the address it is bound to ("HOST:PORT" with the
// port actually chosen).
struct GrpcServer {
  std::unique_ptr<grpc::Server> server;
  std::string address;
};

// Binds `listen` (HOST:PORT; port 0 picks a free one) with `credentials`,
// serves `services` and the standard health service (grpc.health.v1,
// SERVING once started, for the server ("") and for each name of
// `health_names`, the full names of `services` such as
// "caravela.v1.JobService"). Every RPC, health checks included, is counted in
// `metrics` when not null (it must outlive the server). InvalidArgument for
// an address that is not HOST:PORT, Unavailable when it cannot be bound.
absl::StatusOr<GrpcServer> StartGrpcServer(const std::string& listen,
                                           std::shared_ptr<grpc::ServerCredentials> credentials,
                                           const std::vector<grpc::Service*>& services,
                                           int max_message_bytes = kDefaultGrpcMessageBytes,
                                           MetricsRegistry* metrics = nullptr,
                                           const std::vector<std::string>& health_names = {});

// A channel to `target` whose calls are counted in `metrics` (the grpc_client_*
// metrics; must outlive the channel); a plain channel when it is null.
std::shared_ptr<grpc::Channel> CreateGrpcChannel(
    const std::string& target, const std::shared_ptr<grpc::ChannelCredentials>& credentials,
    MetricsRegistry* metrics);

}  // namespace caravela
