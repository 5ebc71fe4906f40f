// Event-time extraction from a decoded record (SPEC §3 `event_time`).
#pragma once

#include <string>

#include "common/job_spec.h"
#include "common/record.h"

namespace caravela {

// Reads `spec.field` of `r` in `spec.format` into epoch milliseconds.
// iso8601: a string (see ParseIso8601); epoch_ms / epoch_s: a number (or a
// string of digits); fractional seconds are exact to the millisecond
// (truncated toward -inf). On failure returns false and sets `reason`
// ("missing event time field \"ts\"", "unparseable event time ...").
bool ExtractEventTime(const Record& r, const EventTimeSpec& spec, int64_t* out,
                      std::string* reason);

}  // namespace caravela
