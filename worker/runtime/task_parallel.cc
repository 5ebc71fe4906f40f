// A task of a parallel job (SPEC §8): its exchange readers and writers,
// watermark markers, the loop (RunParallel) and its part of job-wide
// checkpoints (ServeCheckpoints). The rest of the task is task.cc.
#include <algorithm>
#include <chrono>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/failpoint.h"
#include "spdlog/spdlog.h"
#include "worker/exchange/exchange.h"
#include "worker/runtime/job_checkpoints.h"
#include "worker/runtime/task.h"
#include "worker/runtime/task_internal.h"

namespace caravela {
namespace {

std::shared_ptr<spdlog::logger> Log() { return RuntimeLogger(); }

using task_internal::InputsWatermark;
using task_internal::MinOverActiveInputs;

}  // namespace

// ---- Exchanges (parallel jobs, SPEC §8) ---------------------------------------

absl::Status Task::Impl::OpenExchanges() {
  if (!parallel()) return absl::OkStatus();
  const JobPlan& plan = *placement.plan;
  // Readers: the exchanges feeding this stage; this task owns partition
  // `index` of each (an exchange has as many partitions as its consumers).
  for (int x : stage->input_exchanges) {
    const ExchangePlan& ex = plan.exchanges[x];
    ReaderNode rn;
    int op = NodeId(ex.operator_name) - S();
    if (op < 0) return absl::InternalError("exchange of unknown operator " + ex.operator_name);
    rn.op = op;
    ExchangeReaderOptions ro;
    ro.memory = x < static_cast<int>(placement.memory.size()) ? placement.memory[x] : nullptr;
    ro.bootstrap = placement.exchange_bootstrap;
    ro.topic = ex.topic;
    ro.partitions = {placement.index};
    ro.producers = 0;
    for (int ps : ex.producer_stages) ro.producers += plan.stages[ps].tasks;
    ro.epoch = placement.epoch;
    ro.start = "latest";
    ro.origin = placement.replay;  // replays order records by where they were read
    ro.flow = x < static_cast<int>(placement.flow.size()) ? placement.flow[x] : nullptr;
    if (placement.group_flow && ro.memory == nullptr) ro.flow_group = ex.topic;
    auto reader = ExchangeReader::Open(ro);
    if (!reader.ok()) {
      return absl::Status(reader.status().code(),
                          absl::StrCat("exchange ", ex.topic, ": ", reader.status().message()));
    }
    rn.reader = std::move(*reader);
    rn.topic = ex.topic;
    // Producer ids number the producing stages' tasks in stage order.
    for (int ps : ex.producer_stages) {
      for (int i = 0; i < plan.stages[ps].tasks; ++i) {
        rn.producer_tasks.push_back(plan.FirstTask(ps) + i);
      }
    }
    const int reader_id = static_cast<int>(readers.size());
    for (const ExchangePlan::Input& in : ex.inputs) ops[op].input_reader[in.input] = reader_id;
    readers.push_back(std::move(rn));
  }
  // Writers: the exchanges this stage's nodes feed. Producer ids number the
  // tasks of the producing stages consecutively, stages in id order.
  for (int x : stage->output_exchanges) {
    const ExchangePlan& ex = plan.exchanges[x];
    WriterNode wn;
    ExchangeWriterOptions wo;
    wo.memory = x < static_cast<int>(placement.memory.size()) ? placement.memory[x] : nullptr;
    wo.bootstrap = placement.exchange_bootstrap;
    wo.topic = ex.topic;
    wo.partitions = ex.partitions;
    wo.producer = placement.index;
    for (int ps : ex.producer_stages) {
      if (ps == placement.stage) break;
      wo.producer += plan.stages[ps].tasks;
    }
    wo.epoch = placement.epoch;
    wo.flow = x < static_cast<int>(placement.flow.size()) ? placement.flow[x] : nullptr;
    if (placement.group_flow && wo.memory == nullptr) {
      wo.flow_group = ex.topic;
      wo.cancel = placement.cancel;
    }
    const int op = NodeId(ex.operator_name) - S();
    wo.keys.resize(ops[op].inputs.size());
    const int writer_id = static_cast<int>(writers.size());
    for (const ExchangePlan::Input& in : ex.inputs) {
      if (in.producer_stage != placement.stage) continue;
      wo.keys[in.input] = in.key;
      const int from = NodeId(in.from);
      outputs[from].main.push_back(Edge{-1, in.input, -1, writer_id});
      wn.from.push_back(from);
    }
    auto writer = ExchangeWriter::Open(wo);
    if (!writer.ok()) {
      return absl::Status(writer.status().code(),
                          absl::StrCat("exchange ", ex.topic, ": ", writer.status().message()));
    }
    wn.writer = std::move(*writer);
    wn.sent_at = std::chrono::steady_clock::now();
    writers.push_back(std::move(wn));
  }
  return absl::OkStatus();
}

absl::Status Task::Impl::PollReaders(int timeout_ms, bool* got) {
  for (ReaderNode& rn : readers) {
    for (RecordBatch& b : rn.by_input) b.clear();
    ASSIGN_OR_RETURN(int n, rn.reader->Poll(options.batch_size, timeout_ms, &rn.by_input));
    if (n == 0) continue;
    *got = true;
    for (size_t in = 0; in < rn.by_input.size(); ++in) {
      if (!rn.by_input[in].empty()) {
        RETURN_IF_ERROR(Feed(rn.op, static_cast<int>(in), rn.by_input[in]));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status Task::Impl::SendWatermarkMarkers(bool force) {
  const auto now = std::chrono::steady_clock::now();
  for (WriterNode& wn : writers) {
    const InputsWatermark in = MinOverActiveInputs(
        wn.from.size(), [&](size_t k) { return node_wm[wn.from[k]]; },
        [&](size_t k) { return node_idle[wn.from[k]] != 0; });
    const int64_t w = in.watermark;
    const bool idle = in.idle;
    const bool moved = w > wn.sent_wm;
    const bool due = now - wn.sent_at >= std::chrono::milliseconds(200);
    // At least every 200 ms while it moves, at once when it ends and when
    // idleness changes (SPEC §8).
    if ((moved && (due || w == kMaxTime || force)) || idle != wn.sent_idle) {
      RETURN_IF_ERROR(wn.writer->WriteWatermark(std::max(w, wn.sent_wm), idle));
      wn.sent_wm = std::max(w, wn.sent_wm);
      wn.sent_idle = idle;
      wn.sent_at = now;
    }
  }
  return absl::OkStatus();
}

// ---- Parallel jobs: the task loop and its part of job-wide checkpoints ------

absl::Status Task::Impl::ServeCheckpoints() {
  // Commit the sinks' output of a checkpoint complete job-wide.
  const int64_t done = job->completed();
  if (done > committed_id && stored_id >= done) {
    if (checkpoints != nullptr) checkpoints->Pin(done);
    for (SinkNode& sn : sinks) RETURN_IF_ERROR(sn.sink->Commit(done));
    committed_id = done;
    Failpoint("checkpoint.after_sink_commit");
    CommitSourceOffsets(done);
  }
  // Store a triggered checkpoint once every exchange input is aligned on it.
  const int64_t n = job->triggered();
  if (n <= stored_id || stopped || checkpoints == nullptr) return absl::OkStatus();
  if (committed_id < stored_id) return absl::OkStatus();  // n-1 not committed yet
  for (const ReaderNode& rn : readers) {
    if (rn.reader->AlignedBarrier() != n) return absl::OkStatus();
  }
  RETURN_IF_ERROR(TakeCheckpoint("", n));
  stored_id = n;
  job->Stored(placement.global_id, n);
  Failpoint("checkpoint.after_task_stored");
  for (ReaderNode& rn : readers) rn.reader->ReleaseBarrier();
  if (job->stops_at(n)) stopped = true;
  return absl::OkStatus();
}

absl::Status Task::Impl::RunParallel() {
  bool any_source = false;
  for (const SourceNode& src : sources) any_source = any_source || src.present;
  bool draining = false;
  bool idle = false;  // the last step got no records
  for (;;) {
    if (job->failed()) return absl::CancelledError("another task of the job failed");
    // Without checkpoints a stop ends the task at once (nothing to commit).
    if (checkpoints == nullptr && options.stop != nullptr && options.stop->load()) break;
    RETURN_IF_ERROR(ServeCheckpoints());
    if (job->finished() && (drained || stopped) && committed_id >= job->completed()) break;
    if (stopped) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      continue;
    }
    RETURN_IF_ERROR(MaybeStopAtEndOfInput(&draining));
    bool got = false;
    bool inputs_done = true;
    // A task without exchange inputs waits on its sources after a step that
    // got nothing (no spinning on an empty topic).
    RETURN_IF_ERROR(StepSources(readers.empty() && idle ? 5 : 0, &got, &inputs_done));
    // Wait a little on the exchanges when there is nothing else to do.
    RETURN_IF_ERROR(PollReaders(got || (any_source && !drained && !inputs_done) ? 0 : 5, &got));
    for (const ReaderNode& rn : readers) inputs_done = inputs_done && rn.reader->finished();
    RETURN_IF_ERROR(UpdateWatermarks());
    RETURN_IF_ERROR(FireTimers());
    RETURN_IF_ERROR(SendWatermarkMarkers(false));
    // What this step wrote waits no longer than the step in a writer's buffer.
    for (WriterNode& wn : writers) RETURN_IF_ERROR(wn.writer->SendBuffered());
    RETURN_IF_ERROR(Commit(false));
    if (inputs_done && !drained) {
      // Everything read and propagated (the +inf watermark fired everything).
      RETURN_IF_ERROR(Commit(true));
      RETURN_IF_ERROR(SendWatermarkMarkers(true));
      for (WriterNode& wn : writers) RETURN_IF_ERROR(wn.writer->Flush(30000));
      drained = true;
      job->SetDrained(placement.global_id);
      Log()->debug("task {} drained", name);
    }
    idle = !got;
    if (idle && readers.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  RETURN_IF_ERROR(Commit(true));
  for (WriterNode& wn : writers) RETURN_IF_ERROR(wn.writer->Flush(30000));
  PublishPartitions(true);  // the last report holds the final positions
  return CloseSinks();
}

}  // namespace caravela
