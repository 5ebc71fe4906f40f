// Window join (SPEC §5): input 0 is the left side, input 1 the right side.
//
// Windows are tumbling or hopping, half-open [start, end), aligned to the
// epoch (as for `window`). A left and a right row match when they fall in the
// same window and every `on` key is equal (join_key.h; a null or missing key
// never matches). With hopping windows a pair that shares several windows
// matches once per window.
//
// Output (main), every record
//   {"window_start": ..., "window_end": ..., "left": {...} | null,
//    "right": {...} | null}  with event time window_end - 1:
//  * when the watermark closes a window (W >= end): every pair of rows in it,
//    key by key (keys in encoded order; left rows, then right rows, in event
//    time order);
//  * a row that arrives after its window closed but within allowed_lateness
//    (W < end + allowed_lateness) joins at once with the rows already there;
//  * for outer sides (left/right/full), every row of a window whose key has no
//    row on the other side, once, when the window is final
//    (W >= end + allowed_lateness); the window's state is then deleted.
//    Nothing is ever retracted: a row is padded only when no more partner
//    can arrive.
// With `keep: {left: [..], right: [..]}` a side's rows are buffered and
// emitted with only those fields (the join key is read first), which keeps
// the state of joins over wide rows small.
// A record whose windows are all final goes to side output `too_late` (with
// "side"); with hopping windows it still joins in its open windows. W is the
// operator's watermark before the batch (SPEC §2).
//
// Output watermark: rows emitted for late arrivals are older than W, so the
// output watermark is W - allowed_lateness; nothing the join emits is then
// late for a downstream operator.
//
// State (tables):
//   "left"/"right": key = big-endian window start [+ 0x02 + key group (2
//                   bytes)] + 0x01 join key (0x00 for a null key, kept only
//                   on an outer side) + big-endian time + sequence; value =
//                   the row's JSON. A window's rows of one key are one range
//                   scan; a window is one prefix. The key group is there when
//                   the runtime gives the operator key groups
//                   (OperatorContext::key_groups): a rescale then copies, per
//                   window, the new task's range as it is; rows stored
//                   without it are read by key and laid out anew on open.
//   "windows":      big-endian window start -> "o" (open) | "c" (closed).
//   "meta":         "seq" -> the next sequence number.
// The working set is in memory, write-behind: window start -> join key ->
// per side the rows (decoded once, packed in one pooled block each). Flush() (runtime: before a
// checkpoint, at least every 10 s) writes the rows and window flags that changed since the last
// Flush; a window that opens and becomes final between two flushes never touches the backend.
// Open() reloads everything from the tables, so a restored backend resumes exactly.
//
// Threading: one task thread, like every operator.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "common/job_spec.h"
#include "common/json.h"
#include "worker/operators/join_key.h"
#include "worker/operators/operator.h"
#include "worker/operators/row_pool.h"

namespace caravela {

// Both sides in the same tumbling or hopping window, with equal keys.
struct WindowJoinSpec {
  std::string left, right;
  std::vector<JoinKeySpec> on;
  enum class Kind { kTumbling, kHopping } kind = Kind::kTumbling;
  int64_t size = 0;
  int64_t slide = 0;  // == size for tumbling
  JoinType type = JoinType::kInner;
  int64_t allowed_lateness = 0;
  // keep: {left: [fields], right: [fields]}: each side's rows are buffered
  // and emitted with only these fields (dotted paths keep their dotted
  // names); a side without a list keeps its whole rows. Less state for
  // joins that use a few fields of wide rows (Nexmark q8).
  std::vector<std::string> keep[2];
  std::vector<FieldPath> keep_paths[2];
};

class WindowJoinOperator : public Operator {
 public:
  static constexpr int kLeft = 0;
  static constexpr int kRight = 1;

  // `spec` must be valid (ParseJobSpec accepted it).
  explicit WindowJoinOperator(WindowJoinSpec spec);
  ~WindowJoinOperator() override;

  // Its side outputs, declared once: its kind (OperatorKind::SideOutputs)
  // and the runtime read this list.
  static std::vector<std::string> DeclaredSideOutputs() { return {"too_late"}; }
  std::vector<std::string> SideOutputs() const override { return DeclaredSideOutputs(); }
  absl::Status Open(OperatorContext& ctx) override;
  // Copies the rows of owned join keys; a window stays open if any old task
  // had it open (its rows are still to be joined).
  absl::Status AdoptState(OperatorContext& from, OperatorContext& to,
                          const KeyOwner& owner) override;
  absl::Status ProcessBatch(OperatorContext& ctx, int input, const RecordBatch& batch,
                            Output& out) override;
  absl::Status OnWatermark(OperatorContext& ctx, Output& out) override;
  absl::Status Flush(OperatorContext& ctx) override;
  int64_t OutputWatermark(int64_t input_watermark) const override;

  // Windows currently holding state (tests).
  size_t window_count() const { return windows_.size(); }

 private:
  static constexpr uint32_t kNone = ~uint32_t{0};
  // One buffered row; its record packed in pool_ (Record::PackTo).
  struct Row {
    int64_t time;
    uint64_t seq;
    char* packed;  // owned: pool_.Free when the window is dropped
    uint32_t packed_bytes;
    uint32_t group;  // index into Window::groups
    uint32_t next;   // next row of the same key and side (arrival order) or kNone
    uint8_t side;
    bool persisted;  // in the table
  };
  // The rows of one join key (0x01 + AppendJoinKey, or 0x00 for null) in a
  // window: per side a list through Row::next, in arrival order (sorted by
  // (time, seq) when emitted).
  struct KeyGroup {
    std::string key;
    uint32_t head[2] = {kNone, kNone};
    uint32_t tail[2] = {kNone, kNone};
    // The key's key group in the tables (OperatorContext::key_groups); -1:
    // stored without one.
    int32_t key_group = -1;
  };
  struct Window {
    bool closed = false;
    bool dirty = false;                               // rows or the closed flag not yet flushed
    bool persisted = false;                           // something of it is in the tables
    absl::flat_hash_map<std::string, uint32_t> keys;  // key -> groups index
    std::vector<KeyGroup> groups;
    std::vector<Row> rows;
  };
  // A row to emit: a record being processed or a buffered (packed) row.
  struct RowRef {
    const Record* rec = nullptr;
    const char* packed = nullptr;
  };

  bool Outer(int side) const;
  int64_t End(int64_t start) const;
  // The window starting at `start`, created (reusing a dropped window's
  // buffers) if needed; `created` tells which.
  Window& GetWindow(int64_t start, bool* created);
  // Buffers a row of `side` under `key` in `w`; returns the key's rows.
  KeyGroup& AddRow(Window& w, const std::string& key, int side, int64_t time, uint64_t seq,
                   const Record& rec, bool persisted);
  // Fills sorted_ with the rows of `side` of group `g`, by (time, seq).
  void SortedRows(const Window& w, const KeyGroup& g, int side);
  // Groups of `w` in key order (into groups_order_): all, or with
  // `matched_only` those with a non-null key and rows on both sides.
  void SortGroups(const Window& w, bool matched_only);
  // Emits every pair of window `start`.
  // Both hand a burst on in pieces (Output::MaybeDrain).
  absl::Status Close(OperatorContext& ctx, int64_t start, Window& w, Output& out);
  // Emits the padded rows of window `start`; the caller drops its state.
  absl::Status Final(OperatorContext& ctx, int64_t start, Window& w, Output& out);
  // Frees the rows of `w` and keeps its buffers for the next window.
  void Drop(Window&& w);
  // Appends a result for window `start`; `left`/`right` may be empty (null).
  void EmitPair(OperatorContext& ctx, int64_t start, RowRef left, RowRef right, Output& out);

  WindowJoinSpec spec_;
  std::vector<FieldPath> paths_[2];
  StateTable* tables_[2] = {nullptr, nullptr};
  StateTable* windows_table_ = nullptr;
  StateTable* meta_ = nullptr;
  std::map<int64_t, Window> windows_;
  std::vector<int64_t> deleted_;  // persisted windows dropped since the last Flush
  JoinSequence seq_;
  RowPool pool_;  // the rows' packed records
  Window spare_;  // a dropped window's (empty) buffers
  bool has_spare_ = false;

  // The part of `r` buffered and emitted: the side's `keep` fields (into
  // kept_), or `r` itself.
  const Record& Kept(int side, const Record& r);
  Record kept_;
  TooLateCounters too_late_;
  Counter* matches_ = nullptr;
  Counter* padded_ = nullptr;

  JsonDecoder decoder_;
  Record scratch_;
  std::string key_, row_key_, json_, key_scratch_;
  std::vector<uint32_t> sorted_, sorted_other_, groups_order_;
  // ISO-8601 text of the last window EmitPair formatted (results of one
  // window come together).
  int64_t formatted_start_ = kMinTime;
  std::string start_text_, end_text_;
};

}  // namespace caravela
