#include "worker/runtime/pipeline.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <thread>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/expr.h"
#include "common/json.h"
#include "spdlog/spdlog.h"
#include "worker/connectors/file_connectors.h"
#include "worker/connectors/kafka_sink.h"
#include "worker/connectors/kafka_source.h"
#include "worker/connectors/sink_factory.h"
#include "worker/operators/basic_operators.h"
#include "worker/operators/dedup_operator.h"
#include "worker/operators/interval_join_operator.h"
#include "worker/operators/table_join_operators.h"
#include "worker/operators/window_join_operator.h"
#include "worker/operators/window_operator.h"
#include "worker/runtime/event_time.h"
#include "worker/runtime/watermark.h"

namespace caravela {
namespace {

std::shared_ptr<spdlog::logger> Log() {
  static std::shared_ptr<spdlog::logger> log = [] {
    auto l = spdlog::get("runtime");
    if (!l) l = spdlog::default_logger()->clone("runtime");
    return l;
  }();
  return log;
}

// A consumer of a node's output (main or one side output).
struct Edge {
  int op = -1;    // operator index, or -1
  int input = 0;  // input index of the operator
  int sink = -1;  // sink index, or -1
};

struct NodeOutputs {
  std::vector<Edge> main;
  std::vector<std::vector<Edge>> sides;  // per side output
  std::vector<std::string> side_names;   // "<node>.<side>"
  std::vector<FieldPath> key_fields;     // sink keys of main-output records
  std::vector<std::string> key_names;
};

struct SourceNode {
  const SourceSpec* spec = nullptr;
  std::unique_ptr<RawSource> raw;
  std::unique_ptr<SourceWatermark> wm;
  FieldPath partition_path, arrival_path;
  absl::flat_hash_map<std::string, int> partition_ids;
  // Decoded records waiting to be applied, [head, size).
  RecordBatch pending;
  std::vector<uint8_t> pending_invalid;
  size_t head = 0;
  int64_t last_arrival = kMinTime;
  bool finished = false;
  bool preload = false;  // a lookup table: read whole before anything else
  Output out{1};
  Counter* in = nullptr;
  Counter* invalid = nullptr;
  bool has_pending() const { return head < pending.size(); }
};

struct OperatorNode {
  const OperatorSpec* spec = nullptr;
  std::unique_ptr<Operator> op;
  std::unique_ptr<OperatorContext> ctx;
  std::vector<int> inputs;  // node ids
  Output out;
};

struct SinkNode {
  std::string name;
  std::unique_ptr<Sink> sink;
  Counter* written = nullptr;
  bool dead_letter = false;
};

}  // namespace

struct Pipeline::Impl {
  JobSpec spec;
  RunOptions options;
  MetricsRegistry* metrics = nullptr;
  StateBackend* state = nullptr;
  SystemClock system_clock;
  ManualClock manual_clock;
  const Clock* clock = nullptr;
  bool arrival_mode = false;

  std::vector<SourceNode> sources;  // node ids [0, S)
  std::vector<OperatorNode> ops;    // node ids [S, S+O)
  std::vector<SinkNode> sinks;
  std::vector<NodeOutputs> outputs;  // per node id
  std::vector<int64_t> node_wm;      // output watermark per node id
  std::vector<uint8_t> node_idle;
  int dead_letter_sink = -1;

  JsonDecoder decoder;
  // Processing time of the records of the current poll (read once per poll,
  // at its first record: a clock read per record costs ~2% of the hot path).
  int64_t poll_now = kMinTime;
  std::string json;
  std::string key;
  const FieldPath revision_path = FieldPath::Parse("revision");
  const FieldPath state_path = FieldPath::Parse("state");
  int64_t records_in = 0;
  int64_t records_out = 0;
  int64_t invalid_total = 0;
  std::chrono::steady_clock::time_point started, last_progress, last_flush, last_state_flush;
  int64_t progress_records_in = 0;

  int S() const { return static_cast<int>(sources.size()); }
  int NodeId(std::string_view name) const {
    for (int i = 0; i < S(); ++i) {
      if (sources[i].spec->name == name) return i;
    }
    for (size_t i = 0; i < ops.size(); ++i) {
      if (ops[i].spec->name == name) return S() + static_cast<int>(i);
    }
    return -1;
  }
  Output& OutputOf(int node) { return node < S() ? sources[node].out : ops[node - S()].out; }

  absl::Status Build();
  void Decode(SourceNode& src, const RawMessage& m);
  absl::Status FillPending(SourceNode& src, int timeout_ms);
  absl::Status ApplySourceBatch(int src_id, size_t count);
  absl::Status Dispatch(int node);
  absl::Status WriteSink(int sink, int node, const Record& r, std::string_view side_name);
  absl::Status UpdateWatermarks();
  absl::Status FireTimers();
  // Flushes operator state into the backend and commits it when `force` or
  // state_flush_interval_ms passed; flushes sinks when `force` or 200 ms
  // passed.
  absl::Status Commit(bool force);
  int64_t NextTimer() const;
  int64_t Backlog(const SourceNode& src, int partition) const;
  absl::Status Preload();
  absl::Status RunArrivalMode();
  absl::Status RunWallMode();
  absl::Status Finish();
  void Progress(bool force);
};

Pipeline::~Pipeline() = default;

absl::StatusOr<std::unique_ptr<Pipeline>> Pipeline::Create(const JobSpec& spec,
                                                           RunOptions options) {
  std::unique_ptr<Pipeline> p(new Pipeline());
  p->impl_ = std::make_unique<Impl>();
  Impl& im = *p->impl_;
  im.spec = spec;
  im.options = std::move(options);
  im.metrics = &p->metrics_;
  if (im.options.in_memory_state) {
    p->state_ = NewMemoryBackend();
  } else {
    std::error_code ec;
    std::filesystem::create_directories(im.options.data_dir, ec);
    ASSIGN_OR_RETURN(p->state_, OpenRocksDbBackend(im.options.data_dir + "/state"));
  }
  im.state = p->state_.get();
  RETURN_IF_ERROR(im.Build());
  return p;
}

absl::Status Pipeline::Impl::Build() {
  // Processing time: arrival-driven iff every source is a file with arrival_field.
  // (Lookup tables are preloaded, so their arrival times do not matter.)
  arrival_mode = !spec.sources.empty();
  for (const SourceSpec& s : spec.sources) {
    bool lookup_table = false;
    for (const OperatorSpec& os : spec.operators) {
      lookup_table = lookup_table ||
                     (os.kind == OperatorSpec::Kind::kLookupJoin && os.table_join.table == s.name);
    }
    if (lookup_table && s.kind == SourceSpec::Kind::kFile) continue;
    if (s.kind != SourceSpec::Kind::kFile || s.file.arrival_field.empty()) arrival_mode = false;
  }
  clock = arrival_mode ? static_cast<const Clock*>(&manual_clock)
                       : (options.clock ? options.clock : &system_clock);
  int64_t start_time = arrival_mode ? kMinTime : clock->NowMs();

  // Sources.
  sources.resize(spec.sources.size());
  for (size_t i = 0; i < spec.sources.size(); ++i) {
    const SourceSpec& ss = spec.sources[i];
    SourceNode& src = sources[i];
    src.spec = &ss;
    if (ss.kind == SourceSpec::Kind::kFile) {
      src.raw = std::make_unique<FileSource>(ss.file.path);
      src.partition_path = FieldPath::Parse(ss.file.partition_field);
      src.arrival_path = FieldPath::Parse(ss.file.arrival_field);
    } else {
      KafkaSourceOptions ko;
      ko.bootstrap = ss.kafka.bootstrap.empty() ? options.embedded_bootstrap : ss.kafka.bootstrap;
      ko.topic = ss.kafka.topic;
      ko.start = ss.kafka.start;
      src.raw = std::make_unique<KafkaSource>(ko);
    }
    absl::Status st = src.raw->Open();
    if (st.ok() && ss.kind == SourceSpec::Kind::kKafka && ss.kafka.bounded) {
      st = src.raw->StopAtCurrentEnd();
    }
    if (!st.ok()) {
      return absl::Status(st.code(), absl::StrCat("source ", ss.name, ": ", st.message()));
    }
    src.wm = std::make_unique<SourceWatermark>(ss.watermark, start_time);
    if (ss.kind == SourceSpec::Kind::kKafka) src.wm->EnsurePartitions(src.raw->PartitionCount());
    std::string labels = absl::StrCat("source=\"", ss.name, "\"");
    src.in = metrics->Get("records_in_total", labels);
    src.invalid = metrics->Get("invalid_records_total", labels);
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
    switch (os.kind) {
      case OperatorSpec::Kind::kFilter: {
        ASSIGN_OR_RETURN(auto e, Expr::Compile(os.filter.where));
        on.op = std::make_unique<FilterOperator>(std::move(e));
        break;
      }
      case OperatorSpec::Kind::kProject: {
        std::vector<std::pair<std::string, std::unique_ptr<Expr>>> fields;
        for (const auto& [name, text] : os.project.fields) {
          ASSIGN_OR_RETURN(auto e, Expr::Compile(text));
          fields.emplace_back(name, std::move(e));
        }
        on.op = std::make_unique<ProjectOperator>(std::move(fields));
        break;
      }
      case OperatorSpec::Kind::kDedup: {
        // The fingerprint ignores the arrival field of the source feeding it.
        std::string exclude;
        int up = on.inputs[0];
        while (up >= S()) up = ops[up - S()].inputs.empty() ? -1 : ops[up - S()].inputs[0];
        if (up >= 0) exclude = sources[up].spec->file.arrival_field;
        on.op = std::make_unique<DedupOperator>(os.dedup.id, os.dedup.retention,
                                                os.dedup.fingerprint, exclude);
        break;
      }
      case OperatorSpec::Kind::kWindow:
        on.op = std::make_unique<WindowOperator>(os.window);
        break;
      case OperatorSpec::Kind::kIntervalJoin: {
        ASSIGN_OR_RETURN(on.op, IntervalJoinOperator::Create(os.interval_join));
        break;
      }
      case OperatorSpec::Kind::kWindowJoin:
        on.op = std::make_unique<WindowJoinOperator>(os.window_join);
        break;
      case OperatorSpec::Kind::kTemporalJoin:
        on.op = std::make_unique<TemporalJoinOperator>(os.table_join, os.table_join.table);
        break;
      case OperatorSpec::Kind::kLookupJoin: {
        on.op = std::make_unique<LookupJoinOperator>(os.table_join, os.table_join.table);
        // The table is loaded whole before the first stream record (Preload).
        int table = NodeId(os.table_join.table);
        if (table >= 0 && table < S()) sources[table].preload = true;
        break;
      }
    }
    on.ctx = std::make_unique<OperatorContext>(os.name, state, metrics, clock);
    on.out.Resize(on.op->SideOutputs().size());
    RETURN_IF_ERROR(on.op->Open(*on.ctx));
  }

  // Outputs and key fields per node.
  outputs.resize(sources.size() + ops.size());
  node_wm.assign(outputs.size(), kMinTime);
  node_idle.assign(outputs.size(), 0);
  for (int i = 0; i < S(); ++i) {
    outputs[i].sides.resize(1);
    outputs[i].side_names = {sources[i].spec->name + ".invalid"};
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
    std::vector<std::string> keys = ops[i].op->OutputKeyFields();
    // Joins combine records of several inputs: their output has no key.
    if (keys.empty() && !ops[i].inputs.empty() &&
        ops[i].spec->kind != OperatorSpec::Kind::kProject && !ops[i].spec->is_join()) {
      no.key_fields = outputs[ops[i].inputs[0]].key_fields;
      no.key_names = outputs[ops[i].inputs[0]].key_names;
    } else {
      for (const std::string& k : keys) {
        no.key_fields.push_back(FieldPath{{k}});
        no.key_names.push_back(k);
      }
    }
    for (size_t in = 0; in < ops[i].inputs.size(); ++in) {
      outputs[ops[i].inputs[in]].main.push_back(
          Edge{static_cast<int>(i), static_cast<int>(in), -1});
    }
  }

  // Sinks.
  for (const SinkSpec& ss : spec.sinks) {
    SinkNode sn;
    sn.name = ss.from;
    SinkContext sc;
    sc.job_name = spec.name;
    sc.embedded_bootstrap = options.embedded_bootstrap;
    sc.sink_index = static_cast<int>(sinks.size());
    ASSIGN_OR_RETURN(sn.sink, MakeSink(ss, sc));
    absl::Status st = sn.sink->Open();
    if (!st.ok()) {
      return absl::Status(st.code(), absl::StrCat("sink for ", ss.from, ": ", st.message()));
    }
    sn.written = metrics->Get("sink_records_total", absl::StrCat("from=\"", ss.from, "\""));
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
  for (const NodeOutputs& no : outputs) {
    for (const auto& edges : no.sides) need_dead_letter = need_dead_letter || edges.empty();
  }
  if (need_dead_letter) {
    std::string path = spec.dead_letter_path.empty() ? options.data_dir + "/dead-letter.jsonl"
                                                     : spec.dead_letter_path;
    SinkNode sn;
    sn.name = "dead-letter";
    sn.dead_letter = true;
    sn.sink = std::make_unique<FileSink>(path);
    RETURN_IF_ERROR(sn.sink->Open());
    sn.written = metrics->Get("dead_letter_records_total");
    dead_letter_sink = static_cast<int>(sinks.size());
    sinks.push_back(std::move(sn));
    for (NodeOutputs& no : outputs) {
      for (auto& edges : no.sides) {
        if (edges.empty()) edges.push_back(Edge{-1, 0, dead_letter_sink});
      }
    }
  }
  started = last_progress = last_flush = last_state_flush = std::chrono::steady_clock::now();
  Log()->debug("[job={}] {} sources, {} operators, {} sinks; processing time: {}", spec.name,
               sources.size(), ops.size(), sinks.size(), arrival_mode ? "arrival field" : "clock");
  return absl::OkStatus();
}

// Decodes one raw message into src.pending (a valid record, or an invalid-record
// side record flagged in pending_invalid). Never fails: bad input is data.
void Pipeline::Impl::Decode(SourceNode& src, const RawMessage& m) {
  Record& r = src.pending.Append();
  const SourceSpec& ss = *src.spec;
  absl::Status st = decoder.Decode(m.payload, &r);
  std::string reason;
  int partition = m.partition;
  int64_t arrival = src.last_arrival;
  if (st.ok()) {
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
    if (ss.event_time.has_value()) {
      ExtractEventTime(r, *ss.event_time, &r.event_time, &reason);
    }
  } else {
    reason = std::string(st.message());
  }
  if (arrival_mode) src.last_arrival = std::max(src.last_arrival, arrival);
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
    src.pending_invalid.push_back(1);
  } else {
    src.pending_invalid.push_back(0);
  }
  r.partition = partition;
  r.offset = m.offset;
  if (!arrival_mode && poll_now == kMinTime) poll_now = clock->NowMs();
  r.arrival = arrival_mode ? src.last_arrival : poll_now;
}

absl::Status Pipeline::Impl::FillPending(SourceNode& src, int timeout_ms) {
  if (src.has_pending()) return absl::OkStatus();
  src.pending.clear();
  src.pending_invalid.clear();
  src.head = 0;
  if (src.raw->Exhausted()) return absl::OkStatus();
  poll_now = kMinTime;
  return src.raw->Poll(options.batch_size, timeout_ms, [&](const RawMessage& m) { Decode(src, m); })
      .status();
}

int64_t Pipeline::Impl::Backlog(const SourceNode& src, int partition) const {
  if (arrival_mode) {
    int64_t now = clock->NowMs();
    for (size_t i = src.head; i < src.pending.size() && src.pending[i].arrival <= now; ++i) {
      if (src.pending[i].partition == partition) return 1;
    }
    return 0;
  }
  if (src.has_pending()) return 1;
  if (src.spec->kind == SourceSpec::Kind::kFile) return src.raw->Exhausted() ? 0 : 1;
  return src.raw->Backlog(partition);
}

// Applies pending[head, head+count) of source `src_id` as one batch.
absl::Status Pipeline::Impl::ApplySourceBatch(int src_id, size_t count) {
  SourceNode& src = sources[src_id];
  const int64_t now = clock->NowMs();
  const int64_t skew = src.spec->watermark.max_future_skew;
  const bool has_time = src.spec->event_time.has_value();
  Output& out = src.out;
  for (size_t i = src.head; i < src.head + count; ++i) {
    Record& r = src.pending[i];
    src.wm->OnActivity(r.partition, now);
    if (src.pending_invalid[i]) {
      std::swap(out.EmitSide(0), r);
      src.invalid->Add();
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
      src.invalid->Add();
      ++invalid_total;
      continue;
    }
    if (has_time) src.wm->OnRecord(r.partition, r.event_time, now);
    std::swap(out.Emit(), r);
  }
  src.head += count;
  src.in->Add(static_cast<int64_t>(count));
  records_in += static_cast<int64_t>(count);
  return Dispatch(src_id);
}

absl::Status Pipeline::Impl::WriteSink(int sink_id, int node, const Record& r,
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
    if (!no.key_fields.empty()) {
      key.push_back('{');
      for (size_t k = 0; k < no.key_fields.size(); ++k) {
        if (k > 0) key.push_back(',');
        AppendJsonString(no.key_names[k], &key);
        key.push_back(':');
        r.GetPath(no.key_fields[k]).AppendJson(&key);
      }
      key.push_back('}');
    }
  }
  sn.written->Add();
  ++records_out;
  SinkRecord sr;
  sr.key = key;
  sr.value = json;
  if (!sn.dead_letter && side_name.empty()) {
    Value rev = r.GetPath(revision_path);
    if (rev.type == ValueType::kInt) sr.revision = rev.i;
    Value st = r.GetPath(state_path);
    if (st.type == ValueType::kString) sr.state = st.s;
  }
  return sn.sink->WriteRecord(sr);
}

absl::Status Pipeline::Impl::Dispatch(int node) {
  Output& out = OutputOf(node);
  NodeOutputs& no = outputs[node];
  if (!out.main().empty()) {
    for (const Edge& e : no.main) {
      if (e.sink >= 0) {
        for (const Record& r : out.main()) RETURN_IF_ERROR(WriteSink(e.sink, node, r, ""));
        continue;
      }
      OperatorNode& on = ops[e.op];
      RETURN_IF_ERROR(on.op->ProcessBatch(*on.ctx, e.input, out.main(), on.out));
      RETURN_IF_ERROR(Dispatch(S() + e.op));
    }
  }
  for (size_t s = 0; s < no.sides.size(); ++s) {
    if (out.side(s).empty()) continue;
    for (const Edge& e : no.sides[s]) {
      for (const Record& r : out.side(s)) {
        RETURN_IF_ERROR(WriteSink(e.sink, node, r, no.side_names[s]));
      }
    }
  }
  out.clear();
  return absl::OkStatus();
}

absl::Status Pipeline::Impl::UpdateWatermarks() {
  const int64_t now = clock->NowMs();
  for (int i = 0; i < S(); ++i) {
    SourceNode& src = sources[i];
    if (!src.spec->event_time.has_value()) {
      node_wm[i] = kMaxTime;  // table sources do not hold back event time
      continue;
    }
    node_wm[i] = src.wm->Update(now, [&](int p) { return Backlog(src, p); });
    node_idle[i] = src.wm->idle() ? 1 : 0;
  }
  for (size_t i = 0; i < ops.size(); ++i) {
    OperatorNode& on = ops[i];
    int64_t w = kMaxTime;
    bool all_idle = true;
    for (int in : on.inputs) all_idle = all_idle && node_idle[in];
    for (int in : on.inputs) {
      if (!all_idle && node_idle[in]) continue;  // idle inputs leave the minimum
      w = std::min(w, node_wm[in]);
    }
    int id = S() + static_cast<int>(i);
    node_idle[id] = all_idle ? 1 : 0;
    if (w > on.ctx->watermark()) {
      on.ctx->set_watermark(w);
      RETURN_IF_ERROR(on.op->OnWatermark(*on.ctx, on.out));
      RETURN_IF_ERROR(Dispatch(id));
    }
    node_wm[id] = on.op->OutputWatermark(on.ctx->watermark());
  }
  return absl::OkStatus();
}

int64_t Pipeline::Impl::NextTimer() const {
  int64_t t = kMaxTime;
  for (const OperatorNode& on : ops) t = std::min(t, on.op->NextTimer());
  int64_t now = clock->NowMs();
  for (const SourceNode& src : sources) t = std::min(t, src.wm->NextIdleTransition(now));
  return t;
}

absl::Status Pipeline::Impl::FireTimers() {
  const int64_t now = clock->NowMs();
  for (size_t i = 0; i < ops.size(); ++i) {
    OperatorNode& on = ops[i];
    if (on.op->NextTimer() <= now) {
      RETURN_IF_ERROR(on.op->OnProcessingTime(*on.ctx, on.out));
      RETURN_IF_ERROR(Dispatch(S() + static_cast<int>(i)));
    }
  }
  return absl::OkStatus();
}

absl::Status Pipeline::Impl::Commit(bool force) {
  auto now = std::chrono::steady_clock::now();
  // Operator state is written behind: operators keep their working set in
  // memory and persist it at Flush, which runs at checkpoints, at the end and
  // at least every state_flush_interval_ms (so the uncommitted write batch
  // stays small). Rows that live and die between two flushes never reach
  // the backend.
  if (force ||
      now - last_state_flush >= std::chrono::milliseconds(options.state_flush_interval_ms)) {
    for (OperatorNode& on : ops) RETURN_IF_ERROR(on.op->Flush(*on.ctx));
    RETURN_IF_ERROR(state->Commit());
    last_state_flush = now;
  }
  if (force || now - last_flush > std::chrono::milliseconds(200)) {
    for (SinkNode& sn : sinks) RETURN_IF_ERROR(sn.sink->Flush());
    last_flush = now;
  }
  Progress(false);
  return absl::OkStatus();
}

void Pipeline::Impl::Progress(bool force) {
  if (options.progress_interval_ms <= 0 || options.progress_out == nullptr) return;
  auto now = std::chrono::steady_clock::now();
  auto since = std::chrono::duration_cast<std::chrono::milliseconds>(now - last_progress).count();
  if (!force && since < options.progress_interval_ms) return;
  double secs = std::max<double>(since, 1) / 1000.0;
  double rate = static_cast<double>(records_in - progress_records_in) / secs;
  int64_t wm = kMaxTime;
  for (size_t i = 0; i < ops.size(); ++i) wm = std::min(wm, node_wm[S() + i]);
  if (ops.empty()) {
    for (int i = 0; i < S(); ++i) wm = std::min(wm, node_wm[i]);
  }
  std::string wm_text = wm == kMinTime ? "-inf" : (wm == kMaxTime ? "+inf" : FormatIso8601(wm));
  std::fprintf(options.progress_out,
               "[caravela] in=%lld out=%lld rate=%.0f ev/s watermark=%s invalid=%lld\n",
               static_cast<long long>(records_in), static_cast<long long>(records_out), rate,
               wm_text.c_str(), static_cast<long long>(invalid_total));
  std::fflush(options.progress_out);
  last_progress = now;
  progress_records_in = records_in;
}

// Reads lookup-table sources up to their current end before any other record
// is applied (SPEC §5: "loaded whole before the first stream record"); the
// main loop then keeps following them (files are simply finished).
absl::Status Pipeline::Impl::Preload() {
  for (int i = 0; i < S(); ++i) {
    SourceNode& src = sources[i];
    if (!src.preload) continue;
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

absl::Status Pipeline::Impl::RunArrivalMode() {
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
      continue;
    }
    manual_clock.Set(t_next);
    SourceNode& src = sources[best];
    size_t count = 0;
    while (src.head + count < src.pending.size() &&
           src.pending[src.head + count].arrival == t_next &&
           static_cast<int>(count) < options.batch_size) {
      ++count;
    }
    RETURN_IF_ERROR(ApplySourceBatch(best, count));
    RETURN_IF_ERROR(UpdateWatermarks());
    RETURN_IF_ERROR(FireTimers());
    RETURN_IF_ERROR(Commit(false));
  }
  return absl::OkStatus();
}

absl::Status Pipeline::Impl::RunWallMode() {
  bool draining = false;
  bool any_unbounded = false;
  for (const SourceNode& src : sources) any_unbounded = any_unbounded || !src.raw->Bounded();
  for (;;) {
    if (options.stop != nullptr && options.stop->load()) break;
    bool all_done = true;
    bool got = false;
    if (options.end_of_input != nullptr && options.end_of_input->load() && !draining) {
      draining = true;
      for (SourceNode& src : sources) {
        if (!src.raw->Bounded()) RETURN_IF_ERROR(src.raw->StopAtCurrentEnd());
      }
    }
    for (int i = 0; i < S(); ++i) {
      SourceNode& src = sources[i];
      if (src.finished) continue;
      RETURN_IF_ERROR(FillPending(src, any_unbounded ? 20 : 0));
      if (src.has_pending()) {
        got = true;
        all_done = false;
        RETURN_IF_ERROR(ApplySourceBatch(i, src.pending.size() - src.head));
      } else if (src.raw->Exhausted()) {
        // Ends only in a step without records, so the watermark of the last
        // batch is propagated (and fires) before the end-of-input +inf.
        Log()->debug("[job={}] source {} ended", spec.name, src.spec->name);
        src.finished = true;
        src.wm->Finish();
      } else {
        all_done = false;
      }
    }
    RETURN_IF_ERROR(UpdateWatermarks());
    RETURN_IF_ERROR(FireTimers());
    RETURN_IF_ERROR(Commit(false));
    if (all_done) break;
    if (!got && !any_unbounded) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return absl::OkStatus();
}

absl::Status Pipeline::Impl::Finish() {
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
  Progress(true);
  absl::Status first;
  for (SinkNode& sn : sinks) {
    absl::Status st = sn.sink->Close();
    if (!st.ok() && first.ok()) first = st;
  }
  return first;
}

absl::Status Pipeline::Run() {
  Impl& im = *impl_;
  RETURN_IF_ERROR(im.Preload());
  RETURN_IF_ERROR(im.arrival_mode ? im.RunArrivalMode() : im.RunWallMode());
  return im.Finish();
}

std::string Pipeline::Summary() const {
  const Impl& im = *impl_;
  std::string s = absl::StrFormat("records in: %d, results out: %d", im.records_in, im.records_out);
  for (const auto& [name, v] : metrics_.Snapshot()) {
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
