// Coordinator overhead (issue: cluster service): the Scheduler's cost per
// heartbeat and per scheduling round with many tasks, in-process (a real
// JobStore in a temp dir, workers played by heartbeat requests, as in
// coordinator/scheduler_test.cc). Multiply by the rates to get an idle
// coordinator's CPU: workers heartbeat every 100 ms, the scheduler ticks
// every 50 ms.
//
//   build/bench/coordinator_bench [--benchmark_filter=...]
//
// Args: workers, tasks per worker (slots); jobs of 100 tasks (parallelism
// 50, two stages) fill the slots.
#include <benchmark/benchmark.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "bench/bench_util.h"
#include "coordinator/fake_worker.h"
#include "coordinator/scheduler.h"

namespace caravela {
namespace {

// A coordinator with `workers` x `slots` tasks running, every task READY
// and started.
struct Cluster {
  std::filesystem::path dir;
  ManualClock clock{1'000'000};
  std::unique_ptr<JobStore> store;
  std::unique_ptr<WorkerRegistry> registry;
  std::unique_ptr<Scheduler> scheduler;
  std::vector<std::string> workers;
  std::map<std::string, v1::HeartbeatRequest> beats;  // per worker: its reports

  Cluster(int n_workers, int slots) {
    dir = std::filesystem::temp_directory_path() /
          absl::StrCat("coordinator_bench_", ::getpid(), "_", n_workers, "_", slots);
    std::filesystem::remove_all(dir);
    store = *JobStore::Open(dir.string());
    registry = std::make_unique<WorkerRegistry>(&clock, 3'600'000);
    scheduler =
        std::make_unique<Scheduler>(store.get(), registry.get(), &clock, SchedulerOptions{});
    for (int i = 0; i < n_workers; ++i) {
      v1::RegisterRequest r;
      r.set_slots(slots);
      const v1::RegisterResponse registered = *registry->Register(r);
      workers.push_back(registered.worker_id());
      beats[registered.worker_id()].set_session(registered.session());
    }
    const int tasks = n_workers * slots;
    for (int j = 0; j * 100 < tasks; ++j) {
      v1::Job job;
      job.set_name(absl::StrCat("job", j));
      job.set_id(*store->NewId(job.name()));
      job.set_state(v1::SUBMITTED);
      job.set_parallelism(50);
      job.set_yaml(bench::TwoStageJobYaml(job.name(), 50));
      (void)scheduler->Submit(job);
    }
    scheduler->Tick();
    for (int round = 0; round < 2; ++round) {
      for (const std::string& w : workers) Beat(w, v1::TASK_READY);
    }
    scheduler->Tick();
    for (const std::string& w : workers) Beat(w, v1::TASK_RUNNING);
  }
  ~Cluster() {
    scheduler.reset();
    store.reset();
    std::filesystem::remove_all(dir);
  }

  int Beat(const std::string& worker, v1::TaskPhase phase) {
    v1::HeartbeatRequest& req = beats[worker];
    req.set_worker_id(worker);
    for (v1::TaskReport& r : *req.mutable_tasks()) r.set_phase(phase);
    registry->Heartbeat(req);
    v1::HeartbeatResponse resp;
    scheduler->OnHeartbeat(req, &resp);
    // The next beat reports what this answer assigned.
    req.clear_tasks();
    return ReportAssigned(resp, phase, &req);
  }
};

void BM_Heartbeat(benchmark::State& state) {
  Cluster c(static_cast<int>(state.range(0)), static_cast<int>(state.range(1)));
  size_t i = 0;
  int64_t tasks = 0;
  for (auto _ : state) {
    tasks += c.Beat(c.workers[i++ % c.workers.size()], v1::TASK_RUNNING);
  }
  state.counters["tasks_per_beat"] =
      benchmark::Counter(static_cast<double>(tasks) / static_cast<double>(state.iterations()));
  state.counters["ns_per_task"] = benchmark::Counter(
      static_cast<double>(tasks), benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}
BENCHMARK(BM_Heartbeat)->Args({10, 10})->Args({100, 10})->Unit(benchmark::kMicrosecond);

void BM_Tick(benchmark::State& state) {
  Cluster c(static_cast<int>(state.range(0)), static_cast<int>(state.range(1)));
  for (auto _ : state) c.scheduler->Tick();
  state.counters["tasks"] = static_cast<double>(state.range(0) * state.range(1));
}
BENCHMARK(BM_Tick)->Args({10, 10})->Args({100, 10})->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace caravela

BENCHMARK_MAIN();
