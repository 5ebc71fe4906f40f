#include "coordinator/worker_registry.h"

#include <algorithm>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace caravela {

WorkerRegistry::WorkerRegistry(const Clock* clock, int64_t worker_timeout_ms,
                               std::string cluster_id)
    : clock_(clock),
      timeout_ms_(worker_timeout_ms),
      cluster_id_(std::move(cluster_id)),
      random_(std::random_device{}()) {}

absl::StatusOr<v1::RegisterResponse> WorkerRegistry::Register(const v1::RegisterRequest& request) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!request.cluster_id().empty() && request.cluster_id() != cluster_id_) {
    return absl::FailedPreconditionError(absl::StrCat(
        "this worker was in cluster ", request.cluster_id(), ", this coordinator runs cluster ",
        cluster_id_.empty() ? "(none)" : cluster_id_,
        " (its data directory is another one): the worker's tasks belong to the other "
        "cluster; restart the worker to join this one"));
  }
  v1::WorkerInfo w;
  // An id this registry never saw (it was given by an earlier run of the
  // coordinator) is given back; a known one (alive or dead) never is.
  int64_t n = 0;
  const std::string& previous = request.previous_id();
  if (workers_.count(previous) == 0 && previous.rfind("worker-", 0) == 0 &&
      absl::SimpleAtoi(previous.substr(7), &n) && n > 0) {
    w.set_id(previous);
    next_ = std::max(next_, n + 1);
  } else {
    w.set_id(absl::StrCat("worker-", next_++));
  }
  w.set_address(request.address());
  w.set_host(request.host());
  w.set_shared_dir(request.shared_dir());
  w.set_slots(request.slots());
  w.set_state(v1::ALIVE);
  w.set_registered_at_ms(clock_->NowMs());
  w.set_last_heartbeat_ms(w.registered_at_ms());
  v1::RegisterResponse response;
  response.set_worker_id(w.id());
  response.set_lease_ms(timeout_ms_);
  response.set_cluster_id(cluster_id_);
  uint64_t session = 0;
  while (session == 0) session = random_();
  response.set_session(session);
  sessions_[w.id()] = session;
  workers_[w.id()] = std::move(w);
  return response;
}

bool WorkerRegistry::Heartbeat(const v1::HeartbeatRequest& request) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = workers_.find(request.worker_id());
  if (it == workers_.end() || it->second.state() != v1::ALIVE) return false;
  if (sessions_[request.worker_id()] != request.session()) return false;  // another process
  const int64_t now = clock_->NowMs();
  // A heartbeat after the timeout, before ExpireSilent() noticed: still dead.
  if (now - it->second.last_heartbeat_ms() > timeout_ms_) {
    it->second.set_state(v1::DEAD);
    it->second.set_running_tasks(0);  // its tasks are gone with it
    return false;
  }
  it->second.set_last_heartbeat_ms(now);
  it->second.set_running_tasks(request.running_tasks());
  it->second.set_draining(request.draining());
  return true;
}

std::vector<std::string> WorkerRegistry::ExpireSilent() {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::string> dead;
  const int64_t now = clock_->NowMs();
  for (auto& [id, w] : workers_) {
    if (w.state() == v1::ALIVE && now - w.last_heartbeat_ms() > timeout_ms_) {
      w.set_state(v1::DEAD);
      w.set_running_tasks(0);
      dead.push_back(id);
    }
  }
  return dead;
}

std::vector<v1::WorkerInfo> WorkerRegistry::List() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<v1::WorkerInfo> out;
  out.reserve(workers_.size());
  for (const auto& [id, w] : workers_) out.push_back(w);
  return out;
}

}  // namespace caravela
