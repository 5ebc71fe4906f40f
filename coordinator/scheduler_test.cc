// The Scheduler without processes: a ManualClock, a real JobStore in a temp
// dir, workers played by heartbeat requests.
#include "coordinator/scheduler.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "coordinator/fake_worker.h"
#include "coordinator/job_state.h"
#include "coordinator/placement_policy.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/testing/status_testing.h"

namespace caravela {
namespace {

using ::testing::HasSubstr;

// Three stages (source, dedup, window) at parallelism 2: 6 tasks.
constexpr char kYaml[] = R"(apiVersion: caravela/v1
kind: Job
metadata: {name: revenue}
spec:
  parallelism: 2
  checkpoint: {interval: 1s}
  sources:
    - name: purchases
      kafka: {topic: purchases, bootstrap: "127.0.0.1:1", bounded: true}
      key: [user_id]
      event_time: {field: ts}
  operators:
    - name: unique
      dedup: {from: purchases, id: event_id, retention: 1h}
    - name: revenue
      window: {from: unique, tumbling: 1h, group_by: [country], aggregates: [{as: n, count: "*"}]}
  sinks:
    - {from: revenue, file: {path: out/revenue.jsonl}}
)";

class SchedulerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::path(::testing::TempDir()) /
           absl::StrCat("scheduler_test_", ::getpid(), "_",
                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    auto store = JobStore::Open(dir_.string());
    ASSERT_OK(store.status());
    store_ = std::move(*store);
    Restart();
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // A new registry and scheduler over the same store (a coordinator restart).
  void Restart() {
    registry_ = std::make_unique<WorkerRegistry>(&clock_, 1000);
    SchedulerOptions o;
    o.checkpoint_storage = "file:///shared/checkpoints";
    o.placement = placement_;
    o.checkpoint_timeout_ms = checkpoint_timeout_ms_;
    o.max_restarts = max_restarts_;
    o.write_savepoint = [this](const JobCheckpointRef& ref,
                               const std::string& dir) -> absl::StatusOr<JobSavepoint> {
      std::lock_guard<std::mutex> lock(saved_mu_);
      saved_.push_back({ref, dir});
      if (!savepoint_error_.ok()) return savepoint_error_;
      JobSavepoint sp;
      sp.set_checkpoint_id(ref.checkpoint_id);
      return sp;
    };
    scheduler_ = std::make_unique<Scheduler>(store_.get(), registry_.get(), &clock_, o);
    ASSERT_OK(scheduler_->AdoptStored());
  }

  std::string AddWorker(int slots, const std::string& previous = "") {
    v1::RegisterRequest r;
    r.set_slots(slots);
    r.set_previous_id(previous);
    absl::StatusOr<v1::RegisterResponse> registered = registry_->Register(r);
    EXPECT_OK(registered.status());
    if (!registered.ok()) return "";
    sessions_[registered->worker_id()] = registered->session();
    return registered->worker_id();
  }

  std::string Submit() {
    v1::Job job;
    job.set_id(absl::StrCat("revenue-", ++jobs_));
    job.set_name("revenue");
    job.set_state(v1::SUBMITTED);
    job.set_parallelism(2);
    job.set_yaml(kYaml);
    EXPECT_OK(scheduler_->Submit(job));
    return job.id();
  }

  // Submits a job and starts it on `worker`: placed, its tasks READY, then
  // started (RUNNING unless the scheduler refuses it).
  std::string SubmitRunning(const std::string& worker) {
    const std::string id = Submit();
    scheduler_->Tick();
    Beat(worker, v1::TASK_READY);
    scheduler_->Tick();
    return id;
  }

  v1::Job Get(const std::string& id) {
    auto j = store_->Get(id);
    EXPECT_OK(j.status());
    return j.ok() ? *j : v1::Job();
  }

  // One heartbeat of `worker`: every task it was last assigned reports
  // `phase` and `stored` (0: keep what it reported). Returns the answer.
  v1::HeartbeatResponse Beat(const std::string& worker, v1::TaskPhase phase, int64_t stored = -1,
                             const std::string& error = "", bool permanent = false) {
    v1::HeartbeatRequest req;
    req.set_worker_id(worker);
    req.set_session(sessions_[worker]);
    req.set_draining(draining_.count(worker) > 0);
    if (last_[worker].assignments_size() == 0) {
      // Learn the assignment first, as a worker does.
      EXPECT_TRUE(registry_->Heartbeat(req));
      scheduler_->OnHeartbeat(req, &last_[worker]);
    }
    ReportAssigned(last_[worker], phase, &req, stored >= 0 ? stored : stored_[worker]);
    for (v1::TaskReport& r : *req.mutable_tasks()) {
      r.set_next_checkpoint(1);
      r.set_error(error);
      r.set_permanent(permanent);
    }
    if (stored >= 0) stored_[worker] = stored;
    EXPECT_TRUE(registry_->Heartbeat(req));
    v1::HeartbeatResponse resp;
    scheduler_->OnHeartbeat(req, &resp);
    last_[worker] = resp;
    return resp;
  }

  // The job placed on `worker` starts (its tasks READY) and completes
  // checkpoint 1 a second later.
  void StartAndCompleteCheckpoint1(const std::string& worker, const std::string& id) {
    Beat(worker, v1::TASK_READY);
    scheduler_->Tick();
    ASSERT_EQ(Get(id).state(), v1::RUNNING);
    clock_.Advance(1000);
    scheduler_->Tick();
    Beat(worker, v1::TASK_RUNNING, 1);
    scheduler_->Tick();
    ASSERT_EQ(Get(id).last_checkpoint(), 1);
  }

  int Tasks(const v1::HeartbeatResponse& r) {
    int n = 0;
    for (const v1::Assignment& a : r.assignments()) n += a.tasks_size();
    return n;
  }

  std::filesystem::path dir_;
  ManualClock clock_{1'000'000};
  std::unique_ptr<JobStore> store_;
  std::unique_ptr<WorkerRegistry> registry_;
  std::unique_ptr<Scheduler> scheduler_;
  std::map<std::string, v1::HeartbeatResponse> last_;
  std::map<std::string, uint64_t> sessions_;  // by worker id
  std::map<std::string, int64_t> stored_;
  std::set<std::string> draining_;  // workers whose heartbeats say they leave
  int jobs_ = 0;
  std::shared_ptr<const PlacementPolicy> placement_;  // null: the default
  int64_t checkpoint_timeout_ms_ = kCheckpointTimeoutMs;
  int max_restarts_ = 0;
  // What the scheduler asked the savepoint writer for, and its answer.
  std::mutex saved_mu_;
  std::vector<std::pair<JobCheckpointRef, std::string>> saved_;
  absl::Status savepoint_error_;

  // Ticks until the savepoint writer's thread is done and seen.
  void TickUntilSaved(const std::string& id, size_t writes) {
    for (int i = 0; i < 200; ++i) {
      scheduler_->Tick();
      {
        std::lock_guard<std::mutex> lock(saved_mu_);
        if (saved_.size() >= writes && Get(id).savepoint_to().empty()) return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    ADD_FAILURE() << "the savepoint of " << id << " was not written";
  }
};

TEST_F(SchedulerTest, PlacesStartsCheckpointsAndFinishes) {
  const std::string a = AddWorker(2);
  const std::string id = Submit();
  scheduler_->Tick();
  // 6 tasks, 2 slots: waiting, and saying why.
  EXPECT_EQ(Get(id).state(), v1::SCHEDULING);
  EXPECT_THAT(Get(id).message(), HasSubstr("6 tasks, 2 free slots"));
  const std::string b = AddWorker(2), c = AddWorker(2);
  scheduler_->Tick();
  v1::Job job = Get(id);
  EXPECT_EQ(job.epoch(), 1);
  ASSERT_EQ(job.tasks_size(), 6);
  // Balanced: two tasks each.
  EXPECT_EQ(Tasks(Beat(a, v1::TASK_PREPARING)), 2);
  EXPECT_EQ(Tasks(Beat(b, v1::TASK_PREPARING)), 2);
  EXPECT_EQ(Tasks(Beat(c, v1::TASK_PREPARING)), 2);
  EXPECT_EQ(last_[a].assignments(0).checkpoint_storage(), "file:///shared/checkpoints");
  EXPECT_FALSE(last_[a].assignments(0).start());
  // Not started until every task is READY.
  Beat(a, v1::TASK_READY);
  Beat(b, v1::TASK_READY);
  scheduler_->Tick();
  EXPECT_EQ(Get(id).state(), v1::SCHEDULING);
  Beat(c, v1::TASK_READY);
  scheduler_->Tick();
  EXPECT_EQ(Get(id).state(), v1::RUNNING);
  EXPECT_TRUE(Beat(a, v1::TASK_RUNNING).assignments(0).start());
  // Checkpoint 1 after the interval; complete once every task stored it.
  clock_.Advance(1000);
  scheduler_->Tick();
  EXPECT_EQ(Beat(a, v1::TASK_RUNNING, 1).assignments(0).trigger_checkpoint(), 1);
  Beat(b, v1::TASK_RUNNING, 1);
  scheduler_->Tick();
  EXPECT_EQ(Get(id).last_checkpoint(), 0);
  Beat(c, v1::TASK_RUNNING, 1);
  scheduler_->Tick();
  EXPECT_EQ(Get(id).last_checkpoint(), 1);
  EXPECT_EQ(Beat(a, v1::TASK_RUNNING).assignments(0).completed_checkpoint(), 1);
  // Drained: the last checkpoint stops the job, then it finishes.
  for (const std::string& w : {a, b, c}) Beat(w, v1::TASK_DRAINED);
  scheduler_->Tick();
  v1::HeartbeatResponse r = Beat(a, v1::TASK_DRAINED, 2);
  EXPECT_EQ(r.assignments(0).trigger_checkpoint(), 2);
  EXPECT_TRUE(r.assignments(0).stop_at_trigger());
  Beat(b, v1::TASK_DRAINED, 2);
  Beat(c, v1::TASK_DRAINED, 2);
  scheduler_->Tick();
  EXPECT_TRUE(Beat(a, v1::TASK_DRAINED).assignments(0).finish());
  for (const std::string& w : {a, b, c}) Beat(w, v1::TASK_DONE);
  scheduler_->Tick();
  EXPECT_EQ(Get(id).state(), v1::FINISHED);
  EXPECT_EQ(Get(id).last_checkpoint(), 2);
  EXPECT_EQ(Tasks(Beat(a, v1::TASK_DONE)), 0);  // nothing assigned any more
}

// One writer per output: a job of another name writing the running job's
// file is refused, naming the path and the job; once that job has ended it
// is admitted and runs under an epoch above the first job's, so the file
// sink's fence hands the output over (FileSink).
TEST_F(SchedulerTest, AJobWritingARunningJobsOutputIsRefusedThenRunsAboveItsEpoch) {
  const std::string w = AddWorker(16);
  const std::string first = SubmitRunning(w);
  ASSERT_EQ(Get(first).state(), v1::RUNNING);
  v1::Job copy;
  copy.set_id("copy-2");  // the store orders jobs by the number of their ids
  copy.set_name("copy");
  copy.set_state(v1::SUBMITTED);
  copy.set_parallelism(2);
  copy.set_yaml(absl::StrReplaceAll(kYaml, {{"name: revenue}", "name: copy}"}}));
  const std::vector<SpecError> errors = scheduler_->CheckAdmission(copy);
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_EQ(errors[0].path, "spec.sinks[0].file");
  EXPECT_THAT(errors[0].message,
              HasSubstr(absl::StrCat("file out/revenue.jsonl is written by job ", first,
                                     " (RUNNING, its spec.sinks[0].file)")));
  const absl::Status refused = scheduler_->Submit(copy);
  EXPECT_TRUE(absl::IsFailedPrecondition(refused)) << refused;
  // Another output: admitted while the first runs.
  v1::Job elsewhere = copy;
  elsewhere.set_id("elsewhere-3");
  elsewhere.set_name("elsewhere");
  elsewhere.set_yaml(absl::StrReplaceAll(
      kYaml, {{"name: revenue}", "name: elsewhere}"}, {"out/revenue.jsonl", "out/other.jsonl"}}));
  EXPECT_TRUE(scheduler_->CheckAdmission(elsewhere).empty());

  ASSERT_OK(scheduler_->Cancel(first, "by a test").status());
  ASSERT_OK(scheduler_->Submit(copy));
  scheduler_->Tick();
  EXPECT_GT(Get("copy-2").epoch(), Get(first).epoch());
  // The first job cannot be restarted while the copy writes its output.
  const absl::Status restart = scheduler_->Restart(first, 0).status();
  EXPECT_TRUE(absl::IsFailedPrecondition(restart)) << restart;
  EXPECT_THAT(std::string(restart.message()), HasSubstr("is written by job copy-2"));
}

TEST_F(SchedulerTest, ALostWorkerMovesItsTasksStickilyWithANewEpoch) {
  const std::string a = AddWorker(3), b = AddWorker(3), c = AddWorker(3);
  const std::string id = Submit();
  scheduler_->Tick();
  for (const std::string& w : {a, b, c}) Beat(w, v1::TASK_READY);
  scheduler_->Tick();
  ASSERT_EQ(Get(id).state(), v1::RUNNING);
  std::map<int, std::string> before;
  for (int g = 0; g < 6; ++g) before[g] = Get(id).tasks(g).worker();
  // c falls silent; a and b keep beating.
  for (int i = 0; i < 3; ++i) {
    clock_.Advance(400);
    Beat(a, v1::TASK_RUNNING);
    Beat(b, v1::TASK_RUNNING);
    scheduler_->Tick();
  }
  v1::Job job = Get(id);
  EXPECT_EQ(job.epoch(), 2);
  EXPECT_EQ(job.state(), v1::RECOVERING);
  EXPECT_THAT(job.message(), HasSubstr("worker " + c + " lost"));
  for (int g = 0; g < 6; ++g) {
    EXPECT_NE(job.tasks(g).worker(), c);
    // Sticky: tasks of the live workers stayed where they were.
    if (before[g] != c) {
      EXPECT_EQ(job.tasks(g).worker(), before[g]) << g;
    }
  }
  EXPECT_EQ(Beat(a, v1::TASK_RUNNING).assignments(0).epoch(), 2);
  EXPECT_EQ(Beat(b, v1::TASK_RUNNING).assignments(0).epoch(), 2);
  Beat(a, v1::TASK_READY);
  Beat(b, v1::TASK_READY);
  scheduler_->Tick();
  EXPECT_EQ(Get(id).state(), v1::RUNNING);
}

// A worker joins a running job: the tasks stop at a checkpoint and the job
// is placed again from it, spread within one task.
TEST_F(SchedulerTest, AJoiningWorkerGetsTasksThroughAStoppingCheckpoint) {
  const std::string a = AddWorker(5), b = AddWorker(5);
  const std::string id = Submit();
  scheduler_->Tick();
  for (const std::string& w : {a, b}) Beat(w, v1::TASK_READY);
  scheduler_->Tick();
  ASSERT_EQ(Get(id).state(), v1::RUNNING);
  scheduler_->Tick();
  EXPECT_EQ(Get(id).epoch(), 1);  // 3 and 3: balanced
  const std::string c = AddWorker(5);
  scheduler_->Tick();
  // A checkpoint that stops the tasks, triggered at once.
  v1::HeartbeatResponse r = Beat(a, v1::TASK_RUNNING, 1);
  ASSERT_EQ(r.assignments_size(), 1);
  EXPECT_EQ(r.assignments(0).trigger_checkpoint(), 1);
  EXPECT_TRUE(r.assignments(0).stop_at_trigger());
  EXPECT_EQ(Tasks(Beat(c, v1::TASK_RUNNING)), 0);
  Beat(b, v1::TASK_RUNNING, 1);
  scheduler_->Tick();
  const v1::Job job = Get(id);
  EXPECT_EQ(job.last_checkpoint(), 1);
  EXPECT_EQ(job.epoch(), 2);
  EXPECT_THAT(job.message(), HasSubstr("rebalancing"));
  std::map<std::string, int> per;
  for (const v1::TaskStatus& t : job.tasks()) ++per[t.worker()];
  EXPECT_EQ(per[a], 2);
  EXPECT_EQ(per[b], 2);
  EXPECT_EQ(per[c], 2);
  EXPECT_EQ(Beat(c, v1::TASK_PREPARING).assignments(0).restore_checkpoint(), 1);
  // Balanced now: no further move. (The first beat still reports epoch 1.)
  for (int round = 0; round < 2; ++round) {
    for (const std::string& w : {a, b, c}) Beat(w, v1::TASK_READY);
  }
  scheduler_->Tick();
  scheduler_->Tick();
  EXPECT_EQ(Get(id).epoch(), 2);
  EXPECT_EQ(Get(id).state(), v1::RUNNING);
}

// A checkpoint some task never stores: after the timeout the run restarts
// from the last complete checkpoint with a new epoch, as after a failure.
TEST_F(SchedulerTest, ACheckpointThatTimesOutRestartsTheRun) {
  checkpoint_timeout_ms_ = 2000;
  Restart();
  const std::string a = AddWorker(3), b = AddWorker(3);
  const std::string id = Submit();
  scheduler_->Tick();
  for (const std::string& w : {a, b}) Beat(w, v1::TASK_READY);
  scheduler_->Tick();
  ASSERT_EQ(Get(id).state(), v1::RUNNING);
  clock_.Advance(1000);
  scheduler_->Tick();
  EXPECT_EQ(Beat(a, v1::TASK_RUNNING, 1).assignments(0).trigger_checkpoint(), 1);
  Beat(b, v1::TASK_RUNNING);     // never stores it
  for (int i = 0; i < 5; ++i) {  // 2000 ms in flight: not over the timeout yet
    clock_.Advance(400);
    Beat(a, v1::TASK_RUNNING);
    Beat(b, v1::TASK_RUNNING);
    scheduler_->Tick();
  }
  EXPECT_EQ(Get(id).epoch(), 1);
  EXPECT_EQ(Get(id).state(), v1::RUNNING);
  clock_.Advance(1);
  scheduler_->Tick();
  const v1::Job job = Get(id);
  EXPECT_EQ(job.epoch(), 2);
  EXPECT_EQ(job.state(), v1::RECOVERING);
  EXPECT_EQ(job.last_checkpoint(), 0);
  EXPECT_THAT(job.message(),
              HasSubstr("checkpoint 1 did not complete in 2000 ms (3 of 6 tasks stored it)"));
}

// Its tasks fail again and again (a broker down): each restart after the
// first in a row waits twice as long as the one before, up to a minute; the
// job is never given up on unless max_restarts says so.
class RestartBackoffTest : public SchedulerTest {
 protected:
  // The tasks of the job's current placement on `worker` fail.
  void FailTasks(const std::string& worker) {
    Beat(worker, v1::TASK_PREPARING);
    Beat(worker, v1::TASK_FAILED, -1, "kafka: no such broker");
    scheduler_->Tick();
  }
  // `ms` pass with `worker` beating (no tasks) and the scheduler ticking.
  void Pass(const std::string& worker, int64_t ms) {
    for (int64_t t = 0; t < ms; t += 250) {
      clock_.Advance(std::min<int64_t>(250, ms - t));
      v1::HeartbeatRequest req;
      req.set_worker_id(worker);
      req.set_session(sessions_[worker]);
      EXPECT_TRUE(registry_->Heartbeat(req));
      last_[worker].Clear();  // learns its next assignment at the next Beat
      scheduler_->Tick();
    }
  }
};

TEST_F(RestartBackoffTest, RestartsInARowWaitTwiceAsLongEachUpToAMinute) {
  const std::string a = AddWorker(6);
  const std::string id = Submit();
  scheduler_->Tick();
  FailTasks(a);
  EXPECT_EQ(Get(id).epoch(), 2) << "the first restart is at once";
  for (int64_t delay : {1000, 2000, 4000, 8000, 16000, 32000, 60000, 60000}) {
    FailTasks(a);
    const v1::Job waiting = Get(id);
    ASSERT_EQ(waiting.state(), v1::SCHEDULING) << waiting.DebugString();  // it never ran
    EXPECT_THAT(waiting.message(), HasSubstr("kafka: no such broker"));
    EXPECT_THAT(waiting.message(), HasSubstr("restarting in " + FormatDuration(delay)));
    Pass(a, delay - 1);
    EXPECT_EQ(Get(id).epoch(), waiting.epoch()) << "placed before its delay of " << delay;
    Pass(a, 1);
    EXPECT_EQ(Get(id).epoch(), waiting.epoch() + 1) << "not placed after its delay of " << delay;
  }
}

TEST_F(RestartBackoffTest, ACompletedCheckpointRestartsTheBackoff) {
  const std::string a = AddWorker(6);
  const std::string id = SubmitRunning(a);
  FailTasks(a);
  FailTasks(a);
  EXPECT_THAT(Get(id).message(), HasSubstr("restarting in 1s"));
  Pass(a, 1000);
  ASSERT_NO_FATAL_FAILURE(StartAndCompleteCheckpoint1(a, id));
  const int64_t epoch = Get(id).epoch();
  FailTasks(a);
  EXPECT_EQ(Get(id).epoch(), epoch + 1) << "the first failure after a checkpoint restarts at once";
  FailTasks(a);
  EXPECT_THAT(Get(id).message(), HasSubstr("restarting in 1s"));
}

TEST_F(RestartBackoffTest, MaxRestartsFailsTheJob) {
  max_restarts_ = 3;
  Restart();
  const std::string a = AddWorker(6);
  const std::string id = Submit();
  scheduler_->Tick();
  for (int64_t delay : {0, 1000, 2000}) {
    FailTasks(a);
    ASSERT_EQ(Get(id).state(), v1::SCHEDULING);
    Pass(a, delay);
  }
  FailTasks(a);
  const v1::Job job = Get(id);
  EXPECT_EQ(job.state(), v1::FAILED);
  EXPECT_THAT(job.message(), HasSubstr("kafka: no such broker"));
  EXPECT_THAT(job.message(), HasSubstr("3 restarts without a completed checkpoint"));
}

TEST_F(SchedulerTest, APermanentFailureFailsAtOnceAndRestartResumesFromTheLastCheckpoint) {
  const std::string a = AddWorker(6);
  const std::string id = SubmitRunning(a);
  clock_.Advance(1000);
  scheduler_->Tick();
  Beat(a, v1::TASK_RUNNING, 1);
  scheduler_->Tick();
  ASSERT_EQ(Get(id).last_checkpoint(), 1);
  const int64_t epoch = Get(id).epoch();
  // Only a FAILED or CANCELED job restarts.
  const absl::Status running = scheduler_->Restart(id, 0).status();
  EXPECT_TRUE(absl::IsFailedPrecondition(running)) << running;
  EXPECT_THAT(std::string(running.message()), HasSubstr("cancel it first"));

  Beat(a, v1::TASK_FAILED, -1, "cannot open input file x.jsonl", /*permanent=*/true);
  scheduler_->Tick();
  v1::Job job = Get(id);
  EXPECT_EQ(job.state(), v1::FAILED) << "a permanent failure is not retried";
  EXPECT_THAT(job.message(), HasSubstr("cannot open input file x.jsonl"));
  EXPECT_THAT(job.message(), HasSubstr(absl::StrCat("caravela restart ", id)));

  EXPECT_TRUE(absl::IsInvalidArgument(scheduler_->Restart(id, 129).status()));
  // At parallelism 1: 3 tasks, within the 6 slots.
  auto restarted = scheduler_->Restart(id, 1);
  ASSERT_OK(restarted.status());
  EXPECT_EQ(restarted->state(), v1::SUBMITTED);
  EXPECT_EQ(restarted->parallelism(), 1);
  EXPECT_THAT(restarted->message(),
              HasSubstr("restarted from checkpoint 1 (taken with parallelism 2)"));
  scheduler_->Tick();
  job = Get(id);
  EXPECT_EQ(job.state(), v1::SCHEDULING);
  EXPECT_GT(job.epoch(), epoch) << "a restart runs a new epoch";
  // The new epoch restores checkpoint 1, taken with 2 tasks per stage.
  const v1::HeartbeatResponse r = Beat(a, v1::TASK_PREPARING);
  ASSERT_GT(r.assignments_size(), 0);
  EXPECT_EQ(r.assignments(0).restore_checkpoint(), 1);
  EXPECT_EQ(r.assignments(0).restore_parallelism(), 2);
  EXPECT_EQ(r.assignments(0).parallelism(), 1);
}

TEST_F(SchedulerTest, ACanceledJobWithoutACheckpointRestartsFromTheBeginning) {
  const std::string a = AddWorker(6);
  const std::string id = SubmitRunning(a);
  ASSERT_OK(scheduler_->Cancel(id, "canceled by a user").status());
  ASSERT_EQ(Get(id).state(), v1::CANCELED);
  auto restarted = scheduler_->Restart(id, 0);
  ASSERT_OK(restarted.status());
  EXPECT_EQ(restarted->parallelism(), 2);
  EXPECT_THAT(restarted->message(), HasSubstr("from the beginning"));
  scheduler_->Tick();
  Beat(a, v1::TASK_PREPARING);  // learns the new epoch's assignment
  Beat(a, v1::TASK_READY);
  scheduler_->Tick();
  EXPECT_EQ(Get(id).state(), v1::RUNNING);
}

TEST_F(SchedulerTest, ARestartedCoordinatorAdoptsTheRunningEpoch) {
  const std::string a = AddWorker(3), b = AddWorker(3);
  const std::string id = Submit();
  scheduler_->Tick();
  for (const std::string& w : {a, b}) Beat(w, v1::TASK_READY);
  scheduler_->Tick();
  clock_.Advance(1000);
  scheduler_->Tick();
  Beat(a, v1::TASK_RUNNING, 1);
  Beat(b, v1::TASK_RUNNING, 1);
  scheduler_->Tick();
  ASSERT_EQ(Get(id).last_checkpoint(), 1);
  // Checkpoint 2 triggered; a stored it, then the coordinator died.
  clock_.Advance(1000);
  scheduler_->Tick();
  Beat(a, v1::TASK_RUNNING, 2);

  Restart();
  // The workers come back under their ids and report epoch 1.
  EXPECT_EQ(AddWorker(3, a), a);
  EXPECT_EQ(AddWorker(3, b), b);
  EXPECT_EQ(Tasks(Beat(a, v1::TASK_RUNNING)), 3);
  Beat(b, v1::TASK_RUNNING);
  scheduler_->Tick();
  v1::Job job = Get(id);
  EXPECT_EQ(job.epoch(), 1);
  EXPECT_EQ(job.state(), v1::RUNNING);
  // Checkpoint 2 is triggered again and completes.
  EXPECT_EQ(Beat(b, v1::TASK_RUNNING, 2).assignments(0).trigger_checkpoint(), 2);
  scheduler_->Tick();
  EXPECT_EQ(Get(id).last_checkpoint(), 2);
  EXPECT_EQ(Get(id).epoch(), 1);
}

// The old coordinator triggered a periodic checkpoint 2 and some tasks stored
// it before the input drained; it died, and by the restart every task is
// drained. Checkpoint 2 does not hold what came after it: it completes as a
// periodic one, and the stopping checkpoint is 3 (the bug a CI run found:
// output after 2 was never published).
TEST_F(SchedulerTest, AnAdoptedPeriodicCheckpointDoesNotEndTheJob) {
  const std::string a = AddWorker(6);
  const std::string id = SubmitRunning(a);
  clock_.Advance(1000);
  scheduler_->Tick();
  Beat(a, v1::TASK_RUNNING, 1);
  scheduler_->Tick();
  ASSERT_EQ(Get(id).last_checkpoint(), 1);
  clock_.Advance(1000);
  scheduler_->Tick();
  Beat(a, v1::TASK_RUNNING, 2);  // 2 triggered (not stopping) and stored

  Restart();
  EXPECT_EQ(AddWorker(6, a), a);
  Beat(a, v1::TASK_DRAINED, 2);
  scheduler_->Tick();
  v1::HeartbeatResponse r = Beat(a, v1::TASK_DRAINED, 2);
  EXPECT_EQ(r.assignments(0).trigger_checkpoint(), 2);
  EXPECT_FALSE(r.assignments(0).stop_at_trigger());
  scheduler_->Tick();  // 2 complete; everything drained: 3 stops the job
  EXPECT_EQ(Get(id).last_checkpoint(), 2);
  r = Beat(a, v1::TASK_DRAINED, 2);
  EXPECT_FALSE(r.assignments(0).finish());
  EXPECT_EQ(r.assignments(0).trigger_checkpoint(), 3);
  EXPECT_TRUE(r.assignments(0).stop_at_trigger());
  Beat(a, v1::TASK_DRAINED, 3);
  scheduler_->Tick();
  EXPECT_TRUE(Beat(a, v1::TASK_DRAINED).assignments(0).finish());
}

TEST_F(SchedulerTest, ARestartedCoordinatorRestartsJobsWhoseTasksDoNotComeBack) {
  const std::string a = AddWorker(3), b = AddWorker(3);
  const std::string id = Submit();
  scheduler_->Tick();
  for (const std::string& w : {a, b}) Beat(w, v1::TASK_READY);
  scheduler_->Tick();
  Restart();
  EXPECT_EQ(AddWorker(6, a), a);  // b never comes back
  Beat(a, v1::TASK_RUNNING);
  scheduler_->Tick();
  EXPECT_EQ(Get(id).epoch(), 1);  // still waiting for b
  for (int i = 0; i < 3; ++i) {
    clock_.Advance(400);
    Beat(a, v1::TASK_RUNNING);
    scheduler_->Tick();
  }
  const v1::Job job = Get(id);
  EXPECT_EQ(job.epoch(), 2);
  EXPECT_THAT(job.message(), HasSubstr("not back after the coordinator restarted"));
  for (const v1::TaskStatus& t : job.tasks()) EXPECT_EQ(t.worker(), a);
}

TEST_F(SchedulerTest, OneActiveJobPerNameAndCancelStopsTheTasks) {
  const std::string a = AddWorker(6);
  const std::string id = Submit();
  v1::Job twin;
  twin.set_id("revenue-99");
  twin.set_name("revenue");
  twin.set_state(v1::SUBMITTED);
  twin.set_yaml(kYaml);
  absl::Status st = scheduler_->Submit(twin);
  EXPECT_TRUE(absl::IsFailedPrecondition(st)) << st;
  EXPECT_THAT(st.message(), HasSubstr("share exchange topics"));
  scheduler_->Tick();
  EXPECT_EQ(Tasks(Beat(a, v1::TASK_PREPARING)), 6);
  ASSERT_OK(scheduler_->Cancel(id, "by a test").status());
  EXPECT_EQ(Tasks(Beat(a, v1::TASK_RUNNING)), 0);
  EXPECT_EQ(Get(id).state(), v1::CANCELED);
  // A later job of the name runs above every earlier epoch.
  const std::string next = Submit();
  scheduler_->Tick();
  EXPECT_EQ(Get(next).epoch(), 2);
}

}  // namespace
}  // namespace caravela

namespace caravela {
namespace {

// Refused rescales name why and leave the job RUNNING at its parallelism:
// 0 or above spec.max_parallelism (128), or more tasks than the job's slots
// plus the free ones.
TEST_F(SchedulerTest, RefusedRescalesLeaveTheJobRunningAtItsParallelism) {
  const std::string a = AddWorker(6);
  const std::string id = SubmitRunning(a);
  ASSERT_EQ(Get(id).state(), v1::RUNNING);
  const int tasks = Get(id).tasks_size();
  ASSERT_GT(tasks, 0);
  ASSERT_LE(tasks, 6);

  const absl::Status zero = scheduler_->Rescale(id, 0).status();
  EXPECT_TRUE(absl::IsInvalidArgument(zero)) << zero;
  EXPECT_THAT(std::string(zero.message()), HasSubstr("parallelism must be 1..128"));
  const absl::Status above = scheduler_->Rescale(id, 129).status();
  EXPECT_TRUE(absl::IsInvalidArgument(above)) << above;
  EXPECT_THAT(std::string(above.message()), HasSubstr("spec.max_parallelism"));
  // 6 slots in all: the job's tasks and the free ones.
  const absl::Status slots = scheduler_->Rescale(id, 64).status();
  EXPECT_TRUE(absl::IsFailedPrecondition(slots)) << slots;
  EXPECT_THAT(std::string(slots.message()),
              HasSubstr(absl::StrCat("but the cluster has 6 (", 6 - tasks, " free and the job's ",
                                     tasks, "): add workers")));
  scheduler_->Tick();
  const v1::Job job = Get(id);
  EXPECT_EQ(job.state(), v1::RUNNING);
  EXPECT_EQ(job.parallelism(), 2);
  EXPECT_EQ(job.rescale_to(), 0);
}

TEST_F(SchedulerTest, StopWithSavepointEndsAtACheckpointThenCopiesIt) {
  const std::string a = AddWorker(6);
  const std::string id = Submit();
  scheduler_->Tick();
  // Only a RUNNING job stops with a savepoint.
  EXPECT_TRUE(absl::IsFailedPrecondition(scheduler_->StopWithSavepoint(id, "/sp/one").status()));
  ASSERT_NO_FATAL_FAILURE(StartAndCompleteCheckpoint1(a, id));

  // The first attempt's copy fails: the job goes on from its checkpoint.
  savepoint_error_ = absl::UnavailableError("disk full");
  auto asked = scheduler_->StopWithSavepoint(id, "/sp/one");
  ASSERT_OK(asked.status());
  EXPECT_EQ(asked->savepoint_to(), "/sp/one");
  EXPECT_TRUE(absl::IsFailedPrecondition(
      scheduler_->StopWithSavepoint(id, "/sp/two").status()));  // one at a time
  EXPECT_TRUE(absl::IsFailedPrecondition(scheduler_->Rescale(id, 3).status()));
  scheduler_->Tick();
  v1::HeartbeatResponse r = Beat(a, v1::TASK_RUNNING, 2);
  EXPECT_EQ(r.assignments(0).trigger_checkpoint(), 2);
  EXPECT_TRUE(r.assignments(0).stop_at_trigger());
  scheduler_->Tick();
  EXPECT_EQ(Get(id).last_checkpoint(), 2);
  // Sinks publish the last checkpoint before the tasks return.
  EXPECT_TRUE(Beat(a, v1::TASK_RUNNING).assignments(0).finish());
  Beat(a, v1::TASK_DONE);
  TickUntilSaved(id, 1);
  {
    std::lock_guard<std::mutex> lock(saved_mu_);
    EXPECT_EQ(saved_[0].second, "/sp/one");
    EXPECT_EQ(saved_[0].first.checkpoint_id, 2);
    EXPECT_EQ(saved_[0].first.tasks, 6);
    EXPECT_EQ(saved_[0].first.parallelism, 2);
    EXPECT_EQ(saved_[0].first.job_name, "revenue");
    EXPECT_EQ(saved_[0].first.storage_url,
              "file:///shared/checkpoints/revenue-1");  // the job instance's
  }
  v1::Job job = Get(id);
  EXPECT_EQ(job.state(), v1::SCHEDULING);
  EXPECT_THAT(job.message(), HasSubstr("the savepoint to /sp/one failed (disk full)"));
  EXPECT_EQ(job.epoch(), 2);  // placed again, restoring checkpoint 2
  EXPECT_EQ(Beat(a, v1::TASK_READY).assignments(0).restore_checkpoint(), 2);

  // The second one is written: FINISHED, the savepoint named.
  savepoint_error_ = absl::OkStatus();
  Beat(a, v1::TASK_READY);  // now in the new epoch
  scheduler_->Tick();
  ASSERT_EQ(Get(id).state(), v1::RUNNING);
  ASSERT_OK(scheduler_->StopWithSavepoint(id, "/sp/two").status());
  scheduler_->Tick();
  Beat(a, v1::TASK_RUNNING, 3);
  scheduler_->Tick();
  EXPECT_TRUE(Beat(a, v1::TASK_RUNNING).assignments(0).finish());
  Beat(a, v1::TASK_DONE);
  TickUntilSaved(id, 2);
  job = Get(id);
  EXPECT_EQ(job.state(), v1::FINISHED);
  EXPECT_EQ(job.savepoint(), "/sp/two");
  EXPECT_EQ(job.last_checkpoint(), 3);
  EXPECT_THAT(job.message(), HasSubstr("stopped with a savepoint in /sp/two (checkpoint 3"));
  EXPECT_EQ(Tasks(Beat(a, v1::TASK_DONE)), 0);
}

}  // namespace
}  // namespace caravela

namespace caravela {
namespace {

// A worker leaving (SIGTERM): its tasks move through a stopping checkpoint
// to the others, and nothing new goes to it.
TEST_F(SchedulerTest, ALeavingWorkersTasksMoveThroughAStoppingCheckpoint) {
  const std::string a = AddWorker(6), b = AddWorker(6), c = AddWorker(6);
  const std::string id = Submit();
  scheduler_->Tick();
  for (const std::string& w : {a, b, c}) Beat(w, v1::TASK_READY);
  scheduler_->Tick();
  ASSERT_EQ(Get(id).state(), v1::RUNNING);
  draining_.insert(c);
  Beat(c, v1::TASK_RUNNING);
  scheduler_->Tick();
  v1::HeartbeatResponse r = Beat(a, v1::TASK_RUNNING, 1);
  ASSERT_EQ(r.assignments_size(), 1);
  EXPECT_EQ(r.assignments(0).trigger_checkpoint(), 1);
  EXPECT_TRUE(r.assignments(0).stop_at_trigger());
  Beat(b, v1::TASK_RUNNING, 1);
  Beat(c, v1::TASK_RUNNING, 1);  // the leaving worker's tasks take part
  scheduler_->Tick();
  v1::Job job = Get(id);
  EXPECT_EQ(job.last_checkpoint(), 1);
  EXPECT_EQ(job.epoch(), 2);
  EXPECT_THAT(job.message(), HasSubstr("worker " + c + " is leaving"));
  std::map<std::string, int> per;
  for (const v1::TaskStatus& t : job.tasks()) ++per[t.worker()];
  EXPECT_EQ(per[a], 3);
  EXPECT_EQ(per[b], 3);
  EXPECT_EQ(per.count(c), 0u);
  EXPECT_EQ(Tasks(Beat(c, v1::TASK_RUNNING)), 0);  // it holds nothing now
  // Not rebalanced back onto it while it drains.
  for (int round = 0; round < 2; ++round) {
    for (const std::string& w : {a, b}) Beat(w, v1::TASK_READY);
  }
  scheduler_->Tick();
  EXPECT_EQ(Get(id).state(), v1::RUNNING);
  EXPECT_EQ(Get(id).epoch(), 2);
}

}  // namespace
}  // namespace caravela

namespace caravela {
namespace {

// Completed checkpoints are kept, newest first, with trigger-to-completion
// time, epoch and whether they stopped the tasks.
TEST_F(SchedulerTest, KeepsTheCheckpointHistory) {
  const std::string a = AddWorker(6);
  const std::string id = SubmitRunning(a);
  ASSERT_EQ(Get(id).state(), v1::RUNNING);
  EXPECT_TRUE(scheduler_->CheckpointHistory(id).empty());
  clock_.Advance(1000);
  Beat(a, v1::TASK_RUNNING);  // within its lease
  scheduler_->Tick();         // checkpoint 1 triggered
  clock_.Advance(250);
  Beat(a, v1::TASK_RUNNING, 1);
  scheduler_->Tick();  // ... complete, 250 ms later
  Beat(a, v1::TASK_DRAINED);
  scheduler_->Tick();  // the last one, stopping
  clock_.Advance(40);
  Beat(a, v1::TASK_DRAINED, 2);
  scheduler_->Tick();
  const std::vector<Scheduler::CheckpointRecord> h = scheduler_->CheckpointHistory(id);
  ASSERT_EQ(h.size(), 2u);
  EXPECT_EQ(h[0].id, 2);
  EXPECT_TRUE(h[0].stopping);
  EXPECT_EQ(h[0].duration_ms, 40);
  EXPECT_EQ(h[1].id, 1);
  EXPECT_FALSE(h[1].stopping);
  EXPECT_EQ(h[1].duration_ms, 250);
  EXPECT_EQ(h[1].epoch, 1);
  EXPECT_EQ(h[1].completed_at_ms, 1'000'000 + 1250);
}

}  // namespace
}  // namespace caravela

namespace caravela {
namespace {

// Packs a job onto as few workers as fit, in id order; a placement is off
// by the tasks that packing would put elsewhere.
class PackPolicy final : public PlacementPolicy {
 public:
  const char* name() const override { return "pack"; }
  std::vector<std::string> Place(int tasks, const std::vector<std::string>& /*previous*/,
                                 const ClusterSlots& slots) const override {
    std::map<std::string, int> free = slots.free;
    std::vector<std::string> placed;
    for (auto it = free.begin(); it != free.end() && static_cast<int>(placed.size()) < tasks;) {
      if (it->second == 0) {
        ++it;
        continue;
      }
      placed.push_back(it->first);
      --it->second;
    }
    return placed;
  }
  ImbalanceScore Imbalance(const std::vector<std::string>& placement,
                           const ClusterSlots& slots) const override {
    ClusterSlots without = slots;
    without.Release(placement);
    std::map<std::string, int> want, have;
    for (const std::string& w : Place(static_cast<int>(placement.size()), {}, without)) ++want[w];
    for (const std::string& w : placement) ++have[w];
    ImbalanceScore off;
    for (const auto& [w, n] : have) off.score += std::max(0, n - want[w]);
    if (off.score > 0) off.reason = absl::StrCat("packing: ", off.score, " tasks to move");
    return off;
  }
};

// Spreads like the default, scores what the test says.
class ScoredPolicy final : public PlacementPolicy {
 public:
  explicit ScoredPolicy(std::shared_ptr<std::atomic<int64_t>> score) : score_(std::move(score)) {}
  const char* name() const override { return "scored"; }
  std::vector<std::string> Place(int tasks, const std::vector<std::string>& previous,
                                 const ClusterSlots& slots) const override {
    return SpreadPolicy().Place(tasks, previous, slots);
  }
  ImbalanceScore Imbalance(const std::vector<std::string>& /*placement*/,
                           const ClusterSlots& /*slots*/) const override {
    const int64_t score = score_->load();
    return {score, score > 0 ? "the test says move" : ""};
  }

 private:
  std::shared_ptr<std::atomic<int64_t>> score_;
};

// Places every task on a worker that does not exist.
class BrokenPolicy final : public PlacementPolicy {
 public:
  const char* name() const override { return "broken"; }
  std::vector<std::string> Place(int tasks, const std::vector<std::string>& /*previous*/,
                                 const ClusterSlots& /*slots*/) const override {
    return std::vector<std::string>(static_cast<size_t>(tasks), "nowhere");
  }
  ImbalanceScore Imbalance(const std::vector<std::string>& /*placement*/,
                           const ClusterSlots& /*slots*/) const override {
    return {};
  }
};

// The spread rule would move three of the tasks packed onto a (b has room);
// the policy that packed them judges them in place, checkpoint after
// checkpoint.
TEST_F(SchedulerTest, ACustomPlacementIsJudgedByItsOwnPolicy) {
  placement_ = std::make_shared<PackPolicy>();
  Restart();
  const std::string a = AddWorker(6), b = AddWorker(6);
  const std::string id = Submit();
  scheduler_->Tick();
  EXPECT_EQ(Tasks(Beat(a, v1::TASK_READY)), 6);
  EXPECT_EQ(Tasks(Beat(b, v1::TASK_READY)), 0);
  scheduler_->Tick();
  ASSERT_EQ(Get(id).state(), v1::RUNNING);
  for (int64_t n = 1; n <= 3; ++n) {
    clock_.Advance(1000);
    Beat(a, v1::TASK_RUNNING);
    Beat(b, v1::TASK_RUNNING);
    scheduler_->Tick();  // checkpoint n, periodic
    const v1::HeartbeatResponse r = Beat(a, v1::TASK_RUNNING, n);
    ASSERT_EQ(r.assignments_size(), 1);
    EXPECT_EQ(r.assignments(0).trigger_checkpoint(), n);
    EXPECT_FALSE(r.assignments(0).stop_at_trigger());
    scheduler_->Tick();
  }
  const v1::Job job = Get(id);
  EXPECT_EQ(job.last_checkpoint(), 3);
  EXPECT_EQ(job.epoch(), 1);
  EXPECT_EQ(job.state(), v1::RUNNING);
  for (const v1::TaskStatus& t : job.tasks()) EXPECT_EQ(t.worker(), a);
}

// A score above 0 moves the job through a stopping checkpoint, with the
// policy's reason as the job's message.
TEST_F(SchedulerTest, APolicyScoreAboveZeroMovesTheJob) {
  auto score = std::make_shared<std::atomic<int64_t>>(0);
  placement_ = std::make_shared<ScoredPolicy>(score);
  Restart();
  const std::string a = AddWorker(6);
  const std::string id = SubmitRunning(a);
  ASSERT_EQ(Get(id).state(), v1::RUNNING);
  scheduler_->Tick();
  EXPECT_FALSE(Beat(a, v1::TASK_RUNNING).assignments(0).stop_at_trigger());
  score->store(2);
  scheduler_->Tick();
  const v1::HeartbeatResponse r = Beat(a, v1::TASK_RUNNING, 1);
  EXPECT_EQ(r.assignments(0).trigger_checkpoint(), 1);
  EXPECT_TRUE(r.assignments(0).stop_at_trigger());
  score->store(0);
  scheduler_->Tick();
  const v1::Job job = Get(id);
  EXPECT_EQ(job.last_checkpoint(), 1);
  EXPECT_EQ(job.epoch(), 2);
  EXPECT_EQ(job.state(), v1::SCHEDULING);
  EXPECT_EQ(job.message(), "the test says move");
}

TEST_F(SchedulerTest, APlacementTheSlotsCannotTakeFailsTheJob) {
  placement_ = std::make_shared<BrokenPolicy>();
  Restart();
  AddWorker(6);
  const std::string id = Submit();
  scheduler_->Tick();
  const v1::Job job = Get(id);
  EXPECT_EQ(job.state(), v1::FAILED);
  EXPECT_EQ(job.message(),
            "the broken placement policy failed: it placed tasks on nowhere, which takes no new "
            "tasks");
}

// The coordinator stored RUNNING and died before any task heard "start":
// the adopted run starts as usual (the job stays RUNNING; it is not moved
// to RUNNING again, which its state machine refuses).
TEST_F(SchedulerTest, AnAdoptedRunningJobWhoseTasksAreOnlyReadyStarts) {
  const std::string a = AddWorker(6);
  const std::string id = SubmitRunning(a);
  ASSERT_EQ(Get(id).state(), v1::RUNNING);

  Restart();
  EXPECT_EQ(AddWorker(6, a), a);
  Beat(a, v1::TASK_READY);
  scheduler_->Tick();
  const v1::Job job = Get(id);
  EXPECT_EQ(job.state(), v1::RUNNING);
  EXPECT_EQ(job.epoch(), 1);
  EXPECT_TRUE(Beat(a, v1::TASK_READY).assignments(0).start());
}

}  // namespace
}  // namespace caravela

namespace caravela {
namespace {

// Workers of unequal size: the job is spread over both and stays there.
// (Sending each task to the worker with the most free slots put all six on
// a, which the spread rule judged off: a stopping checkpoint and a new
// epoch after every start.)
TEST_F(SchedulerTest, AJobOnUnequalWorkersIsNotMovedOverAndOver) {
  const std::string a = AddWorker(10), b = AddWorker(2);
  const std::string id = Submit();
  scheduler_->Tick();
  EXPECT_EQ(Tasks(Beat(a, v1::TASK_READY)), 4);
  EXPECT_EQ(Tasks(Beat(b, v1::TASK_READY)), 2);
  scheduler_->Tick();
  ASSERT_EQ(Get(id).state(), v1::RUNNING);
  for (int64_t n = 1; n <= 3; ++n) {
    clock_.Advance(1000);
    Beat(a, v1::TASK_RUNNING);
    Beat(b, v1::TASK_RUNNING);
    scheduler_->Tick();  // checkpoint n, periodic
    const v1::HeartbeatResponse r = Beat(a, v1::TASK_RUNNING, n);
    ASSERT_EQ(r.assignments_size(), 1);
    EXPECT_EQ(r.assignments(0).trigger_checkpoint(), n);
    EXPECT_FALSE(r.assignments(0).stop_at_trigger());
    Beat(b, v1::TASK_RUNNING, n);
    scheduler_->Tick();
  }
  EXPECT_EQ(Get(id).last_checkpoint(), 3);
  EXPECT_EQ(Get(id).epoch(), 1);
}

}  // namespace
}  // namespace caravela
