// WorkerAgent: what `caravela worker` runs (SPEC §8 "Services"): its own gRPC
// server (grpc.health.v1, for probes), registration with the coordinator and
// heartbeats within the lease the coordinator grants. When the coordinator
// answers that it does not know the worker (it was declared dead, or the
// coordinator restarted), the agent registers again under a new id; when no
// heartbeat got through for a whole lease, the lease is lost (the tasks it
// will run must stop then: a paused or partitioned worker cannot keep
// writing). Running assigned tasks is the next slice of the cluster issue.
// Thread-safe accessors; one heartbeat thread.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "common/status.h"

namespace caravela {

struct WorkerAgentOptions {
  std::string coordinator;             // HOST:PORT
  std::string listen = "127.0.0.1:0";  // the worker's own gRPC server
  int slots = 1;
  std::string token;   // bearer token for the coordinator, empty for none
  std::string tls_ca;  // PEM roots to reach the coordinator over TLS; empty: plaintext
  // Called (on the heartbeat thread) with each id the worker registers under.
  std::function<void(const std::string& worker_id)> on_registered;
};

class WorkerAgent {
 public:
  // Starts the server and registers, retrying for up to `register_timeout_ms`
  // (Unavailable naming the coordinator after that).
  static absl::StatusOr<std::unique_ptr<WorkerAgent>> Start(const WorkerAgentOptions& options,
                                                            int register_timeout_ms = 10000);
  ~WorkerAgent();
  std::string worker_id() const;
  const std::string& address() const;
  // Registrations so far (1 after Start; more after leases were lost).
  int registrations() const;
  void Stop();

  struct Impl;

 private:
  WorkerAgent() = default;
  std::unique_ptr<Impl> impl_;
};

}  // namespace caravela
