// Bearer-token checks shared by the coordinator's gRPC services, and the
// absl -> gRPC status mapping.
#pragma once

#include <grpcpp/grpcpp.h>

#include <string>
#include <string_view>

#include "common/http_server.h"  // BearerMatches
#include "common/status.h"

namespace caravela {

// OK when `token` is empty or the call's "authorization" metadata carries
// it; UNAUTHENTICATED otherwise (before anything else is done).
grpc::Status CheckToken(const grpc::ServerContext& context, const std::string& token);

// absl::Status -> grpc::Status (same code and message).
grpc::Status ToGrpc(const absl::Status& s);

}  // namespace caravela
