#include "worker/operators/operator.h"

namespace caravela {

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
