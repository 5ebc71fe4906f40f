// JobCheckpoints: the job-wide checkpoint and lifecycle signals between the
// coordinating thread of a parallel job (JobRunner) and its task threads
// (SPEC §8 "Checkpoints are job-wide").
//
// Protocol, checkpoint n (when to do what is decided by the job's
// CheckpointCoordinator, worker/checkpoint/checkpoint_coordinator.h, which
// the coordinating thread feeds with stored() and drained()):
//   1. the coordinator Trigger(n) (only when no checkpoint is in flight, and
//      only after Complete(n-1));
//   2. each task, once it sees n triggered and every exchange input delivered
//      barrier n (aligned), writes barrier n into its exchange outputs, stores
//      its state (task manifest n) and calls Stored(task, n);
//   3. when every task stored n, the coordinator writes the job's commit
//      record for n (JobRunner: the commit point) and calls Complete(n);
//   4. tasks see completed() == n and commit their sinks for n before they
//      store n+1.
// A checkpoint triggered with `stop` ends the job after it: tasks stop
// reading input once they stored it, commit when it completes, and return
// when the coordinator calls Finish(). A job without checkpoints is finished
// when every task is drained.
//
// Threading: every method is thread-safe (atomics and one mutex).
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <vector>

#include "common/status.h"

namespace caravela {

class JobCheckpoints {
 public:
  explicit JobCheckpoints(int tasks) : stored_(tasks), drained_(tasks) {
    for (auto& s : stored_) s.store(0);
    for (auto& d : drained_) d.store(false);
  }
  int tasks() const { return static_cast<int>(stored_.size()); }

  // ---- coordinator
  // Monotonic: an id not above the one triggered is ignored.
  void Trigger(int64_t id, bool stop) {
    std::lock_guard<std::mutex> l(trigger_mu_);
    if (id <= triggered_.load()) return;
    stop_at_.store(stop ? id : 0);
    triggered_.store(id);
  }
  void Complete(int64_t id) { completed_.store(id); }
  int64_t stored(int task) const { return stored_[task].load(); }
  bool drained(int task) const { return drained_[task].load(); }
  void Finish() { finish_.store(true); }
  // First error of any task (the coordinator stops the job).
  absl::Status error() const {
    std::lock_guard<std::mutex> l(mu_);
    return error_;
  }
  bool failed() const { return failed_.load(); }

  // ---- tasks
  int64_t triggered() const { return triggered_.load(); }
  // A task's exchange reader got the first barrier `id` of this epoch: a
  // producing task, maybe on another worker, saw checkpoint `id` triggered,
  // so it is (the barrier says whether it stops the job). The tasks here
  // take it without waiting for the coordinator's word to reach this
  // worker: in a cluster that word comes with a heartbeat answer, up to a
  // heartbeat later on one worker than on another, and every consuming task
  // would hold its inputs that much longer for the barriers to align.
  void SawBarrier(int64_t id, bool stop) { Trigger(id, stop); }
  // True if checkpoint `id` ends the job.
  bool stops_at(int64_t id) const { return id != 0 && stop_at_.load() == id; }
  // The id of the stopping checkpoint triggered, 0 if none.
  int64_t stop_at() const { return stop_at_.load(); }
  void Stored(int task, int64_t id) { stored_[task].store(id); }
  int64_t completed() const { return completed_.load(); }
  // The task read all its input and propagated it (bounded inputs ended).
  void SetDrained(int task) { drained_[task].store(true); }
  bool finished() const { return finish_.load(); }
  void Fail(const absl::Status& st) {
    std::lock_guard<std::mutex> l(mu_);
    if (error_.ok()) error_ = st;
    failed_.store(true);
  }

 private:
  std::vector<std::atomic<int64_t>> stored_;
  std::vector<std::atomic<bool>> drained_;
  std::mutex trigger_mu_;  // Trigger's check and stores
  std::atomic<int64_t> triggered_{0};
  std::atomic<int64_t> stop_at_{0};
  std::atomic<int64_t> completed_{0};
  std::atomic<bool> finish_{false};
  std::atomic<bool> failed_{false};
  mutable std::mutex mu_;
  absl::Status error_;
};

}  // namespace caravela
