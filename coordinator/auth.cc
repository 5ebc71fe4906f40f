#include "coordinator/auth.h"

namespace caravela {

bool BearerMatches(std::string_view header, std::string_view token) {
  constexpr std::string_view kPrefix = "Bearer ";
  if (token.empty() || header.size() != kPrefix.size() + token.size() ||
      header.substr(0, kPrefix.size()) != kPrefix) {
    return false;
  }
  unsigned char diff = 0;  // no early exit: the time does not depend on where it differs
  for (size_t i = 0; i < token.size(); ++i) {
    diff |= static_cast<unsigned char>(header[kPrefix.size() + i] ^ token[i]);
  }
  return diff == 0;
}

grpc::Status CheckToken(const grpc::ServerContext& context, const std::string& token) {
  if (token.empty()) return grpc::Status::OK;
  const auto& md = context.client_metadata();
  auto it = md.find("authorization");
  if (it == md.end() ||
      !BearerMatches(std::string_view(it->second.data(), it->second.size()), token)) {
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                        "missing or wrong bearer token (--token-file or $CARAVELA_TOKEN)");
  }
  return grpc::Status::OK;
}

grpc::Status ToGrpc(const absl::Status& s) {
  if (s.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(s.code()), std::string(s.message()));
}

}  // namespace caravela
