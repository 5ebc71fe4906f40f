// JSON decoding into Records (simdjson DOM with runtime CPU dispatch). One
// JsonDecoder per thread; it reuses its parser and buffers across calls.
//
// Numbers: integers that fit int64 become kInt; numbers written with a
// fraction become exact kDecimal (the shortest text that round-trips, at least
// one fractional digit: 100.0 -> 100.0, 19.99 -> 19.99); others kDouble.
#pragma once

#include <string>
#include <string_view>

#include "common/record.h"
#include "common/status.h"
#include "simdjson.h"

namespace caravela {

class JsonDecoder {
 public:
  // Decodes one JSON object (one JSONL line) into `out` (cleared first).
  // Errors (InvalidArgument) say what is wrong: "not JSON", "truncated JSON",
  // "invalid UTF-8", "top-level value is not an object". Never crashes on input.
  absl::Status Decode(std::string_view json, Record* out);

  // Bytes that must be readable after the text passed to DecodePadded.
  static constexpr size_t kPadding = simdjson::SIMDJSON_PADDING;
  // Decode for text followed by at least kPadding readable bytes (a source's
  // read buffer): parsed where it lies instead of copied first.
  absl::Status DecodePadded(std::string_view json, Record* out);

 private:
  static std::string_view TrimEnd(std::string_view json);
  // Parses `len` bytes at `padded` (kPadding readable after) into `out`.
  absl::Status Parse(const char* padded, size_t len, Record* out);

  simdjson::dom::parser parser_;
  std::string padded_;
};

}  // namespace caravela
