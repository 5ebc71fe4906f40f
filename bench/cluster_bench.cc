// The cluster as processes on this machine (issue: cluster service): a
// `caravela broker`, a `caravela coordinator` and N `caravela worker`
// processes; the benchmark submits the exchange job (purchases keyed by
// user_id -> dedup by event_id -> hourly revenue by country, two exchanges,
// tests/revenue_job.h, checkpoints every second) and reports what it
// measured:
//
//   throughput  events/s from the epoch's start to FINISHED, and CPU seconds
//               per worker process and of the coordinator;
//   failover    a worker holding tasks is SIGKILLed after most input was
//               read; time from the kill to the new epoch running and to
//               the first output of the new owners, and the size of the
//               checkpoint the job restored;
//   single      the throughput job's baseline: the same job and input run by
//               `caravela run --parallelism N` (one process, in-memory
//               exchanges), wall time from spawn to exit and its CPU;
//   idle        the coordinator's CPU while --fake-workers x --slots tasks
//               heartbeat every 100 ms over gRPC (no real work).
//   rescale     an interval join that keeps every purchase row as keyed
//               state (~230 B a row: --purchases 450000 is ~100 MB) at
//               parallelism 2; then 2 -> 3 and 3 -> 2 with `rescale`, and a
//               plain restore of the same state at 3 and at 2 (cancel, then
//               `restart` at the same parallelism). For each: time from the
//               command to the new epoch (a rescale waits for its
//               checkpoint) and from the new epoch to every task running
//               (the restore).
//
//   build/bench/cluster_bench --mode throughput --workers 1|2|3 [--purchases 100000]
//                             [--exchange network|kafka]
//   build/bench/cluster_bench --mode single --parallelism 2 [--purchases 100000]
//   build/bench/cluster_bench --mode failover --purchases 400000 --partitions 32
//   build/bench/cluster_bench --mode idle --fake-workers 100 --slots 10 --seconds 10
//   build/bench/cluster_bench --mode rescale --purchases 450000 --partitions 32
//
// The embedded broker keeps ~5 MiB per partition: --purchases x ~210 B /
// --partitions must stay below that (the bench says so when it does not).
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "bench/bench_util.h"
#include "bench/purchase_generator.h"
#include "caravela/v1/worker.grpc.pb.h"
#include "common/job_plan.h"
#include "common/job_spec.h"
#include "coordinator/fake_worker.h"
#include "coordinator/job_client.h"
#include "grpcpp/grpcpp.h"
#include "httplib.h"
#include "tests/child_process.h"
#include "tests/revenue_job.h"
#include "worker/connectors/kafka_test_util.h"
#include "worker/registry/builtin_kinds.h"

namespace caravela {
namespace {

namespace fs = std::filesystem;
using milliseconds = std::chrono::milliseconds;
using SteadyClock = std::chrono::steady_clock;

struct Flags {
  std::string mode = "throughput";
  int workers = 3;
  int64_t purchases = 100'000;
  int partitions = 6;
  int parallelism = 3;
  int fake_workers = 100;
  int slots = 10;
  int seconds = 10;
  std::string dir;
  std::string exchange = "network";
};

// `yaml` with spec.exchange set (the cluster's default is network).
std::string WithExchange(std::string yaml, const std::string& exchange) {
  const size_t at = yaml.find("spec:\n");
  if (at != std::string::npos && exchange != "network") {
    yaml.insert(at + 6, "  exchange: " + exchange + "\n");
  }
  return yaml;
}

// CPU seconds (user + system) of a process so far.
double CpuSeconds(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t close = stat.rfind(')');
  if (close == std::string::npos) return 0;
  std::vector<std::string> f = absl::StrSplit(stat.substr(close + 2), ' ');
  // Fields after the name start at state (3rd field overall): utime is the
  // 14th field overall, stime the 15th.
  if (f.size() < 13) return 0;
  return (std::stod(f[11]) + std::stod(f[12])) / static_cast<double>(sysconf(_SC_CLK_TCK));
}

int64_t DirBytes(const fs::path& dir) {
  int64_t total = 0;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(dir, ec);
       it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (it->is_regular_file(ec)) total += static_cast<int64_t>(it->file_size(ec));
  }
  return total;
}

class Cluster {
 public:
  explicit Cluster(const Flags& f) : f_(f), dir_(f.dir) {}

  // workers < 0: the broker and the input only.
  bool Start(int workers, int slots, const std::string& yaml,
             const std::vector<std::string>& more_topics = {}) {
    ParseResult parsed = ParseJobSpec(yaml);
    if (!parsed.ok()) {
      std::fprintf(stderr, "job: %s\n", parsed.errors[0].ToString().c_str());
      return false;
    }
    std::map<std::string, int> partitions = {{"purchases", f_.partitions}};
    for (const std::string& t : more_topics) {
      const std::vector<std::string> nc = absl::StrSplit(t, ':');
      int n = 1;
      if (nc.size() == 2 && absl::SimpleAtoi(nc[1], &n)) partitions[nc[0]] = n;
    }
    auto plan = PlanJob(parsed.spec, f_.parallelism, partitions);
    if (!plan.ok()) {
      std::fprintf(stderr, "plan: %s\n", std::string(plan.status().message()).c_str());
      return false;
    }
    tasks_ = plan->total_tasks();
    std::vector<std::string> args = {CARAVELA_BINARY, "broker", "--topic",
                                     absl::StrCat("purchases:", f_.partitions)};
    for (const ExchangePlan& ex : plan->exchanges) {
      args.push_back("--topic");
      args.push_back(absl::StrCat(ex.topic, ":", ex.CreatePartitions(*plan)));
    }
    for (const std::string& t : more_topics) {
      args.push_back("--topic");
      args.push_back(t);
    }
    broker_ = std::make_unique<ChildProcess>(args, dir_ / "broker.log");
    bootstrap_ = broker_->WaitFor(R"(listening on (\S+))", milliseconds(20000));
    if (bootstrap_.empty()) return false;
    if (!Produce()) return false;
    if (workers < 0) return true;
    coordinator_ = std::make_unique<ChildProcess>(
        std::vector<std::string>{CARAVELA_BINARY, "coordinator", "--listen", "127.0.0.1:0",
                                 "--data-dir", (dir_ / "coordinator").string(), "--allow-path",
                                 dir_.string(), "--worker-timeout", "3s"},
        dir_ / "coordinator.log");
    address_ = coordinator_->WaitFor(R"(grpc=(\S+))", milliseconds(20000));
    if (address_.empty()) return false;
    for (int i = 0; i < workers; ++i) {
      workers_.push_back(std::make_unique<ChildProcess>(
          std::vector<std::string>{CARAVELA_BINARY, "worker", "--coordinator", address_, "--slots",
                                   std::to_string(slots), "--data-dir",
                                   (dir_ / absl::StrCat("w", i)).string(), "--bootstrap",
                                   bootstrap_, "--allow-path", dir_.string()},
          dir_ / absl::StrCat("worker-", i, ".log")));
      ids_.push_back(workers_.back()->WaitFor(R"(id=(\S+))", milliseconds(20000)));
    }
    return true;
  }

  bool Produce() {
    bench::PurchaseStreamOptions o;
    o.purchases = f_.purchases;
    o.span_ms = 12LL * 3600 * 1000;
    o.countries = 20;
    bench::PurchaseGenerator gen(o);
    std::vector<KafkaTestRecord> batch;
    std::string line;
    int64_t bytes = 0;
    const auto t0 = SteadyClock::now();
    auto flush = [&] {
      absl::Status st = ProduceRecords(bootstrap_, "purchases", batch, 120000);
      if (!st.ok()) std::fprintf(stderr, "produce: %s\n", std::string(st.message()).c_str());
      batch.clear();
      return st.ok();
    };
    while (gen.Next(&line)) {
      bytes += static_cast<int64_t>(line.size());
      KafkaTestRecord r;
      r.key = gen.last_key();
      r.value = line;
      batch.push_back(std::move(r));
      ++lines_;
      if (batch.size() >= 50000 && !flush()) return false;
    }
    if (!batch.empty() && !flush()) return false;
    const double per_partition = static_cast<double>(bytes) / f_.partitions / (1 << 20);
    std::printf(
        "input: %" PRId64 " records, %.1f MB, %.1f MiB per partition (produced in %.1f s)%s\n",
        lines_, static_cast<double>(bytes) / 1e6, per_partition,
        std::chrono::duration<double>(SteadyClock::now() - t0).count(),
        per_partition > 4.5 ? " -- near the embedded broker's ~5 MiB: use more --partitions" : "");
    return true;
  }

  // Waits for a new epoch of `id` after `epoch` and then for it to run;
  // prints the two times measured from `t0`.
  bool TimeEpoch(const std::string& id, const std::string& what, int64_t epoch,
                 SteadyClock::time_point t0) {
    SteadyClock::time_point placed;
    if (!Until(id, [&](const v1::Job& j) {
          if (j.epoch() > epoch && placed == SteadyClock::time_point()) placed = SteadyClock::now();
          return j.epoch() > epoch && j.state() == v1::RUNNING;
        })) {
      return false;
    }
    const auto running = SteadyClock::now();
    const v1::Job j = Get(id);
    std::printf("  %-28s command -> epoch %" PRId64
                " placed %.2f s, placed -> running %.2f s "
                "(total %.2f s; %d tasks)\n",
                what.c_str(), j.epoch(), std::chrono::duration<double>(placed - t0).count(),
                std::chrono::duration<double>(running - placed).count(),
                std::chrono::duration<double>(running - t0).count(), j.tasks_size());
    std::fflush(stdout);
    return true;
  }

  std::string Submit(const std::string& yaml) {
    auto r = JobClient(address_, "").Submit(yaml, f_.parallelism);
    if (!r.ok() || r->job_id().empty()) {
      std::fprintf(stderr, "submit failed: %s\n",
                   r.ok() ? r->DebugString().c_str() : std::string(r.status().message()).c_str());
      return "";
    }
    return r->job_id();
  }

  v1::Job Get(const std::string& id) {
    auto j = JobClient(address_, "").Get(id);
    return j.ok() ? *j : v1::Job();
  }

  // Polls until `pred` holds (true) or the job ends otherwise / times out.
  template <typename P>
  bool Until(const std::string& id, P pred, int timeout_s = 600) {
    const auto deadline = SteadyClock::now() + std::chrono::seconds(timeout_s);
    while (SteadyClock::now() < deadline) {
      const v1::Job j = Get(id);
      if (pred(j)) return true;
      if (j.state() == v1::FAILED || j.state() == v1::CANCELED) {
        std::fprintf(stderr, "job %s: %s\n", v1::JobState_Name(j.state()).c_str(),
                     j.message().c_str());
        return false;
      }
      std::this_thread::sleep_for(milliseconds(10));
    }
    std::fprintf(stderr, "timed out\n");
    return false;
  }

  const Flags& f_;
  fs::path dir_;
  std::unique_ptr<ChildProcess> broker_, coordinator_;
  std::vector<std::unique_ptr<ChildProcess>> workers_;
  std::vector<std::string> ids_;
  std::string bootstrap_, address_;
  int tasks_ = 0;
  int64_t lines_ = 0;
};

int Throughput(const Flags& f) {
  Cluster c(f);
  const int slots = (9 + f.workers - 1) / f.workers;
  const std::string yaml = WithExchange(RevenueJob("bench-revenue", f.dir, 1000), f.exchange);
  if (!c.Start(f.workers, std::max(slots, (c.tasks_ + f.workers - 1) / f.workers), yaml)) return 1;
  const std::string id = c.Submit(yaml);
  if (id.empty()) return 1;
  if (!c.Until(id, [](const v1::Job& j) { return j.state() == v1::RUNNING; })) return 1;
  const auto t0 = SteadyClock::now();
  std::vector<double> cpu0;
  for (auto& w : c.workers_) cpu0.push_back(CpuSeconds(w->pid()));
  const double coord0 = CpuSeconds(c.coordinator_->pid());
  const double broker0 = CpuSeconds(c.broker_->pid());
  if (!c.Until(id, [](const v1::Job& j) { return j.state() == v1::FINISHED; })) return 1;
  const double secs = std::chrono::duration<double>(SteadyClock::now() - t0).count();
  const v1::Job job = c.Get(id);
  std::map<std::string, int> tasks;
  for (const v1::TaskStatus& t : job.tasks()) ++tasks[t.worker()];
  std::printf("throughput (%s exchange): %d worker process%s, %d tasks, %" PRId64
              " events in %.2f s: %.0f events/s total, %.0f per worker\n",
              f.exchange.c_str(), f.workers, f.workers == 1 ? "" : "es", job.tasks_size(), c.lines_,
              secs, static_cast<double>(c.lines_) / secs,
              static_cast<double>(c.lines_) / secs / f.workers);
  double total_cpu = 0;
  for (size_t i = 0; i < c.workers_.size(); ++i) {
    const double cpu = CpuSeconds(c.workers_[i]->pid()) - cpu0[i];
    total_cpu += cpu;
    std::printf("  worker %s: %d tasks, %.2f CPU s (%.0f%% of a core)\n", c.ids_[i].c_str(),
                tasks[c.ids_[i]], cpu, 100 * cpu / secs);
  }
  std::printf(
      "  workers total %.2f CPU s (%.0f events per CPU ms); coordinator %.2f CPU s; "
      "broker %.2f CPU s\n",
      total_cpu, static_cast<double>(c.lines_) / (total_cpu * 1000),
      CpuSeconds(c.coordinator_->pid()) - coord0, CpuSeconds(c.broker_->pid()) - broker0);
  return 0;
}

// CPU seconds (user + system) of this process's waited-for children.
double ChildrenCpuSeconds() {
  rusage ru{};
  getrusage(RUSAGE_CHILDREN, &ru);
  return static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
         static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

int Single(const Flags& f) {
  Cluster c(f);
  const std::string yaml = RevenueJob("bench-revenue", f.dir, 1000);
  if (!c.Start(-1, 0, yaml)) return 1;
  // The job names the cluster's broker (workers get it with --bootstrap).
  std::string named = yaml;
  const std::string topic = "kafka: {topic: purchases,";
  named.replace(named.find(topic), topic.size(),
                "kafka: {bootstrap: \"" + c.bootstrap_ + "\", topic: purchases,");
  const fs::path job = fs::path(f.dir) / "single.yaml";
  std::ofstream(job) << named;
  const std::string cmd =
      absl::StrCat(CARAVELA_BINARY, " run -q --parallelism ", f.parallelism, " --data-dir ",
                   (fs::path(f.dir) / "single").string(), " ", job.string(), " > ",
                   (fs::path(f.dir) / "single.log").string(), " 2>&1");
  const double cpu0 = ChildrenCpuSeconds();
  const double broker0 = CpuSeconds(c.broker_->pid());
  const auto t0 = SteadyClock::now();
  const int rc = std::system(cmd.c_str());
  const double secs = std::chrono::duration<double>(SteadyClock::now() - t0).count();
  const double cpu = ChildrenCpuSeconds() - cpu0;
  if (rc != 0) {
    std::fprintf(stderr, "caravela run failed (%d): see %s/single.log\n", rc, f.dir.c_str());
    return 1;
  }
  std::printf("single process (caravela run --parallelism %d, in-memory exchanges): %" PRId64
              " events in %.2f s (spawn to exit): %.0f events/s; %.2f CPU s (%.0f events per CPU "
              "ms); broker %.2f CPU s\n",
              f.parallelism, c.lines_, secs, static_cast<double>(c.lines_) / secs, cpu,
              static_cast<double>(c.lines_) / (cpu * 1000), CpuSeconds(c.broker_->pid()) - broker0);
  return 0;
}

int Failover(const Flags& f) {
  Cluster c(f);
  // Long dedup retention: every event id stays in the state.
  const std::string yaml =
      WithExchange(RevenueJob("bench-revenue", f.dir, 1000, "30d"), f.exchange);
  if (!c.Start(3, 9, yaml)) return 1;
  const std::string id = c.Submit(yaml);
  if (id.empty()) return 1;
  // Most of the input read, a checkpoint taken after it.
  int64_t read_at = 0;
  if (!c.Until(id, [&](const v1::Job& j) {
        int64_t in = 0;
        for (const v1::TaskStatus& t : j.tasks()) in += t.stage() == 0 ? t.records_in() : 0;
        if (in >= c.lines_ * 8 / 10 && read_at == 0) read_at = j.last_checkpoint() + 1;
        return read_at > 0 && j.last_checkpoint() >= read_at;
      })) {
    return 1;
  }
  const v1::Job before = c.Get(id);
  const int64_t state_bytes = DirBytes(fs::path(f.dir) / "coordinator/checkpoints" / id);
  const auto killed = SteadyClock::now();
  c.workers_[0]->Stop(SIGKILL);
  if (!c.Until(id, [&](const v1::Job& j) {
        return j.epoch() > before.epoch() &&
               (j.state() == v1::RUNNING || j.state() == v1::FINISHED);
      })) {
    return 1;
  }
  const double running = std::chrono::duration<double>(SteadyClock::now() - killed).count();
  if (!c.Until(id, [&](const v1::Job& j) {
        for (const v1::TaskStatus& t : j.tasks()) {
          if (t.records_out() > 0) return true;
        }
        return j.state() == v1::FINISHED;
      })) {
    return 1;
  }
  const double output = std::chrono::duration<double>(SteadyClock::now() - killed).count();
  std::printf("failover: checkpoint %" PRId64
              " holds %.1f MB (all tasks, storage %s); worker "
              "timeout 3 s\n  kill -> new epoch running: %.2f s\n  kill -> first output of the "
              "new owners: %.2f s\n",
              before.last_checkpoint(), static_cast<double>(state_bytes) / 1e6,
              "file:// on the local disk", running, output);
  if (!c.Until(id, [](const v1::Job& j) { return j.state() == v1::FINISHED; })) return 1;
  return 0;
}

// An interval join that keeps every purchase (nothing on the right side
// matches within the 30 days it waits).
std::string KeepEveryRowJob(const std::string& dir) {
  return absl::StrCat(R"(
apiVersion: caravela/v1
kind: Job
metadata: {name: bench-rescale}
spec:
  checkpoint: {interval: 2s}
  sources:
    - name: purchases
      kafka: {topic: purchases}
      key: [user_id]
      event_time: {field: event_time, format: iso8601}
      watermark: {max_out_of_orderness: 5m, idle_timeout: 10s}
    - name: shipments
      kafka: {topic: shipments}
      event_time: {field: event_time, format: iso8601}
      watermark: {max_out_of_orderness: 5m, idle_timeout: 10s}
  operators:
    - name: shipped
      interval_join:
        left: purchases
        right: shipments
        on: [event_id]
        between: {lower: 0m, upper: 30d}
        type: inner
  sinks:
    - {from: shipped, file: {path: )",
                      dir, R"(/out/shipped.jsonl}}
)");
}

int Rescale(const Flags& flags) {
  Flags f = flags;
  f.parallelism = 2;
  Cluster c(f);
  const std::string yaml = WithExchange(KeepEveryRowJob(f.dir), f.exchange);
  if (!c.Start(3, 4, yaml, {"shipments:4"})) return 1;
  const std::string id = c.Submit(yaml);
  if (id.empty()) return 1;
  // Every purchase read and a checkpoint completed after that.
  auto settle = [&](const char* what) {
    int64_t after = 0;
    const auto t0 = SteadyClock::now();
    const bool ok = c.Until(id, [&](const v1::Job& j) {
      if (j.state() != v1::RUNNING) return false;
      int64_t in = 0;
      for (const v1::TaskStatus& t : j.tasks()) {
        if (t.stage() == 0) in += t.records_in();
      }
      // Counters start again with each epoch: after a restore, two new
      // checkpoints are enough.
      const bool read = in >= c.lines_ || j.epoch() > 1;
      if (after == 0 && read) after = j.last_checkpoint() + 1;
      return after > 0 && j.last_checkpoint() >= after + 1;
    });
    if (ok) {
      std::printf("%s: every purchase read and checkpoint %" PRId64 " taken (%.1f s)\n", what,
                  c.Get(id).last_checkpoint(),
                  std::chrono::duration<double>(SteadyClock::now() - t0).count());
    }
    return ok;
  };
  if (!settle("parallelism 2")) return 1;
  const fs::path storage = fs::path(f.dir) / "coordinator/checkpoints";
  std::printf("checkpoint storage %.1f MB (file:// on the local disk, every retained checkpoint)\n",
              static_cast<double>(DirBytes(storage)) / 1e6);
  auto rescale = [&](int n) {
    const int64_t epoch = c.Get(id).epoch();
    const auto t0 = SteadyClock::now();
    auto r = JobClient(c.address_, "").Rescale(id, n);
    if (!r.ok()) {
      std::fprintf(stderr, "rescale: %s\n", std::string(r.status().message()).c_str());
      return false;
    }
    return c.TimeEpoch(id, absl::StrCat("rescale to ", n, ":"), epoch, t0) &&
           settle(absl::StrCat("parallelism ", n).c_str());
  };
  auto plain = [&](int n) {
    auto canceled = JobClient(c.address_, "").Cancel(id);
    if (!canceled.ok() ||
        !c.Until(id, [](const v1::Job& j) { return j.state() == v1::CANCELED; })) {
      return false;
    }
    const int64_t epoch = c.Get(id).epoch();
    const auto t0 = SteadyClock::now();
    auto r = JobClient(c.address_, "").Restart(id, n);
    if (!r.ok()) {
      std::fprintf(stderr, "restart: %s\n", std::string(r.status().message()).c_str());
      return false;
    }
    return c.TimeEpoch(id, absl::StrCat("plain restore at ", n, ":"), epoch, t0) &&
           settle(absl::StrCat("parallelism ", n).c_str());
  };
  std::printf("rescale cost (%" PRId64 " rows of keyed state):\n", c.lines_);
  if (!rescale(3) || !plain(3) || !rescale(2) || !plain(2)) return 1;
  std::printf("checkpoint storage %.1f MB at the end\n",
              static_cast<double>(DirBytes(storage)) / 1e6);
  return 0;
}

int Idle(const Flags& f) {
  fs::path dir(f.dir);
  ChildProcess coordinator(
      {CARAVELA_BINARY, "coordinator", "--listen", "127.0.0.1:0", "--http", "127.0.0.1:0",
       "--data-dir", (dir / "coordinator").string(), "--worker-timeout", "10s"},
      dir / "coordinator.log");
  const std::vector<std::string> addresses =
      coordinator.WaitForMatch(R"(grpc=(\S+) http=(\S+))", milliseconds(20000));
  if (addresses.size() != 3) return 1;
  const std::string address = addresses[1], http = addresses[2];
  auto stub =
      v1::WorkerService::NewStub(grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  // Fake workers: registered, then a job of fake_workers x slots tasks
  // (two stages of half each) placed on them; every heartbeat reports every
  // task RUNNING, as real workers do every 100 ms.
  std::vector<std::string> ids;
  for (int i = 0; i < f.fake_workers; ++i) {
    v1::RegisterRequest r;
    r.set_slots(f.slots);
    v1::RegisterResponse resp;
    grpc::ClientContext ctx;
    if (!stub->Register(&ctx, r, &resp).ok()) return 1;
    ids.push_back(resp.worker_id());
  }
  const int tasks = f.fake_workers * f.slots;
  const std::string yaml = bench::TwoStageJobYaml("idle", tasks / 2);
  auto submitted = JobClient(address, "").Submit(yaml, 0);
  if (!submitted.ok() || submitted->job_id().empty()) return 1;
  std::map<std::string, v1::HeartbeatRequest> beats;
  auto beat_all = [&](v1::TaskPhase phase) {
    for (const std::string& w : ids) {
      v1::HeartbeatRequest& req = beats[w];
      req.set_worker_id(w);
      for (v1::TaskReport& t : *req.mutable_tasks()) t.set_phase(phase);
      v1::HeartbeatResponse resp;
      grpc::ClientContext ctx;
      if (!stub->Heartbeat(&ctx, req, &resp).ok()) continue;
      req.clear_tasks();
      ReportAssigned(resp, phase, &req);
      // One source partition per task, as the dashboard shows them.
      for (v1::TaskReport& t : *req.mutable_tasks()) {
        v1::SourcePartitionStatus* p = t.add_partitions();
        p->set_source("purchases");
        p->set_partition(t.task());
        p->set_offset(1000 + t.task());
        p->set_watermark_ms(1700000000000 + t.task());
      }
    }
  };
  for (int i = 0; i < 10; ++i) {
    beat_all(v1::TASK_READY);
    std::this_thread::sleep_for(milliseconds(100));
  }
  const double cpu0 = CpuSeconds(coordinator.pid());
  const auto t0 = SteadyClock::now();
  int64_t rounds = 0;
  while (SteadyClock::now() - t0 < std::chrono::seconds(f.seconds)) {
    const auto next = SteadyClock::now() + milliseconds(100);
    beat_all(v1::TASK_RUNNING);
    ++rounds;
    std::this_thread::sleep_until(next);
  }
  const double secs = std::chrono::duration<double>(SteadyClock::now() - t0).count();
  const double cpu = CpuSeconds(coordinator.pid()) - cpu0;
  const v1::Job job = JobClient(address, "").Get(submitted->job_id()).value_or(v1::Job());
  // The dashboard's API over this job while the heartbeats go on: each
  // answer's time (ms), 20 times per path.
  std::string api;
  httplib::Client client("http://" + http);
  for (const std::string& path :
       {std::string("/api/v1/jobs"), "/api/v1/jobs/" + submitted->job_id(),
        "/api/v1/jobs/" + submitted->job_id() + "/series", std::string("/api/v1/workers")}) {
    std::vector<double> ms;
    size_t bytes = 0;
    for (int i = 0; i < 20; ++i) {
      beat_all(v1::TASK_RUNNING);
      const auto a = SteadyClock::now();
      auto r = client.Get(path);
      ms.push_back(std::chrono::duration<double, std::milli>(SteadyClock::now() - a).count());
      if (!r || r->status != 200) return 1;
      bytes = r->body.size();
    }
    std::sort(ms.begin(), ms.end());
    absl::StrAppend(&api, absl::StrFormat("\n  GET %s: median %.1f ms, max %.1f ms, %zu bytes",
                                          path, ms[ms.size() / 2], ms.back(), bytes));
  }
  std::printf("idle coordinator: %d fake workers x %d slots, job %s with %d tasks (%s), %" PRId64
              " heartbeat rounds in %.1f s (%.0f heartbeats/s)\n  coordinator CPU %.2f s = "
              "%.1f%% of a core; %.1f us per heartbeat, %.2f us per task report\n",
              f.fake_workers, f.slots, submitted->job_id().c_str(), job.tasks_size(),
              v1::JobState_Name(job.state()).c_str(), rounds, secs,
              static_cast<double>(rounds * f.fake_workers) / secs, cpu, 100 * cpu / secs,
              1e6 * cpu / static_cast<double>(rounds * f.fake_workers),
              1e6 * cpu / static_cast<double>(rounds * tasks));
  std::printf("dashboard API with %d tasks:%s\n", job.tasks_size(), api.c_str());
  return 0;
}

}  // namespace
}  // namespace caravela

int main(int argc, char** argv) {
  caravela::Flags f;
  CLI::App app("Caravela cluster benchmark: broker, coordinator and workers as processes");
  app.add_option("--mode", f.mode, "throughput | single | failover | idle | rescale")
      ->capture_default_str();
  app.add_option("--exchange", f.exchange, "Exchange transport: network | kafka")
      ->check(CLI::IsMember({"network", "kafka"}))
      ->capture_default_str();
  app.add_option("--workers", f.workers, "Worker processes (throughput)")->capture_default_str();
  app.add_option("--purchases", f.purchases, "Distinct purchases produced")->capture_default_str();
  app.add_option("--partitions", f.partitions, "Partitions of the input topic")
      ->capture_default_str();
  app.add_option("--parallelism", f.parallelism, "Tasks per stage")->capture_default_str();
  app.add_option("--fake-workers", f.fake_workers, "Simulated workers (idle)")
      ->capture_default_str();
  app.add_option("--slots", f.slots, "Tasks per simulated worker (idle)")->capture_default_str();
  app.add_option("--seconds", f.seconds, "Measured time (idle)")->capture_default_str();
  app.add_option("--dir", f.dir, "Working directory (default: a new temp dir, removed)");
  CLI11_PARSE(app, argc, argv);
  const bool temp = f.dir.empty();
  if (temp) {
    f.dir = (std::filesystem::temp_directory_path() /
             absl::StrCat("caravela-cluster-bench-", ::getpid()))
                .string();
  }
  std::filesystem::create_directories(f.dir);
  int rc = 2;
  if (f.mode == "throughput") rc = caravela::Throughput(f);
  if (f.mode == "failover") rc = caravela::Failover(f);
  if (f.mode == "idle") rc = caravela::Idle(f);
  if (f.mode == "single") rc = caravela::Single(f);
  if (f.mode == "rescale") rc = caravela::Rescale(f);
  if (rc == 2) std::fprintf(stderr, "unknown --mode %s\n", f.mode.c_str());
  if (temp && rc == 0) std::filesystem::remove_all(f.dir);
  return rc;
}
