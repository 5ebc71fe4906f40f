// Internal to worker/runtime: Task::Impl, a task made of its parts, each a
// class in a file of its own (docs/architecture.md walks them):
//   task_context.h     TaskContext: the job, the placement, options, clock;
//   task_graph.*       TaskGraph and GraphBuilder: the nodes and their wiring;
//   task_ingest.*      SourceIngest: decode, quarantine, merge by arrival;
//   task_dispatch.*    Dispatcher: batches through operators to sinks and
//                      exchange writers;
//   task_watermarks.*  WatermarkTracker: watermarks, markers, timers;
//   task_checkpointer.*, task_rescale.cc
//                      TaskCheckpointer: open, restore, take, rescaled restore;
//   task_status.*      TaskStatus: what other threads read, the progress line.
// The loop is here and in task.cc (Step, the standalone drivers),
// task_parallel.cc (a task of a parallel job) and task_replay.cc (lockstep
// replays driven by the JobRunner).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>

#include "worker/runtime/task.h"
#include "worker/runtime/task_checkpointer.h"
#include "worker/runtime/task_context.h"
#include "worker/runtime/task_dispatch.h"
#include "worker/runtime/task_graph.h"
#include "worker/runtime/task_ingest.h"
#include "worker/runtime/task_status.h"
#include "worker/runtime/task_watermarks.h"

namespace caravela {

struct Task::Impl {
  TaskContext ctx;
  std::unique_ptr<StateBackend> state_owner;
  TaskGraph graph;
  TaskStatus status{ctx, graph};
  SourceIngest ingest{ctx};
  Dispatcher dispatch{ctx, graph, status};
  WatermarkTracker watermarks{ctx, graph, ingest, dispatch, status};
  TaskCheckpointer checkpointer{ctx, graph, status, [this] { return Commit(true); }};
  std::chrono::steady_clock::time_point last_flush, last_state_flush;
  bool drained = false;   // parallel: every input read and propagated
  bool draining = false;  // options.end_of_input seen: unbounded sources stop at their end

  // One unit of work: input (the sources' next batches, or one arrival step
  // of a source), exchange input, then watermarks, timers, watermark
  // markers, exchange writers' buffers, and the periodic state and sink
  // flush. The drivers (RunWallMode, RunArrivalMode, RunParallel, the
  // Replay* calls) say what a step does.
  struct StepSpec {
    enum class Input { kNone, kSources, kArrival };
    Input input = Input::kSources;
    int source_timeout_ms = 0;  // kSources: wait at most this for a batch
    int source = -1;            // kArrival: the records of `source` that
    int64_t arrival = 0;        // arrived at `arrival`
    enum class Exchanges { kNone, kPoll, kReplay };
    // kPoll: after the sources, waiting at most `exchange_wait_ms` when the
    // sources brought nothing; kReplay: everything, sorted by origin, first.
    Exchanges exchanges = Exchanges::kNone;
    int exchange_wait_ms = 0;
    bool watermarks = true;  // recompute and propagate, send markers
    bool force_markers = false;
    bool timers = true;
    bool flush = true;  // Commit(false)
  };
  struct StepResult {
    bool got = false;         // some records were applied
    bool inputs_done = true;  // every source and exchange input ended
  };
  absl::Status Step(const StepSpec& spec, StepResult* result);

  // Flushes operator state into the backend and commits it when `force` or
  // state_flush_interval_ms passed (never without `state`); flushes sinks
  // when `force` or 200 ms passed.
  absl::Status Commit(bool force, bool state = true);
  void Progress(bool force);
  // Reads lookup-table sources whole before anything else (SPEC §5).
  absl::Status Preload();
  // One batch of each source; marks exhausted ones finished.
  absl::Status StepSources(int timeout_ms, bool* got, bool* all_done);
  // Once options.end_of_input is set: unbounded sources stop at their
  // current end (then drain and finish).
  absl::Status MaybeStopAtEndOfInput();
  absl::Status MaybeCheckpoint();
  // The drivers.
  // Arrival mode: makes `step` the next step in arrival order (records of
  // all sources by arrival time, ties in source order; a due timer first).
  // False when every source is drained (and marked finished).
  absl::StatusOr<bool> NextArrivalStep(StepSpec* step);
  absl::Status RunArrivalMode();
  absl::Status RunWallMode();
  absl::Status RunParallel();
  absl::Status Finish();
};

}  // namespace caravela
