#include "worker/operators/operator.h"

#include "absl/strings/str_cat.h"
#include "common/job_plan.h"
#include "common/key_encoding.h"
#include "worker/state/key_codec.h"
#include "xxhash.h"

namespace caravela {

absl::Status OperatorContext::MayOpen(const std::string& table) const {
  if (!refuse_tables_) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      "operator ", name_, " keeps state (table ", table,
      ") but has no rescale rule (Operator::AdoptState), so its state cannot move to another "
      "task count: restore with the parallelism of the checkpoint or savepoint"));
}

bool KeyOwner::Owns(const Record& r, int input, std::string* scratch) const {
  if (tasks <= 1) return true;
  const std::vector<FieldPath>& key = keys[static_cast<size_t>(input)];
  return OwnsHash(ExchangeKeyHash(r, key, scratch));
}

int KeyOwner::KeyGroup(const Record& r, int input, std::string* scratch) const {
  return KeyGroupOf(ExchangeKeyHash(r, keys[static_cast<size_t>(input)], scratch), max_parallelism);
}

uint64_t KeyOwner::HashValues(const std::vector<Value>& values, std::string* scratch) {
  scratch->clear();
  for (const Value& v : values) AppendKeyField(v, scratch);
  return XXH3_64bits(scratch->data(), scratch->size());
}

absl::StatusOr<std::vector<size_t>> KeyOwner::GroupPositions(
    const std::vector<FieldPath>& group_paths, const std::string& what) const {
  std::vector<size_t> positions;
  for (const FieldPath& k : keys.at(0)) {
    size_t i = 0;
    while (i < group_paths.size() && group_paths[i].ToString() != k.ToString()) ++i;
    if (i == group_paths.size()) {
      return absl::FailedPreconditionError(
          absl::StrCat(what, ": partitioning field ", k.ToString(), " is not in group_by"));
    }
    positions.push_back(i);
  }
  return positions;
}

bool KeyOwner::OwnsGroup(const Record& rec, const std::vector<size_t>& positions,
                         std::string* scratch) const {
  return tasks <= 1 ||
         TaskOfKeyGroup(max_parallelism, tasks, GroupKeyGroup(rec, positions, scratch)) == index;
}

absl::Status KeyOwner::CopyOwnedRows(StateTable* from, StateTable* to,
                                     std::string_view prefix) const {
  const KeyGroupRange range = Range();
  std::string begin, end;
  KeyGroupRangeKeys(prefix, range.first, range.last, &begin, &end);
  return from->Scan(begin, end, [to](std::string_view key, std::string_view value) {
    to->Put(key, value);
    return true;
  });
}

int KeyOwner::GroupKeyGroup(const Record& rec, const std::vector<size_t>& positions,
                            std::string* scratch) const {
  std::vector<Value> group;
  const int32_t g = rec.FindChild(0, "g");
  if (g >= 0) {
    rec.ForEachChild(static_cast<uint32_t>(g),
                     [&](uint32_t c) { group.push_back(rec.Get(static_cast<int32_t>(c))); });
  }
  std::vector<Value> values(positions.size());
  for (size_t i = 0; i < positions.size(); ++i) {
    values[i] = positions[i] < group.size() ? group[positions[i]] : Value::Null();
  }
  return KeyGroupOf(HashValues(values, scratch), max_parallelism);
}

const char* TooLateReasonCode(TooLateReason reason) {
  switch (reason) {
    case TooLateReason::kAfterFinal:
      return "after_final";
    case TooLateReason::kBeyondRetention:
      return "beyond_retention";
    case TooLateReason::kBeforeJoinBound:
      return "before_join_bound";
    case TooLateReason::kBehindWatermark:
      return "behind_watermark";
  }
  return "unknown";
}

void TooLateCounters::Open(OperatorContext& ctx, std::initializer_list<TooLateReason> reasons) {
  for (TooLateReason r : reasons) {
    counters_[static_cast<int>(r)] =
        ctx.OpCounter("too_late_total", std::string("reason=\"") + TooLateReasonCode(r) + "\"");
  }
}

void BuildSideRecord(const OperatorContext& ctx, const Record& r, TooLateReason reason,
                     std::string_view detail, Record* side) {
  side->AddString("operator", ctx.name());
  side->AddString("reason", TooLateReasonCode(reason));
  side->AddString("detail", detail);
  side->AddString("event_time", FormatIso8601(r.event_time));
  if (ctx.watermark() == kMinTime) {
    side->AddNull("watermark");
  } else {
    side->AddString("watermark", FormatIso8601(ctx.watermark()));
  }
  side->AddValue("record", r.Get(0));
  side->event_time = r.event_time;
  side->arrival = r.arrival;
  side->partition = r.partition;
  side->offset = r.offset;
}

}  // namespace caravela
