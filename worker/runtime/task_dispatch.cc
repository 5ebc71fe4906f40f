#include "worker/runtime/task_dispatch.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/failpoint.h"
#include "common/source_kind.h"
#include "common/time_util.h"

namespace caravela {

using task_internal::Edge;
using task_internal::kFutureEventTime;
using task_internal::kValidRecord;
using task_internal::NodeOutputs;
using task_internal::OperatorNode;
using task_internal::ReaderNode;
using task_internal::SinkNode;
using task_internal::SourceNode;

// Applies pending[head, head+count) of source `src_id` as one batch.
absl::Status Dispatcher::ApplySourceBatch(int src_id, size_t count) {
  SourceNode& src = graph_.sources[src_id];
  const int64_t now = ctx_.clock->NowMs();
  const int64_t skew = src.spec->watermark.max_future_skew;
  const bool has_time = src.spec->event_time.has_value();
  Output& out = src.out;
  const bool file = !src.spec->kind->partitioned_log();  // one stream: positions of partition 0
  for (size_t i = src.input.head; i < src.input.head + count; ++i) {
    Record& r = src.input.pending[i];
    const size_t raw_partition = file ? 0 : static_cast<size_t>(r.partition);
    if (raw_partition < src.pos.applied.size()) src.pos.applied[raw_partition] = r.offset + 1;
    src.pos.applied_arrival = r.arrival;
    src.wm->OnActivity(r.partition, now);
    if (src.input.pending_invalid[i] != kValidRecord) {
      out.side(0).AppendSwapped(r);
      src.counters.invalid[src.input.pending_invalid[i]]->Add();
      status_.AddInvalid();
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
      json_.clear();
      r.AppendJson(&json_);
      s.AddString("raw", json_);
      s.partition = r.partition;
      s.offset = r.offset;
      src.counters.invalid[kFutureEventTime]->Add();
      status_.AddInvalid();
      continue;
    }
    if (has_time && !r.tombstone) {
      src.wm->OnRecord(r.partition, r.event_time, now);
      src.counters.delay->Observe(now - r.event_time);
    }
    out.main().AppendSwapped(r);
  }
  src.input.head += count;
  if (src.counters.delay.has_value()) src.counters.delay->Flush();
  if (src.pos.live_applied != nullptr) {
    for (size_t p = 0; p < src.pos.applied.size(); ++p) {
      src.pos.live_applied[p].store(src.pos.applied[p], std::memory_order_relaxed);
    }
  }
  src.counters.in->Add(static_cast<int64_t>(count));
  status_.AddRecordsIn(static_cast<int64_t>(count));
  RETURN_IF_ERROR(Dispatch(src_id));
  Failpoint("source.after_batch");
  return absl::OkStatus();
}

absl::Status Dispatcher::WriteSink(int sink_id, int node, const Record& r,
                                   std::string_view side_name) {
  SinkNode& sn = graph_.sinks[sink_id];
  json_.clear();
  if (sn.dead_letter) {
    json_.append("{\"side_output\":");
    AppendJsonString(side_name, &json_);
    std::string rest = r.ToJson();
    if (rest.size() > 2) {
      json_.push_back(',');
      json_.append(rest, 1, std::string::npos);
    } else {
      json_.push_back('}');
    }
  } else {
    r.AppendJson(&json_);
  }
  key_.clear();
  if (side_name.empty() && node >= 0) {
    const NodeOutputs& no = graph_.outputs[node];
    if (!no.key_fields.empty()) r.AppendFieldsJson(no.key_names, no.key_fields, &key_);
  }
  sn.written->Add();
  status_.AddRecordOut();
  SinkRecord sr;
  sr.key = key_;
  sr.value = json_;
  if (!sn.dead_letter && side_name.empty()) {
    Value rev = r.GetPath(revision_path_);
    if (rev.type == ValueType::kInt) {
      sr.revision = rev.i;
      sn.revisions->Add();
    }
    Value st = r.GetPath(state_path_);
    if (st.type == ValueType::kString) sr.state = st.s;
  }
  RETURN_IF_ERROR(sn.sink->WriteRecord(sr));
  Failpoint("sink.after_write");
  return absl::OkStatus();
}

absl::Status Dispatcher::Dispatch(int node) {
  Output& out = graph_.OutputOf(node);
  NodeOutputs& no = graph_.outputs[node];
  if (node >= graph_.S()) {
    // What an operator emitted, main and side outputs (one add per batch).
    OperatorNode& on = graph_.ops[node - graph_.S()];
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
        ExchangeWriter& w = *graph_.writers[e.writer].writer;
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

absl::Status Dispatcher::Feed(int op, int input, const RecordBatch& batch, RecordBatch* movable) {
  OperatorNode& on = graph_.ops[op];
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
  return Dispatch(graph_.S() + op);
}

absl::Status Dispatcher::ApplyArrivalStep(int src_id, int64_t t) {
  const SourceNode& src = graph_.sources[src_id];
  size_t count = 0;
  while (src.input.head + count < src.input.pending.size() &&
         src.input.pending[src.input.head + count].arrival == t &&
         static_cast<int>(count) < ctx_.options.batch_size) {
    ++count;
  }
  return count == 0 ? absl::OkStatus() : ApplySourceBatch(src_id, count);
}

void Dispatcher::CountExchangeRecords(const ReaderNode& rn) {
  int64_t records = 0;
  for (const RecordBatch& b : rn.by_input) records += static_cast<int64_t>(b.size());
  status_.AddExchangeRecordsIn(records);
}

absl::Status Dispatcher::PollReaders(int timeout_ms, bool* got) {
  for (ReaderNode& rn : graph_.readers) {
    for (RecordBatch& b : rn.by_input) b.clear();
    ASSIGN_OR_RETURN(int n, rn.reader->Poll(ctx_.options.batch_size, timeout_ms, &rn.by_input));
    if (n == 0) continue;
    *got = true;
    CountExchangeRecords(rn);
    for (size_t in = 0; in < rn.by_input.size(); ++in) {
      if (!rn.by_input[in].empty()) {
        RETURN_IF_ERROR(Feed(rn.op, static_cast<int>(in), rn.by_input[in]));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status Dispatcher::ConsumeReplayInput() {
  for (ReaderNode& rn : graph_.readers) {
    for (;;) {
      for (RecordBatch& b : rn.by_input) b.clear();
      ASSIGN_OR_RETURN(int n, rn.reader->Poll(1 << 20, 0, &rn.by_input));
      if (n == 0) break;
      CountExchangeRecords(rn);
      for (size_t in = 0; in < rn.by_input.size(); ++in) {
        RecordBatch& batch = rn.by_input[in];
        if (batch.empty()) continue;
        // One task would have seen them in source order: partition, offset
        // (ties keep their producer's order).
        std::vector<size_t> order(batch.size());
        for (size_t i = 0; i < order.size(); ++i) order[i] = i;
        std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
          return std::pair(batch[a].partition, batch[a].offset) <
                 std::pair(batch[b].partition, batch[b].offset);
        });
        sorted_.clear();
        for (size_t i : order) sorted_.AppendSwapped(batch[i]);
        RETURN_IF_ERROR(Feed(rn.op, static_cast<int>(in), sorted_));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status Dispatcher::CloseSinks() {
  absl::Status first;
  for (SinkNode& sn : graph_.sinks) {
    absl::Status st = sn.sink->Close();
    if (!st.ok() && first.ok()) first = st;
  }
  return first;
}

}  // namespace caravela
