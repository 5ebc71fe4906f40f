#include "worker/operators/operator.h"

#include "common/job_plan.h"
#include "common/key_encoding.h"
#include "xxhash.h"

namespace caravela {

bool KeyOwner::Owns(const Record& r, int input, std::string* scratch) const {
  if (tasks <= 1) return true;
  const std::vector<FieldPath>& key = keys[static_cast<size_t>(input)];
  return OwnsHash(ExchangeKeyHash(r, key, scratch));
}

uint64_t KeyOwner::HashValues(const std::vector<Value>& values, std::string* scratch) {
  scratch->clear();
  for (const Value& v : values) AppendKeyField(v, scratch);
  return XXH3_64bits(scratch->data(), scratch->size());
}

void BuildSideRecord(const OperatorContext& ctx, const Record& r, std::string_view reason,
                     Record* side) {
  side->AddString("operator", ctx.name());
  side->AddString("reason", reason);
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
