#include "worker/runtime/job_part.h"

#include <condition_variable>
#include <filesystem>
#include <mutex>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/job_plan.h"
#include "common/job_spec.h"
#include "common/logging.h"
#include "spdlog/spdlog.h"
#include "worker/checkpoint/job_savepoint.h"
#include "worker/exchange/exchange.h"
#include "worker/registry/builtin_kinds.h"
#include "worker/runtime/job_checkpoints.h"
#include "worker/runtime/job_runner.h"
#include "worker/runtime/task.h"

namespace caravela {

struct JobPart::Impl {
  JobPartOptions part;
  RunOptions options;
  // The worker's registry under this job's labels (job_id, job_name).
  std::unique_ptr<MetricsRegistry> metrics;
  JobSpec spec;
  JobPlan plan;  // tasks point into it
  std::unique_ptr<JobCheckpoints> job;
  std::vector<std::unique_ptr<Task>> tasks;  // in part.tasks order, once prepared

  mutable std::mutex mu;
  std::condition_variable cv;
  std::vector<TaskState> states;
  bool prepared = false;
  bool run = false;
  bool stop = false;
  std::atomic<bool> cancel{false};  // ends exchange writers' waits
  std::thread main;

  ~Impl() {
    // Tasks go before the plan and the checkpoint signals they point to.
    tasks.clear();
  }

  std::string Name() const { return absl::StrCat(part.job_id, " epoch ", part.epoch); }

  void FailAll(const absl::Status& st) {
    std::lock_guard<std::mutex> lock(mu);
    for (TaskState& s : states) {
      s.phase = Phase::kFailed;
      s.error = std::string(st.message());
      s.permanent = IsPermanentFailure(st);
    }
  }

  absl::Status Prepare() {
    ParseResult parsed = ParseJobSpec(part.yaml);
    if (!parsed.ok()) {
      std::vector<std::string> errors;
      errors.reserve(parsed.errors.size());
      for (const SpecError& e : parsed.errors) errors.push_back(e.path + ": " + e.message);
      return absl::InvalidArgumentError(absl::StrJoin(errors, "; "));
    }
    spec = std::move(parsed.spec);
    // The job from the network may only touch what this worker allows.
    std::vector<std::string> allowed = part.allowed_paths;
    if (!part.shared_dir.empty()) allowed.push_back(part.shared_dir);
    if (std::vector<SpecError> refused = CheckAllowedPaths(spec, allowed); !refused.empty()) {
      return absl::PermissionDeniedError(
          absl::StrCat("refused by this worker: ", JoinSpecErrors(refused)));
    }
    if (part.shared_dir.empty()) {
      // Each worker's disk is its own: a relative path would scatter the
      // job's files over the workers.
      if (std::vector<SpecError> relative = RelativeFilePaths(spec); !relative.empty()) {
        return absl::InvalidArgumentError(absl::StrCat(
            JoinSpecErrors(relative),
            ": relative paths of a cluster job resolve against the workers' shared directory, "
            "and this worker has none: start the workers with --shared-dir DIR (or "
            "CARAVELA_SHARED_DIR), a directory every worker mounts at the same path, or give "
            "absolute paths under an --allow-path directory"));
      }
    } else {
      spec.ResolvePaths(part.shared_dir);
      if (spec.dead_letter_path.empty()) {
        spec.dead_letter_path =
            (std::filesystem::path(part.shared_dir) / part.job_id / "dead-letter.jsonl").string();
      }
    }
    if (spec.checkpoint.storage.empty()) spec.checkpoint.storage = part.checkpoint_storage;
    if (!spec.checkpoint.storage.empty()) {
      // One job instance, one place: a resubmitted job of the same name
      // starts fresh.
      spec.checkpoint.storage = JobInstanceStorage(spec.checkpoint.storage, part.job_id);
    }
    ASSIGN_OR_RETURN(SourcePartitions partitions,
                     QuerySourcePartitions(spec, options.embedded_bootstrap));
    ASSIGN_OR_RETURN(plan, PlanClusterJob(spec, part.parallelism, partitions));
    const std::string bootstrap = JobKafkaBootstrap(spec, options.embedded_bootstrap);
    // Exchanges stream between workers (the default) unless the job asks
    // for Kafka topics (spec.exchange: kafka).
    const bool network = spec.exchange != "kafka" && part.network != nullptr;
    if (!network && !plan.exchanges.empty()) {
      if (bootstrap.empty()) {
        return absl::FailedPreconditionError(
            "the job's Kafka exchanges (spec.exchange: kafka) need a Kafka cluster: name one in a "
            "source or sink, or start the worker with --bootstrap");
      }
      for (const ExchangePlan& ex : plan.exchanges) {
        RETURN_IF_ERROR(
            EnsureExchangeTopic(bootstrap, ex.topic, ex.partitions, ex.CreatePartitions(plan)));
      }
    }
    job = std::make_unique<JobCheckpoints>(plan.total_tasks());
    if (options.state_budget == nullptr) {
      options.state_budget = NewStateMemoryBudget(kStateBlockCacheBytes, kStateWriteBufferBytes);
    }
    std::vector<std::unique_ptr<Task>> created;
    for (int g : part.tasks) {
      TaskPlacement pl;
      pl.plan = &plan;
      int first = 0;
      for (const StagePlan& st : plan.stages) {
        if (g < first + st.tasks) {
          pl.stage = st.id;
          pl.index = g - first;
          break;
        }
        first += st.tasks;
      }
      if (g < 0 || g >= plan.total_tasks()) {
        return absl::InvalidArgumentError(
            absl::StrCat("task ", g, " is not in the job's plan (", plan.total_tasks(), " tasks)"));
      }
      pl.global_id = g;
      pl.epoch = part.epoch;
      pl.exchange_bootstrap = bootstrap;
      pl.flow.assign(plan.exchanges.size(), nullptr);
      pl.memory.assign(plan.exchanges.size(), nullptr);
      pl.checkpoints = job.get();
      pl.source_partitions = partitions;
      pl.restore_checkpoint = part.restore_checkpoint;
      pl.restore_parallelism = part.restore_parallelism;
      pl.fence_sinks = true;
      // A replay in arrival order runs in one task (WhyNotClusterParallelism):
      // its processing time is the records' arrival times, as in `caravela run`.
      pl.replay = plan.total_tasks() == 1 && ArrivalDriven(spec);
      if (network) {
        pl.network = part.network;
        pl.task_addresses = part.task_addresses;
      }
      pl.job_id = part.job_id;
      pl.group_flow = !network;
      pl.cancel = &cancel;
      auto t = Task::Create(spec, options, std::move(pl), metrics.get());
      if (!t.ok()) {
        return absl::Status(t.status().code(),
                            absl::StrCat("task ", g, ": ", t.status().message()));
      }
      created.push_back(std::move(*t));
    }
    std::lock_guard<std::mutex> lock(mu);
    tasks = std::move(created);
    prepared = true;
    for (size_t i = 0; i < tasks.size(); ++i) {
      states[i].phase = Phase::kReady;
      states[i].next_checkpoint = tasks[i]->next_checkpoint_id();
    }
    return absl::OkStatus();
  }

  void Main() {
    LogContext log_context(Name());
    absl::Status st = Prepare();
    if (!st.ok()) {
      RuntimeLogger()->error("cannot prepare tasks {}: {}", absl::StrJoin(part.tasks, ","),
                             std::string(st.message()));
      FailAll(st);
      return;
    }
    RuntimeLogger()->info("tasks {} ready{}", absl::StrJoin(part.tasks, ","),
                          part.restore_checkpoint > 0
                              ? absl::StrCat(" (restored checkpoint ", part.restore_checkpoint, ")")
                              : std::string());
    {
      std::unique_lock<std::mutex> lock(mu);
      cv.wait(lock, [&] { return run || stop; });
      if (stop) return;
      for (TaskState& s : states) s.phase = Phase::kRunning;
    }
    std::vector<std::thread> threads;
    for (size_t i = 0; i < tasks.size(); ++i) {
      threads.emplace_back([this, i] {
        LogContext task_context(Name(), tasks[i]->log_label());
        absl::Status r = tasks[i]->Run();
        if (!r.ok()) {
          bool stopping;
          {
            std::lock_guard<std::mutex> lock(mu);
            stopping = stop;
          }
          if (!stopping) {
            RuntimeLogger()->error("task {} failed: {}", part.tasks[i], std::string(r.message()));
          }
          // The job restarts from its last checkpoint: the others stop too.
          job->Fail(r);
          cancel = true;
        }
        std::lock_guard<std::mutex> lock(mu);
        states[i].phase = r.ok() ? Phase::kDone : Phase::kFailed;
        states[i].error = std::string(r.message());
      });
    }
    for (std::thread& t : threads) t.join();
  }
};

bool IsPermanentFailure(const absl::Status& st) {
  switch (st.code()) {
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kPermissionDenied:
    case absl::StatusCode::kNotFound:
    case absl::StatusCode::kUnimplemented:
      return true;
    default:
      return false;
  }
}

std::unique_ptr<JobPart> JobPart::Start(JobPartOptions part, RunOptions options,
                                        MetricsRegistry* metrics) {
  std::unique_ptr<JobPart> p(new JobPart());
  p->impl_ = std::make_unique<Impl>();
  Impl& im = *p->impl_;
  options.data_dir = absl::StrCat(options.data_dir, "/", part.job_id);
  options.exchange = RunOptions::Exchange::kKafka;
  options.progress_interval_ms = 0;
  im.options = std::move(options);
  im.metrics = std::make_unique<MetricsRegistry>(
      metrics, absl::StrCat("job_id=\"", part.job_id, "\",job_name=\"", part.job_name, "\""));
  for (int g : part.tasks) {
    TaskState s;
    s.task = g;
    im.states.push_back(s);
  }
  im.part = std::move(part);
  im.main = std::thread([&im] { im.Main(); });
  return p;
}

JobPart::~JobPart() { Stop(); }

const std::string& JobPart::job_id() const { return impl_->part.job_id; }
MetricsRegistry* JobPart::metrics() const { return impl_->metrics.get(); }

int64_t JobPart::epoch() const { return impl_->part.epoch; }

void JobPart::Run() {
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    if (impl_->run) return;
    impl_->run = true;
  }
  impl_->cv.notify_all();
}

void JobPart::Signal(int64_t trigger, bool stop_at_trigger, int64_t completed, bool finish) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  JobCheckpoints* job = impl_->prepared ? impl_->job.get() : nullptr;
  if (job == nullptr) return;
  if (trigger > job->triggered()) job->Trigger(trigger, stop_at_trigger);
  if (completed > job->completed()) job->Complete(completed);
  if (finish && !job->finished()) job->Finish();
}

std::vector<JobPart::TaskState> JobPart::States() const {
  const Impl& im = *impl_;
  std::lock_guard<std::mutex> lock(im.mu);
  std::vector<TaskState> out = im.states;
  if (!im.prepared) return out;
  for (size_t i = 0; i < out.size(); ++i) {
    const int g = out[i].task;
    out[i].stored_checkpoint = im.job->stored(g);
    if (out[i].phase == Phase::kRunning && im.job->drained(g)) out[i].phase = Phase::kDrained;
    out[i].records_in = im.tasks[i]->records_in();
    out[i].records_out = im.tasks[i]->records_out();
    out[i].watermark_ms = im.tasks[i]->watermark();
    out[i].consumer_lag = im.tasks[i]->consumer_lag();
    out[i].partitions = im.tasks[i]->partitions();
    out[i].activity = im.tasks[i]->activity();
    out[i].state_bytes = im.tasks[i]->state_bytes();
    out[i].stop_checkpoint = im.job->stop_at();
  }
  return out;
}

void JobPart::Stop() {
  if (impl_ == nullptr) return;
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->stop = true;
    impl_->cancel = true;
    if (impl_->prepared) impl_->job->Fail(absl::CancelledError("stopped by the worker"));
  }
  impl_->cv.notify_all();
  if (impl_->main.joinable()) impl_->main.join();
}

}  // namespace caravela
