// TaskContext: what every part of a task reads (worker/runtime/task*.cc):
// the job, where the task sits in it, its options, metrics, state and clock.
// Set up by Task::Create before the graph is built; the checkpointer sets
// `epoch` (TaskCheckpointer::Open) before anything else reads it.
#pragma once

#include <map>
#include <string>

#include "common/job_plan.h"
#include "common/job_spec.h"
#include "common/metrics.h"
#include "common/time_util.h"
#include "worker/runtime/pipeline.h"
#include "worker/runtime/task.h"
#include "worker/state/state_backend.h"

namespace caravela {

class JobCheckpoints;

// The part names of a parallel task's file outputs (SinkNode::part), set by
// TaskCheckpointer::Open before the sinks open. Part names never repeat
// across parallelisms: a task continues the files of the old task it
// succeeds under their recorded names, and a task a rescale added writes
// new ones (the default name plus "-c<checkpoint>").
struct SinkParts {
  // By sink node (TaskGraph::sinks): the names the restored checkpoint gives.
  std::map<int, std::string> by_node;
  // Others: the default name for a stage of `stage_tasks` tasks in a plan
  // of `total_tasks` (0: this plan's), plus `suffix`.
  int stage_tasks = 0;
  int total_tasks = 0;
  std::string suffix;
};

// The default part name of task `index` of stage `stage` (of `stage_tasks`
// tasks, in a plan of `total_tasks`): "<index>" for a sink in a stage of
// several tasks, "s<stage>-<index>" for a dead letter in a plan of several
// tasks, else "" (no part suffix).
std::string DefaultSinkPart(int stage, int stage_tasks, int total_tasks, bool dead_letter,
                            int index);

struct TaskContext {
  JobSpec spec;
  RunOptions options;
  TaskPlacement placement;
  std::string name;  // "job" or "job/stage-1/task-2" (log prefix)
  MetricsRegistry* metrics = nullptr;
  StateBackend* state = nullptr;
  // Processing time: the injected clock (default the system's), or the
  // manual clock that arrival times drive (arrival_mode).
  SystemClock system_clock;
  ManualClock manual_clock;
  const Clock* clock = nullptr;
  bool arrival_mode = false;
  // The task's stage of a parallel job and the job's checkpoint signals
  // (null: the task runs the whole job, standalone).
  const StagePlan* stage = nullptr;
  JobCheckpoints* job = nullptr;
  int64_t epoch = 0;
  SinkParts sink_parts;

  bool parallel() const { return placement.plan != nullptr; }
  // The task in log lines (LogContext): "stage-1/task-2", "" for a one-task job.
  std::string TaskLabel() const {
    return name.size() > spec.name.size() ? name.substr(spec.name.size() + 1) : std::string();
  }
  // True if operator `os` runs in this task's stage.
  bool OperatorHere(const OperatorSpec& os) const {
    if (!parallel()) return true;
    auto it = placement.plan->stage_of.find(os.name);
    return it != placement.plan->stage_of.end() && it->second == placement.stage;
  }
};

}  // namespace caravela
