// libFuzzer target: Expr::Compile must reject bad text with a status (never
// crash, hang or overflow the stack), and Eval of any compiled expression must
// return some value for any record. Input: "<expression>\n<json record>"; when
// the JSON part does not decode, a fixed record with common field names is used.
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "common/expr.h"
#include "common/json.h"
#include "common/status.h"

namespace {

constexpr char kFixedRecord[] =
    R"({"a":1,"b":-2,"c":2.5,"d":19.99,"x":9223372036854775807,"y":-9223372036854775808,)"
    R"("z":0,"s":"abc","t":true,"f":false,"n":null,"o":{"a":{"b":1},"s":"x"},"arr":[1,"2"],)"
    R"("e":1e300,"h":100.0,"m":0.0})";

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static caravela::JsonDecoder* decoder = new caravela::JsonDecoder();
  static caravela::Record* fixed = [] {
    auto* r = new caravela::Record();
    CARAVELA_CHECK(decoder->Decode(kFixedRecord, r).ok());
    return r;
  }();
  std::string_view in(reinterpret_cast<const char*>(data), size);
  size_t nl = in.find('\n');
  std::string_view text = in.substr(0, nl);
  auto expr = caravela::Expr::Compile(text);
  if (!expr.ok()) {
    CARAVELA_CHECK(expr.status().code() == absl::StatusCode::kInvalidArgument);
    return 0;
  }
  CARAVELA_CHECK((*expr)->text() == text);
  std::vector<caravela::FieldPath> fields;
  (*expr)->CollectFields(&fields);
  caravela::Record own;
  const caravela::Record* rec = fixed;
  if (nl != std::string_view::npos && decoder->Decode(in.substr(nl + 1), &own).ok()) rec = &own;
  caravela::Value v = (*expr)->Eval(*rec);
  std::string json = v.ToJson();  // every result must serialize
  CARAVELA_CHECK(!json.empty());
  caravela::Record empty;
  (*expr)->Eval(empty);
  return 0;
}
