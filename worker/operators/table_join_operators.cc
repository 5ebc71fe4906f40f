#include "worker/operators/table_join_operators.h"

#include <string_view>

#include "common/json.h"
#include "worker/operators/join_key.h"
#include "worker/state/key_codec.h"

namespace caravela {
namespace {

std::vector<FieldPath> Paths(const TableJoinSpec& spec, bool table_side) {
  std::vector<FieldPath> out;
  for (const JoinKeySpec& k : spec.on) out.push_back(table_side ? k.right_path : k.left_path);
  return out;
}

// Output: the stream record's fields plus the table row under `name`.
void Enrich(const Record& stream, std::string_view name, const Record* row, Record* out) {
  out->EnsureRoot();
  stream.ForEachChild(0, [&](uint32_t c) {
    if (stream.Key(c) != name) out->AddValue(stream.Key(c), stream.Get(static_cast<int32_t>(c)));
  });
  if (row == nullptr || row->empty()) {
    out->AddNull(name);
  } else {
    out->AddValue(name, row->Get(0));
  }
  out->event_time = stream.event_time;
  out->arrival = stream.arrival;
  out->partition = stream.partition;
  out->offset = stream.offset;
}

// The join key of `r` (see join_key.h); false if a key field is null/missing.
bool EncodeKey(const Record& r, const std::vector<FieldPath>& paths, std::string* out) {
  out->clear();
  return AppendJoinKey(r, paths, out);
}

}  // namespace

// ---------------------------------------------------------------------------
// lookup_join

LookupJoinOperator::LookupJoinOperator(TableJoinSpec spec, std::string table_name)
    : spec_(std::move(spec)), table_name_(std::move(table_name)) {}

absl::Status LookupJoinOperator::Open(OperatorContext& ctx) {
  ASSIGN_OR_RETURN(table_, ctx.OpenTable("rows"));
  misses_ = ctx.OpCounter("join_unmatched_total");
  rows_.clear();
  JsonDecoder dec;
  absl::Status error;
  RETURN_IF_ERROR(table_->Scan("", "", [&](std::string_view key, std::string_view value) {
    Record& row = rows_[std::string(key)];
    error = dec.Decode(value, &row);
    return error.ok();
  }));
  return error;
}

absl::Status LookupJoinOperator::ProcessBatch(OperatorContext& ctx, int input,
                                              const RecordBatch& batch, Output& out) {
  if (input == 1) {  // table: the latest row per key wins
    std::vector<FieldPath> paths = Paths(spec_, true);
    for (const Record& r : batch) {
      if (!EncodeKey(r, paths, &key_)) continue;
      if (r.tombstone) {  // the key was deleted from the table
        rows_.erase(key_);
        table_->Delete(key_);
        continue;
      }
      rows_[key_] = r;
      json_.clear();
      r.AppendJson(&json_);
      table_->Put(key_, json_);
    }
    return absl::OkStatus();
  }
  std::vector<FieldPath> paths = Paths(spec_, false);
  for (const Record& r : batch) {
    const Record* row = nullptr;
    if (EncodeKey(r, paths, &key_)) {
      auto it = rows_.find(key_);
      if (it != rows_.end()) row = &it->second;
    }
    if (row == nullptr) {
      misses_->Add();
      if (spec_.type != JoinType::kLeft) continue;
    }
    Enrich(r, table_name_, row, &out.Emit());
  }
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------
// temporal_join

TemporalJoinOperator::TemporalJoinOperator(TableJoinSpec spec, std::string table_name)
    : spec_(std::move(spec)), table_name_(std::move(table_name)) {}

size_t TemporalJoinOperator::version_count() const {
  size_t n = 0;
  for (const auto& [k, v] : versions_) n += v.size();
  return n;
}

absl::Status LookupJoinOperator::AdoptState(OperatorContext& from, OperatorContext& to,
                                            const KeyOwner& owner) {
  return absl::UnimplementedError(absl::StrCat(
      "lookup_join ", to.name(),
      ": its broadcast table cannot move between task counts yet; run the job with its "
      "previous parallelism, or start it from scratch"));
}

bool TemporalJoinOperator::StateKey(const Record& r, int input, std::string* out, int* key_group) {
  out->clear();
  *key_group = key_groups_ != nullptr ? key_groups_->KeyGroup(r, input, &hash_scratch_) : -1;
  if (*key_group >= 0) AppendKeyGroupPrefix(out, *key_group);
  if (AppendJoinKey(r, paths_[input], out)) return true;
  out->clear();
  return false;
}

std::string TemporalJoinOperator::PendingKey(int key_group, int64_t time, int64_t seq) {
  std::string k;
  if (key_group >= 0) AppendKeyGroupPrefix(&k, key_group);
  AppendBigEndian64(&k, time);
  AppendBigEndian64(&k, seq);
  return k;
}

absl::Status TemporalJoinOperator::AdoptState(OperatorContext& from, OperatorContext& to,
                                              const KeyOwner& owner) {
  JsonDecoder dec;
  Record row;
  std::string scratch, existing;
  absl::Status error;
  const std::string marker(1, kKeyGroupMarker), after_marker(1, kKeyGroupMarker + 1);
  for (const char* name : {"versions", "pending"}) {
    const bool versions = name[0] == 'v';
    ASSIGN_OR_RETURN(StateTable * old_table, from.OpenTable(name));
    ASSIGN_OR_RETURN(StateTable * table, to.OpenTable(name));
    // Laid out by key group: this task's range, copied as it is (old tasks
    // owned distinct key groups, so their keys cannot collide).
    RETURN_IF_ERROR(owner.CopyOwnedRows(old_table, table));
    // Stored without key groups (join keys start with a letter, pending
    // keys with the time): decoded.
    auto decoded = [&](std::string_view key, std::string_view value) {
      error = dec.Decode(value, &row);
      if (!error.ok()) return false;
      if (!owner.Owns(row, versions ? 1 : 0, &scratch)) return true;
      if (versions) {
        table->Put(key, value);
        return true;
      }
      // Pending records: time + sequence; sequences of old tasks collide.
      int64_t t = 0;
      if (!ReadBigEndian64(&key, &t)) {
        error = absl::DataLossError("corrupt temporal join state in " + from.name());
        return false;
      }
      for (;;) {
        std::string k = PendingKey(-1, t, adopt_seq_++);
        absl::StatusOr<bool> held = table->Get(k, &existing);
        if (!held.ok()) {
          error = held.status();
          return false;
        }
        if (!*held) {
          table->Put(k, value);
          return true;
        }
      }
    };
    RETURN_IF_ERROR(old_table->Scan("", marker, decoded));
    if (error.ok()) RETURN_IF_ERROR(old_table->Scan(after_marker, "", decoded));
    RETURN_IF_ERROR(error);
  }
  return absl::OkStatus();
}

absl::Status TemporalJoinOperator::Open(OperatorContext& ctx) {
  ASSIGN_OR_RETURN(versions_table_, ctx.OpenTable("versions"));
  ASSIGN_OR_RETURN(pending_table_, ctx.OpenTable("pending"));
  too_late_.Open(ctx, {TooLateReason::kBehindWatermark});
  misses_ = ctx.OpCounter("join_unmatched_total");
  key_groups_ = ctx.key_groups();
  paths_[0] = Paths(spec_, false);
  paths_[1] = Paths(spec_, true);
  versions_.clear();
  pending_.clear();
  next_seq_ = 0;
  JsonDecoder dec;
  absl::Status error;
  // Rows under the other layout's key: (stored key, key now) of versions;
  // pending records also when their (time, sequence) is another's (two old
  // tasks' records adopted as they are), numbered anew below.
  std::vector<std::pair<std::string, std::string>> relaid;
  std::vector<std::pair<std::string, Pending>> renumbered;
  std::string state_key;
  int key_group = -1;
  RETURN_IF_ERROR(versions_table_->Scan("", "", [&](std::string_view key, std::string_view value) {
    std::string_view time_bytes = key.substr(key.size() - 8);
    int64_t t = 0;
    ReadBigEndian64(&time_bytes, &t);
    Record row;
    error = dec.Decode(value, &row);
    if (!error.ok()) return false;
    row.event_time = t;
    if (!StateKey(row, 1, &state_key, &key_group)) return true;  // never stored
    std::string mine = state_key;
    AppendBigEndian64(&mine, t);
    if (mine != key) relaid.emplace_back(std::string(key), std::move(mine));
    versions_[state_key][t] = std::move(row);
    return true;
  }));
  RETURN_IF_ERROR(error);
  for (const auto& [stored, mine] : relaid) {
    std::string value;
    ASSIGN_OR_RETURN(bool held, versions_table_->Get(stored, &value));
    if (!held) continue;
    versions_table_->Delete(stored);
    versions_table_->Put(mine, value);
  }
  relaid.clear();
  RETURN_IF_ERROR(pending_table_->Scan("", "", [&](std::string_view key, std::string_view value) {
    const std::string stored(key);
    // Time + sequence (16 bytes), after a key group's prefix or not.
    if (key.size() == 16 + kKeyGroupPrefixBytes && ReadKeyGroupPrefix(&key) < 0) key = {};
    int64_t t = 0, seq = 0;
    if (key.size() != 16 || !ReadBigEndian64(&key, &t) || !ReadBigEndian64(&key, &seq)) {
      error = absl::DataLossError("corrupt temporal join state in " + ctx.name());
      return false;
    }
    Pending p;
    error = dec.Decode(value, &p.record);
    if (!error.ok()) return false;
    p.record.event_time = t;
    StateKey(p.record, 0, &p.key, &p.key_group);
    next_seq_ = std::max(next_seq_, seq + 1);
    if (pending_.count({t, seq}) > 0) {
      relaid.emplace_back(stored, "");  // deleted, and written under a new sequence
      renumbered.emplace_back(std::string(value), std::move(p));
      return true;
    }
    std::string mine = PendingKey(p.key_group, t, seq);
    if (mine != stored) relaid.emplace_back(stored, std::move(mine));
    pending_[{t, seq}] = std::move(p);
    return true;
  }));
  RETURN_IF_ERROR(error);
  for (const auto& [stored, mine] : relaid) {
    std::string value;
    ASSIGN_OR_RETURN(bool held, pending_table_->Get(stored, &value));
    if (!held) continue;
    pending_table_->Delete(stored);
    if (!mine.empty()) pending_table_->Put(mine, value);
  }
  for (auto& [value, p] : renumbered) {
    const int64_t t = p.record.event_time, seq = next_seq_++;
    pending_table_->Put(PendingKey(p.key_group, t, seq), value);
    pending_[{t, seq}] = std::move(p);
  }
  return absl::OkStatus();
}

absl::Status TemporalJoinOperator::ProcessBatch(OperatorContext& ctx, int input,
                                                const RecordBatch& batch, Output& out) {
  const int64_t W = ctx.watermark();
  int key_group = -1;
  for (const Record& r : batch) {
    if (r.event_time < W) {
      too_late_.Add(TooLateReason::kBehindWatermark);
      Record& s = out.EmitSide(0);
      BuildSideRecord(ctx, r, TooLateReason::kBehindWatermark,
                      input == 1 ? "table version older than the watermark"
                                 : "stream record older than the watermark",
                      &s);
      s.AddString("side", input == 1 ? "table" : "stream");
      continue;
    }
    const bool has_key = StateKey(r, input, &key_, &key_group);
    json_.clear();
    r.AppendJson(&json_);
    if (input == 1) {
      if (!has_key) continue;  // a version without a key can never be joined
      Record& row = versions_[key_][r.event_time];
      row = r;
      std::string k = key_;
      AppendBigEndian64(&k, r.event_time);
      versions_table_->Put(k, json_);
      continue;
    }
    int64_t seq = next_seq_++;
    Pending& p = pending_[{r.event_time, seq}];
    p.record = r;
    p.key = key_;  // empty for a null key
    p.key_group = key_group;
    pending_table_->Put(PendingKey(key_group, r.event_time, seq), json_);
  }
  return absl::OkStatus();
}

absl::Status TemporalJoinOperator::OnWatermark(OperatorContext& ctx, Output& out) {
  const int64_t W = ctx.watermark();
  // Emit stream records with t < W: every version with time <= t is known.
  while (!pending_.empty() && pending_.begin()->first.first < W) {
    auto it = pending_.begin();
    const Pending& p = it->second;
    const Record* row = nullptr;
    if (!p.key.empty()) {
      auto vit = versions_.find(p.key);
      if (vit != versions_.end()) {
        auto ver = vit->second.upper_bound(p.record.event_time);  // first version > t
        if (ver != vit->second.begin()) row = &std::prev(ver)->second;
      }
    }
    if (row == nullptr) misses_->Add();
    if (row != nullptr || spec_.type == JoinType::kLeft) {
      Enrich(p.record, table_name_, row, &out.Emit());
    }
    pending_table_->Delete(PendingKey(p.key_group, it->first.first, it->first.second));
    pending_.erase(it);
  }
  // Compact: per key keep only the latest version older than W (and newer ones).
  if (W == kMaxTime) {
    for (auto& [key, vers] : versions_) {
      for (auto& [t, row] : vers) {
        std::string k = key;
        AppendBigEndian64(&k, t);
        versions_table_->Delete(k);
      }
    }
    versions_.clear();
    return absl::OkStatus();
  }
  for (auto vit = versions_.begin(); vit != versions_.end(); ++vit) {
    auto& vers = vit->second;
    auto first_current = vers.lower_bound(W);  // versions >= W stay
    if (first_current == vers.begin()) continue;
    auto keep = std::prev(first_current);  // latest version < W stays
    for (auto it = vers.begin(); it != keep;) {
      std::string k = vit->first;
      AppendBigEndian64(&k, it->first);
      versions_table_->Delete(k);
      it = vers.erase(it);
    }
  }
  return absl::OkStatus();
}

}  // namespace caravela
