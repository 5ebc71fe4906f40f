#include "worker/agent/worker_agent.h"

#include <grpcpp/grpcpp.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "caravela/v1/exchange.grpc.pb.h"
#include "caravela/v1/job.grpc.pb.h"
#include "caravela/v1/worker.grpc.pb.h"
#include "common/http_server.h"
#include "common/logging.h"
#include "common/metrics.h"
#include "common/time_util.h"
#include "proto/grpc_support.h"
#include "spdlog/spdlog.h"
#include "worker/exchange/network_exchange.h"
#include "worker/runtime/job_part.h"
#include "worker/state/state_backend.h"

namespace caravela {
namespace {

std::shared_ptr<spdlog::logger> Log() {
  static const std::shared_ptr<spdlog::logger> log = SubsystemLogger("agent");
  return log;
}

using SteadyClock = std::chrono::steady_clock;

// Where other processes reach this worker: `advertise` when given, else the
// bound address, with a wildcard host (0.0.0.0, [::]) replaced by the
// machine's host name.
std::string AdvertisedAddress(const std::string& advertise, const std::string& bound) {
  if (!advertise.empty()) return advertise;
  const size_t colon = bound.rfind(':');
  if (colon == std::string::npos) return bound;
  const std::string host = bound.substr(0, colon);
  if (host != "0.0.0.0" && host != "[::]" && host != "::") return bound;
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) != 0 || name[0] == 0) return bound;
  return absl::StrCat(name, bound.substr(colon));
}

}  // namespace

struct WorkerAgent::Impl {
  WorkerAgentOptions options;
  // Streams of other workers' tasks feed readers here (served on `server`,
  // which goes first).
  std::unique_ptr<NetworkExchange> network;
  std::unique_ptr<grpc::Server> server;
  std::string address;  // as registered: others reach this worker there
  std::unique_ptr<v1::WorkerService::Stub> stub;
  std::shared_ptr<grpc::Channel> channel;  // to the coordinator (its job service too)
  mutable std::mutex mu;
  std::vector<std::string> held_jobs;  // the jobs of `parts` (under mu)
  std::string worker_id;
  uint64_t session = 0;             // of the current registration
  std::string cluster_id;           // the cluster it joined (kept across registrations)
  absl::Status refused_by_cluster;  // a coordinator of another cluster refused it
  int64_t lease_ms = 10000;
  std::atomic<int> registrations{0};
  std::atomic<bool> stop{false};
  std::atomic<bool> draining{false};
  std::thread heartbeats;
  // Running parts by job id (heartbeat thread only, counted in `tasks`).
  std::map<std::string, std::unique_ptr<JobPart>> parts;
  std::map<std::string, int64_t> max_epoch;           // highest epoch run per job
  std::set<std::pair<std::string, int64_t>> refused;  // logged once each
  std::atomic<int> tasks{0};
  MetricsRegistry metrics;
  std::unique_ptr<HttpServer> http;
  std::shared_ptr<StateMemoryBudget> budget =
      NewStateMemoryBudget(kStateBlockCacheBytes, kStateWriteBufferBytes);

  void StopParts(const std::string& why) {
    for (auto& [id, part] : parts) {
      Log()->warn("stopping job {} epoch {}: {}", id, part->epoch(), why);
      part->Stop();
    }
    parts.clear();
    tasks = 0;
  }

  // "revenue-1 SCHEDULING: waiting for workers: ..." as the coordinator
  // sees the job now (or why it cannot say).
  std::string DescribeJob(const std::string& job_id) const {
    auto jobs = v1::JobService::NewStub(channel);
    grpc::ClientContext context;
    Prepare(&context, 2000);
    v1::GetJobRequest request;
    request.set_job_id(job_id);
    v1::Job job;
    const grpc::Status st = jobs->GetJob(&context, request, &job);
    if (!st.ok())
      return absl::StrCat(job_id, ": the coordinator did not say (", st.error_message(), ")");
    return absl::StrCat(job_id, " ", v1::JobState_Name(job.state()),
                        job.message().empty() ? "" : ": ", job.message());
  }

  static v1::TaskPhase ToProto(JobPart::Phase p) {
    switch (p) {
      case JobPart::Phase::kPreparing:
        return v1::TASK_PREPARING;
      case JobPart::Phase::kReady:
        return v1::TASK_READY;
      case JobPart::Phase::kRunning:
        return v1::TASK_RUNNING;
      case JobPart::Phase::kDrained:
        return v1::TASK_DRAINED;
      case JobPart::Phase::kDone:
        return v1::TASK_DONE;
      case JobPart::Phase::kFailed:
        return v1::TASK_FAILED;
    }
    return v1::TASK_PHASE_UNSPECIFIED;
  }

  // Task reports for the heartbeat; also sets the per-partition gauges of
  // /metrics (labelled with the job's id and name).
  void Report(v1::HeartbeatRequest* request) {
    int n = 0;
    const int64_t now = SystemClock().NowMs();
    for (const auto& [id, part] : parts) {
      for (const JobPart::TaskState& s : part->States()) {
        Task::PublishPartitionMetrics(s.partitions, now, part->metrics());
        v1::TaskReport* r = request->add_tasks();
        r->set_job_id(id);
        r->set_epoch(part->epoch());
        r->set_task(s.task);
        r->set_phase(ToProto(s.phase));
        Task::ActivityToProto(s.activity, r->mutable_activity());
        r->set_stored_checkpoint(s.stored_checkpoint);
        r->set_next_checkpoint(s.next_checkpoint);
        r->set_error(s.error);
        r->set_permanent(s.permanent);
        r->set_records_in(s.records_in);
        r->set_records_out(s.records_out);
        r->set_watermark_ms(s.watermark_ms);
        r->set_consumer_lag(s.consumer_lag);
        r->set_stop_checkpoint(s.stop_checkpoint);
        r->set_state_bytes(s.state_bytes);
        for (const Task::PartitionStatus& p : s.partitions) {
          Task::PartitionToProto(p, r->add_partitions());
        }
        ++n;
      }
    }
    request->set_running_tasks(n);
    metrics.SetAges("operator_watermark_ms", "operator_watermark_lag_ms", now);
  }

  // Runs exactly what `response` assigns.
  void Apply(const v1::HeartbeatResponse& response) {
    std::map<std::string, const v1::Assignment*> assigned;
    for (const v1::Assignment& a : response.assignments()) assigned[a.job_id()] = &a;
    for (auto it = parts.begin(); it != parts.end();) {
      auto a = assigned.find(it->first);
      if (a == assigned.end() || a->second->epoch() != it->second->epoch()) {
        Log()->info("stopping job {} epoch {}: {}", it->first, it->second->epoch(),
                    a == assigned.end() ? "no longer assigned here"
                                        : absl::StrCat("epoch ", a->second->epoch(), " begins"));
        it->second->Stop();
        it = parts.erase(it);
      } else {
        ++it;
      }
    }
    for (const auto& [id, a] : assigned) {
      auto it = parts.find(id);
      // The YAML comes only while no task of the epoch is reported here.
      if (it == parts.end() && a->yaml().empty()) continue;
      if (it == parts.end()) {
        // An epoch runs at most once here: a part stopped (lease lost) and
        // built again would restore the checkpoint while the epoch's other
        // tasks went on without replaying what it lost. The coordinator
        // restarts the job with a new epoch when the task does not report.
        int64_t& seen = max_epoch[id];
        if (a->epoch() <= seen) {
          if (refused.insert({id, a->epoch()}).second) {
            Log()->warn("refusing job {} epoch {}: epoch {} ran here already", id, a->epoch(),
                        seen);
          }
          continue;
        }
        seen = a->epoch();
        JobPartOptions po;
        po.job_id = id;
        po.job_name = a->job_name();
        po.yaml = a->yaml();
        po.epoch = a->epoch();
        po.parallelism = a->parallelism();
        po.tasks.assign(a->tasks().begin(), a->tasks().end());
        po.restore_checkpoint = a->restore_checkpoint();
        po.restore_parallelism = a->restore_parallelism();
        po.checkpoint_storage = a->checkpoint_storage();
        po.allowed_paths = options.allowed_paths;
        po.shared_dir = options.shared_dir;
        po.network = network.get();
        po.task_addresses.assign(a->task_addresses().begin(), a->task_addresses().end());
        RunOptions ro;
        ro.data_dir = options.data_dir;
        ro.embedded_bootstrap = options.bootstrap;
        ro.state_budget = budget;
        Log()->info("job {} epoch {}: preparing tasks {} (restore checkpoint {})", id, a->epoch(),
                    absl::StrJoin(po.tasks, ","), a->restore_checkpoint());
        it = parts.emplace(id, JobPart::Start(std::move(po), std::move(ro), &metrics)).first;
      }
      JobPart& part = *it->second;
      if (a->start()) part.Run();
      part.Signal(a->trigger_checkpoint(), a->stop_at_trigger(), a->completed_checkpoint(),
                  a->finish());
    }
    int n = 0;
    for (const v1::Assignment& a : response.assignments()) n += a.tasks_size();
    tasks = n;
    std::lock_guard<std::mutex> lock(mu);
    held_jobs.clear();
    for (const auto& [id, part] : parts) held_jobs.push_back(id);
  }

  void Prepare(grpc::ClientContext* c, int timeout_ms) const {
    c->set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(timeout_ms));
    if (!options.token.empty()) c->AddMetadata("authorization", "Bearer " + options.token);
  }

  grpc::Status Register(const std::string& previous_id = "") {
    v1::RegisterRequest request;
    request.set_previous_id(previous_id);
    request.set_address(address);
    request.set_slots(options.slots);
    request.set_shared_dir(options.shared_dir);
    {
      std::lock_guard<std::mutex> lock(mu);
      request.set_cluster_id(cluster_id);
    }
    char host[256] = {0};
    if (gethostname(host, sizeof(host) - 1) == 0) request.set_host(host);
    v1::RegisterResponse response;
    grpc::ClientContext context;
    Prepare(&context, 2000);
    grpc::Status st = stub->Register(&context, request, &response);
    if (st.error_code() == grpc::StatusCode::FAILED_PRECONDITION) {
      // Another cluster's coordinator answers at this address: this
      // process must not run its tasks (nor keep its own).
      std::lock_guard<std::mutex> lock(mu);
      refused_by_cluster =
          absl::FailedPreconditionError(absl::StrCat("the coordinator at ", options.coordinator,
                                                     " refused this worker: ", st.error_message()));
    }
    if (!st.ok()) return st;
    {
      std::lock_guard<std::mutex> lock(mu);
      worker_id = response.worker_id();
      session = response.session();
      cluster_id = response.cluster_id();
      lease_ms = std::max<int64_t>(response.lease_ms(), 100);
    }
    ++registrations;
    Log()->info("registered with {} as {} (lease {} ms)", options.coordinator, response.worker_id(),
                response.lease_ms());
    if (options.on_registered) options.on_registered(response.worker_id());
    return st;
  }

  void HeartbeatLoop() {
    auto last_ok = SteadyClock::now();
    bool lease_lost = false;
    while (!stop.load()) {
      int64_t lease;
      std::string id;
      uint64_t id_session;
      {
        std::lock_guard<std::mutex> lock(mu);
        lease = lease_ms;
        id = worker_id;
        id_session = session;
      }
      const auto period = std::chrono::milliseconds(
          std::max<int64_t>(std::min<int64_t>(lease / 4, options.heartbeat_ms), 10));
      for (auto until = SteadyClock::now() + period; SteadyClock::now() < until && !stop.load();) {
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
      if (stop.load()) break;
      if (!lease_lost && SteadyClock::now() - last_ok > std::chrono::milliseconds(lease)) {
        // Paused, or cut off: the coordinator has given this id up by now.
        lease_lost = true;
        Log()->warn("no heartbeat got through for {} ms: lease of {} lost", lease, id);
        StopParts("lease lost");
      }
      v1::HeartbeatRequest request;
      request.set_worker_id(id);
      request.set_session(id_session);
      request.set_draining(draining.load());
      Report(&request);
      v1::HeartbeatResponse response;
      grpc::ClientContext context;
      Prepare(&context, static_cast<int>(std::max<int64_t>(lease / 2, 50)));
      grpc::Status st = stub->Heartbeat(&context, request, &response);
      if (!lease_lost && SteadyClock::now() - last_ok > std::chrono::milliseconds(lease)) {
        // Paused while the call was in flight: the lease ran out meanwhile,
        // whatever the answer says.
        lease_lost = true;
        Log()->warn("no heartbeat got through for {} ms: lease of {} lost", lease, id);
        StopParts("lease lost");
      }
      if (st.ok() && !response.unknown_worker()) {
        last_ok = SteadyClock::now();
        lease_lost = false;
        Apply(response);
        continue;
      }
      if (st.ok() && response.unknown_worker()) {
        // Declared dead (or the coordinator restarted): whatever this id
        // owned is gone; start over under a new one.
        // A restarted coordinator gives the id back and adopts the tasks;
        // one that declared this worker dead gives a new id: its tasks were
        // moved, stop them.
        Log()->warn("the coordinator does not know {} any more: registering again", id);
        if (grpc::Status r = Register(id); r.ok()) {
          last_ok = SteadyClock::now();
          if (worker_id != id) StopParts("the coordinator gave this worker up");
        } else if (r.error_code() == grpc::StatusCode::FAILED_PRECONDITION) {
          Log()->error("{}", r.error_message());
          StopParts("refused by the coordinator");
          break;  // Failure() tells the process to exit
        }
        continue;
      }
      if (!lease_lost && SteadyClock::now() - last_ok > std::chrono::milliseconds(lease)) {
        lease_lost = true;
        Log()->warn("no heartbeat got through for {} ms: lease of {} lost ({})", lease, id,
                    st.error_message());
        StopParts("lease lost");
      }
    }
  }
};

WorkerAgent::~WorkerAgent() { Stop(); }

bool WorkerAgent::Drain(int64_t timeout_ms) {
  if (impl_ == nullptr) return true;
  impl_->draining = true;
  std::vector<std::string> jobs;
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    jobs = impl_->held_jobs;
  }
  Log()->info("draining: {} tasks to hand over (up to {} ms)", impl_->tasks.load(), timeout_ms);
  const auto until = SteadyClock::now() + std::chrono::milliseconds(timeout_ms);
  while (impl_->tasks.load() > 0 && SteadyClock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  const bool moved = impl_->tasks.load() == 0;
  if (moved) {
    // No task is left here; where each job went is the coordinator's to say
    // (other workers, or SCHEDULING until slots are free).
    Log()->info("drained: no task left here{}", jobs.empty() ? "" : "; its jobs now:");
    for (const std::string& id : jobs) Log()->info("  {}", impl_->DescribeJob(id));
  } else {
    Log()->warn("drain timed out with {} tasks here: stopping them (their jobs restore)",
                impl_->tasks.load());
  }
  Stop();
  return moved;
}

void WorkerAgent::Stop() {
  if (impl_ == nullptr) return;
  impl_->stop = true;
  if (impl_->heartbeats.joinable()) impl_->heartbeats.join();
  impl_->StopParts("the worker stops");
  // Streams from other workers' tasks end (their readers here are gone);
  // the deadline cancels any still open.
  if (impl_->server != nullptr) {
    impl_->server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  }
  if (impl_->http != nullptr) impl_->http->Stop();
}

std::string WorkerAgent::worker_id() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->worker_id;
}

const std::string& WorkerAgent::address() const { return impl_->address; }

std::string WorkerAgent::http_address() const {
  return impl_->http != nullptr ? impl_->http->address() : "";
}

int WorkerAgent::registrations() const { return impl_->registrations.load(); }

absl::Status WorkerAgent::Failure() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->refused_by_cluster;
}

int WorkerAgent::task_count() const { return impl_->tasks.load(); }

absl::StatusOr<std::unique_ptr<WorkerAgent>> WorkerAgent::Start(const WorkerAgentOptions& options,
                                                                int register_timeout_ms) {
  std::unique_ptr<WorkerAgent> agent(new WorkerAgent());
  agent->impl_ = std::make_unique<Impl>();
  Impl& im = *agent->impl_;
  im.options = options;
  if (options.slots < 1) return absl::InvalidArgumentError("--slots must be at least 1");
  NetworkExchangeOptions net;
  net.token = options.token;
  // Peers serve what this worker serves: TLS (trusting --tls-ca) when it has
  // a certificate, plaintext otherwise (the token is checked either way).
  if (!options.tls_cert.empty()) {
    if (options.tls_ca.empty()) {
      return absl::InvalidArgumentError(
          "--tls-cert needs --tls-ca: the roots the other workers' certificates chain to");
    }
    net.tls_ca = options.tls_ca;
  }
  net.metrics = &im.metrics;
  ASSIGN_OR_RETURN(im.network, NetworkExchange::Create(std::move(net)));
  // Exchange messages are batches of frames (64 KiB) plus one frame, which
  // may hold a large record.
  constexpr int kMaxMessageBytes = 64 << 20;
  ASSIGN_OR_RETURN(std::shared_ptr<grpc::ServerCredentials> server_credentials,
                   ServerCredentials(options.tls_cert, options.tls_key));
  ASSIGN_OR_RETURN(
      GrpcServer server,
      StartGrpcServer(options.listen, server_credentials, {im.network->service()}, kMaxMessageBytes,
                      &im.metrics, {v1::ExchangeService::service_full_name()}));
  im.server = std::move(server.server);
  im.address = AdvertisedAddress(options.advertise, server.address);
  ASSIGN_OR_RETURN(std::shared_ptr<grpc::ChannelCredentials> credentials,
                   ChannelCredentials(options.tls_ca));
  im.channel = CreateGrpcChannel(options.coordinator, credentials, &im.metrics);
  im.stub = v1::WorkerService::NewStub(im.channel);
  if (!options.http_listen.empty()) {
    Impl* impl = &im;
    ASSIGN_OR_RETURN(im.http,
                     HttpServer::Start(options.http_listen, options.token,
                                       {HealthRoute(), MetricsRoute([impl] {
                                          return impl->metrics.ToPrometheusText("caravela_");
                                        })}));
  }
  const auto deadline = SteadyClock::now() + std::chrono::milliseconds(register_timeout_ms);
  grpc::Status st;
  while (!(st = im.Register(options.requested_id)).ok()) {
    if (st.error_code() == grpc::StatusCode::UNAUTHENTICATED ||
        st.error_code() == grpc::StatusCode::INVALID_ARGUMENT || SteadyClock::now() > deadline) {
      return absl::Status(static_cast<absl::StatusCode>(st.error_code()),
                          absl::StrCat("cannot register with the coordinator at ",
                                       options.coordinator, ": ", st.error_message()));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  im.heartbeats = std::thread([&im] { im.HeartbeatLoop(); });
  return agent;
}

}  // namespace caravela
