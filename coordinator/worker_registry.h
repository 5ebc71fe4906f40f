// WorkerRegistry: the workers a coordinator knows and whether they are alive
// (SPEC §8). A worker is ALIVE from Register() while heartbeats come within
// `worker_timeout`; then it is DEAD for good: a later heartbeat is refused as
// unknown and the worker registers again under a new id, so a paused or
// partitioned worker never silently resumes what was taken from it. Kept in
// memory: after a coordinator restart workers find themselves unknown at
// their next heartbeat and register again under their previous id, which the
// new registry never saw and so gives back (the Scheduler then adopts their
// running tasks). Each registration gets a random session that its
// heartbeats must carry, so a process holding the same id from another
// registration (or from another coordinator that had this address) is told
// it is unknown instead of being taken for the worker; a worker that was in
// another cluster (RegisterRequest.cluster_id) is refused. Thread-safe; time
// from `clock`.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include "caravela/v1/worker.pb.h"
#include "common/status.h"
#include "common/time_util.h"

namespace caravela {

class WorkerRegistry {
 public:
  WorkerRegistry(const Clock* clock, int64_t worker_timeout_ms, std::string cluster_id = "");

  int64_t lease_ms() const { return timeout_ms_; }
  // A new id "worker-<n>" (n counts every registration), or the request's
  // previous_id if this registry never saw it (the coordinator restarted),
  // with a new session, the lease and the cluster id. FailedPrecondition
  // for a worker that was in another cluster.
  absl::StatusOr<v1::RegisterResponse> Register(const v1::RegisterRequest& request);
  // False for an unknown or dead worker, or another session than its
  // registration's.
  bool Heartbeat(const v1::HeartbeatRequest& request);
  // Marks workers silent for longer than the timeout DEAD; returns their ids.
  std::vector<std::string> ExpireSilent();
  std::vector<v1::WorkerInfo> List() const;

 private:
  const Clock* clock_;
  int64_t timeout_ms_;
  std::string cluster_id_;
  mutable std::mutex mu_;
  int64_t next_ = 1;
  std::map<std::string, v1::WorkerInfo> workers_;  // by id
  std::map<std::string, uint64_t> sessions_;       // by id
  std::mt19937_64 random_;
};

}  // namespace caravela
