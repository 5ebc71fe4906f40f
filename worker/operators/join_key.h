// Join-key encoding shared by the interval and window joins.
//
// AppendJoinKey appends one self-delimiting field per key path (a type tag, a
// 4-byte big-endian length, the bytes), so an encoded key is never a prefix
// of another and (key, time) state keys range-scan exactly one key.
// Equality is that of `==`: numbers by value (1, 1.0 and 1.00 encode alike),
// strings bytewise, booleans, objects and arrays by JSON text; "1" is not 1.
#pragma once

#include <string>
#include <vector>

#include "common/record.h"

namespace caravela {

// Appends the encoded key of `r` read through `paths` to `out`. Returns false
// (with `out` partly written) if any key field is null or missing: such a
// record never matches anything.
bool AppendJoinKey(const Record& r, const std::vector<FieldPath>& paths, std::string* out);

}  // namespace caravela
