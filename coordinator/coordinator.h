// Coordinator: the process `caravela coordinator` runs (SPEC §8 "Services").
// The gRPC JobService over a durable JobStore in its data dir, the
// WorkerService (registration, heartbeats with task reports and
// assignments, leases), the Scheduler that places tasks on workers and
// coordinates checkpoints (a thread ticks it), the standard gRPC health
// service (grpc.health.v1, SERVING once started) and server reflection, so
// grpc_cli/grpcurl-style tools and Kubernetes gRPC probes work; optionally
// (--http) HTTP: the web dashboard at / (web/dashboard, embedded through
// common/dashboard.h; its files are public), /healthz (public), and behind
// the same token /metrics and a read-only JSON API (/api/v1/jobs,
// /api/v1/jobs/ID, /api/v1/jobs/ID/series, /api/v1/jobs/ID/checkpoints,
// /api/v1/workers) that the dashboard reads (HttpRoutes in coordinator.cc).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/http_server.h"
#include "common/job_plan.h"
#include "common/job_spec.h"
#include "common/status.h"
#include "google/protobuf/message.h"

namespace caravela {

struct CoordinatorOptions {
  std::string listen = "127.0.0.1:0";  // HOST:PORT; port 0 picks a free one
  // HTTP (JSON API under /api/v1/, /healthz); empty: none. Port 0: any.
  std::string http_listen;
  std::string data_dir = "caravela-coordinator";
  std::string token;  // non-empty: bearer token required on every service call
  int max_message_bytes = 4 << 20;
  // A worker without heartbeats for this long is dead (its lease).
  int64_t worker_timeout_ms = 10000;
  // Absolute directories submitted jobs may name files in (besides paths
  // relative to a worker's data dir); CheckAllowedPaths.
  std::vector<std::string> allowed_paths;
  // Checkpoint storage URL every worker reaches, for jobs that name none;
  // empty: file://<data_dir>/checkpoints (one machine, or a shared volume).
  std::string checkpoint_storage;
  // See SchedulerOptions::prepare_job.
  std::function<absl::Status(const JobSpec&, const JobPlan&)> prepare_job;
  // TLS (PEM files); both empty: plaintext.
  std::string tls_cert_file, tls_key_file;
  // Restarts after failures in a row: SchedulerOptions::max_restarts (0: no
  // limit) and the longest delay between two (max_restart_backoff_ms).
  int max_restarts = 0;
  int64_t max_restart_backoff_ms = 60000;
};

// A message as the JSON API answers it (ProtoJson: docs/api.md):
// the coordinator's /api/v1/ and `caravela run --http`'s.
HttpResponse ProtoJsonResponse(const google::protobuf::Message& m);

class Coordinator {
 public:
  // Opens the store and starts serving; InvalidArgument / Unavailable naming
  // what failed (a port in use, a data dir that cannot be opened).
  static absl::StatusOr<std::unique_ptr<Coordinator>> Start(const CoordinatorOptions& options);
  ~Coordinator();
  // "HOST:PORT" with the port actually bound.
  const std::string& grpc_address() const;
  // The HTTP address actually bound ("" without HTTP).
  std::string http_address() const;
  // Blocks until Shutdown() (from another thread or a signal watcher).
  void Wait();
  void Shutdown();

  struct Impl;

 private:
  Coordinator() = default;
  static std::vector<HttpRoute> HttpRoutes(Impl& im);
  static std::string CoordinatorMetrics(Impl& im);
  // One dashboard sample of every job that has not ended (JobSeries).
  static void SampleJobs(Impl& im, int64_t now_ms);
  std::unique_ptr<Impl> impl_;
};

}  // namespace caravela
