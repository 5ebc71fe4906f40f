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
  // DecodePadded for a line of `block`: JSON Lines followed by kPadding
  // readable bytes (a file source's lines of one poll) that begins with its
  // first line; all its lines are decoded, in order. The first line parses
  // the whole block in one pass (simdjson parse_many: one stage-1 scan over
  // all its lines instead of one per line); each line then takes its
  // document from that pass when the document is exactly the line, and is
  // parsed alone otherwise (a malformed line, two documents on one line, a
  // document spanning lines...). Same records, same errors as DecodePadded.
  absl::Status DecodeLine(std::string_view json, std::string_view block, Record* out);

 private:
  static std::string_view TrimEnd(std::string_view json);
  // Parses `len` bytes at `padded` (kPadding readable after) into `out`.
  absl::Status Parse(const char* padded, size_t len, Record* out);
  // Builds `out` from a parsed document of `len` bytes of text.
  static absl::Status Build(simdjson::dom::element doc, size_t len, Record* out);
  // The document of `block` that is exactly the (trimmed) line `json`, if
  // any; starts a pass over `block` when it is not the current one.
  bool BlockDocument(std::string_view json, std::string_view block, simdjson::dom::element* doc);

  simdjson::dom::parser parser_;
  std::string padded_;
  // The block pass: its own parser (the one-line parser_ serves the lines
  // it cannot), the block and the document the pass has reached.
  simdjson::dom::parser block_parser_;
  simdjson::dom::document_stream block_stream_;
  simdjson::dom::document_stream::iterator block_doc_;
  std::string_view block_;
};

}  // namespace caravela
