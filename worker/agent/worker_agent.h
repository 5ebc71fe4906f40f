// WorkerAgent: what `caravela worker` runs (SPEC §8 "Services"): its own gRPC
// server (grpc.health.v1, for probes; caravela.v1.ExchangeService, the
// network exchange's streams into its tasks), registration with the coordinator and
// heartbeats within the lease the coordinator grants. When the coordinator
// answers that it does not know the worker (it was declared dead, or the
// coordinator restarted), the agent registers again under a new id; when no
// heartbeat got through for a whole lease, the lease is lost and every task
// stops (a paused or partitioned worker cannot keep writing).
//
// Tasks: each heartbeat reports the worker's tasks (worker/runtime/job_part.h)
// and its answer is the whole assignment: the agent starts a JobPart per
// assigned (job, epoch), stops parts of another epoch or of jobs no longer
// assigned, refuses an epoch older than one it ran, lets a part run once the
// coordinator starts the epoch and forwards the checkpoint signals.
// Heartbeats come every `heartbeat_ms` (at most a quarter of the lease).
// Thread-safe accessors; one heartbeat thread.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"

namespace caravela {

struct WorkerAgentOptions {
  std::string coordinator;             // HOST:PORT
  std::string listen = "127.0.0.1:0";  // the worker's own gRPC server
  // HOST:PORT other workers and the coordinator reach that server at (the
  // network exchange streams to it); empty: the bound address, a wildcard
  // host replaced by the host name.
  std::string advertise;
  int slots = 1;
  std::string token;   // bearer token for the coordinator, empty for none
  std::string tls_ca;  // PEM roots to reach the coordinator over TLS; empty: plaintext
  // PEM certificate chain and key: the worker's own server speaks TLS, and
  // it reaches the other workers over TLS trusting `tls_ca` (every worker of
  // a cluster is set up alike). Empty: plaintext between workers.
  std::string tls_cert;
  std::string tls_key;
  std::string data_dir = "caravela-worker";  // task state: <data_dir>/<job id>/task-<n>
  // Kafka cluster for jobs that name none (exchanges, sources, sinks).
  std::string bootstrap;
  // The directory every worker mounts at the same path (absolute; empty:
  // none): a job's relative file paths resolve against it, and its default
  // dead letter lies in it. Jobs may name files in it.
  std::string shared_dir;
  // Other directories submitted jobs may name files in (absolute).
  std::vector<std::string> allowed_paths;
  int heartbeat_ms = 100;
  // HOST:PORT for /metrics (its tasks' counters) and /healthz; empty: none.
  std::string http_listen;
  // The id to ask for at the first registration ("worker-<n>"; empty: any).
  // A coordinator gives it when no worker had it during its run, else
  // another.
  std::string requested_id;
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
  // The HTTP address actually bound ("" without HTTP).
  std::string http_address() const;
  // Registrations so far (1 after Start; more after leases were lost).
  int registrations() const;
  // Tasks this worker holds now (any phase).
  int task_count() const;
  // Not OK once a coordinator of another cluster refused to take this
  // worker back (its data directory changed, or another service took the
  // address): the agent has stopped its tasks and heartbeats, and the
  // process should exit with this message (a restarted worker joins anew).
  absl::Status Failure() const;
  // Leaves gracefully (SIGTERM): tells the coordinator it is draining (no
  // new tasks; each job with tasks here moves them to other workers through
  // a stopping checkpoint), waits until it holds no task or `timeout_ms`
  // passed, then Stop()s. True if every task had moved away in time.
  bool Drain(int64_t timeout_ms);
  void Stop();

  struct Impl;

 private:
  WorkerAgent() = default;
  std::unique_ptr<Impl> impl_;
};

}  // namespace caravela
