// Reconciliation (SPEC §10, `caravela reconcile`): recompute a job's window
// results in batch from its replayable raw input with no lateness cut-off,
// read the FINAL results back from one of its sinks, and compare them window
// by window.
//
// The recomputation runs the job itself (same sources, filters, projections,
// dedup and aggregates) through the one-process runtime with:
//  * every Kafka source bounded and read from its earliest retained offset;
//  * watermarks held back for the whole input (max_out_of_orderness of 1000
//    years), so no record is late, no window fires and no dedup id expires
//    before the input ends; then W = +inf fires every window once, FINAL;
//  * dedup retention unbounded: the first copy of an id in arrival order
//    wins over the whole input, as the stream decides within its retention;
//  * no EARLY timers, no checkpoints, one task; the in-memory state backend
//    (nothing is restored) with scratch files in a work dir.
//
// Read-back: JSONL files (the configured path and the part files of a
// parallel job, `<stem>.part-N<ext>`), a Kafka topic read from its start to
// its current end, or a PostgreSQL table (each row's `value` jsonb). Per
// window key (group-by values and window bounds) the highest revision wins.
//
// Comparison, per window whose window_start lies in the range: a window the
// sink holds as not yet FINAL is the stream's (skipped, counted); otherwise
// every result field but revision, state and reconciled must be equal
// (numbers by value: 1 == 1.0). A window only one side has is a difference.
//
// Causes: the job's too_late records (its sinks of `<op>.too_late` outputs
// that are files or Kafka topics, and its dead-letter file) are counted per
// window they missed: `after_final` records of the window by their "window",
// `beyond_retention` records of a dedup by the windows their event time falls
// in. With `reconcile: {id}` a sink result with more `events` than the
// recomputed one was counted twice by the stream (an id seen again after the
// dedup retention).
//
// Joins (window, interval and temporal joins; report only): a join row has
// no key and no revision, so the rows are compared as multisets by their
// canonical JSON (members sorted, numbers by value). A row only the
// recomputation has is explained when its left or right record (a temporal
// join's stream record) is in the join's too_late output. --range selects a
// window join's rows by window_start; other joins' rows are compared whole.
// Rows a running job has not emitted yet (outer rows wait for the
// watermark) show as only_recomputed: reconcile a join once its input is
// behind its watermark. `apply` is refused for joins.
//
// Apply (`apply`): each differing window the recomputation has is published
// through the sink as state FINAL, `reconciled: true` and revision
// ReconciledRevision(sink revision), which no run of the job can have reached
// yet (see there), so every store's revision guard keeps it.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/job_spec.h"
#include "common/status.h"
#include "common/time_util.h"

namespace caravela {

struct ReconcileOptions {
  // The sink to read back: its label (`file:PATH`, `kafka:TOPIC`,
  // `postgres:TABLE`, `clickhouse:DB.TABLE`; a relative file path matches the
  // end of the sink's) or
  // its index in spec.sinks. Empty: the first sink of a window's results.
  std::string sink;
  // Windows compared: window_start in [range_start, range_end).
  int64_t range_start = kMinTime;
  int64_t range_end = kMaxTime;
  // Scratch directory of the recomputation (state, outputs); created and
  // removed by Reconcile.
  std::string work_dir;
  // Broker for Kafka sources and sinks that name no bootstrap (the job ran
  // them on an embedded broker): host:port.
  std::string bootstrap;
  bool apply = false;
};

// "START..END" with ISO-8601 UTC times (either side may be empty: open), or
// "yesterday" / "today" (the UTC day before the one of `now_ms`, or it) ->
// [start, end). InvalidArgument names what is wrong.
absl::StatusOr<std::pair<int64_t, int64_t>> ParseTimeRange(std::string_view text, int64_t now_ms);

// The revision a reconciled result gets when the sink holds `revision`: the
// last one of the next epoch (revisions are epoch * 10^9 + n, SPEC §4), so it
// beats anything the epoch that wrote `revision` and a restore of it can
// still publish.
int64_t ReconciledRevision(int64_t revision);

struct ReconcileDifference {
  enum class Kind { kDiffers, kOnlyRecomputed, kOnlyInSink };
  Kind kind = Kind::kDiffers;
  std::string key;   // JSON object of the window's key fields
  std::string sink;  // the sink's result (JSON), empty if none
  int64_t sink_revision = -1;
  std::string recomputed;  // the recomputed FINAL result (JSON), empty if none
  // Why they differ, when the job's audit trail or the results tell:
  // "N records after FINAL", "N records beyond the dedup retention", ...
  std::vector<std::string> causes;
  bool applied = false;  // published by apply
  int64_t rows = 1;      // join rows: copies the other side lacks
};

struct ReconcileReport {
  std::string job;
  std::string window;      // the operator whose results are compared
  bool join_rows = false;  // a join's rows (multisets), not window results
  std::string sink;        // its label
  int64_t range_start = kMinTime;
  int64_t range_end = kMaxTime;
  int64_t records_read = 0;  // valid records of the recomputation's sources
  double recompute_seconds = 0;
  int64_t sink_results = 0;  // results read back (all revisions)
  double read_seconds = 0;   // reading them back
  int64_t windows = 0;       // windows in range, either side (join: rows)
  int64_t matching = 0;
  int64_t not_final = 0;  // in range, the sink's result is not FINAL yet
  std::vector<ReconcileDifference> differences;
  int64_t applied = 0;

  bool all_match() const { return differences.empty(); }
  // Human report; JSON for scripts (one object).
  std::string ToText() const;
  std::string ToJson() const;
};

// Runs the reconciliation of `spec` (as LoadJobSpec returned it: paths
// resolved). Errors: InvalidArgument (no such sink, a sink that does not
// read a window's or a join's results, apply or an unusable range for a
// join, a Kafka part with no broker to reach), and what
// reading the input or the sink returns (naming it).
absl::StatusOr<ReconcileReport> Reconcile(const JobSpec& spec, const ReconcileOptions& options);

}  // namespace caravela
