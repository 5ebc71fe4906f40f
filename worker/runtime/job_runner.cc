#include "worker/runtime/job_runner.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <limits>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/failpoint.h"
#include "common/logging.h"
#include "common/sink_kind.h"
#include "common/source_kind.h"
#include "common/time_util.h"
#include "proto/grpc_support.h"
#include "spdlog/spdlog.h"
#include "worker/checkpoint/checkpoint_coordinator.h"
#include "worker/checkpoint/checkpoint_storage.h"
#include "worker/checkpoint/job_savepoint.h"
#include "worker/connectors/embedded_broker.h"
#include "worker/exchange/exchange.h"
#include "worker/exchange/network_exchange.h"
#include "worker/runtime/job_checkpoints.h"

namespace caravela {
namespace {

std::shared_ptr<spdlog::logger> Log() { return RuntimeLogger(); }

// Outstanding exchange bytes per partition before a writer waits for its
// readers (the embedded broker keeps ~5 MiB per partition; in memory it
// bounds the queue).
constexpr int64_t kExchangeFlowLimitBytes = 2 << 20;

// The job's commit record: "checkpoint=N\ntasks=T\nparallelism=P\n".
struct JobRecord {
  int64_t checkpoint = 0;
  int tasks = 0;
  int parallelism = 0;
};

std::string EncodeJobRecord(const JobRecord& r) {
  return absl::StrCat("checkpoint=", r.checkpoint, "\ntasks=", r.tasks,
                      "\nparallelism=", r.parallelism, "\n");
}

bool DecodeJobRecord(absl::string_view text, JobRecord* r) {
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    std::pair<std::string, std::string> kv = absl::StrSplit(line, absl::MaxSplits('=', 1));
    int64_t v = 0;
    if (!absl::SimpleAtoi(kv.second, &v)) return false;
    if (kv.first == "checkpoint") r->checkpoint = v;
    if (kv.first == "tasks") r->tasks = static_cast<int>(v);
    if (kv.first == "parallelism") r->parallelism = static_cast<int>(v);
  }
  return r->checkpoint > 0;
}

}  // namespace

struct JobRunner::Impl {
  JobSpec spec;
  RunOptions options;
  MetricsRegistry* metrics = nullptr;
  bool parallel = false;
  bool replay = false;  // arrival-driven: lockstep on one thread (RunReplay)
  int parallelism = 1;
  std::unique_ptr<EmbeddedBroker> broker;  // exchanges of a job that names no cluster
  std::unique_ptr<CheckpointStorage> storage;
  std::string record_key;
  int64_t epoch = 0;
  int64_t restore_id = 0;
  int restore_parallelism = 0;  // the restored checkpoint's, if another (a rescale)
  std::unique_ptr<JobCheckpoints> job;
  std::vector<std::unique_ptr<ExchangeFlowControl>> flows;
  std::vector<std::unique_ptr<MemoryExchange>> memory;
  // --exchange network: the tasks stream to themselves over gRPC on
  // loopback, as tasks on different workers do (tests, benchmarks).
  std::unique_ptr<NetworkExchange> network;
  GrpcServer server;
  std::atomic<bool> cancel{false};

  ~Impl() {
    if (server.server != nullptr) {
      server.server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
    }
  }

  // Ends every wait of a writer on a reader (a task failed).
  void AbortExchanges() {
    for (auto& f : flows) f->Abort();
    for (auto& m : memory) m->Abort();
    cancel = true;
  }
};

JobRunner::~JobRunner() = default;

std::string JobKafkaBootstrap(const JobSpec& spec, const std::string& embedded_bootstrap) {
  for (const SourceSpec& ss : spec.sources) {
    const std::optional<std::string> bootstrap = ss.kind->KafkaBootstrap(ss);
    if (bootstrap.has_value() && !bootstrap->empty()) return *bootstrap;
  }
  for (const SinkSpec& ss : spec.sinks) {
    const std::optional<std::string> bootstrap = ss.kind->KafkaBootstrap(ss);
    if (bootstrap.has_value() && !bootstrap->empty()) return *bootstrap;
  }
  return embedded_bootstrap;
}

absl::StatusOr<SourcePartitions> QuerySourcePartitions(const JobSpec& spec,
                                                       const std::string& embedded_bootstrap) {
  SourcePartitions out;
  for (const SourceSpec& ss : spec.sources) {
    if (!ss.kind->partitioned_log()) continue;
    absl::StatusOr<int> count = ss.kind->PartitionCount(ss, embedded_bootstrap);
    if (absl::IsNotFound(count.status())) {
      // Not created yet: the source waits for it (count unknown).
      Log()->info("source {}: {}; it waits for it", ss.name, std::string(count.status().message()));
      continue;
    }
    if (!count.ok()) {
      const absl::Status& st = count.status();
      return absl::Status(st.code(), absl::StrCat("source ", ss.name, ": ", st.message()));
    }
    out[ss.name] = *count;
  }
  return out;
}

absl::StatusOr<std::unique_ptr<JobRunner>> JobRunner::Create(const JobSpec& spec,
                                                             const RunOptions& options,
                                                             MetricsRegistry* metrics) {
  LogContext log_context(spec.name);
  std::unique_ptr<JobRunner> r(new JobRunner());
  r->impl_ = std::make_unique<Impl>();
  Impl& im = *r->impl_;
  im.spec = spec;
  im.options = options;
  im.metrics = metrics;
  im.parallelism = options.parallelism > 0 ? options.parallelism : spec.parallelism;
  SourcePartitions partitions;
  if (im.parallelism > 1) {
    ASSIGN_OR_RETURN(partitions, QuerySourcePartitions(spec, options.embedded_bootstrap));
  }
  ASSIGN_OR_RETURN(r->plan_, PlanJob(spec, im.parallelism, partitions));
  for (const StagePlan& st : r->plan_.stages) im.parallel = im.parallel || st.tasks > 1;
  if (!im.parallel && spec.checkpoint.interval > 0 && options.from_savepoint.empty()) {
    // Checkpoints of a parallel run: one task per stage continues them (a
    // rescale to 1), in the job's layout, instead of one task for the job.
    ASSIGN_OR_RETURN(std::unique_ptr<CheckpointStorage> storage,
                     OpenCheckpointStorage(CheckpointStorageUrl(spec, options.data_dir)));
    ASSIGN_OR_RETURN(im.parallel, storage->Exists(spec.name + "/job-checkpoint"));
    if (im.parallel) {
      ASSIGN_OR_RETURN(partitions, QuerySourcePartitions(spec, options.embedded_bootstrap));
      ASSIGN_OR_RETURN(r->plan_, PlanJob(spec, im.parallelism, partitions));
    }
  }
  if (!im.parallel) {
    // Every stage has one task: the whole job is one task, no exchange.
    ASSIGN_OR_RETURN(auto t, Task::Create(spec, options, TaskPlacement{}, metrics));
    r->tasks_.push_back(std::move(t));
    return r;
  }
  if ((!options.from_savepoint.empty() || !options.savepoint_on_stop.empty()) &&
      spec.checkpoint.interval <= 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "savepoints of a job with parallelism ", im.parallelism,
        " are copies of its checkpoints: give it spec.checkpoint (or run with --parallelism 1)"));
  }
  for (size_t i = 0; i < spec.sinks.size(); ++i) {
    const SinkSpec& sink = spec.sinks[i];
    if (std::string why = sink.kind->WhyNotParallel(sink, im.parallelism); !why.empty()) {
      return absl::UnimplementedError(absl::StrCat("spec.sinks[", i, "].", why));
    }
  }

  // Arrival-driven jobs (replays) run in lockstep on one thread: processing
  // time is simulated, so results do not depend on the parallelism.
  im.replay = ArrivalDriven(spec);
  if (im.replay && spec.checkpoint.interval > 0) {
    return absl::UnimplementedError(absl::StrCat(
        "spec.checkpoint with arrival_field sources and parallelism ", im.parallelism,
        " is not supported yet: a replay in arrival order runs its tasks in lockstep without "
        "checkpoints; run it with --parallelism 1 or without spec.checkpoint"));
  }
  // The Kafka cluster that carries the exchanges: the job's (the first
  // bootstrap it names), else the embedded one. In memory: none (always for
  // replays: one thread writes and reads).
  const bool kafka_exchange = options.exchange == RunOptions::Exchange::kKafka && !im.replay;
  const bool network_exchange = options.exchange == RunOptions::Exchange::kNetwork && !im.replay &&
                                !r->plan_.exchanges.empty();
  std::vector<std::string> task_addresses;
  if (network_exchange) {
    ASSIGN_OR_RETURN(im.network, NetworkExchange::Create({}));
    ASSIGN_OR_RETURN(im.server, StartGrpcServer("127.0.0.1:0", grpc::InsecureServerCredentials(),
                                                {im.network->service()}, 64 << 20));
    task_addresses.assign(static_cast<size_t>(r->plan_.total_tasks()), im.server.address);
  }
  std::string bootstrap;
  if (kafka_exchange) {
    bootstrap = JobKafkaBootstrap(spec, options.embedded_bootstrap);
    if (bootstrap.empty()) {
      ASSIGN_OR_RETURN(im.broker, EmbeddedBroker::Start(0, EmbeddedBroker::kAutoCreatePartitions));
      bootstrap = im.broker->bootstrap();
      Log()->info("embedded Kafka broker for exchanges at {}", bootstrap);
    }
  }

  // Epoch and the job's last complete checkpoint.
  const int total_tasks = r->plan_.total_tasks();
  if (spec.checkpoint.interval > 0) {
    const std::string url = CheckpointStorageUrl(spec, options.data_dir);
    ASSIGN_OR_RETURN(im.storage, OpenCheckpointStorage(url));
    const std::string prefix = spec.name + "/";
    ASSIGN_OR_RETURN(std::optional<int64_t> job_epoch, ReadEpoch(*im.storage, prefix + "epoch"));
    // A standalone run of the same job counted its epochs under task-0.
    ASSIGN_OR_RETURN(std::optional<int64_t> task0_epoch,
                     ReadEpoch(*im.storage, prefix + "task-0/epoch"));
    im.epoch = std::max(job_epoch.value_or(0), task0_epoch.value_or(0)) + 1;
    RETURN_IF_ERROR(im.storage->Write(prefix + "epoch", std::to_string(im.epoch)));
    im.record_key = prefix + "job-checkpoint";
    ASSIGN_OR_RETURN(bool has_record, im.storage->Exists(im.record_key));
    if (has_record) {
      ASSIGN_OR_RETURN(std::string text, im.storage->Read(im.record_key));
      JobRecord rec;
      if (!DecodeJobRecord(text, &rec)) {
        return absl::DataLossError(
            absl::StrCat("corrupt job checkpoint record ", url, "/", im.record_key));
      }
      if (rec.parallelism != im.parallelism) {
        // A rescale: every task gathers its partitions and keys from the
        // tasks of the checkpoint's layout (worker/runtime/task_rescale.cc).
        im.restore_parallelism = rec.parallelism;
        Log()->info("checkpoint {} was taken with parallelism {}: rescaling to {}", rec.checkpoint,
                    rec.parallelism, im.parallelism);
      } else if (rec.tasks != total_tasks) {
        return absl::FailedPreconditionError(absl::StrCat(
            "checkpoint ", rec.checkpoint, " of job ", spec.name, " was taken with ", rec.tasks,
            " tasks; the same parallelism now plans ", total_tasks,
            " (a source's partition count changed?): start from scratch with another --data-dir"));
      }
      im.restore_id = rec.checkpoint;
    }
    if (!options.from_savepoint.empty()) RETURN_IF_ERROR(r->ImportSavepoint(url));
  }

  for (const ExchangePlan& ex : r->plan_.exchanges) {
    if (kafka_exchange) {
      RETURN_IF_ERROR(
          EnsureExchangeTopic(bootstrap, ex.topic, ex.partitions, ex.CreatePartitions(r->plan_)));
      im.flows.push_back(
          std::make_unique<ExchangeFlowControl>(ex.partitions, kExchangeFlowLimitBytes));
    } else if (!network_exchange) {
      // A replay's single thread must never wait on a full queue.
      im.memory.push_back(std::make_unique<MemoryExchange>(
          ex.topic, ex.partitions,
          im.replay ? std::numeric_limits<int64_t>::max() : kExchangeFlowLimitBytes));
    }
  }
  im.job = std::make_unique<JobCheckpoints>(total_tasks);

  // Every task (readers included) is created before any runs: readers start
  // at the exchanges' log end, before a writer of this epoch writes.
  RunOptions task_options = options;
  task_options.progress_interval_ms = 0;
  // Job savepoints are the runner's (one task's savepoint is the standalone
  // layout).
  task_options.from_savepoint.clear();
  task_options.savepoint_on_stop.clear();
  // One RocksDB memory budget for every task of the process (SPEC §6).
  if (task_options.state_budget == nullptr) {
    task_options.state_budget = NewStateMemoryBudget(kStateBlockCacheBytes, kStateWriteBufferBytes);
  }
  int global_id = 0;
  for (const StagePlan& st : r->plan_.stages) {
    for (int i = 0; i < st.tasks; ++i) {
      TaskPlacement pl;
      pl.plan = &r->plan_;
      pl.stage = st.id;
      pl.index = i;
      pl.global_id = global_id++;
      pl.epoch = im.epoch;
      pl.exchange_bootstrap = bootstrap;
      for (auto& f : im.flows) pl.flow.push_back(f.get());
      for (auto& m : im.memory) pl.memory.push_back(m.get());
      pl.checkpoints = im.job.get();
      pl.source_partitions = partitions;
      pl.restore_checkpoint = im.restore_id;
      pl.restore_parallelism = im.restore_parallelism;
      pl.replay = im.replay;
      if (network_exchange) {
        pl.network = im.network.get();
        pl.task_addresses = task_addresses;
        pl.job_id = spec.name;
        pl.cancel = &im.cancel;
      }
      auto t = Task::Create(spec, task_options, std::move(pl), metrics);
      if (!t.ok()) {
        return absl::Status(t.status().code(),
                            absl::StrCat("stage ", st.id, " task ", i, ": ", t.status().message()));
      }
      r->tasks_.push_back(std::move(*t));
    }
  }
  Log()->info("{} tasks in {} stages, {} exchanges ({}), epoch {}{}", total_tasks,
              r->plan_.stages.size(), r->plan_.exchanges.size(),
              kafka_exchange     ? "Kafka at " + bootstrap
              : network_exchange ? "gRPC streams at " + im.server.address
                                 : std::string("in memory"),
              im.epoch,
              im.restore_id > 0 ? absl::StrCat(", restored checkpoint ", im.restore_id) : "");
  if (im.restore_id > 0) metrics->Get("restores_total")->Add();
  return r;
}

int64_t JobRunner::records_in() const {
  int64_t n = 0;
  for (const auto& t : tasks_) n += t->records_in();
  return n;
}

int64_t JobRunner::records_out() const {
  int64_t n = 0;
  for (const auto& t : tasks_) n += t->records_out();
  return n;
}

absl::Status JobRunner::Run() {
  Impl& im = *impl_;
  LogContext log_context(im.spec.name);
  if (!im.parallel) return tasks_[0]->Run();
  if (im.replay) return RunReplay();
  JobCheckpoints& job = *im.job;
  std::vector<std::thread> threads;
  std::vector<std::atomic<bool>> done(tasks_.size());
  for (auto& d : done) d.store(false);
  for (size_t i = 0; i < tasks_.size(); ++i) {
    threads.emplace_back([this, &job, &done, i] {
      LogContext task_context(impl_->spec.name, tasks_[i]->log_label());
      absl::Status st = tasks_[i]->Run();
      if (!st.ok()) {
        Log()->error("task {} failed: {}", tasks_[i]->name(), std::string(st.message()));
        job.Fail(absl::Status(st.code(), absl::StrCat(tasks_[i]->name(), ": ", st.message())));
        impl_->AbortExchanges();
      }
      done[i].store(true);
    });
  }

  using Clock = std::chrono::steady_clock;
  const Clock::time_point started = Clock::now();
  auto now_ms = [started] {
    return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - started).count();
  };
  CheckpointCoordinatorOptions checkpoint_options;
  checkpoint_options.tasks = static_cast<int>(tasks_.size());
  checkpoint_options.interval_ms =
      im.storage != nullptr ? std::max<int64_t>(1, im.spec.checkpoint.interval) : 0;
  checkpoint_options.timeout_ms = kCheckpointTimeoutMs;
  CheckpointCoordinator coordinator(checkpoint_options);
  // Above every id a task used: a crashed run may have stored checkpoints
  // that never completed job-wide (they are skipped, never reused).
  int64_t next_id = im.restore_id + 1;
  for (const auto& t : tasks_) next_id = std::max(next_id, t->next_checkpoint_id());
  coordinator.Start(now_ms(), next_id);
  auto last_progress = Clock::now();
  int64_t last_in = 0;
  auto all_done = [&] {
    return std::all_of(done.begin(), done.end(), [](const auto& d) { return d.load(); });
  };
  while (!all_done()) {
    if (job.failed()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
      continue;
    }
    // A stop makes the next checkpoint the last (without checkpoints: ends).
    if (im.options.stop != nullptr && im.options.stop->load()) coordinator.RequestStop();
    for (int i = 0; i < job.tasks(); ++i) {
      coordinator.TaskStored(i, job.stored(i));
      coordinator.TaskDrained(i, job.drained(i));
    }
    for (CheckpointAction a = coordinator.Poll(now_ms());
         a.kind != CheckpointAction::kNone && !job.failed(); a = coordinator.Poll(now_ms())) {
      switch (a.kind) {
        case CheckpointAction::kTrigger:
          // The last checkpoint (input drained or stop) ends the job.
          job.Trigger(a.id, a.stop);
          break;
        case CheckpointAction::kComplete: {
          // Every task stored it: the job's record is the commit point.
          JobRecord rec{a.id, static_cast<int>(tasks_.size()), im.parallelism};
          if (absl::Status st = im.storage->Write(im.record_key, EncodeJobRecord(rec)); !st.ok()) {
            job.Fail(st);
            break;
          }
          Failpoint("checkpoint.after_job_record");
          im.metrics->Get("job_checkpoints_total")->Add();
          im.metrics->Get("job_checkpoint_last_id")->Set(a.id);
          im.metrics->Get("job_checkpoint_last_duration_ms")->Set(a.duration_ms);
          im.metrics->Get("job_checkpoint_last_completed_timestamp_ms")->Set(SystemClock().NowMs());
          Log()->debug("checkpoint {} complete on {} tasks in {} ms", a.id, tasks_.size(),
                       a.duration_ms);
          job.Complete(a.id);
          break;
        }
        case CheckpointAction::kFinish:
          job.Finish();
          break;
        case CheckpointAction::kFail:
          // The tasks stop as for a failed task.
          job.Fail(absl::DeadlineExceededError(a.why));
          im.AbortExchanges();
          break;
        case CheckpointAction::kNone:
          break;
      }
    }
    if (im.options.progress_interval_ms > 0 && im.options.progress_out != nullptr &&
        Clock::now() - last_progress >=
            std::chrono::milliseconds(im.options.progress_interval_ms)) {
      const double secs = std::chrono::duration<double>(Clock::now() - last_progress).count();
      const int64_t in = records_in();
      // The total, then per task: records in and watermark; the task that
      // holds the job's watermark back is named.
      size_t slowest = 0;
      std::string per_task;
      for (size_t i = 0; i < tasks_.size(); ++i) {
        const int64_t wm = tasks_[i]->watermark();
        if (wm < tasks_[slowest]->watermark()) slowest = i;
        absl::StrAppend(&per_task, " ", i, ":", tasks_[i]->records_in());
      }
      const int64_t low = tasks_[slowest]->watermark();
      std::fprintf(im.options.progress_out,
                   "[caravela] %zu tasks in=%lld out=%lld rate=%.0f ev/s checkpoint=%lld "
                   "watermark=%s (task %s) in per task:%s\n",
                   tasks_.size(), static_cast<long long>(in), static_cast<long long>(records_out()),
                   static_cast<double>(in - last_in) / std::max(secs, 1e-3),
                   static_cast<long long>(job.completed()), FormatWatermark(low).c_str(),
                   tasks_[slowest]->name().c_str(), per_task.c_str());
      for (const auto& t : tasks_) {
        const std::string label = absl::StrCat("task=\"", t->name(), "\"");
        im.metrics->Get("task_records_in_total", label)->Set(t->records_in());
        im.metrics->Get("task_records_out_total", label)->Set(t->records_out());
        im.metrics->Get("task_watermark_ms", label)->Set(t->watermark());
      }
      std::fflush(im.options.progress_out);
      last_in = in;
      last_progress = Clock::now();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  for (auto& t : threads) t.join();
  RETURN_IF_ERROR(job.error());
  if (!im.options.savepoint_on_stop.empty()) {
    // The job's last checkpoint (input drained or stopped) is the savepoint.
    JobCheckpointRef ref;
    ref.storage_url = CheckpointStorageUrl(im.spec, im.options.data_dir);
    ref.job_name = im.spec.name;
    ref.tasks = static_cast<int>(tasks_.size());
    ref.parallelism = im.parallelism;
    ref.checkpoint_id = job.completed();
    ASSIGN_OR_RETURN(JobSavepoint sp, WriteJobSavepoint(ref, im.options.savepoint_on_stop));
    im.metrics->Get("savepoints_total")->Add();
    Log()->info("savepoint of checkpoint {} written to {}", sp.checkpoint_id(),
                im.options.savepoint_on_stop);
  }
  return absl::OkStatus();
}

absl::Status JobRunner::ImportSavepoint(const std::string& storage_url) {
  Impl& im = *impl_;
  const std::string& dir = im.options.from_savepoint;
  if (std::filesystem::exists(std::filesystem::path(dir) / "savepoint.manifest")) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the savepoint in ", dir, " is a one-task job's: run it with --parallelism 1"));
  }
  ASSIGN_OR_RETURN(JobSavepoint sp, ReadJobSavepoint(dir));
  if (std::vector<SpecError> misfit = CheckSavepointFits(sp, dir, im.spec); !misfit.empty()) {
    std::vector<std::string> lines;
    lines.reserve(misfit.size());
    for (const SpecError& e : misfit) lines.push_back(e.ToString());
    return absl::FailedPreconditionError(absl::StrJoin(lines, "; "));
  }
  RETURN_IF_ERROR(ImportJobSavepoint(dir, sp, storage_url));
  im.restore_id = sp.checkpoint_id();
  im.restore_parallelism = sp.parallelism() != im.parallelism ? sp.parallelism() : 0;
  // Above the epochs the savepoint's job wrote with.
  if (sp.epoch() >= im.epoch) {
    im.epoch = sp.epoch() + 1;
    RETURN_IF_ERROR(im.storage->Write(im.spec.name + "/epoch", std::to_string(im.epoch)));
  }
  Log()->info("starting from the savepoint in {} (checkpoint {}, parallelism {})", dir,
              sp.checkpoint_id(), sp.parallelism());
  return absl::OkStatus();
}

absl::Status JobRunner::RunReplay() {
  // The loop of a single task in arrival mode (Task::Impl::RunArrivalMode),
  // each of its steps swept over the tasks in stage (topological) order, so
  // every stage applies what the previous ones sent in the same step before
  // its own part of it.
  const int sources = static_cast<int>(impl_->spec.sources.size());
  std::vector<bool> finished(static_cast<size_t>(sources), false);
  auto sweep = [&](Task::ReplayPhase phase, int64_t now, int source) -> absl::Status {
    for (auto& t : tasks_) RETURN_IF_ERROR(t->ReplaySweep(phase, now, source));
    return absl::OkStatus();
  };
  int64_t now = kMinTime;
  for (;;) {
    int best = -1;
    int64_t t_next = kMaxTime;
    for (int s = 0; s < sources; ++s) {
      if (finished[s]) continue;
      int64_t next = kMaxTime;
      for (auto& t : tasks_) {
        ASSIGN_OR_RETURN(int64_t a, t->ReplayNextArrival(s));
        next = std::min(next, a);
      }
      if (next == kMaxTime) {
        // Ends when every task of it is drained, as one task's source would.
        finished[s] = true;
        for (auto& t : tasks_) t->ReplayFinishSource(s);
        continue;
      }
      if (best < 0 || next < t_next) {
        best = s;
        t_next = next;
      }
    }
    if (best < 0) break;
    int64_t timer = kMaxTime;
    for (auto& t : tasks_) timer = std::min(timer, t->ReplayNextTimer());
    if (timer <= t_next) {
      now = timer;
      RETURN_IF_ERROR(sweep(Task::ReplayPhase::kWatermarks, now, -1));
      RETURN_IF_ERROR(sweep(Task::ReplayPhase::kTimers, now, -1));
      continue;
    }
    now = t_next;
    RETURN_IF_ERROR(sweep(Task::ReplayPhase::kApply, now, best));
    RETURN_IF_ERROR(sweep(Task::ReplayPhase::kWatermarks, now, -1));
    RETURN_IF_ERROR(sweep(Task::ReplayPhase::kTimers, now, -1));
  }
  // Input drained: the end-of-input watermark (+inf) fires everything.
  RETURN_IF_ERROR(sweep(Task::ReplayPhase::kWatermarks, now, -1));
  for (auto& t : tasks_) RETURN_IF_ERROR(t->ReplayClose());
  return absl::OkStatus();
}

}  // namespace caravela
