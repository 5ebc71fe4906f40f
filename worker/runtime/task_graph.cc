#include "worker/runtime/task_graph.h"

#include <algorithm>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "common/operator_kind.h"
#include "common/sink_kind.h"
#include "common/source_kind.h"
#include "worker/connectors/file_connectors.h"
#include "worker/connectors/sink_factory.h"
#include "worker/runtime/job_checkpoints.h"
#include "worker/runtime/task_dispatch.h"
#include "worker/runtime/task_ingest.h"

namespace caravela {

using task_internal::Edge;
using task_internal::kInvalidReasonNames;
using task_internal::kInvalidReasons;
using task_internal::NodeOutputs;
using task_internal::OperatorNode;
using task_internal::ReaderNode;
using task_internal::SinkNode;
using task_internal::SourceNode;
using task_internal::WriterNode;

absl::StatusOr<std::unique_ptr<RawSource>> GraphBuilder::OpenRawSource(
    const SourceNode& src, const std::map<int32_t, int64_t>& start_offsets) const {
  const SourceSpec& ss = *src.spec;
  SourceContext sc;
  sc.job_name = ctx_.spec.name;
  sc.embedded_bootstrap = ctx_.options.embedded_bootstrap;
  sc.partitions = src.owned;
  sc.share_tasks = src.share_tasks;
  sc.share_index = src.share_index;
  sc.start_offsets = start_offsets;
  absl::StatusOr<std::unique_ptr<RawSource>> raw = ss.kind->Create(ss, sc);
  if (!raw.ok()) {
    const absl::Status& st = raw.status();
    return absl::Status(st.code(), absl::StrCat("source ", ss.name, ": ", st.message()));
  }
  return raw;
}

std::string DefaultSinkPart(int stage, int stage_tasks, int total_tasks, bool dead_letter,
                            int index) {
  if (dead_letter) return total_tasks > 1 ? absl::StrCat("s", stage, "-", index) : "";
  return stage_tasks > 1 ? std::to_string(index) : "";
}

std::string GraphBuilder::SinkPart(int node, bool dead_letter) const {
  if (!ctx_.parallel()) return "";
  const SinkParts& parts = ctx_.sink_parts;
  if (auto it = parts.by_node.find(node); it != parts.by_node.end()) return it->second;
  const int stage_tasks = parts.stage_tasks > 0 ? parts.stage_tasks : ctx_.stage->tasks;
  const int total_tasks =
      parts.total_tasks > 0 ? parts.total_tasks : ctx_.placement.plan->total_tasks();
  std::string part = DefaultSinkPart(ctx_.placement.stage, stage_tasks, total_tasks, dead_letter,
                                     ctx_.placement.index);
  if (!parts.suffix.empty()) {
    absl::StrAppend(&part, part.empty() ? std::to_string(ctx_.placement.index) : "", parts.suffix);
  }
  return part;
}

absl::StatusOr<std::unique_ptr<Sink>> GraphBuilder::OpenTaskSink(size_t sink_index,
                                                                 const std::string& part,
                                                                 int global_id) const {
  SinkSpec ss = ctx_.spec.sinks[sink_index];
  if (!part.empty()) ss.kind->ForTask(ss, part);
  SinkContext sc;
  sc.job_name = ctx_.spec.name;
  sc.embedded_bootstrap = ctx_.options.embedded_bootstrap;
  sc.sink_index = static_cast<int>(sink_index);
  sc.epoch = ctx_.epoch;
  sc.checkpointed = checkpointed_;
  sc.fence = ctx_.placement.fence_sinks;
  if (ctx_.placement.fence_sinks) {
    sc.local_dir = ctx_.options.data_dir;
    sc.job_id = ctx_.placement.job_id;
  }
  sc.task = ctx_.parallel() ? global_id : -1;
  sc.from = ctx_.spec.FindOperator(ss.from);
  ASSIGN_OR_RETURN(std::unique_ptr<Sink> sink, MakeSink(ss, sc));
  absl::Status st = sink->Open();
  if (!st.ok()) {
    return absl::Status(st.code(), absl::StrCat("sink for ", ss.from, ": ", st.message()));
  }
  return sink;
}

absl::StatusOr<std::unique_ptr<Sink>> GraphBuilder::OpenDeadLetter(const std::string& part) const {
  const RunOptions& options = ctx_.options;
  std::string path = ctx_.spec.dead_letter_path.empty() ? options.data_dir + "/dead-letter.jsonl"
                                                        : ctx_.spec.dead_letter_path;
  // One dead-letter file per task: dead-letter.part-s<stage>-<index>.jsonl.
  if (!part.empty()) path = PartFilePath(path, part);
  // A cluster task's default dead letter is on its worker's own disk.
  const bool fence = ctx_.placement.fence_sinks;
  auto sink = std::make_unique<FileSink>(
      path, checkpointed_, fence && path.rfind(options.data_dir + "/", 0) == 0,
      fence ? ctx_.epoch : -1, fence ? ctx_.placement.job_id : std::string());
  RETURN_IF_ERROR(sink->Open());
  return sink;
}

absl::Status GraphBuilder::Build(Dispatcher& dispatch) {
  RETURN_IF_ERROR(BuildSources());
  RETURN_IF_ERROR(BuildOperators(dispatch));
  BuildOutputs();
  RETURN_IF_ERROR(OpenExchanges());
  return OpenSinks();
}

absl::Status GraphBuilder::BuildSources() {
  const JobSpec& spec = ctx_.spec;
  const int64_t start_time = ctx_.arrival_mode ? kMinTime : ctx_.clock->NowMs();
  std::vector<SourceNode>& sources = graph_.sources;
  sources.resize(spec.sources.size());
  for (size_t i = 0; i < spec.sources.size(); ++i) {
    const SourceSpec& ss = spec.sources[i];
    SourceNode& src = sources[i];
    src.spec = &ss;
    src.partition_path = FieldPath::Parse(ss.kind->PartitionField(ss));
    src.arrival_path = FieldPath::Parse(ss.kind->ArrivalField(ss));
    src.wm = std::make_unique<SourceWatermark>(ss.watermark, start_time);
    if (ctx_.parallel()) {
      const StagePlan& stage = *ctx_.stage;
      const bool mine =
          std::find(stage.sources.begin(), stage.sources.end(), ss.name) != stage.sources.end();
      const bool broadcast = std::find(stage.broadcast.begin(), stage.broadcast.end(), ss.name) !=
                             stage.broadcast.end();
      src.present = mine || broadcast;
      if (!src.present) continue;
      if (mine && stage.tasks > 1 && ss.kind->partitioned_log()) {
        auto it = ctx_.placement.source_partitions.find(ss.name);
        if (it == ctx_.placement.source_partitions.end()) {
          // A topic not created yet: the source takes its share once it is.
          src.share_tasks = stage.tasks;
          src.share_index = ctx_.placement.index;
        } else {
          for (int p = 0; p < it->second; ++p) {
            if (p % stage.tasks == ctx_.placement.index) src.owned.push_back(p);
          }
        }
        src.wm->SetOwnership(stage.tasks, ctx_.placement.index);
      }
    }
    ASSIGN_OR_RETURN(src.raw, OpenRawSource(src, {}));
    src.pos.applied = src.raw->Positions();
    src.pos.ResetLiveApplied();
    if (ctx_.arrival_mode && ss.kind->partitioned_log() && !ss.kind->ArrivalField(ss).empty()) {
      src.input.merged = true;
      src.input.staged.resize(static_cast<size_t>(src.raw->PartitionCount()));
    }
    if (ss.kind->partitioned_log()) src.wm->EnsurePartitions(src.raw->PartitionCount());
    std::string labels = absl::StrCat("source=\"", ss.name, "\"");
    src.counters.in = ctx_.metrics->Get("records_in_total", labels);
    for (int r = 1; r < kInvalidReasons; ++r) {
      src.counters.invalid[r] =
          ctx_.metrics->Get("invalid_records_total",
                            absl::StrCat(labels, ",reason=\"", kInvalidReasonNames[r], "\""));
    }
    if (ss.event_time.has_value()) {
      src.counters.delay.emplace(
          ctx_.metrics->GetHistogram("arrival_delay_ms", labels, DelayBucketsMs()));
    }
  }
  return absl::OkStatus();
}

absl::Status GraphBuilder::BuildOperators(Dispatcher& dispatch) {
  const JobSpec& spec = ctx_.spec;
  std::vector<OperatorNode>& ops = graph_.ops;
  const int S = graph_.S();
  // Spec order is topological: inputs are defined earlier.
  ops.resize(spec.operators.size());
  for (size_t i = 0; i < spec.operators.size(); ++i) {
    const OperatorSpec& os = spec.operators[i];
    OperatorNode& on = ops[i];
    on.spec = &os;
    for (const std::string& in : os.Inputs()) {
      int id = graph_.NodeId(in);
      if (id < 0 || id >= S + static_cast<int>(i)) {
        return absl::InvalidArgumentError(
            absl::StrCat("operator ", os.name, ": input \"", in, "\" is not defined before it"));
      }
      on.inputs.push_back(id);
    }
    OperatorBuildContext build;
    // The arrival field of the source at the root of input 0.
    int up = on.inputs[0];
    while (up >= S) up = ops[up - S].inputs.empty() ? -1 : ops[up - S].inputs[0];
    if (up >= 0) {
      const SourceSpec& us = *graph_.sources[up].spec;
      build.upstream_arrival_field = us.kind->ArrivalField(us);
    }
    ASSIGN_OR_RETURN(on.op, os.kind->Create(os, build));
    // The spec's edges name the kind's side outputs; the operator emits by
    // index into its own list: they must be one list.
    if (on.op->SideOutputs() != os.SideOutputs()) {
      return absl::InternalError(
          absl::StrCat("operator kind ", std::string(os.kind->name()),
                       ": its operator's side outputs [", absl::StrJoin(on.op->SideOutputs(), ", "),
                       "] differ from the kind's [", absl::StrJoin(os.SideOutputs(), ", "), "]"));
    }
    // Preloaded inputs (lookup tables) are read whole before the first
    // record of the others (Task::Impl::Preload).
    for (int in : os.kind->PreloadedInputs()) {
      const int table = on.inputs[static_cast<size_t>(in)];
      if (table >= 0 && table < S) graph_.sources[table].preload = true;
    }
    on.ctx = std::make_unique<OperatorContext>(os.name, ctx_.state, ctx_.metrics, ctx_.clock);
    on.ctx->set_epoch(ctx_.epoch);
    const std::string op_label = absl::StrCat("op=\"", os.name, "\"");
    on.records_in = ctx_.metrics->Get("operator_records_in_total", op_label);
    on.records_out = ctx_.metrics->Get("operator_records_out_total", op_label);
    for (const std::string& side : on.op->SideOutputs()) {
      on.side_records.push_back(ctx_.metrics->Get(
          "operator_side_records_total", absl::StrCat(op_label, ",output=\"", side, "\"")));
      if (side == "too_late") on.late = ctx_.metrics->Get("operator_late_records_total", op_label);
    }
    on.out.Resize(on.op->SideOutputs().size());
    on.out.SetDrain([&dispatch, id = S + static_cast<int>(i)] { return dispatch.Dispatch(id); });
    on.here = ctx_.OperatorHere(os);
    on.input_reader.assign(on.inputs.size(), -1);
    if (on.here) RETURN_IF_ERROR(on.op->Open(*on.ctx));
  }
  return absl::OkStatus();
}

// Outputs and key fields per node, and the edges between local nodes.
void GraphBuilder::BuildOutputs() {
  std::vector<NodeOutputs>& outputs = graph_.outputs;
  const std::vector<OperatorNode>& ops = graph_.ops;
  const int S = graph_.S();
  outputs.resize(graph_.sources.size() + ops.size());
  for (int i = 0; i < S; ++i) {
    const SourceSpec& ss = *graph_.sources[i].spec;
    outputs[i].sides.resize(1);
    outputs[i].side_names = {ss.name + ".invalid"};
    outputs[i].side_totals.assign(1, 0);
    for (const FieldPath& k : ss.key) {
      outputs[i].key_fields.push_back(k);
      outputs[i].key_names.push_back(k.ToString());
    }
  }
  for (size_t i = 0; i < ops.size(); ++i) {
    NodeOutputs& no = outputs[S + i];
    for (const std::string& side : ops[i].op->SideOutputs()) {
      no.side_names.push_back(ops[i].spec->name + "." + side);
    }
    no.sides.resize(no.side_names.size());
    no.side_totals.assign(no.side_names.size(), 0);
    std::vector<std::string> keys = ops[i].op->OutputKeyFields();
    // Joins combine records of several inputs, a project makes new ones:
    // their output has no key of its own (OperatorKind::InheritsInputKey).
    if (keys.empty() && !ops[i].inputs.empty() && ops[i].spec->kind->InheritsInputKey()) {
      no.key_fields = outputs[ops[i].inputs[0]].key_fields;
      no.key_names = outputs[ops[i].inputs[0]].key_names;
    } else {
      for (const std::string& k : keys) {
        no.key_fields.push_back(FieldPath{{k}});
        no.key_names.push_back(k);
      }
    }
    for (size_t in = 0; in < ops[i].inputs.size(); ++in) {
      const int from = ops[i].inputs[in];
      if (!graph_.NodeHere(from)) continue;  // fed by an exchange reader (OpenExchanges)
      if (ops[i].here) {
        outputs[from].main.push_back(Edge{static_cast<int>(i), static_cast<int>(in), -1});
      }
      // Edges into other stages' operators go to exchange writers (OpenExchanges).
    }
  }
}

absl::Status GraphBuilder::OpenExchanges() {
  if (!ctx_.parallel()) return absl::OkStatus();
  const TaskPlacement& placement = ctx_.placement;
  const JobPlan& plan = *placement.plan;
  const int S = graph_.S();
  // Readers: the exchanges feeding this stage; this task owns partition
  // `index` of each (an exchange has as many partitions as its consumers).
  for (int x : ctx_.stage->input_exchanges) {
    const ExchangePlan& ex = plan.exchanges[x];
    ReaderNode rn;
    int op = graph_.NodeId(ex.operator_name) - S;
    if (op < 0) return absl::InternalError("exchange of unknown operator " + ex.operator_name);
    rn.op = op;
    ExchangeReaderOptions ro;
    ro.memory = x < static_cast<int>(placement.memory.size()) ? placement.memory[x] : nullptr;
    if (ro.memory == nullptr && placement.network != nullptr) {
      ro.network = placement.network;
      ro.job_id = placement.job_id;
    }
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
    if (JobCheckpoints* job = ctx_.job; job != nullptr) {
      ro.on_barrier = [job](int64_t id, bool stop) { job->SawBarrier(id, stop); };
    }
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
    const int reader_id = static_cast<int>(graph_.readers.size());
    for (const ExchangePlan::Input& in : ex.inputs) {
      graph_.ops[op].input_reader[in.input] = reader_id;
    }
    graph_.readers.push_back(std::move(rn));
  }
  // Writers: the exchanges this stage's nodes feed. Producer ids number the
  // tasks of the producing stages consecutively, stages in id order.
  for (int x : ctx_.stage->output_exchanges) {
    const ExchangePlan& ex = plan.exchanges[x];
    WriterNode wn;
    ExchangeWriterOptions wo;
    wo.memory = x < static_cast<int>(placement.memory.size()) ? placement.memory[x] : nullptr;
    if (wo.memory == nullptr && placement.network != nullptr) {
      // Partition p is the consuming stage's task p.
      wo.network = placement.network;
      wo.job_id = placement.job_id;
      for (int p = 0; p < ex.partitions; ++p) {
        const size_t g =
            static_cast<size_t>(plan.FirstTask(ex.consumer_stage)) + static_cast<size_t>(p);
        if (g >= placement.task_addresses.size() || placement.task_addresses[g].empty()) {
          return absl::FailedPreconditionError(
              absl::StrCat("exchange ", ex.topic, ": no address of the worker running task ", g,
                           " (the coordinator sends them with the assignment)"));
        }
        wo.peers.push_back(placement.task_addresses[g]);
      }
      wo.cancel = placement.cancel;
    }
    wo.bootstrap = placement.exchange_bootstrap;
    wo.compression = ctx_.spec.exchange_compression;
    wo.topic = ex.topic;
    wo.partitions = ex.partitions;
    wo.max_parallelism = ctx_.spec.max_parallelism;
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
    const int op = graph_.NodeId(ex.operator_name) - S;
    wo.keys.resize(graph_.ops[op].inputs.size());
    const int writer_id = static_cast<int>(graph_.writers.size());
    for (const ExchangePlan::Input& in : ex.inputs) {
      if (in.producer_stage != placement.stage) continue;
      wo.keys[in.input] = in.key;
      const int from = graph_.NodeId(in.from);
      graph_.outputs[from].main.push_back(Edge{-1, in.input, -1, writer_id});
      wn.from.push_back(from);
    }
    auto writer = ExchangeWriter::Open(wo);
    if (!writer.ok()) {
      return absl::Status(writer.status().code(),
                          absl::StrCat("exchange ", ex.topic, ": ", writer.status().message()));
    }
    wn.writer = std::move(*writer);
    wn.sent_at = std::chrono::steady_clock::now();
    graph_.writers.push_back(std::move(wn));
  }
  return absl::OkStatus();
}

// Sinks run in the stage of the node they read; side outputs nobody reads
// go to the dead letter.
absl::Status GraphBuilder::OpenSinks() {
  const JobSpec& spec = ctx_.spec;
  std::vector<NodeOutputs>& outputs = graph_.outputs;
  std::vector<SinkNode>& sinks = graph_.sinks;
  MetricsRegistry* metrics = ctx_.metrics;
  for (size_t sink_index = 0; sink_index < spec.sinks.size(); ++sink_index) {
    const SinkSpec& ss = spec.sinks[sink_index];
    std::string_view from_node = ss.from;
    if (graph_.NodeId(from_node) < 0) from_node = from_node.substr(0, from_node.rfind('.'));
    if (!graph_.NodeHere(graph_.NodeId(from_node))) continue;
    SinkNode sn;
    sn.name = ss.from;
    sn.spec_index = static_cast<int>(sink_index);
    sn.part = SinkPart(static_cast<int>(sinks.size()), /*dead_letter=*/false);
    ASSIGN_OR_RETURN(sn.sink, OpenTaskSink(sink_index, sn.part, ctx_.placement.global_id));
    sn.written = metrics->Get("sink_records_total", absl::StrCat("from=\"", ss.from, "\""));
    // Per sink (several may read one output): "file:out/x.jsonl", "kafka:topic", ...
    const std::string target = ss.Label();
    const std::string sink_labels = absl::StrCat(
        "from=\"", ss.from, "\",sink=\"",
        absl::StrReplaceAll(target, {{"\\", "\\\\"}, {"\"", "\\\""}, {"\n", "\\n"}}), "\"");
    sn.revisions = metrics->Get("sink_revisions_written_total", sink_labels);
    sn.rejected = metrics->Get("sink_revisions_rejected_total", sink_labels);
    int sink_id = static_cast<int>(sinks.size());
    sinks.push_back(std::move(sn));
    int node = graph_.NodeId(ss.from);
    if (node >= 0) {
      outputs[node].main.push_back(Edge{-1, 0, sink_id});
      continue;
    }
    bool found = false;
    for (size_t n = 0; n < outputs.size() && !found; ++n) {
      for (size_t s = 0; s < outputs[n].side_names.size(); ++s) {
        if (outputs[n].side_names[s] == ss.from) {
          outputs[n].sides[s].push_back(Edge{-1, 0, sink_id});
          found = true;
          break;
        }
      }
    }
    if (!found) return absl::InvalidArgumentError("sink reads unknown output \"" + ss.from + "\"");
  }

  // Dead letter: every side output nobody reads.
  bool need_dead_letter = false;
  for (size_t n = 0; n < outputs.size(); ++n) {
    if (!graph_.NodeHere(static_cast<int>(n))) continue;
    for (const auto& edges : outputs[n].sides) {
      need_dead_letter = need_dead_letter || edges.empty();
    }
  }
  if (!need_dead_letter) return absl::OkStatus();
  SinkNode sn;
  sn.name = "dead-letter";
  sn.dead_letter = true;
  sn.part = SinkPart(static_cast<int>(sinks.size()), /*dead_letter=*/true);
  ASSIGN_OR_RETURN(sn.sink, OpenDeadLetter(sn.part));
  sn.written = metrics->Get("dead_letter_records_total");
  graph_.dead_letter_sink = static_cast<int>(sinks.size());
  sinks.push_back(std::move(sn));
  for (size_t n = 0; n < outputs.size(); ++n) {
    if (!graph_.NodeHere(static_cast<int>(n))) continue;
    for (auto& edges : outputs[n].sides) {
      if (edges.empty()) edges.push_back(Edge{-1, 0, graph_.dead_letter_sink});
    }
  }
  return absl::OkStatus();
}

}  // namespace caravela
