// Bearer-token checks shared by the coordinator's gRPC services, and the
// absl -> gRPC status mapping.
#pragma once

#include <grpcpp/grpcpp.h>

#include <string>
#include <string_view>

#include "common/status.h"

namespace caravela {

// Whether `header` is "Bearer <token>", compared in constant time.
bool BearerMatches(std::string_view header, std::string_view token);

// OK when `token` is empty or the call's "authorization" metadata carries
// it; UNAUTHENTICATED otherwise (before anything else is done).
grpc::Status CheckToken(const grpc::ServerContext& context, const std::string& token);

// absl::Status -> grpc::Status (same code and message).
grpc::Status ToGrpc(const absl::Status& s);

}  // namespace caravela
