// TLS for the gRPC APIs of this directory (SPEC §8 "Services": optional TLS
// from certificate files). Empty file names mean plaintext, for loopback and
// tests; errors name the file that could not be read.
#pragma once

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>

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

}  // namespace caravela
