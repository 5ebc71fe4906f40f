#include "coordinator/coordinator.h"

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <random>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/dashboard.h"
#include "common/http_server.h"
#include "common/logging.h"
#include "common/metrics.h"
#include "common/time_util.h"
#include "coordinator/job_series.h"
#include "coordinator/job_service.h"
#include "coordinator/job_state.h"
#include "coordinator/job_store.h"
#include "coordinator/scheduler.h"
#include "coordinator/worker_registry.h"
#include "coordinator/worker_service.h"
#include "nlohmann/json.hpp"
#include "proto/grpc_support.h"
#include "spdlog/spdlog.h"

namespace caravela {

namespace {

// The cluster's id, kept in <data_dir>/cluster-id (made at the first start):
// workers remember it and a coordinator with another data directory refuses
// them (WorkerRegistry).
absl::StatusOr<std::string> LoadOrCreateClusterId(const std::string& data_dir) {
  const std::filesystem::path file = std::filesystem::path(data_dir) / "cluster-id";
  std::string id;
  if (std::ifstream in(file); in && std::getline(in, id) && !id.empty()) return id;
  std::random_device random;
  id = absl::StrFormat("%08x%08x", random(), random());
  std::error_code ec;
  std::filesystem::create_directories(data_dir, ec);
  const std::filesystem::path tmp = file.string() + ".tmp";
  std::ofstream out(tmp, std::ios::trunc);
  out << id << "\n";
  out.close();
  if (!out) return absl::InternalError(absl::StrCat("cannot write ", tmp.string()));
  std::filesystem::rename(tmp, file, ec);
  if (ec)
    return absl::InternalError(absl::StrCat("cannot write ", file.string(), ": ", ec.message()));
  return id;
}

}  // namespace

struct Coordinator::Impl {
  CoordinatorOptions options;
  std::unique_ptr<JobStore> store;
  SystemClock clock;
  std::unique_ptr<JobServiceImpl> jobs;
  std::unique_ptr<WorkerRegistry> workers;
  std::unique_ptr<Scheduler> scheduler;
  std::unique_ptr<WorkerServiceImpl> worker_service;
  std::unique_ptr<grpc::Server> server;
  std::string address;
  std::unique_ptr<HttpServer> http;
  MetricsRegistry metrics;  // the coordinator's counters (/metrics)
  JobSeries series;         // the dashboard's samples (/api/v1/jobs/ID/series)
  std::atomic<bool> stop{false};
  std::thread ticker;  // Scheduler::Tick every 50 ms
};

Coordinator::~Coordinator() {
  if (impl_ == nullptr) return;
  impl_->stop = true;
  if (impl_->ticker.joinable()) impl_->ticker.join();
  if (impl_->http != nullptr) impl_->http->Stop();
  if (impl_->server != nullptr) impl_->server->Shutdown();
}

namespace {

HttpResponse FromStatus(const absl::Status& st) {
  return HttpError(absl::IsNotFound(st) ? 404 : 500, std::string(st.message()));
}

}  // namespace

HttpResponse ProtoJsonResponse(const google::protobuf::Message& m) {
  HttpResponse r;
  r.body = ProtoJson(m) + "\n";
  return r;
}

// Gauges of what the coordinator holds now, then its counters.
std::string Coordinator::CoordinatorMetrics(Impl& im) {
  MetricsRegistry now;
  for (int s = v1::SUBMITTED; s <= v1::FAILED; ++s) {
    now.Get("coordinator_jobs",
            absl::StrCat("state=\"", JobStateName(static_cast<JobState>(s)), "\""));
  }
  const int64_t now_ms = im.clock.NowMs();
  if (absl::StatusOr<std::vector<v1::Job>> jobs = im.store->List(); jobs.ok()) {
    for (const v1::Job& j : *jobs) {
      now.Get("coordinator_jobs", absl::StrCat("state=\"", JobStateName(j.state()), "\""))->Add();
      // Running jobs: when their last checkpoint completed, and how long ago.
      if (j.state() != v1::RUNNING) continue;
      const std::vector<Scheduler::CheckpointRecord> history =
          im.scheduler->CheckpointHistory(j.id());
      if (history.empty()) continue;
      int64_t last = 0;
      for (const Scheduler::CheckpointRecord& c : history) last = std::max(last, c.completed_at_ms);
      const std::string label = absl::StrCat("job_id=\"", j.id(), "\",job_name=\"", j.name(), "\"");
      now.Get("job_checkpoint_last_completed_timestamp_ms", label)->Set(last);
      now.Get("job_checkpoint_age_ms", label)->Set(std::max<int64_t>(0, now_ms - last));
    }
  }
  now.Get("coordinator_workers", "state=\"ALIVE\"");
  now.Get("coordinator_workers", "state=\"DEAD\"");
  for (const v1::WorkerInfo& w : im.workers->List()) {
    now.Get("coordinator_workers", absl::StrCat("state=\"", v1::WorkerState_Name(w.state()), "\""))
        ->Add();
    if (w.state() == v1::ALIVE) {
      now.Get("coordinator_worker_slots")->Add(w.slots());
      now.Get("coordinator_worker_tasks")->Add(w.running_tasks());
    }
  }
  return now.ToPrometheusText("caravela_") + im.metrics.ToPrometheusText("caravela_");
}

void Coordinator::SampleJobs(Impl& im, int64_t now_ms) {
  absl::StatusOr<std::vector<v1::Job>> jobs = im.store->List();
  if (!jobs.ok()) return;
  std::vector<std::string> ids;
  for (v1::Job& j : *jobs) {
    ids.push_back(j.id());
    if (IsFinal(j.state())) continue;  // its last samples stay
    im.scheduler->FillLive(&j);
    im.series.Sample(j, now_ms);
  }
  im.series.Retain(ids);
}

std::vector<HttpRoute> Coordinator::HttpRoutes(Impl& im) {
  std::vector<HttpRoute> routes = DashboardRoutes();
  routes.push_back(HealthRoute());
  routes.push_back(MetricsRoute([&im] { return CoordinatorMetrics(im); }));
  routes.push_back({"/api/v1/jobs", false, [&im](const std::vector<std::string>&) {
                      absl::StatusOr<std::vector<v1::Job>> jobs = im.store->List();
                      if (!jobs.ok()) return FromStatus(jobs.status());
                      v1::ListJobsResponse out;
                      for (v1::Job& j : *jobs) {
                        j.clear_yaml();
                        im.scheduler->FillLive(&j);
                        *out.add_jobs() = std::move(j);
                      }
                      return ProtoJsonResponse(out);
                    }});
  routes.push_back({"/api/v1/jobs/([^/]+)", false, [&im](const std::vector<std::string>& c) {
                      absl::StatusOr<v1::Job> job = im.store->Get(c[0]);
                      if (!job.ok()) return FromStatus(job.status());
                      im.scheduler->FillLive(&*job);
                      return ProtoJsonResponse(*job);
                    }});
  routes.push_back(im.series.Route());
  routes.push_back(
      {"/api/v1/jobs/([^/]+)/checkpoints", false, [&im](const std::vector<std::string>& c) {
         nlohmann::json out = nlohmann::json::array();
         for (const Scheduler::CheckpointRecord& r : im.scheduler->CheckpointHistory(c[0])) {
           out.push_back({{"id", r.id},
                          {"completed_at_ms", r.completed_at_ms},
                          {"duration_ms", r.duration_ms},
                          {"epoch", r.epoch},
                          {"stopping", r.stopping}});
         }
         HttpResponse response;
         response.body = out.dump();
         return response;
       }});
  routes.push_back({"/api/v1/workers", false, [&im](const std::vector<std::string>&) {
                      v1::ListWorkersResponse out;
                      for (v1::WorkerInfo& w : im.workers->List())
                        *out.add_workers() = std::move(w);
                      return ProtoJsonResponse(out);
                    }});
  return routes;
}

absl::StatusOr<std::unique_ptr<Coordinator>> Coordinator::Start(const CoordinatorOptions& options) {
  std::unique_ptr<Coordinator> c(new Coordinator());
  c->impl_ = std::make_unique<Impl>();
  Impl& im = *c->impl_;
  im.options = options;
  ASSIGN_OR_RETURN(im.store, JobStore::Open(options.data_dir + "/jobs"));
  ASSIGN_OR_RETURN(const std::string cluster_id, LoadOrCreateClusterId(options.data_dir));
  SubsystemLogger("coordinator")->info("cluster {}", cluster_id);
  im.workers = std::make_unique<WorkerRegistry>(&im.clock, options.worker_timeout_ms, cluster_id);
  SchedulerOptions so;
  so.checkpoint_storage = options.checkpoint_storage;
  so.prepare_job = options.prepare_job;
  so.metrics = &im.metrics;
  so.max_restarts = options.max_restarts;
  so.max_restart_backoff_ms = options.max_restart_backoff_ms;
  if (so.checkpoint_storage.empty()) {
    so.checkpoint_storage =
        "file://" + std::filesystem::absolute(options.data_dir + "/checkpoints").string();
  }
  im.scheduler = std::make_unique<Scheduler>(im.store.get(), im.workers.get(), &im.clock, so);
  RETURN_IF_ERROR(im.scheduler->AdoptStored());
  im.jobs = std::make_unique<JobServiceImpl>(
      im.store.get(), options.token, &im.clock, options.allowed_paths, im.scheduler.get(),
      std::filesystem::absolute(options.data_dir + "/savepoints").lexically_normal().string());
  im.worker_service = std::make_unique<WorkerServiceImpl>(im.workers.get(), options.token,
                                                          im.scheduler.get(), &im.metrics);

  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  ASSIGN_OR_RETURN(std::shared_ptr<grpc::ServerCredentials> credentials,
                   ServerCredentials(options.tls_cert_file, options.tls_key_file));
  ASSIGN_OR_RETURN(GrpcServer server, StartGrpcServer(options.listen, std::move(credentials),
                                                      {im.jobs.get(), im.worker_service.get()},
                                                      options.max_message_bytes, &im.metrics,
                                                      {v1::JobService::service_full_name(),
                                                       v1::WorkerService::service_full_name()}));
  im.server = std::move(server.server);
  im.address = std::move(server.address);
  if (!options.http_listen.empty()) {
    ASSIGN_OR_RETURN(im.http,
                     HttpServer::Start(options.http_listen, options.token, HttpRoutes(im)));
  }
  im.ticker = std::thread([&im] {
    int64_t next_sample = 0;
    while (!im.stop.load()) {
      im.scheduler->Tick();
      if (const int64_t now = im.clock.NowMs(); now >= next_sample) {
        SampleJobs(im, now);
        next_sample = now + 1000;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  });
  return c;
}

const std::string& Coordinator::grpc_address() const { return impl_->address; }

std::string Coordinator::http_address() const {
  return impl_->http != nullptr ? impl_->http->address() : "";
}

void Coordinator::Wait() { impl_->server->Wait(); }

void Coordinator::Shutdown() { impl_->server->Shutdown(); }

}  // namespace caravela
