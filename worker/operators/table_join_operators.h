// Stream-table joins (SPEC §5). Input 0 is the stream, input 1 the table
// source. The output is the stream record with the matched table row nested
// under the table source's name (`{...stream fields..., "navio_info": {...}}`,
// null when a left join finds nothing); its event time is the stream
// record's. Key fields that are null or missing never match.
//
// lookup_join: enriches against the *latest* contents of a dimension table.
//   The runtime loads the table source whole before the first stream record
//   (and then keeps following it); a later table record with the same key
//   replaces the row. Not time-aware: a stream record sees the table as it is
//   when the record is processed. State: table "rows" (key -> row JSON),
//   mirrored in memory.
//
// temporal_join: the stream record at t joins the table version valid at t
//   (the latest version whose event time <= t; versions are valid from their
//   own event time, like Flink's FOR SYSTEM_TIME AS OF). Stream records wait
//   until the watermark W (min of stream and table) passes t (t < W), so
//   table versions up to t are all seen; then they are emitted in (t, arrival)
//   order. Records of either side with event time < W are too late (a
//   stream record's version may be compacted away; a table version would
//   change results already emitted): side output `too_late`. Versions older
//   than W are compacted: per key only the latest version < W is kept.
//   State: tables "versions" (key + time -> row) and "pending" (time + seq ->
//   stream record), mirrored in memory. In a task with key groups
//   (OperatorContext::key_groups) both keys start with the record's key
//   group (worker/state/key_codec.h): a rescale copies a new task's range as
//   it is; rows stored without them are read by their record's key, and an
//   Open lays rows of the other layout out anew.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "common/job_spec.h"
#include "worker/operators/operator.h"

namespace caravela {

// temporal_join and lookup_join: a stream against a table source (`table`
// always names a source). type is kInner or kLeft.
struct TableJoinSpec {
  std::string stream, table;
  std::vector<JoinKeySpec> on;  // left = stream field, right = table field
  JoinType type = JoinType::kInner;
};

class LookupJoinOperator : public Operator {
 public:
  // `table_name`: the table source's name (the nested field's name).
  LookupJoinOperator(TableJoinSpec spec, std::string table_name);

  absl::Status Open(OperatorContext& ctx) override;
  // Unimplemented: the table is broadcast, and its rows belong with the
  // table source's offsets of the task they come from.
  absl::Status AdoptState(OperatorContext& from, OperatorContext& to,
                          const KeyOwner& owner) override;
  absl::Status ProcessBatch(OperatorContext& ctx, int input, const RecordBatch& batch,
                            Output& out) override;
  size_t table_size() const { return rows_.size(); }

 private:
  TableJoinSpec spec_;
  std::string table_name_;
  StateTable* table_ = nullptr;
  absl::flat_hash_map<std::string, Record> rows_;
  Counter* misses_ = nullptr;
  std::string key_, json_;
};

class TemporalJoinOperator : public Operator {
 public:
  TemporalJoinOperator(TableJoinSpec spec, std::string table_name);

  // Its side outputs, declared once: its kind (OperatorKind::SideOutputs)
  // and the runtime read this list.
  static std::vector<std::string> DeclaredSideOutputs() { return {"too_late"}; }
  std::vector<std::string> SideOutputs() const override { return DeclaredSideOutputs(); }
  absl::Status Open(OperatorContext& ctx) override;
  // Copies the versions and waiting stream records of owned keys: those
  // laid out by key group as they are, others under sequences no pending
  // record of the table holds (so onto restored state too).
  absl::Status AdoptState(OperatorContext& from, OperatorContext& to,
                          const KeyOwner& owner) override;
  absl::Status ProcessBatch(OperatorContext& ctx, int input, const RecordBatch& batch,
                            Output& out) override;
  absl::Status OnWatermark(OperatorContext& ctx, Output& out) override;
  // Versions and buffered stream records held in memory (tests).
  size_t version_count() const;
  size_t pending_count() const { return pending_.size(); }

 private:
  struct Pending {
    Record record;
    std::string key;     // StateKey; empty: null key
    int key_group = -1;  // with key groups, else -1
  };
  // The key under which versions of `r`'s join key are kept: with key
  // groups, the key group's prefix, then the join key. False (and *out
  // cleared) for a null join key; *key_group is set either way.
  bool StateKey(const Record& r, int input, std::string* out, int* key_group);
  static std::string PendingKey(int key_group, int64_t time, int64_t seq);
  TableJoinSpec spec_;
  std::string table_name_;
  StateTable* versions_table_ = nullptr;
  StateTable* pending_table_ = nullptr;
  int64_t adopt_seq_ = 0;                 // sequence of the next pending record AdoptState writes
  const KeyOwner* key_groups_ = nullptr;  // OperatorContext::key_groups()
  std::vector<FieldPath> paths_[2];       // join key paths: stream, table
  std::string hash_scratch_;
  // key -> (version time -> row)
  absl::flat_hash_map<std::string, std::map<int64_t, Record>> versions_;
  std::map<std::pair<int64_t, int64_t>, Pending> pending_;  // (time, seq)
  int64_t next_seq_ = 0;
  TooLateCounters too_late_;
  Counter* misses_ = nullptr;
  std::string key_, json_;
};

}  // namespace caravela
