// PlacementPolicy: where the tasks of a job run, and whether a running job
// should move. One policy answers both questions, so that the Scheduler
// never hands a job over (a stopping checkpoint and a new epoch) to a
// placement the same rule then judges wrong again: a policy's Imbalance
// scores its own Place's result 0 while the cluster stays as it was.
// (Redpanda's partition allocator and its balancer share their scored
// constraints for the same reason.)
//
// The Scheduler owns the cluster's slots (ClusterSlots, rebuilt every
// round from the worker registry) and validates every placement a policy
// returns (CheckPlacement); a policy is a pure function of its arguments.
// SpreadPolicy, the default, spreads each job evenly over the workers.
//
// Threading: a policy is shared by the Scheduler's threads: its methods
// are const and must not keep state between calls.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "common/status.h"

namespace caravela {

// The cluster's slots as one scheduler round sees them.
struct ClusterSlots {
  // Every ALIVE worker, draining ones included (they may hold tasks but
  // take no new ones).
  std::set<std::string> alive;
  // The ALIVE workers that take new tasks (not draining), with their free
  // slots: their slots less every placed task on them.
  std::map<std::string, int> free;

  // The free slots of every worker taking tasks.
  int TotalFree() const;
  // Takes a slot per task of `placement` (a worker per task) from `free`;
  // Release gives them back. Workers not in `free` are skipped.
  void Take(const std::vector<std::string>& placement);
  void Release(const std::vector<std::string>& placement);
};

// How far a running job's placement is from where its policy would put it.
struct ImbalanceScore {
  // 0: the placement stays. Above 0: the Scheduler places the job again
  // (through a stopping checkpoint); larger is further off.
  int64_t score = 0;
  // Why, for the job's message and the log ("" when the score is 0).
  std::string reason;

  bool balanced() const { return score <= 0; }
};

class PlacementPolicy {
 public:
  virtual ~PlacementPolicy() = default;

  // For the log: "spread", ...
  virtual const char* name() const = 0;

  // The worker of each of a job's `tasks` tasks (indexed like the plan's
  // tasks, stage by stage) for its next epoch. `previous[g]` is where task
  // g ran in the last epoch ("" or past the end: nowhere). `slots.free`
  // counts every other job's tasks as taken and none of this job's. The
  // Scheduler calls it only when `slots.TotalFree() >= tasks`, and fails
  // the job if the result does not pass CheckPlacement.
  virtual std::vector<std::string> Place(int tasks, const std::vector<std::string>& previous,
                                         const ClusterSlots& slots) const = 0;

  // Scores a running job's `placement` (a worker per task) against the
  // cluster as it is now: `slots.free` counts this job's tasks as taken.
  // Must score Place's result 0 when judged with the slots Place saw less
  // that result, or the job would be moved again and again.
  virtual ImbalanceScore Imbalance(const std::vector<std::string>& placement,
                                   const ClusterSlots& slots) const = 0;
};

// The default placement: sticky, then spread.
//  * Place: each task keeps its previous worker while that worker takes
//    tasks and has room, up to an even share (total / workers with room,
//    rounded down, at least 1) per worker; every other task goes to the
//    worker with room holding the fewest of the job's tasks (then the most
//    free slots, then the lowest id).
//  * Imbalance: a live worker with room holds at least two tasks of the
//    job fewer than another live worker; the score is the difference less
//    one. Place's result never is: the workers it leaves with room end
//    within one task of every other.
class SpreadPolicy final : public PlacementPolicy {
 public:
  const char* name() const override { return "spread"; }
  std::vector<std::string> Place(int tasks, const std::vector<std::string>& previous,
                                 const ClusterSlots& slots) const override;
  ImbalanceScore Imbalance(const std::vector<std::string>& placement,
                           const ClusterSlots& slots) const override;
};

// For logs: "1 worker (a:6)", "3 workers (a:2, b:2, c:2)"; the first 8
// workers by id, then ", ...".
std::string DescribePlacement(const std::vector<std::string>& placement);

// OK if `placement` names one worker per task (`tasks` of them), each a
// worker of `slots.free`, none more often than its free slots; else
// Internal, saying which rule it breaks.
absl::Status CheckPlacement(const std::vector<std::string>& placement, int tasks,
                            const ClusterSlots& slots);

}  // namespace caravela
