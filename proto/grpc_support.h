// Serving and calling the gRPC APIs of this directory: a server with the
// standard health service, and TLS credentials from certificate files (SPEC
// §8 "Services": optional TLS). Empty file names mean plaintext, for
// loopback and tests; errors name the file that could not be read.
#pragma once

#include <google/protobuf/message.h>
#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace caravela {

// Server credentials: TLS with the PEM certificate chain and private key,
// or insecure when both are empty (one without the other is an error).
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> ServerCredentials(
    const std::string& cert_file, const std::string& key_file);

// Channel credentials: TLS trusting the PEM roots in `ca_file` (the
// server's certificate must name the host or IP it is reached by), or
// insecure when `ca_file` is empty.
absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> ChannelCredentials(
    const std::string& ca_file);

// `m` in the proto3 JSON mapping: with the .proto's field names
// (snake_case, the CLI's --json) or, `proto_names` false, lowerCamelCase (the
// coordinator's HTTP API).
std::string ProtoJson(const google::protobuf::Message& m, bool proto_names = true);

// A started server and the address it is bound to ("HOST:PORT" with the
// port actually chosen).
struct GrpcServer {
  std::unique_ptr<grpc::Server> server;
  std::string address;
};

// Binds `listen` (HOST:PORT; port 0 picks a free one) with `credentials`,
// serves `services` and the standard health service (grpc.health.v1,
// SERVING once started). InvalidArgument for an address that is not
// HOST:PORT, Unavailable when it cannot be bound.
absl::StatusOr<GrpcServer> StartGrpcServer(const std::string& listen,
                                           std::shared_ptr<grpc::ServerCredentials> credentials,
                                           const std::vector<grpc::Service*>& services,
                                           int max_message_bytes = 4 << 20);

}  // namespace caravela
