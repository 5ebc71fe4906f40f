#include "worker/runtime/task_ingest.h"

#include <algorithm>
#include <chrono>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "common/source_kind.h"
#include "simdjson.h"
#include "worker/runtime/event_time.h"

namespace caravela {

using task_internal::InvalidReason;
using task_internal::kBadEventTime;
using task_internal::kMalformed;
using task_internal::kMissingEventTime;
using task_internal::kTombstone;
using task_internal::kValidRecord;

// Decodes one raw message into src.input.pending (a valid record, or an invalid-record
// side record flagged in pending_invalid). Never fails: bad input is data.
void SourceIngest::Decode(task_internal::SourceNode& src, const RawMessage& m, RecordBatch& into,
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
    } else if (st = decoder_.Decode(m.key, &r); !st.ok()) {
      st = absl::InvalidArgumentError(absl::StrCat(
          "tombstone whose key is not a JSON object with the table's key fields: ", st.message()));
    }
    r.tombstone = st.ok();
  } else {
    st = !m.block.empty() ? decoder_.DecodeLine(m.payload, m.block, &r)
         : m.padded       ? decoder_.DecodePadded(m.payload, &r)
                          : decoder_.Decode(m.payload, &r);
  }
  if (st.ok() && !r.tombstone) {
    if (ctx_.arrival_mode) {
      Value a = r.GetPath(src.arrival_path);
      if (a.type == ValueType::kInt) arrival = a.i;
    }
    if (!src.partition_path.empty()) {
      json_.clear();
      r.GetPath(src.partition_path).AppendJson(&json_);
      auto [it, inserted] =
          src.partition_ids.emplace(json_, static_cast<int>(src.partition_ids.size()));
      partition = it->second;
    }
    if (ss.event_time.has_value() && !ExtractEventTime(r, *ss.event_time, &r.event_time, &reason)) {
      code = r.GetPath(ss.event_time->field).is_null() ? kMissingEventTime : kBadEventTime;
    }
  } else if (!st.ok()) {
    reason = std::string(st.message());
    code = m.tombstone ? kTombstone : kMalformed;
  }
  if (ctx_.arrival_mode) last_arrival = std::max(last_arrival, arrival);
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
  if (!ctx_.arrival_mode && poll_now_ == kMinTime) poll_now_ = ctx_.clock->NowMs();
  r.arrival = ctx_.arrival_mode ? last_arrival : poll_now_;
}

absl::Status SourceIngest::FillPending(task_internal::SourceNode& src, int timeout_ms) {
  if (src.has_pending()) return absl::OkStatus();
  src.input.pending.clear();
  src.input.pending_invalid.clear();
  src.input.head = 0;
  if (src.input.merged) return FillMerged(src);
  if (src.raw->Exhausted()) return absl::OkStatus();
  poll_now_ = kMinTime;
  return src.raw
      ->Poll(ctx_.options.batch_size, timeout_ms,
             [&](const RawMessage& m) {
               Decode(src, m, src.input.pending, src.input.pending_invalid, src.input.last_arrival);
             })
      .status();
}

absl::Status SourceIngest::FillMerged(task_internal::SourceNode& src) {
  using SteadyClock = std::chrono::steady_clock;
  auto last_progress = SteadyClock::now();
  for (;;) {
    MergeStaged(src);
    if (src.has_pending()) return absl::OkStatus();
    // Every partition delivered all it has: MergeStaged took the last steps.
    if (src.raw->Exhausted()) return absl::OkStatus();
    ASSIGN_OR_RETURN(int n, src.raw->Poll(ctx_.options.batch_size, 100, [&](const RawMessage& m) {
      if (m.partition < 0 || m.partition >= static_cast<int32_t>(src.input.staged.size())) return;
      task_internal::SourceNode::Staged& st = src.input.staged[m.partition];
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

void SourceIngest::MergeStaged(task_internal::SourceNode& src) {
  src.input.pending.clear();
  src.input.pending_invalid.clear();
  src.input.head = 0;
  // A step (one arrival time) is complete once every partition either shows
  // a later arrival or has nothing more to deliver.
  for (;;) {
    int64_t t = kMaxTime;
    for (const task_internal::SourceNode::Staged& st : src.input.staged) {
      if (!st.empty()) t = std::min(t, st.records[st.head].arrival);
    }
    if (t == kMaxTime) return;
    for (size_t p = 0; p < src.input.staged.size(); ++p) {
      const task_internal::SourceNode::Staged& st = src.input.staged[p];
      const bool later = !st.empty() && st.records[st.records.size() - 1].arrival > t;
      const bool done = src.raw->Backlog(static_cast<int32_t>(p)) == 0;
      if (!later && !done) return;  // partition p may still bring records at t
    }
    for (task_internal::SourceNode::Staged& st : src.input.staged) {
      while (!st.empty() && st.records[st.head].arrival == t) {
        src.input.pending.AppendSwapped(st.records[st.head]);
        src.input.pending_invalid.push_back(st.invalid[st.head]);
        ++st.head;
      }
    }
    if (static_cast<int>(src.input.pending.size()) >= ctx_.options.batch_size) return;
  }
}

int64_t SourceIngest::Backlog(const task_internal::SourceNode& src, int partition) const {
  if (ctx_.arrival_mode) {
    int64_t now = ctx_.clock->NowMs();
    for (size_t i = src.input.head;
         i < src.input.pending.size() && src.input.pending[i].arrival <= now; ++i) {
      if (src.input.pending[i].partition == partition) return 1;
    }
    return 0;
  }
  if (src.has_pending()) return 1;
  if (!src.spec->kind->partitioned_log()) return src.raw->Exhausted() ? 0 : 1;
  return src.raw->Backlog(partition);
}

}  // namespace caravela
