// Coordinator: the process `caravela coordinator` runs (SPEC §8 "Services").
// Today: the gRPC JobService over a durable JobStore in its data dir, the
// WorkerService (registration, heartbeats, leases; a thread declares silent
// workers dead), the standard gRPC health service (grpc.health.v1, SERVING
// once started) and server reflection, so grpc_cli/grpcurl-style tools and
// Kubernetes gRPC probes work. Assignment of tasks to workers and the HTTP
// dashboard come with the next slices (coordinator/README.md).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "common/status.h"

namespace caravela {

struct CoordinatorOptions {
  std::string listen = "127.0.0.1:0";  // HOST:PORT; port 0 picks a free one
  std::string data_dir = "caravela-coordinator";
  std::string token;  // non-empty: bearer token required on every service call
  int max_message_bytes = 4 << 20;
  // A worker without heartbeats for this long is dead (its lease).
  int64_t worker_timeout_ms = 10000;
  // Absolute directories submitted jobs may name files in (besides paths
  // relative to a worker's data dir); CheckAllowedPaths.
  std::vector<std::string> allowed_paths;
  // TLS (PEM files); both empty: plaintext.
  std::string tls_cert_file, tls_key_file;
};

class Coordinator {
 public:
  // Opens the store and starts serving; InvalidArgument / Unavailable naming
  // what failed (a port in use, a data dir that cannot be opened).
  static absl::StatusOr<std::unique_ptr<Coordinator>> Start(const CoordinatorOptions& options);
  ~Coordinator();
  // "HOST:PORT" with the port actually bound.
  const std::string& grpc_address() const;
  // Blocks until Shutdown() (from another thread or a signal watcher).
  void Wait();
  void Shutdown();

  struct Impl;

 private:
  Coordinator() = default;
  std::unique_ptr<Impl> impl_;
};

}  // namespace caravela
