// libFuzzer target: JsonDecoder::Decode must never crash on any bytes, and a
// decoded record must round-trip: encode(decode(encode(r))) == encode(r).
// Also exercises FieldPath lookups on whatever was decoded, and decodes the
// input's lines as one block (JsonDecoder::DecodeLine, as the file source
// does): each line must give what decoding it alone gives.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "common/json.h"
#include "common/record.h"
#include "common/status.h"

namespace {

void CheckBlockDecode(std::string_view in) {
  static caravela::JsonDecoder* block_decoder = new caravela::JsonDecoder();
  static caravela::JsonDecoder* line_decoder = new caravela::JsonDecoder();
  // The lines' block as a file source hands it over: from the first line
  // that is not blank to the end of the last, padded.
  std::string buf(in);
  buf.append(caravela::JsonDecoder::kPadding, ' ');
  std::vector<std::string_view> lines;
  for (size_t at = 0; at < in.size();) {
    size_t nl = in.find('\n', at);
    if (nl == std::string_view::npos) nl = in.size();
    if (nl > at) lines.emplace_back(buf.data() + at, nl - at);
    at = nl + 1;
  }
  if (lines.empty()) return;
  const std::string_view block(
      lines.front().data(),
      static_cast<size_t>(lines.back().data() + lines.back().size() - lines.front().data()));
  caravela::Record a;
  caravela::Record b;
  for (std::string_view line : lines) {
    const absl::Status sa = line_decoder->Decode(line, &a);
    const absl::Status sb = block_decoder->DecodeLine(line, block, &b);
    if (sa != sb || (sa.ok() && a.ToJson() != b.ToJson())) {
      fprintf(stderr, "block decode differs on line:\n%.*s\n%s / %s\n%s / %s\n",
              static_cast<int>(line.size()), line.data(), sa.ToString().c_str(),
              sb.ToString().c_str(), a.ToJson().c_str(), b.ToJson().c_str());
      abort();
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static caravela::JsonDecoder* decoder = new caravela::JsonDecoder();
  std::string_view in(reinterpret_cast<const char*>(data), size);
  CheckBlockDecode(in);
  caravela::Record r;
  if (!decoder->Decode(in, &r).ok()) return 0;
  std::string once = r.ToJson();
  caravela::Record again;
  absl::Status st = decoder->Decode(once, &again);
  if (!st.ok()) {
    fprintf(stderr, "re-decode failed: %s\n%s\n", std::string(st.message()).c_str(), once.c_str());
    abort();
  }
  std::string twice = again.ToJson();
  if (once != twice) {
    fprintf(stderr, "round trip differs:\n%s\n%s\n", once.c_str(), twice.c_str());
    abort();
  }
  // Look up every top-level key and one level below.
  r.ForEachChild(0, [&](uint32_t c) {
    caravela::FieldPath p;
    p.parts.emplace_back(r.Key(c));
    caravela::Value v = r.GetPath(p);
    // Duplicate keys are kept; lookups find the first one.
    if (r.FindChild(0, p.parts[0]) == static_cast<int32_t>(c)) {
      CARAVELA_CHECK(v.type == r.nodes()[c].type);
    }
    if (v.type == caravela::ValueType::kObject) {
      r.ForEachChild(c, [&](uint32_t g) {
        caravela::FieldPath q = p;
        q.parts.emplace_back(r.Key(g));
        (void)r.GetPath(q);
      });
    }
  });
  // Copying the whole record into another one preserves it.
  caravela::Record copy;
  copy.AddValue("r", r.Get(0));
  std::string wrapped = copy.ToJson();
  CARAVELA_CHECK(wrapped == "{\"r\":" + once + "}");
  return 0;
}
