// JobClient: the CLI's side of the JobService (`caravela submit`, `jobs`,
// `job`, `cancel`): a channel to the coordinator, the bearer token on every
// call, a deadline, and gRPC errors turned into absl::Status with the
// coordinator's address in the message.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "caravela/v1/job.grpc.pb.h"
#include "caravela/v1/worker.grpc.pb.h"
#include "common/status.h"

namespace caravela {

class JobClient {
 public:
  // `address` HOST:PORT; `token` empty for none; `tls_ca` a PEM file of the
  // roots to trust for TLS, empty for plaintext (a bad file fails every call).
  JobClient(const std::string& address, std::string token, int timeout_ms = 10000,
            const std::string& tls_ca = "");

  // `from_savepoint`: a savepoint directory on the coordinator ("" none).
  absl::StatusOr<v1::SubmitJobResponse> Submit(const std::string& yaml, int parallelism,
                                               const std::string& from_savepoint = "");
  absl::StatusOr<v1::Job> Get(const std::string& id);
  absl::StatusOr<std::vector<v1::Job>> List();
  absl::StatusOr<v1::Job> Cancel(const std::string& id);
  absl::StatusOr<v1::Job> Rescale(const std::string& id, int parallelism);
  // parallelism 0: the job's.
  absl::StatusOr<v1::Job> Restart(const std::string& id, int parallelism = 0);
  absl::StatusOr<v1::Job> StopWithSavepoint(const std::string& id, const std::string& dir);
  // WorkerService.ListWorkers.
  absl::StatusOr<std::vector<v1::WorkerInfo>> Workers();
  // grpc.health.v1 Check of the whole server (or of the service named, e.g.
  // "caravela.v1.JobService"): "SERVING", "NOT_SERVING", ...
  absl::StatusOr<std::string> Health(const std::string& service = "");

 private:
  void Prepare(grpc::ClientContext* context) const;
  absl::Status FromGrpc(const grpc::Status& s) const;

  std::string address_;
  std::string token_;
  int timeout_ms_;
  absl::Status init_;  // the TLS setup's error, if any
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::JobService::Stub> stub_;
};

}  // namespace caravela
