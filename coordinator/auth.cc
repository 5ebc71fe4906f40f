#include "coordinator/auth.h"

#include "common/http_server.h"

namespace caravela {

grpc::Status CheckToken(const grpc::ServerContext& context, const std::string& token) {
  if (token.empty()) return grpc::Status::OK;
  const auto& md = context.client_metadata();
  auto it = md.find("authorization");
  if (it == md.end() ||
      !BearerMatches(std::string_view(it->second.data(), it->second.size()), token)) {
    return grpc::Status(
        grpc::StatusCode::UNAUTHENTICATED,
        "missing or wrong bearer token: send the metadata \"authorization: Bearer <token>\" "
        "with the token of the coordinator's --token-file (the CLI: --token-file "
        "or $CARAVELA_TOKEN_FILE)");
  }
  return grpc::Status::OK;
}

grpc::Status ToGrpc(const absl::Status& s) {
  if (s.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(s.code()), std::string(s.message()));
}

}  // namespace caravela
