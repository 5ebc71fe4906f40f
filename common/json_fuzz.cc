// libFuzzer target: JsonDecoder::Decode must never crash on any bytes, and a
// decoded record must round-trip: encode(decode(encode(r))) == encode(r).
// Also exercises FieldPath lookups on whatever was decoded.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "common/json.h"
#include "common/record.h"
#include "common/status.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static caravela::JsonDecoder* decoder = new caravela::JsonDecoder();
  std::string_view in(reinterpret_cast<const char*>(data), size);
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
