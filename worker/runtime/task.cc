#include "worker/runtime/task.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <map>
#include <optional>
#include <thread>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "caravela/v1/job.pb.h"
#include "common/expr.h"
#include "common/failpoint.h"
#include "common/json.h"
#include "common/logging.h"
#include "common/operator_kind.h"
#include "common/sink_kind.h"
#include "common/source_kind.h"
#include "spdlog/spdlog.h"
#include "worker/checkpoint/checkpoint_manager.h"
#include "worker/checkpoint/manifest_fields.h"
#include "worker/connectors/file_connectors.h"
#include "worker/connectors/kafka_sink.h"
#include "worker/connectors/kafka_source.h"
#include "worker/connectors/sink_factory.h"
#include "worker/exchange/exchange.h"
#include "worker/operators/basic_operators.h"
#include "worker/operators/dedup_operator.h"
#include "worker/operators/interval_join_operator.h"
#include "worker/operators/table_join_operators.h"
#include "worker/operators/window_join_operator.h"
#include "worker/operators/window_operator.h"
#include "worker/runtime/event_time.h"
#include "worker/runtime/job_checkpoints.h"
#include "worker/runtime/task_internal.h"
#include "worker/runtime/watermark.h"
#include "xxhash.h"

namespace caravela {

std::shared_ptr<spdlog::logger> RuntimeLogger() {
  static const std::shared_ptr<spdlog::logger> log = SubsystemLogger("runtime");
  return log;
}

std::string CheckpointStorageUrl(const JobSpec& spec, const std::string& data_dir) {
  if (!spec.checkpoint.storage.empty()) return spec.checkpoint.storage;
  return "file://" + std::filesystem::absolute(data_dir + "/checkpoints").string();
}

namespace {

std::shared_ptr<spdlog::logger> Log() { return RuntimeLogger(); }

using task_internal::InputsWatermark;
using task_internal::InvalidReason;
using task_internal::kBadEventTime;
using task_internal::kFutureEventTime;
using task_internal::kInvalidReasonNames;
using task_internal::kInvalidReasons;
using task_internal::kMalformed;
using task_internal::kMissingEventTime;
using task_internal::kTombstone;
using task_internal::kValidRecord;
using task_internal::MinOverActiveInputs;

}  // namespace

Task::~Task() = default;

StateBackend& Task::state() { return *impl_->state; }
const std::string& Task::name() const { return impl_->name; }
std::string Task::log_label() const { return impl_->TaskLabel(); }
int64_t Task::records_in() const { return impl_->records_in.load(std::memory_order_relaxed); }
int64_t Task::watermark() const {
  return impl_->published_watermark.load(std::memory_order_relaxed);
}
int64_t Task::next_checkpoint_id() const {
  return impl_->checkpoints == nullptr ? 1 : impl_->checkpoints->next_checkpoint_id();
}
int64_t Task::records_out() const { return impl_->records_out.load(std::memory_order_relaxed); }
int64_t Task::consumer_lag() const {
  // Live per partition (see partitions()) once published; before that, as of
  // the task's last watermark update.
  const std::vector<PartitionStatus> parts = partitions();
  if (parts.empty()) return impl_->published_lag.load(std::memory_order_relaxed);
  int64_t lag = 0;
  for (const PartitionStatus& p : parts) lag += p.lag;
  return lag;
}

int64_t Task::state_bytes() const {
  return impl_->published_state_bytes.load(std::memory_order_relaxed);
}

void Task::PublishPartitionMetrics(const std::string& job,
                                   const std::vector<PartitionStatus>& partitions, int64_t now_ms,
                                   MetricsRegistry* metrics) {
  for (const PartitionStatus& p : partitions) {
    const std::string labels =
        absl::StrCat("job=\"", job, "\",source=\"", p.source, "\",partition=\"", p.partition, "\"");
    metrics->Get("source_partition_offset", labels)->Set(p.offset);
    metrics->Get("source_partition_lag_records", labels)->Set(p.lag);
    metrics->Get("source_partition_idle", labels)->Set(p.idle ? 1 : 0);
    // Before its first record a partition has no watermark yet.
    if (p.watermark_ms <= kMinTime || p.watermark_ms >= kMaxTime) continue;
    metrics->Get("source_partition_watermark_ms", labels)->Set(p.watermark_ms);
    metrics->Get("source_partition_watermark_lag_ms", labels)
        ->Set(std::max<int64_t>(0, now_ms - p.watermark_ms));
  }
}

Task::Activity Task::activity() const {
  std::lock_guard<std::mutex> lock(impl_->partitions_mu);
  return impl_->published_activity;
}

void Task::ActivityToProto(const Activity& a, v1::TaskActivity* out) {
  for (const auto& [side, n] : a.side_records) (*out->mutable_side_records())[side] = n;
  out->set_records_late(a.records_late);
  out->set_records_too_late(a.records_too_late);
  for (const ExchangeInputStatus& e : a.exchange_inputs) {
    v1::ExchangeInputStatus* p = out->add_exchange_inputs();
    p->set_exchange(e.exchange);
    p->set_partition(e.partition);
    p->set_producer_task(e.producer_task);
    p->set_watermark_ms(e.watermark_ms);
    p->set_idle(e.idle);
  }
}

void Task::PartitionToProto(const PartitionStatus& p, v1::SourcePartitionStatus* out) {
  out->set_source(p.source);
  out->set_partition(p.partition);
  out->set_offset(p.offset);
  out->set_lag(p.lag);
  out->set_watermark_ms(p.watermark_ms);
  out->set_idle(p.idle);
}

std::vector<Task::PartitionStatus> Task::partitions() const {
  std::lock_guard<std::mutex> lock(impl_->partitions_mu);
  std::vector<PartitionStatus> out = impl_->published_partitions;
  // Offsets and lag of Kafka partitions are read live, so that they stay
  // true while the task thread is busy or blocked (a slow sink): position
  // after the last applied batch, log end as the client last saw it.
  for (size_t i = 0; i < out.size() && i < impl_->published_live.size(); ++i) {
    const Impl::LiveLag& live = impl_->published_live[i];
    if (live.raw == nullptr) continue;
    out[i].offset = live.applied->load(std::memory_order_relaxed);
    const int64_t high = live.raw->HighWatermark(out[i].partition);
    if (high >= out[i].offset) out[i].lag = high - out[i].offset;
  }
  return out;
}

absl::StatusOr<std::unique_ptr<Task>> Task::Create(const JobSpec& spec, RunOptions options,
                                                   TaskPlacement placement,
                                                   MetricsRegistry* metrics) {
  std::unique_ptr<Task> t(new Task());
  t->impl_ = std::make_unique<Impl>();
  Impl& im = *t->impl_;
  im.spec = spec;
  im.options = std::move(options);
  im.placement = std::move(placement);
  im.metrics = metrics;
  im.job = im.placement.checkpoints;
  im.name = spec.name;
  std::string dir = im.options.data_dir;
  if (im.parallel()) {
    im.stage = &im.placement.plan->stages[im.placement.stage];
    im.name = absl::StrCat(spec.name, "/stage-", im.placement.stage, "/task-", im.placement.index);
    dir = absl::StrCat(im.options.data_dir, "/task-", im.placement.global_id);
  }
  LogContext log_context(spec.name, im.TaskLabel());
  if (im.options.in_memory_state) {
    im.state_owner = NewMemoryBackend();
  } else {
    // Every run starts from empty local state: the state of a previous run is
    // ahead of its last checkpoint (or, without checkpoints, of the input's
    // start), so reusing it would count events twice. A checkpoint or
    // savepoint, if any, is restored into it below.
    std::error_code ec;
    std::filesystem::remove_all(dir + "/state", ec);
    std::filesystem::create_directories(dir, ec);
    ASSIGN_OR_RETURN(im.state_owner, OpenRocksDbBackend(dir + "/state", im.options.state_budget));
  }
  im.state = im.state_owner.get();
  RETURN_IF_ERROR(im.OpenCheckpoints());
  RETURN_IF_ERROR(im.Build());
  RETURN_IF_ERROR(im.Restore());
  return t;
}

absl::StatusOr<std::unique_ptr<RawSource>> Task::Impl::OpenRawSource(
    const SourceSpec& ss, const std::vector<int32_t>& owned,
    const std::map<int32_t, int64_t>& start_offsets) {
  SourceContext sc;
  sc.job_name = spec.name;
  sc.embedded_bootstrap = options.embedded_bootstrap;
  sc.partitions = owned;
  sc.start_offsets = start_offsets;
  absl::StatusOr<std::unique_ptr<RawSource>> raw = ss.kind->Create(ss, sc);
  if (!raw.ok()) {
    const absl::Status& st = raw.status();
    return absl::Status(st.code(), absl::StrCat("source ", ss.name, ": ", st.message()));
  }
  return raw;
}

absl::StatusOr<std::unique_ptr<Sink>> Task::Impl::OpenTaskSink(size_t sink_index, int index,
                                                               int global_id) {
  SinkSpec ss = spec.sinks[sink_index];
  if (parallel() && stage->tasks > 1) ss.kind->ForTask(ss, index);
  SinkContext sc;
  sc.job_name = spec.name;
  sc.embedded_bootstrap = options.embedded_bootstrap;
  sc.sink_index = static_cast<int>(sink_index);
  sc.epoch = epoch;
  sc.checkpointed = checkpoints != nullptr;
  sc.fence = placement.fence_sinks;
  if (placement.fence_sinks) sc.local_dir = options.data_dir;
  sc.task = parallel() ? global_id : -1;
  sc.from = spec.FindOperator(ss.from);
  ASSIGN_OR_RETURN(std::unique_ptr<Sink> sink, MakeSink(ss, sc));
  absl::Status st = sink->Open();
  if (!st.ok()) {
    return absl::Status(st.code(), absl::StrCat("sink for ", ss.from, ": ", st.message()));
  }
  return sink;
}

absl::StatusOr<std::unique_ptr<Sink>> Task::Impl::OpenDeadLetter(int index) {
  std::string path = spec.dead_letter_path.empty() ? options.data_dir + "/dead-letter.jsonl"
                                                   : spec.dead_letter_path;
  // One dead-letter file per task: dead-letter.part-s<stage>-<index>.jsonl
  // (by stage and index, like the other sinks' part files, so a rescaled
  // task continues the file of the old task with its index).
  if (parallel() && placement.plan->total_tasks() > 1) {
    path = PartFilePath(path, absl::StrCat("s", placement.stage, "-", index));
  }
  // A cluster task's default dead letter is on its worker's own disk.
  auto sink = std::make_unique<FileSink>(
      path, checkpoints != nullptr,
      placement.fence_sinks && path.rfind(options.data_dir + "/", 0) == 0,
      placement.fence_sinks ? epoch : -1);
  RETURN_IF_ERROR(sink->Open());
  return sink;
}

absl::Status Task::Impl::Build() {
  // Processing time: arrival-driven iff every source has an arrival_field.
  arrival_mode = ArrivalDriven(spec);
  // A task of a parallel job sees only part of the input: processing time is
  // the clock's (arrival times still travel with the records), unless the job
  // replays in lockstep (JobRunner), which drives every task's clock.
  if (parallel() && !placement.replay) arrival_mode = false;
  clock = arrival_mode ? static_cast<const Clock*>(&manual_clock)
                       : (options.clock ? options.clock : &system_clock);
  int64_t start_time = arrival_mode ? kMinTime : clock->NowMs();

  // Sources.
  sources.resize(spec.sources.size());
  for (size_t i = 0; i < spec.sources.size(); ++i) {
    const SourceSpec& ss = spec.sources[i];
    SourceNode& src = sources[i];
    src.spec = &ss;
    src.partition_path = FieldPath::Parse(ss.kind->PartitionField(ss));
    src.arrival_path = FieldPath::Parse(ss.kind->ArrivalField(ss));
    src.wm = std::make_unique<SourceWatermark>(ss.watermark, start_time);
    if (parallel()) {
      const bool mine =
          std::find(stage->sources.begin(), stage->sources.end(), ss.name) != stage->sources.end();
      const bool broadcast = std::find(stage->broadcast.begin(), stage->broadcast.end(), ss.name) !=
                             stage->broadcast.end();
      src.present = mine || broadcast;
      if (!src.present) continue;
      if (mine && stage->tasks > 1 && ss.kind->partitioned_log()) {
        auto it = placement.source_partitions.find(ss.name);
        if (it == placement.source_partitions.end()) {
          return absl::InternalError(absl::StrCat("source ", ss.name, ": partition count unknown"));
        }
        for (int p = 0; p < it->second; ++p) {
          if (p % stage->tasks == placement.index) src.owned.push_back(p);
        }
        src.wm->SetOwnership(stage->tasks, placement.index);
      }
    }
    ASSIGN_OR_RETURN(src.raw, OpenRawSource(ss, src.owned, {}));
    src.applied = src.raw->Positions();
    src.ResetLiveApplied();
    if (arrival_mode && ss.kind->partitioned_log() && !ss.kind->ArrivalField(ss).empty()) {
      src.merged = true;
      src.staged.resize(static_cast<size_t>(src.raw->PartitionCount()));
    }
    if (ss.kind->partitioned_log()) src.wm->EnsurePartitions(src.raw->PartitionCount());
    std::string labels = absl::StrCat("source=\"", ss.name, "\"");
    src.in = metrics->Get("records_in_total", labels);
    for (int r = 1; r < kInvalidReasons; ++r) {
      src.invalid[r] =
          metrics->Get("invalid_records_total",
                       absl::StrCat(labels, ",reason=\"", kInvalidReasonNames[r], "\""));
    }
    if (ss.event_time.has_value()) {
      src.delay.emplace(metrics->GetHistogram("arrival_delay_ms", labels, DelayBucketsMs()));
    }
  }

  // Operators (spec order is topological: inputs are defined earlier).
  ops.resize(spec.operators.size());
  for (size_t i = 0; i < spec.operators.size(); ++i) {
    const OperatorSpec& os = spec.operators[i];
    OperatorNode& on = ops[i];
    on.spec = &os;
    for (const std::string& in : os.Inputs()) {
      int id = NodeId(in);
      if (id < 0 || id >= S() + static_cast<int>(i)) {
        return absl::InvalidArgumentError(
            absl::StrCat("operator ", os.name, ": input \"", in, "\" is not defined before it"));
      }
      on.inputs.push_back(id);
    }
    OperatorBuildContext build;
    // The arrival field of the source at the root of input 0.
    int up = on.inputs[0];
    while (up >= S()) up = ops[up - S()].inputs.empty() ? -1 : ops[up - S()].inputs[0];
    if (up >= 0) {
      const SourceSpec& us = *sources[up].spec;
      build.upstream_arrival_field = us.kind->ArrivalField(us);
    }
    ASSIGN_OR_RETURN(on.op, os.kind->Create(os, build));
    // Preloaded inputs (lookup tables) are read whole before the first
    // record of the others (Preload).
    for (int in : os.kind->PreloadedInputs()) {
      const int table = on.inputs[static_cast<size_t>(in)];
      if (table >= 0 && table < S()) sources[table].preload = true;
    }
    on.ctx = std::make_unique<OperatorContext>(os.name, state, metrics, clock);
    on.ctx->set_epoch(epoch);
    const std::string op_label = absl::StrCat("op=\"", os.name, "\"");
    on.records_in = metrics->Get("operator_records_in_total", op_label);
    on.records_out = metrics->Get("operator_records_out_total", op_label);
    for (const std::string& side : on.op->SideOutputs()) {
      on.side_records.push_back(metrics->Get("operator_side_records_total",
                                             absl::StrCat(op_label, ",output=\"", side, "\"")));
      if (side == "too_late") on.late = metrics->Get("operator_late_records_total", op_label);
    }
    on.out.Resize(on.op->SideOutputs().size());
    on.out.SetDrain([this, id = S() + static_cast<int>(i)] { return Dispatch(id); });
    on.here = OperatorHere(os);
    on.input_reader.assign(on.inputs.size(), -1);
    if (on.here) RETURN_IF_ERROR(on.op->Open(*on.ctx));
  }

  // Outputs and key fields per node.
  outputs.resize(sources.size() + ops.size());
  node_wm.assign(outputs.size(), kMinTime);
  node_idle.assign(outputs.size(), 0);
  for (int i = 0; i < S(); ++i) {
    outputs[i].sides.resize(1);
    outputs[i].side_names = {sources[i].spec->name + ".invalid"};
    outputs[i].side_totals.assign(1, 0);
    for (const FieldPath& k : sources[i].spec->key) {
      outputs[i].key_fields.push_back(k);
      outputs[i].key_names.push_back(k.ToString());
    }
  }
  for (size_t i = 0; i < ops.size(); ++i) {
    NodeOutputs& no = outputs[S() + i];
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
      if (!NodeHere(from)) continue;  // fed by an exchange reader (OpenExchanges)
      if (ops[i].here) {
        outputs[from].main.push_back(Edge{static_cast<int>(i), static_cast<int>(in), -1});
      }
      // Edges into other stages' operators go to exchange writers (OpenExchanges).
    }
  }
  RETURN_IF_ERROR(OpenExchanges());

  // Sinks: a sink runs in the stage of the node it reads.
  for (size_t sink_index = 0; sink_index < spec.sinks.size(); ++sink_index) {
    const SinkSpec& ss = spec.sinks[sink_index];
    std::string_view from_node = ss.from;
    if (NodeId(from_node) < 0) from_node = from_node.substr(0, from_node.rfind('.'));
    if (!NodeHere(NodeId(from_node))) continue;
    SinkNode sn;
    sn.name = ss.from;
    sn.spec_index = static_cast<int>(sink_index);
    ASSIGN_OR_RETURN(sn.sink, OpenTaskSink(sink_index, placement.index, placement.global_id));
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
    int node = NodeId(ss.from);
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
    if (!NodeHere(static_cast<int>(n))) continue;
    for (const auto& edges : outputs[n].sides) {
      need_dead_letter = need_dead_letter || edges.empty();
    }
  }
  if (need_dead_letter) {
    SinkNode sn;
    sn.name = "dead-letter";
    sn.dead_letter = true;
    ASSIGN_OR_RETURN(sn.sink, OpenDeadLetter(placement.index));
    sn.written = metrics->Get("dead_letter_records_total");
    dead_letter_sink = static_cast<int>(sinks.size());
    sinks.push_back(std::move(sn));
    for (size_t n = 0; n < outputs.size(); ++n) {
      if (!NodeHere(static_cast<int>(n))) continue;
      for (auto& edges : outputs[n].sides) {
        if (edges.empty()) edges.push_back(Edge{-1, 0, dead_letter_sink});
      }
    }
  }
  PublishPartitions(/*now=*/true);  // partitions and their lag exist before the first batch
  started = last_progress = last_flush = last_state_flush = std::chrono::steady_clock::now();
  Log()->debug("{} sources, {} operators, {} sinks; processing time: {}", sources.size(),
               ops.size(), sinks.size(), arrival_mode ? "arrival field" : "clock");
  return absl::OkStatus();
}

// Decodes one raw message into src.pending (a valid record, or an invalid-record
// side record flagged in pending_invalid). Never fails: bad input is data.
void Task::Impl::Decode(SourceNode& src, const RawMessage& m, RecordBatch& into,
                        std::vector<uint8_t>& invalid, int64_t& last_arrival) {
  Record& r = into.Append();
  const SourceSpec& ss = *src.spec;
  std::string reason;
  InvalidReason code = kValidRecord;
  int partition = m.partition;
  int64_t arrival = last_arrival;
  absl::Status st;
  if (m.tombstone) {
    // A Kafka tombstone deletes a lookup table's row: its key fields come
    // from the message key (a JSON object such as {"alias":"x"}).
    if (!src.preload) {
      st = absl::InvalidArgumentError(
          "null value (tombstone): only lookup-table sources accept deletions");
    } else if (st = decoder.Decode(m.key, &r); !st.ok()) {
      st = absl::InvalidArgumentError(absl::StrCat(
          "tombstone whose key is not a JSON object with the table's key fields: ", st.message()));
    }
    r.tombstone = st.ok();
  } else {
    st = !m.block.empty() ? decoder.DecodeLine(m.payload, m.block, &r)
         : m.padded       ? decoder.DecodePadded(m.payload, &r)
                          : decoder.Decode(m.payload, &r);
  }
  if (st.ok() && !r.tombstone) {
    if (arrival_mode) {
      Value a = r.GetPath(src.arrival_path);
      if (a.type == ValueType::kInt) arrival = a.i;
    }
    if (!src.partition_path.empty()) {
      json.clear();
      r.GetPath(src.partition_path).AppendJson(&json);
      auto [it, inserted] =
          src.partition_ids.emplace(json, static_cast<int>(src.partition_ids.size()));
      partition = it->second;
    }
    if (ss.event_time.has_value() && !ExtractEventTime(r, *ss.event_time, &r.event_time, &reason)) {
      code = r.GetPath(ss.event_time->field).is_null() ? kMissingEventTime : kBadEventTime;
    }
  } else if (!st.ok()) {
    reason = std::string(st.message());
    code = m.tombstone ? kTombstone : kMalformed;
  }
  if (arrival_mode) last_arrival = std::max(last_arrival, arrival);
  if (!reason.empty()) {
    std::string raw(m.payload);
    r.Clear();
    r.AddString("source", ss.name);
    r.AddInt("partition", partition);
    r.AddInt("offset", m.offset);
    r.AddString("reason", reason);
    // Keep the payload losslessly: as text when it is UTF-8, else base64.
    if (simdjson::validate_utf8(raw.data(), raw.size())) {
      r.AddString("raw", raw);
    } else {
      r.AddString("raw_base64", absl::Base64Escape(raw));
    }
    invalid.push_back(code == kValidRecord ? kMalformed : code);
  } else {
    invalid.push_back(0);
  }
  r.partition = partition;
  r.offset = m.offset;
  if (!arrival_mode && poll_now == kMinTime) poll_now = clock->NowMs();
  r.arrival = arrival_mode ? last_arrival : poll_now;
}

absl::Status Task::Impl::FillPending(SourceNode& src, int timeout_ms) {
  if (src.has_pending()) return absl::OkStatus();
  src.pending.clear();
  src.pending_invalid.clear();
  src.head = 0;
  if (src.merged) return FillMerged(src);
  if (src.raw->Exhausted()) return absl::OkStatus();
  poll_now = kMinTime;
  return src.raw
      ->Poll(options.batch_size, timeout_ms,
             [&](const RawMessage& m) {
               Decode(src, m, src.pending, src.pending_invalid, src.last_arrival);
             })
      .status();
}

absl::Status Task::Impl::FillMerged(SourceNode& src) {
  using SteadyClock = std::chrono::steady_clock;
  auto last_progress = SteadyClock::now();
  for (;;) {
    MergeStaged(src);
    if (src.has_pending()) return absl::OkStatus();
    // Every partition delivered all it has: MergeStaged took the last steps.
    if (src.raw->Exhausted()) return absl::OkStatus();
    ASSIGN_OR_RETURN(int n, src.raw->Poll(options.batch_size, 100, [&](const RawMessage& m) {
      if (m.partition < 0 || m.partition >= static_cast<int32_t>(src.staged.size())) return;
      SourceNode::Staged& st = src.staged[m.partition];
      if (st.empty()) {
        st.records.clear();
        st.invalid.clear();
        st.head = 0;
      }
      Decode(src, m, st.records, st.invalid, st.last_arrival);
    }));
    if (n > 0) {
      last_progress = SteadyClock::now();
    } else if (SteadyClock::now() - last_progress > std::chrono::seconds(60)) {
      return absl::UnavailableError(absl::StrCat(
          "source ", src.spec->name, ": no record for 60 s while replaying in arrival order"));
    }
  }
}

void Task::Impl::MergeStaged(SourceNode& src) {
  src.pending.clear();
  src.pending_invalid.clear();
  src.head = 0;
  // A step (one arrival time) is complete once every partition either shows
  // a later arrival or has nothing more to deliver.
  for (;;) {
    int64_t t = kMaxTime;
    for (const SourceNode::Staged& st : src.staged) {
      if (!st.empty()) t = std::min(t, st.records[st.head].arrival);
    }
    if (t == kMaxTime) return;
    for (size_t p = 0; p < src.staged.size(); ++p) {
      const SourceNode::Staged& st = src.staged[p];
      const bool later = !st.empty() && st.records[st.records.size() - 1].arrival > t;
      const bool done = src.raw->Backlog(static_cast<int32_t>(p)) == 0;
      if (!later && !done) return;  // partition p may still bring records at t
    }
    for (SourceNode::Staged& st : src.staged) {
      while (!st.empty() && st.records[st.head].arrival == t) {
        src.pending.AppendSwapped(st.records[st.head]);
        src.pending_invalid.push_back(st.invalid[st.head]);
        ++st.head;
      }
    }
    if (static_cast<int>(src.pending.size()) >= options.batch_size) return;
  }
}

int64_t Task::Impl::Backlog(const SourceNode& src, int partition) const {
  if (arrival_mode) {
    int64_t now = clock->NowMs();
    for (size_t i = src.head; i < src.pending.size() && src.pending[i].arrival <= now; ++i) {
      if (src.pending[i].partition == partition) return 1;
    }
    return 0;
  }
  if (src.has_pending()) return 1;
  if (!src.spec->kind->partitioned_log()) return src.raw->Exhausted() ? 0 : 1;
  return src.raw->Backlog(partition);
}

// Applies pending[head, head+count) of source `src_id` as one batch.
absl::Status Task::Impl::ApplySourceBatch(int src_id, size_t count) {
  SourceNode& src = sources[src_id];
  const int64_t now = clock->NowMs();
  const int64_t skew = src.spec->watermark.max_future_skew;
  const bool has_time = src.spec->event_time.has_value();
  Output& out = src.out;
  const bool one_stream = !src.spec->kind->partitioned_log();  // positions: partition 0
  for (size_t i = src.head; i < src.head + count; ++i) {
    Record& r = src.pending[i];
    const size_t raw_partition = one_stream ? 0 : static_cast<size_t>(r.partition);
    if (raw_partition < src.applied.size()) src.applied[raw_partition] = r.offset + 1;
    src.applied_arrival = r.arrival;
    src.wm->OnActivity(r.partition, now);
    if (src.pending_invalid[i] != kValidRecord) {
      out.side(0).AppendSwapped(r);
      src.invalid[src.pending_invalid[i]]->Add();
      ++invalid_total;
      continue;
    }
    if (has_time && skew > 0 && r.event_time > SatAdd(now, skew)) {
      Record& s = out.EmitSide(0);
      s.AddString("source", src.spec->name);
      s.AddInt("partition", r.partition);
      s.AddInt("offset", r.offset);
      s.AddString("reason", absl::StrCat("event time ", FormatIso8601(r.event_time),
                                         " is later than processing time ", FormatIso8601(now),
                                         " + max_future_skew ", FormatDuration(skew)));
      json.clear();
      r.AppendJson(&json);
      s.AddString("raw", json);
      s.partition = r.partition;
      s.offset = r.offset;
      src.invalid[kFutureEventTime]->Add();
      ++invalid_total;
      continue;
    }
    if (has_time && !r.tombstone) {
      src.wm->OnRecord(r.partition, r.event_time, now);
      src.delay->Observe(now - r.event_time);
    }
    out.main().AppendSwapped(r);
  }
  src.head += count;
  if (src.delay.has_value()) src.delay->Flush();
  if (src.live_applied != nullptr) {
    for (size_t p = 0; p < src.applied.size(); ++p) {
      src.live_applied[p].store(src.applied[p], std::memory_order_relaxed);
    }
  }
  src.in->Add(static_cast<int64_t>(count));
  records_in.fetch_add(static_cast<int64_t>(count), std::memory_order_relaxed);
  RETURN_IF_ERROR(Dispatch(src_id));
  Failpoint("source.after_batch");
  return absl::OkStatus();
}

absl::Status Task::Impl::WriteSink(int sink_id, int node, const Record& r,
                                   std::string_view side_name) {
  SinkNode& sn = sinks[sink_id];
  json.clear();
  if (sn.dead_letter) {
    json.append("{\"side_output\":");
    AppendJsonString(side_name, &json);
    std::string rest = r.ToJson();
    if (rest.size() > 2) {
      json.push_back(',');
      json.append(rest, 1, std::string::npos);
    } else {
      json.push_back('}');
    }
  } else {
    r.AppendJson(&json);
  }
  key.clear();
  if (side_name.empty() && node >= 0) {
    const NodeOutputs& no = outputs[node];
    if (!no.key_fields.empty()) r.AppendFieldsJson(no.key_names, no.key_fields, &key);
  }
  sn.written->Add();
  records_out.fetch_add(1, std::memory_order_relaxed);
  SinkRecord sr;
  sr.key = key;
  sr.value = json;
  if (!sn.dead_letter && side_name.empty()) {
    Value rev = r.GetPath(revision_path);
    if (rev.type == ValueType::kInt) {
      sr.revision = rev.i;
      sn.revisions->Add();
    }
    Value st = r.GetPath(state_path);
    if (st.type == ValueType::kString) sr.state = st.s;
  }
  RETURN_IF_ERROR(sn.sink->WriteRecord(sr));
  Failpoint("sink.after_write");
  return absl::OkStatus();
}

absl::Status Task::Impl::Dispatch(int node) {
  Output& out = OutputOf(node);
  NodeOutputs& no = outputs[node];
  if (node >= S()) {
    // What an operator emitted, main and side outputs (one add per batch).
    OperatorNode& on = ops[node - S()];
    if (!out.main().empty()) on.records_out->Add(static_cast<int64_t>(out.main().size()));
    for (size_t s = 0; s < on.side_records.size(); ++s) {
      if (!out.side(s).empty()) on.side_records[s]->Add(static_cast<int64_t>(out.side(s).size()));
    }
  }
  if (!out.main().empty()) {
    for (const Edge& e : no.main) {
      if (e.sink >= 0) {
        for (const Record& r : out.main()) RETURN_IF_ERROR(WriteSink(e.sink, node, r, ""));
        continue;
      }
      if (e.writer >= 0) {
        ExchangeWriter& w = *writers[e.writer].writer;
        for (const Record& r : out.main()) RETURN_IF_ERROR(w.Write(e.input, r));
        continue;
      }
      // The only reader of this batch, which is cleared after: its
      // records may be moved on rather than copied (Output::Forward).
      RETURN_IF_ERROR(Feed(e.op, e.input, out.main(), no.main.size() == 1 ? &out.main() : nullptr));
    }
  }
  for (size_t s = 0; s < no.sides.size(); ++s) {
    if (out.side(s).empty()) continue;
    no.side_totals[s] += static_cast<int64_t>(out.side(s).size());
    for (const Edge& e : no.sides[s]) {
      for (const Record& r : out.side(s)) {
        RETURN_IF_ERROR(WriteSink(e.sink, node, r, no.side_names[s]));
      }
    }
  }
  out.clear();
  return absl::OkStatus();
}

absl::Status Task::Impl::UpdateWatermarks() {
  const int64_t now = clock->NowMs();
  int64_t lag = 0;
  for (int i = 0; i < S(); ++i) {
    SourceNode& src = sources[i];
    if (!src.present) continue;
    if (src.spec->kind->partitioned_log() && !arrival_mode) {
      // Consumer lag: records after the position, up to the last high watermark seen.
      for (int p = 0; p < src.raw->PartitionCount(); ++p) lag += src.raw->Backlog(p);
    }
    if (!src.spec->event_time.has_value()) {
      node_wm[i] = kMaxTime;  // table sources do not hold back event time
      continue;
    }
    node_wm[i] = src.wm->Update(now, [&](int p) { return Backlog(src, p); });
    node_idle[i] = src.wm->idle() ? 1 : 0;
  }
  published_lag.store(lag, std::memory_order_relaxed);
  PublishPartitions();
  for (size_t i = 0; i < ops.size(); ++i) {
    OperatorNode& on = ops[i];
    if (!on.here) continue;
    // Per input: the watermark of the local node feeding it, or of the
    // exchange reader (min over its producers' markers).
    auto input_wm = [&](size_t k) {
      const int r = on.input_reader[k];
      return r >= 0 ? readers[r].reader->watermark() : node_wm[on.inputs[k]];
    };
    auto input_idle = [&](size_t k) {
      const int r = on.input_reader[k];
      return r >= 0 ? readers[r].reader->idle() : node_idle[on.inputs[k]] != 0;
    };
    const InputsWatermark in = MinOverActiveInputs(on.inputs.size(), input_wm, input_idle);
    const int64_t w = in.watermark;
    int id = S() + static_cast<int>(i);
    node_idle[id] = in.idle ? 1 : 0;
    if (w > on.ctx->watermark()) {
      on.ctx->set_watermark(w);
      if (w < kMaxTime) {
        if (on.watermark_ms == nullptr) {  // no series before the first watermark
          on.watermark_ms =
              metrics->Get("operator_watermark_ms",
                           absl::StrCat("op=\"", on.spec->name, "\",task=\"", name, "\""));
        }
        on.watermark_ms->Set(w);
      }
      RETURN_IF_ERROR(on.op->OnWatermark(*on.ctx, on.out));
      RETURN_IF_ERROR(Dispatch(id));
    }
    node_wm[id] = on.op->OutputWatermark(on.ctx->watermark());
  }
  // For the job's coordinating thread (progress line, metrics).
  published_watermark.store(LowestWatermark(), std::memory_order_relaxed);
  return absl::OkStatus();
}

void Task::Impl::PublishPartitions(bool now_anyway) {
  // For status reports only: a few hundred ms old is fresh enough, and the
  // hot path pays one clock read.
  constexpr auto kEvery = std::chrono::milliseconds(250);
  const auto now = std::chrono::steady_clock::now();
  if (!now_anyway && now - partitions_at < kEvery) return;
  partitions_at = now;
  std::vector<Task::PartitionStatus> out;
  std::vector<LiveLag> live;
  for (int i = 0; i < S(); ++i) {
    SourceNode& src = sources[i];
    if (!src.present || src.raw == nullptr) continue;
    const bool kafka = src.spec->kind->partitioned_log() && !arrival_mode;
    src.idle_logged.resize(static_cast<size_t>(src.raw->PartitionCount()), 0);
    for (int p = 0; p < src.raw->PartitionCount(); ++p) {
      if (src.wm != nullptr && !src.wm->owned(p)) continue;
      Task::PartitionStatus ps;
      ps.source = src.spec->name;
      ps.partition = p;
      ps.offset = p < static_cast<int>(src.applied.size()) ? src.applied[p] : 0;
      ps.lag = kafka ? src.raw->Backlog(p) : 0;
      if (src.wm != nullptr && p < src.wm->partition_count()) {
        ps.watermark_ms = src.wm->partition_watermark(p);
        ps.idle = src.wm->partition_idle(p);
        if (ps.idle != (src.idle_logged[p] != 0)) {
          // Operators want to know when a partition stops holding the
          // watermark back, and when it does again.
          src.idle_logged[p] = ps.idle ? 1 : 0;
          LogContext partition_context(spec.name, TaskLabel(), p);
          if (ps.idle) {
            Log()->info("source {}: idle (no record for {}): the watermark goes on without it",
                        src.spec->name, FormatDuration(src.spec->watermark.idle_timeout));
          } else {
            Log()->info("source {}: active again: it holds the watermark back again",
                        src.spec->name);
          }
        }
      } else {
        ps.watermark_ms = kMaxTime;  // a table source holds no event time back
      }
      out.push_back(std::move(ps));
      const bool has_live =
          kafka && src.live_applied != nullptr && p < static_cast<int>(src.applied.size());
      live.push_back(has_live ? LiveLag{src.raw.get(), &src.live_applied[p]} : LiveLag{});
    }
  }
  Task::Activity activity;
  for (size_t n = 0; n < outputs.size(); ++n) {
    if (!NodeHere(static_cast<int>(n))) continue;
    const NodeOutputs& no = outputs[n];
    for (size_t k = 0; k < no.side_names.size() && k < no.side_totals.size(); ++k) {
      activity.side_records.emplace_back(no.side_names[k], no.side_totals[k]);
      if (absl::EndsWith(no.side_names[k], ".too_late")) {
        activity.records_too_late += no.side_totals[k];
      }
    }
  }
  for (const OperatorNode& on : ops) activity.records_late += on.late_total;
  for (const ReaderNode& rn : readers) {
    for (const ExchangeChannelStatus& ch : rn.reader->Channels()) {
      Task::ExchangeInputStatus e;
      e.exchange = rn.topic;
      e.partition = ch.partition;
      e.producer_task = ch.producer >= 0 && ch.producer < static_cast<int>(rn.producer_tasks.size())
                            ? rn.producer_tasks[ch.producer]
                            : -1;
      e.watermark_ms = ch.watermark;
      e.idle = ch.idle;
      activity.exchange_inputs.push_back(std::move(e));
    }
  }
  std::lock_guard<std::mutex> lock(partitions_mu);
  published_partitions = std::move(out);
  published_live = std::move(live);
  published_activity = std::move(activity);
}

int64_t Task::Impl::LowestWatermark() const {
  int64_t wm = kMaxTime;
  bool any_op = false;
  for (size_t i = 0; i < ops.size(); ++i) {
    if (!ops[i].here) continue;
    any_op = true;
    wm = std::min(wm, node_wm[S() + i]);
  }
  if (!any_op) {
    for (int i = 0; i < S(); ++i) {
      if (sources[i].present) wm = std::min(wm, node_wm[i]);
    }
  }
  return wm;
}

absl::Status Task::Impl::Feed(int op, int input, const RecordBatch& batch, RecordBatch* movable) {
  OperatorNode& on = ops[op];
  on.records_in->Add(static_cast<int64_t>(batch.size()));
  if (on.late != nullptr) {
    const int64_t w = on.ctx->watermark();
    int64_t late = 0;
    for (const Record& r : batch) late += r.event_time < w ? 1 : 0;
    if (late > 0) {
      on.late->Add(late);
      on.late_total += late;
    }
  }
  on.out.set_movable_input(movable);
  const absl::Status st = on.op->ProcessBatch(*on.ctx, input, batch, on.out);
  on.out.set_movable_input(nullptr);
  RETURN_IF_ERROR(st);
  return Dispatch(S() + op);
}

int64_t Task::Impl::NextTimer() const {
  int64_t t = kMaxTime;
  for (const OperatorNode& on : ops) {
    if (on.here) t = std::min(t, on.op->NextTimer());
  }
  int64_t now = clock->NowMs();
  for (const SourceNode& src : sources) {
    if (src.present) t = std::min(t, src.wm->NextIdleTransition(now));
  }
  return t;
}

absl::Status Task::Impl::FireTimers() {
  const int64_t now = clock->NowMs();
  for (size_t i = 0; i < ops.size(); ++i) {
    OperatorNode& on = ops[i];
    if (on.here && on.op->NextTimer() <= now) {
      RETURN_IF_ERROR(on.op->OnProcessingTime(*on.ctx, on.out));
      RETURN_IF_ERROR(Dispatch(S() + static_cast<int>(i)));
    }
  }
  return absl::OkStatus();
}

absl::Status Task::Impl::Commit(bool force) {
  auto now = std::chrono::steady_clock::now();
  // Operator state is written behind: operators keep their working set in
  // memory and persist it at Flush, which runs at checkpoints, at the end and
  // at least every state_flush_interval_ms (so the uncommitted write batch
  // stays small). Rows that live and die between two flushes never reach
  // the backend.
  if (force ||
      now - last_state_flush >= std::chrono::milliseconds(options.state_flush_interval_ms)) {
    for (OperatorNode& on : ops) {
      if (on.here) RETURN_IF_ERROR(on.op->Flush(*on.ctx));
    }
    RETURN_IF_ERROR(state->Commit());
    last_state_flush = now;
  }
  if (force || now - last_flush > std::chrono::milliseconds(200)) {
    for (SinkNode& sn : sinks) {
      RETURN_IF_ERROR(sn.sink->Flush());
      sn.CountRejected();
    }
    last_flush = now;
  }
  Progress(false);
  return absl::OkStatus();
}

void Task::Impl::Progress(bool force) {
  if (options.progress_interval_ms <= 0 || options.progress_out == nullptr) return;
  auto now = std::chrono::steady_clock::now();
  auto since = std::chrono::duration_cast<std::chrono::milliseconds>(now - last_progress).count();
  if (!force && since < options.progress_interval_ms) return;
  double secs = std::max<double>(since, 1) / 1000.0;
  const int64_t in = records_in.load(std::memory_order_relaxed);
  const int64_t out = records_out.load(std::memory_order_relaxed);
  double rate = static_cast<double>(in - progress_records_in) / secs;
  const std::string wm_text = FormatWatermark(LowestWatermark());
  std::string checkpoint_text;
  if (checkpoints != nullptr && last_checkpoint_id > 0) {
    checkpoint_text =
        absl::StrFormat(" checkpoint=%d (%.0fs ago)", last_checkpoint_id,
                        std::chrono::duration<double>(now - last_checkpoint_at).count());
  }
  std::fprintf(options.progress_out,
               "[caravela] in=%lld out=%lld rate=%.0f ev/s watermark=%s invalid=%lld%s\n",
               static_cast<long long>(in), static_cast<long long>(out), rate, wm_text.c_str(),
               static_cast<long long>(invalid_total), checkpoint_text.c_str());
  std::fflush(options.progress_out);
  last_progress = now;
  progress_records_in = in;
}

// Reads lookup-table sources up to their current end before any other record
// is applied (SPEC §5: "loaded whole before the first stream record"); the
// main loop then keeps following them (files are simply finished).
absl::Status Task::Impl::Preload() {
  for (int i = 0; i < S(); ++i) {
    SourceNode& src = sources[i];
    if (!src.preload || !src.present) continue;
    for (;;) {
      RETURN_IF_ERROR(FillPending(src, 20));
      if (src.has_pending()) {
        RETURN_IF_ERROR(ApplySourceBatch(i, src.pending.size() - src.head));
        continue;
      }
      if (src.raw->Exhausted()) break;
      bool caught_up = true;
      for (int p = 0; p < src.raw->PartitionCount(); ++p) {
        caught_up = caught_up && src.raw->Backlog(p) == 0;
      }
      if (caught_up) break;
    }
  }
  return Commit(false);
}

absl::Status Task::Impl::ApplyArrivalStep(int src_id, int64_t t) {
  const SourceNode& src = sources[src_id];
  size_t count = 0;
  while (src.head + count < src.pending.size() && src.pending[src.head + count].arrival == t &&
         static_cast<int>(count) < options.batch_size) {
    ++count;
  }
  return count == 0 ? absl::OkStatus() : ApplySourceBatch(src_id, count);
}

absl::Status Task::Impl::RunArrivalMode() {
  for (;;) {
    int best = -1;
    int64_t t_next = kMaxTime;
    for (int i = 0; i < S(); ++i) {
      SourceNode& src = sources[i];
      RETURN_IF_ERROR(FillPending(src, 0));
      if (!src.has_pending()) {
        if (!src.finished) {
          src.finished = true;
          src.wm->Finish();
        }
        continue;
      }
      int64_t a = src.pending[src.head].arrival;
      if (best < 0 || a < t_next) {
        best = i;
        t_next = a;
      }
    }
    // Input drained: the end-of-input watermark (+inf) fires everything.
    if (best < 0) break;
    // Due timers and idleness transitions fire before the next record.
    int64_t timer = NextTimer();
    if (timer <= t_next) {
      manual_clock.Set(timer);
      RETURN_IF_ERROR(UpdateWatermarks());
      RETURN_IF_ERROR(FireTimers());
      RETURN_IF_ERROR(Commit(false));
      RETURN_IF_ERROR(MaybeCheckpoint());
      continue;
    }
    manual_clock.Set(t_next);
    RETURN_IF_ERROR(ApplyArrivalStep(best, t_next));
    RETURN_IF_ERROR(UpdateWatermarks());
    RETURN_IF_ERROR(FireTimers());
    RETURN_IF_ERROR(Commit(false));
    RETURN_IF_ERROR(MaybeCheckpoint());
  }
  return absl::OkStatus();
}

absl::Status Task::Impl::RunWallMode() {
  bool draining = false;
  bool any_unbounded = false;
  for (const SourceNode& src : sources) any_unbounded = any_unbounded || !src.raw->Bounded();
  for (;;) {
    if (options.stop != nullptr && options.stop->load()) break;
    bool all_done = true;
    bool got = false;
    RETURN_IF_ERROR(MaybeStopAtEndOfInput(&draining));
    RETURN_IF_ERROR(StepSources(any_unbounded ? 20 : 0, &got, &all_done));
    RETURN_IF_ERROR(UpdateWatermarks());
    RETURN_IF_ERROR(FireTimers());
    RETURN_IF_ERROR(Commit(false));
    RETURN_IF_ERROR(MaybeCheckpoint());
    if (all_done) break;
    if (!got && !any_unbounded) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return absl::OkStatus();
}

absl::Status Task::Impl::MaybeStopAtEndOfInput(bool* draining) {
  if (options.end_of_input == nullptr || !options.end_of_input->load() || *draining) {
    return absl::OkStatus();
  }
  *draining = true;
  for (SourceNode& src : sources) {
    if (src.present && !src.raw->Bounded()) RETURN_IF_ERROR(src.raw->StopAtCurrentEnd());
  }
  return absl::OkStatus();
}

absl::Status Task::Impl::StepSources(int timeout_ms, bool* got, bool* all_done) {
  for (int i = 0; i < S(); ++i) {
    SourceNode& src = sources[i];
    if (!src.present || src.finished) continue;
    RETURN_IF_ERROR(FillPending(src, timeout_ms));
    if (src.has_pending()) {
      *got = true;
      *all_done = false;
      RETURN_IF_ERROR(ApplySourceBatch(i, src.pending.size() - src.head));
    } else if (src.raw->Exhausted()) {
      // Ends only in a step without records, so the watermark of the last
      // batch is propagated (and fires) before the end-of-input +inf.
      Log()->debug("source {} ended", src.spec->name);
      src.finished = true;
      src.wm->Finish();
    } else {
      *all_done = false;
    }
  }
  return absl::OkStatus();
}

absl::Status Task::Impl::CloseSinks() {
  absl::Status first;
  for (SinkNode& sn : sinks) {
    absl::Status st = sn.sink->Close();
    if (!st.ok() && first.ok()) first = st;
  }
  return first;
}

absl::Status Task::Impl::Finish() {
  bool all_bounded_done = true;
  for (SourceNode& src : sources) {
    if (src.finished) continue;
    if (src.raw->Exhausted() && !src.has_pending()) {
      src.finished = true;
      src.wm->Finish();
    } else {
      all_bounded_done = false;
    }
  }
  if (all_bounded_done) RETURN_IF_ERROR(UpdateWatermarks());
  RETURN_IF_ERROR(Commit(true));
  // A final checkpoint commits the last output (checkpointed sinks show only
  // committed output) and lets a stopped job resume where it stopped.
  if (checkpoints != nullptr && spec.checkpoint.interval > 0) RETURN_IF_ERROR(TakeCheckpoint(""));
  if (!options.savepoint_on_stop.empty())
    RETURN_IF_ERROR(TakeCheckpoint(options.savepoint_on_stop));
  Progress(true);
  return CloseSinks();
}

// ---- Checkpoints (SPEC §6) ----------------------------------------------------

namespace {

constexpr int kTaskId = 0;  // one task per job in-process (the cluster assigns more)

}  // namespace

void Task::Impl::CommitSourceOffsets(int64_t id) {
  for (SourceNode& src : sources) {
    if (!src.present || src.checkpointed_id != id) continue;
    // Monitoring only: a failure is logged, never fatal.
    if (absl::Status st = src.raw->CommitOffsets(src.checkpointed); !st.ok()) {
      Log()->warn("source {}: {}", src.spec->name, std::string(st.message()));
    }
  }
}

absl::Status Task::Impl::OpenCheckpoints() {
  const bool periodic = spec.checkpoint.interval > 0;
  if (parallel()) {
    // The job (JobRunner) owns the epoch and the commit records; a task only
    // stores its own state under <job>/task-<id>/.
    epoch = placement.epoch;
    if (!periodic) return absl::OkStatus();
    const std::string url = CheckpointStorageUrl(spec, options.data_dir);
    const std::string dir = absl::StrCat(options.data_dir, "/task-", placement.global_id);
    // One more than `retain`: the newest task checkpoint may not be complete
    // job-wide yet, and the job's last complete one must survive its GC.
    ASSIGN_OR_RETURN(checkpoints, CheckpointManager::Open(url, spec.name, placement.global_id,
                                                          dir + "/checkpoint-scratch",
                                                          std::max(1, spec.checkpoint.retain) + 1));
    // The job's last complete checkpoint outlives any number of newer ones
    // this task stored in runs that died before the job completed them.
    checkpoints->Pin(placement.restore_checkpoint);
    spec_hash = JobGraphHash(spec);
    return absl::OkStatus();
  }
  if (!periodic && options.from_savepoint.empty() && options.savepoint_on_stop.empty()) {
    return absl::OkStatus();
  }
  const std::string url = CheckpointStorageUrl(spec, options.data_dir);
  ASSIGN_OR_RETURN(checkpoints, CheckpointManager::Open(url, spec.name, kTaskId,
                                                        options.data_dir + "/checkpoint-scratch",
                                                        std::max(1, spec.checkpoint.retain)));
  spec_hash = JobGraphHash(spec);
  // The epoch is counted durably at every start, before anything is written,
  // so that revisions published after a restart exceed everything published
  // before it, even output that came after the last checkpoint.
  const std::string key = checkpoints->prefix() + "epoch";
  ASSIGN_OR_RETURN(std::optional<int64_t> previous, ReadEpoch(checkpoints->storage(), key));
  if (previous.has_value()) epoch = *previous + 1;
  if (!options.from_savepoint.empty()) {
    // A savepoint may come from another data dir with a later epoch: the
    // revisions it published must stay below ours too.
    ASSIGN_OR_RETURN(savepoint, CheckpointManager::LoadSavepoint(options.from_savepoint));
    epoch = std::max(epoch, savepoint->epoch() + 1);
  }
  RETURN_IF_ERROR(checkpoints->storage().Write(key, std::to_string(epoch)));
  checkpoint_interval_ms = spec.checkpoint.interval;
  return absl::OkStatus();
}

absl::Status Task::Impl::Restore() {
  if (checkpoints == nullptr) return absl::OkStatus();
  std::optional<CheckpointManifest> m;
  if (parallel()) {
    if (placement.restore_checkpoint > 0 && Rescaled()) {
      stored_id = committed_id = placement.restore_checkpoint;
      return RestoreRescaled();
    }
    if (placement.restore_checkpoint > 0) {
      ASSIGN_OR_RETURN(m, checkpoints->LatestUpTo(placement.restore_checkpoint));
      if (!m.has_value() || m->checkpoint_id() != placement.restore_checkpoint) {
        return absl::DataLossError(
            absl::StrCat("task ", placement.global_id, " of job ", spec.name, ": checkpoint ",
                         placement.restore_checkpoint,
                         " is complete job-wide but this task's part of it is missing from ",
                         checkpoints->storage().url()));
      }
    }
    stored_id = committed_id = placement.restore_checkpoint;
  } else if (savepoint.has_value()) {
    m = savepoint;
  } else if (spec.checkpoint.interval > 0) {
    ASSIGN_OR_RETURN(m, checkpoints->LatestUpTo(kMaxTime));
    // A sink whose commit cannot be redone after a crash (Kafka
    // transactions) may hold the output of an older checkpoint only: restore
    // that one and replay from it.
    int64_t committed = kMaxTime;
    for (SinkNode& sn : sinks) {
      ASSIGN_OR_RETURN(int64_t c, sn.sink->LastCommittedCheckpoint());
      if (c >= 0) committed = std::min(committed, c);
    }
    if (m.has_value() && committed < m->checkpoint_id()) {
      Log()->warn(
          "checkpoint {} is complete but a sink committed only up to {}: "
          "restoring that one",
          m->checkpoint_id(), committed);
      ASSIGN_OR_RETURN(m, checkpoints->LatestUpTo(committed));
    }
  }
  if (!m.has_value()) {
    // A fresh start: checkpointed sinks drop whatever a crashed run left.
    for (SinkNode& sn : sinks) RETURN_IF_ERROR(sn.sink->Recover(0, ""));
    return absl::OkStatus();
  }
  RETURN_IF_ERROR(CheckSameGraph(*m));
  const auto t0 = std::chrono::steady_clock::now();
  if (!options.from_savepoint.empty()) {
    ASSIGN_OR_RETURN(CheckpointManifest sp,
                     checkpoints->RestoreSavepoint(options.from_savepoint, *state));
    (void)sp;
  } else {
    ASSIGN_OR_RETURN(RestoreStats rs, checkpoints->RestoreState(*m, *state));
    (void)rs;
  }
  RETURN_IF_ERROR(ApplyManifest(*m));
  const auto ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0)
          .count();
  metrics->Get("restores_total")->Add();
  Log()->info("restored {} {} (epoch {}) in {} ms; this run is epoch {}",
              options.from_savepoint.empty() ? "checkpoint" : "savepoint", m->checkpoint_id(),
              m->epoch(), ms, epoch);
  return absl::OkStatus();
}

absl::Status Task::Impl::CheckSameGraph(const CheckpointManifest& m) const {
  if (m.spec_hash().empty() || JobGraphHashMatches(spec, m.spec_hash())) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      "checkpoint ", m.checkpoint_id(), " of job ", spec.name,
      " was taken by a different job graph (sources, operators or sinks changed): its state "
      "cannot be restored into this one. Start from scratch with another --data-dir (or "
      "checkpoint storage), or run the job version that wrote it."));
}

absl::Status Task::Impl::ApplyManifest(const CheckpointManifest& m) {
  if (const std::optional<int64_t> now = ManifestClock(m); now.has_value() && arrival_mode) {
    manual_clock.Set(*now);
  }
  for (const auto& sc : m.sources()) {
    int id = NodeId(sc.name());
    if (id < 0 || id >= S()) {
      return absl::DataLossError(
          absl::StrCat("checkpoint ", m.checkpoint_id(), " names unknown source ", sc.name()));
    }
    SourceNode& src = sources[id];
    std::map<int32_t, int64_t> start;
    for (const auto& pc : sc.partitions()) {
      if (pc.next_offset() >= 0) start[pc.partition()] = pc.next_offset();
    }
    {
      // Task::partitions() must not read the source being replaced.
      std::lock_guard<std::mutex> lock(partitions_mu);
      published_live.clear();
    }
    ASSIGN_OR_RETURN(src.raw, OpenRawSource(*src.spec, src.owned, start));
    src.applied = src.raw->Positions();
    src.ResetLiveApplied();
    if (const std::optional<std::string> wm = SourceWatermarkState(m, sc)) {
      if (!src.wm->Import(*wm)) {
        return absl::DataLossError(absl::StrCat("checkpoint ", m.checkpoint_id(),
                                                ": bad watermark state of source ", sc.name()));
      }
    }
    int n = 0;
    for (std::string& v : SourcePartitionIds(m, sc)) src.partition_ids.emplace(std::move(v), n++);
    if (const std::optional<int64_t> la = SourceLastArrival(m, sc)) {
      src.last_arrival = *la;
      src.applied_arrival = src.last_arrival;
    }
  }
  for (const auto& oc : m.operators()) {
    int id = NodeId(oc.name());
    const std::optional<int64_t> w = OperatorWatermark(oc);
    if (id < S() || !w.has_value()) {
      return absl::DataLossError(
          absl::StrCat("checkpoint ", m.checkpoint_id(), ": bad state of operator ", oc.name()));
    }
    ops[id - S()].ctx->set_watermark(*w);
  }
  // Table pointers died with the old state: operators reopen theirs, with
  // the clock and watermarks of the checkpoint (timers are armed from them).
  for (OperatorNode& on : ops) {
    if (on.here) RETURN_IF_ERROR(on.op->Open(*on.ctx));
  }
  for (const auto& sc : m.sinks()) {
    if (sc.index() < 0 || sc.index() >= static_cast<int>(sinks.size())) {
      return absl::DataLossError(
          absl::StrCat("checkpoint ", m.checkpoint_id(), " names unknown sink ", sc.index()));
    }
    absl::Status st = sinks[sc.index()].sink->Recover(m.checkpoint_id(), sc.state());
    if (!st.ok()) {
      return absl::Status(
          st.code(), absl::StrCat("sink for ", sinks[sc.index()].name, ": recovering checkpoint ",
                                  m.checkpoint_id(), ": ", st.message()));
    }
  }
  return absl::OkStatus();
}

absl::Status Task::Impl::MaybeCheckpoint() {
  if (checkpoints == nullptr || checkpoint_interval_ms <= 0) return absl::OkStatus();
  const int64_t now = clock->NowMs();
  if (next_checkpoint_at == kMinTime) {
    next_checkpoint_at = SatAdd(now, checkpoint_interval_ms);
    return absl::OkStatus();
  }
  if (now < next_checkpoint_at) return absl::OkStatus();
  next_checkpoint_at = SatAdd(now, checkpoint_interval_ms);
  return TakeCheckpoint("");
}

absl::Status Task::Impl::TakeCheckpoint(const std::string& savepoint_dir, int64_t job_id) {
  const auto t0 = std::chrono::steady_clock::now();
  RETURN_IF_ERROR(Commit(true));  // operator state into the backend, committed
  const int64_t id = job_id > 0 ? job_id : checkpoints->next_checkpoint_id();
  CheckpointManifest m;
  m.set_checkpoint_id(id);
  m.set_job_name(spec.name);
  m.set_spec_hash(spec_hash);
  m.set_epoch(epoch);
  for (SourceNode& src : sources) {
    if (!src.present) continue;
    src.checkpointed = src.applied;
    src.checkpointed_id = id;
    auto* sc = m.add_sources();
    sc->set_name(src.spec->name);
    for (size_t p = 0; p < src.applied.size(); ++p) {
      auto* pc = sc->add_partitions();
      pc->set_partition(static_cast<int32_t>(p));
      pc->set_next_offset(src.applied[p]);
      if (static_cast<int>(p) < src.wm->partition_count()) {
        pc->set_watermark(src.wm->partition_watermark(static_cast<int>(p)));
        pc->set_idle(src.wm->partition_idle(static_cast<int>(p)));
      }
    }
    SetSourceWatermarkState(&m, sc, src.wm->Export());
    if (!src.partition_ids.empty()) {
      std::vector<std::string> by_id(src.partition_ids.size());
      for (const auto& [value, pid] : src.partition_ids) by_id[pid] = value;
      SetSourcePartitionIds(&m, sc, by_id);
    }
    if (arrival_mode) SetSourceLastArrival(&m, sc, src.applied_arrival);
  }
  if (arrival_mode) SetManifestClock(&m, clock->NowMs());
  for (OperatorNode& on : ops) {
    if (!on.here) continue;
    auto* oc = m.add_operators();
    oc->set_name(on.spec->name);
    SetOperatorWatermark(oc, on.ctx->watermark());
  }
  for (size_t i = 0; i < sinks.size(); ++i) {
    ASSIGN_OR_RETURN(std::string st, sinks[i].sink->PreCommit(id));
    sinks[i].CountRejected();
    auto* sc = m.add_sinks();
    sc->set_index(static_cast<int32_t>(i));
    sc->set_state(st);
  }
  // Barrier `id` after every record this task wrote into its exchanges: the
  // consumers' checkpoint `id` holds exactly the records before it (SPEC §8).
  for (WriterNode& wn : writers) RETURN_IF_ERROR(wn.writer->WriteBarrier(id));
  CheckpointStats stats;
  if (savepoint_dir.empty()) {
    ASSIGN_OR_RETURN(stats, checkpoints->Write(*state, std::move(m)));
  } else {
    ASSIGN_OR_RETURN(stats, checkpoints->WriteSavepoint(*state, std::move(m), savepoint_dir));
  }
  // The manifest is the commit point: now the sinks publish. In a parallel
  // job the commit point is the job's record once every task stored `id`
  // (ServeCheckpoints commits then).
  if (!parallel()) {
    for (SinkNode& sn : sinks) RETURN_IF_ERROR(sn.sink->Commit(id));
    Failpoint("checkpoint.after_sink_commit");
    if (savepoint_dir.empty()) CommitSourceOffsets(id);
    // The job's checkpoint is this task's (age: job_checkpoint_age).
    metrics->Get("job_checkpoint_last_completed_timestamp_ms")->Set(SystemClock().NowMs());
  }
  const auto ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0)
          .count();
  metrics->Get(savepoint_dir.empty() ? "checkpoints_total" : "savepoints_total")->Add();
  metrics->Get("checkpoint_uploaded_bytes_total")->Add(static_cast<int64_t>(stats.bytes_uploaded));
  metrics->Get("checkpoint_last_duration_ms")->Set(ms);
  metrics->Get("checkpoint_last_state_bytes")->Set(static_cast<int64_t>(stats.bytes_total));
  metrics->Get("checkpoint_last_id")->Set(id);
  // State per table (RocksDB properties), read while it is committed.
  int64_t state_total = 0;
  for (const StateBackend::TableStats& t : state->Stats()) {
    const std::string labels = absl::StrCat("task=\"", name, "\",table=\"", t.table, "\"");
    metrics->Get("state_keys", labels)->Set(static_cast<int64_t>(t.keys));
    metrics->Get("state_bytes", labels)->Set(static_cast<int64_t>(t.bytes));
    state_total += static_cast<int64_t>(t.bytes);
  }
  published_state_bytes.store(state_total, std::memory_order_relaxed);
  last_checkpoint_id = id;
  last_checkpoint_at = std::chrono::steady_clock::now();
  Log()->debug("{} {}: {} ms, {} of {} bytes uploaded",
               savepoint_dir.empty() ? "checkpoint" : "savepoint", id, ms, stats.bytes_uploaded,
               stats.bytes_total);
  if (!savepoint_dir.empty()) {
    Log()->info("savepoint {} written to {}", id, savepoint_dir);
  }
  return absl::OkStatus();
}

absl::Status Task::Run() {
  Impl& im = *impl_;
  LogContext log_context(im.spec.name, im.TaskLabel());
  RETURN_IF_ERROR(im.Preload());
  if (im.parallel()) return im.RunParallel();
  RETURN_IF_ERROR(im.arrival_mode ? im.RunArrivalMode() : im.RunWallMode());
  return im.Finish();
}

std::string Task::Summary() const {
  const Impl& im = *impl_;
  return JobSummary(*im.metrics, im.records_in.load(), im.records_out.load());
}

std::string JobSummary(const MetricsRegistry& metrics, int64_t records_in, int64_t records_out) {
  std::string s = absl::StrFormat("records in: %d, results out: %d", records_in, records_out);
  for (const auto& [name, v] : metrics.Snapshot()) {
    if (v == 0) continue;
    if (name.rfind("invalid_records_total", 0) == 0 || name.rfind("too_late_total", 0) == 0 ||
        name.rfind("dedup_", 0) == 0 || name.rfind("dead_letter", 0) == 0) {
      if (name.rfind("dedup_retention", 0) == 0 || name.rfind("dedup_passed", 0) == 0) continue;
      absl::StrAppend(&s, "\n  ", name, " = ", v);
    }
  }
  return s;
}

}  // namespace caravela
