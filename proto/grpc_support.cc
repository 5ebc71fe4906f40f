#include "proto/grpc_support.h"

#include <grpcpp/health_check_service_interface.h>
#include <grpcpp/support/client_interceptor.h>
#include <grpcpp/support/server_interceptor.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <limits>
#include <sstream>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/metrics.h"
#include "google/protobuf/descriptor.h"
#include "nlohmann/json.hpp"

namespace caravela {
namespace {

absl::StatusOr<std::string> ReadPem(const std::string& path, const char* what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::InvalidArgumentError(absl::StrCat("cannot read the ", what, " ", path));
  std::stringstream ss;
  ss << in.rdbuf();
  if (ss.str().find("-----BEGIN") == std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat("the ", what, " ", path, " is not PEM"));
  }
  return ss.str();
}

// The name of a status code as gRPC spells it ("NOT_FOUND").
std::string CodeName(grpc::StatusCode code) {
  static const char* const kNames[] = {"OK",
                                       "CANCELLED",
                                       "UNKNOWN",
                                       "INVALID_ARGUMENT",
                                       "DEADLINE_EXCEEDED",
                                       "NOT_FOUND",
                                       "ALREADY_EXISTS",
                                       "PERMISSION_DENIED",
                                       "RESOURCE_EXHAUSTED",
                                       "FAILED_PRECONDITION",
                                       "ABORTED",
                                       "OUT_OF_RANGE",
                                       "UNIMPLEMENTED",
                                       "INTERNAL",
                                       "UNAVAILABLE",
                                       "DATA_LOSS",
                                       "UNAUTHENTICATED"};
  const int i = static_cast<int>(code);
  if (i >= 0 && i < static_cast<int>(sizeof(kNames) / sizeof(kNames[0]))) return kNames[i];
  return std::to_string(i);
}

// The `method` label of a call to `method` ("/pkg.Service/Method"): the
// name when this binary knows the method (its generated descriptors, and
// the standard health service libgrpc++ serves without them), else
// "unknown", so that clients calling made-up names cannot grow the label
// set.
std::string MethodLabel(const char* method) {
  const std::string m = method != nullptr ? method : "";
  const size_t slash = m.rfind('/');
  bool known = m == "/grpc.health.v1.Health/Check" || m == "/grpc.health.v1.Health/Watch";
  if (!known && slash != std::string::npos && slash > 1 && m[0] == '/') {
    const std::string full = absl::StrCat(m.substr(1, slash - 1), ".", m.substr(slash + 1));
    known = google::protobuf::DescriptorPool::generated_pool()->FindMethodByName(full) != nullptr;
  }
  return absl::StrCat("method=\"", known ? m : "unknown", "\"");
}

// One RPC: counts it and its duration into `metrics` once its status is
// known. `side` is "server" or "client". One object per RPC (gRPC creates
// it when the call starts and runs its hooks one at a time).
class RpcMetricsInterceptor : public grpc::experimental::Interceptor {
 public:
  RpcMetricsInterceptor(MetricsRegistry* metrics, const char* side, const char* method)
      : metrics_(metrics), side_(side), method_(MethodLabel(method)) {}

  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    using grpc::experimental::InterceptionHookPoints;
    if (methods->QueryInterceptionHookPoint(InterceptionHookPoints::PRE_SEND_STATUS)) {
      Record(methods->GetSendStatus().error_code());
    } else if (methods->QueryInterceptionHookPoint(InterceptionHookPoints::POST_RECV_STATUS)) {
      const grpc::Status* status = methods->GetRecvStatus();
      Record(status != nullptr ? status->error_code() : grpc::StatusCode::UNKNOWN);
    }
    methods->Proceed();
  }

 private:
  void Record(grpc::StatusCode code) {
    const int64_t ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                           std::chrono::steady_clock::now() - start_)
                           .count();
    metrics_
        ->Get(absl::StrCat("grpc_", side_, "_handled_total"),
              absl::StrCat(method_, ",code=\"", CodeName(code), "\""))
        ->Add();
    metrics_
        ->GetHistogram(absl::StrCat("grpc_", side_, "_handling_ms"), method_,
                       GrpcLatencyBucketsMs())
        ->Observe(ms);
  }

  MetricsRegistry* metrics_;
  const char* side_;
  std::string method_;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
};

class ServerMetricsFactory : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  explicit ServerMetricsFactory(MetricsRegistry* metrics) : metrics_(metrics) {}
  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override {
    return new RpcMetricsInterceptor(metrics_, "server", info->method());
  }

 private:
  MetricsRegistry* metrics_;
};

class ClientMetricsFactory : public grpc::experimental::ClientInterceptorFactoryInterface {
 public:
  explicit ClientMetricsFactory(MetricsRegistry* metrics) : metrics_(metrics) {}
  grpc::experimental::Interceptor* CreateClientInterceptor(
      grpc::experimental::ClientRpcInfo* info) override {
    return new RpcMetricsInterceptor(metrics_, "client", info->method());
  }

 private:
  MetricsRegistry* metrics_;
};

}  // namespace

const std::vector<int64_t>& GrpcLatencyBucketsMs() {
  static const std::vector<int64_t> bounds = {1,   5,   10,    25,    50,    100,
                                              250, 500, 1'000, 2'500, 5'000, 10'000};
  return bounds;
}

std::shared_ptr<grpc::Channel> CreateGrpcChannel(
    const std::string& target, const std::shared_ptr<grpc::ChannelCredentials>& credentials,
    MetricsRegistry* metrics) {
  if (metrics == nullptr) return grpc::CreateChannel(target, credentials);
  std::vector<std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>> creators;
  creators.push_back(std::make_unique<ClientMetricsFactory>(metrics));
  return grpc::experimental::CreateCustomChannelWithInterceptors(
      target, credentials, grpc::ChannelArguments(), std::move(creators));
}

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> ServerCredentials(
    const std::string& cert_file, const std::string& key_file) {
  if (cert_file.empty() && key_file.empty()) return grpc::InsecureServerCredentials();
  if (cert_file.empty() || key_file.empty()) {
    return absl::InvalidArgumentError("TLS needs both --tls-cert and --tls-key");
  }
  absl::StatusOr<std::string> cert = ReadPem(cert_file, "TLS certificate");
  if (!cert.ok()) return cert.status();
  absl::StatusOr<std::string> key = ReadPem(key_file, "TLS key");
  if (!key.ok()) return key.status();
  grpc::SslServerCredentialsOptions options;
  options.pem_key_cert_pairs.push_back({*key, *cert});
  return grpc::SslServerCredentials(options);
}

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> ChannelCredentials(
    const std::string& ca_file) {
  if (ca_file.empty()) return grpc::InsecureChannelCredentials();
  absl::StatusOr<std::string> roots = ReadPem(ca_file, "TLS CA file");
  if (!roots.ok()) return roots.status();
  grpc::SslCredentialsOptions options;
  options.pem_root_certs = *roots;
  return grpc::SslCredentials(options);
}

absl::StatusOr<GrpcServer> StartGrpcServer(const std::string& listen,
                                           std::shared_ptr<grpc::ServerCredentials> credentials,
                                           const std::vector<grpc::Service*>& services,
                                           int max_message_bytes, MetricsRegistry* metrics,
                                           const std::vector<std::string>& health_names) {
  const size_t colon = listen.rfind(':');
  if (colon == std::string::npos || colon == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--listen ", listen, ": expected HOST:PORT (port 0: any free one)"));
  }
  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(listen, std::move(credentials), &port);
  builder.SetMaxReceiveMessageSize(max_message_bytes);
  for (grpc::Service* service : services) builder.RegisterService(service);
  if (metrics != nullptr) {
    std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> creators;
    creators.push_back(std::make_unique<ServerMetricsFactory>(metrics));
    builder.experimental().SetInterceptorCreators(std::move(creators));
  }
  GrpcServer out;
  out.server = builder.BuildAndStart();
  if (out.server == nullptr || port == 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", listen, " (in use, or not an address here?)"));
  }
  out.address = absl::StrCat(listen.substr(0, colon), ":", port);
  for (const std::string& name : health_names) {
    out.server->GetHealthCheckService()->SetServingStatus(name, true);
  }
  out.server->GetHealthCheckService()->SetServingStatus(true);
  return out;
}

namespace {

using google::protobuf::FieldDescriptor;

nlohmann::ordered_json FieldValue(const google::protobuf::Message& m, const FieldDescriptor* f,
                                  int index);

nlohmann::ordered_json MessageJson(const google::protobuf::Message& m) {
  nlohmann::ordered_json out = nlohmann::ordered_json::object();
  const google::protobuf::Descriptor* d = m.GetDescriptor();
  const google::protobuf::Reflection* r = m.GetReflection();
  for (int i = 0; i < d->field_count(); ++i) {
    const FieldDescriptor* f = d->field(i);
    if (f->is_map()) {
      nlohmann::ordered_json map = nlohmann::ordered_json::object();
      const FieldDescriptor* key = f->message_type()->map_key();
      const FieldDescriptor* value = f->message_type()->map_value();
      for (int k = 0; k < r->FieldSize(m, f); ++k) {
        const google::protobuf::Message& entry = r->GetRepeatedMessage(m, f, k);
        nlohmann::ordered_json kj = FieldValue(entry, key, -1);
        map[kj.is_string() ? kj.get<std::string>() : kj.dump()] = FieldValue(entry, value, -1);
      }
      out[f->name()] = std::move(map);
    } else if (f->is_repeated()) {
      nlohmann::ordered_json list = nlohmann::ordered_json::array();
      for (int k = 0; k < r->FieldSize(m, f); ++k) list.push_back(FieldValue(m, f, k));
      out[f->name()] = std::move(list);
    } else {
      out[f->name()] = FieldValue(m, f, -1);
    }
  }
  return out;
}

// The value of field `f` of `m` (element `index` of a repeated field, -1
// for a singular one).
nlohmann::ordered_json FieldValue(const google::protobuf::Message& m, const FieldDescriptor* f,
                                  int index) {
  const google::protobuf::Reflection* r = m.GetReflection();
  const bool rep = index >= 0;
  switch (f->cpp_type()) {
    case FieldDescriptor::CPPTYPE_INT32:
      return rep ? r->GetRepeatedInt32(m, f, index) : r->GetInt32(m, f);
    case FieldDescriptor::CPPTYPE_INT64: {
      const int64_t v = rep ? r->GetRepeatedInt64(m, f, index) : r->GetInt64(m, f);
      if (v == std::numeric_limits<int64_t>::min()) return nullptr;  // unknown
      return v;
    }
    case FieldDescriptor::CPPTYPE_UINT32:
      return rep ? r->GetRepeatedUInt32(m, f, index) : r->GetUInt32(m, f);
    case FieldDescriptor::CPPTYPE_UINT64:
      return rep ? r->GetRepeatedUInt64(m, f, index) : r->GetUInt64(m, f);
    case FieldDescriptor::CPPTYPE_DOUBLE:
    case FieldDescriptor::CPPTYPE_FLOAT: {
      const double v = f->cpp_type() == FieldDescriptor::CPPTYPE_DOUBLE
                           ? (rep ? r->GetRepeatedDouble(m, f, index) : r->GetDouble(m, f))
                           : (rep ? r->GetRepeatedFloat(m, f, index) : r->GetFloat(m, f));
      if (!std::isfinite(v)) return nullptr;
      return v;
    }
    case FieldDescriptor::CPPTYPE_BOOL:
      return rep ? r->GetRepeatedBool(m, f, index) : r->GetBool(m, f);
    case FieldDescriptor::CPPTYPE_ENUM: {
      const google::protobuf::EnumValueDescriptor* e =
          rep ? r->GetRepeatedEnum(m, f, index) : r->GetEnum(m, f);
      return e->name();
    }
    case FieldDescriptor::CPPTYPE_STRING:
      // Every string of the API is text (no bytes fields).
      return rep ? r->GetRepeatedString(m, f, index) : r->GetString(m, f);
    case FieldDescriptor::CPPTYPE_MESSAGE:
      return MessageJson(rep ? r->GetRepeatedMessage(m, f, index) : r->GetMessage(m, f));
  }
  return nullptr;
}

}  // namespace

std::string ProtoJson(const google::protobuf::Message& m) {
  // Invalid UTF-8 (a user's error text) is replaced, never thrown.
  return MessageJson(m).dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

}  // namespace caravela
