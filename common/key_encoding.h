// The key encoding shared by the join operators (state keys) and the exchange
// partitioner (ExchangeKeyHash in common/job_plan.h).
//
// One self-delimiting field per key value: a type tag, a 4-byte big-endian
// length, the bytes. So an encoded key is never a prefix of another, and equal
// values encode alike across platforms. Equality is that of `==`: numbers by
// value (1, 1.0 and 1.00 encode alike), strings bytewise, booleans, objects
// and arrays by JSON text; "1" is not 1.
//
// Tags: 'z' null (no bytes), 'b' bool ("1"/"0"), 'n' number (canonical text:
// integral values as integers, decimals without trailing zeros, other
// doubles as their shortest round-trip text), 's' string, 'j' object/array.
// Changing the encoding changes every exchange partition and join state key:
// it is a persisted format.
#pragma once

#include <string>

#include "common/record.h"

namespace caravela {

// Appends the encoding of one key value to `out`.
void AppendKeyField(const Value& v, std::string* out);

}  // namespace caravela
