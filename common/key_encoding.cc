#include "common/key_encoding.h"

#include <cmath>
#include <cstdint>

namespace caravela {
namespace {

// Appends the text of a number such that equal numbers give equal text.
void AppendCanonicalNumber(const Value& v, std::string* out) {
  switch (v.type) {
    case ValueType::kInt:
      out->append(std::to_string(v.i));
      return;
    case ValueType::kDecimal: {
      int64_t m = v.i;
      uint8_t scale = v.scale;
      while (scale > 0 && m % 10 == 0) {
        m /= 10;
        --scale;
      }
      if (scale == 0) {
        out->append(std::to_string(m));
      } else {
        AppendDecimal(m, scale, out);
      }
      return;
    }
    case ValueType::kDouble:
      if (std::isfinite(v.d) && v.d == std::trunc(v.d) && std::fabs(v.d) < 9.2e18) {
        out->append(std::to_string(static_cast<int64_t>(v.d)));
      } else {
        AppendDouble(v.d, out);
      }
      return;
    default:
      return;
  }
}

}  // namespace

void AppendKeyField(const Value& v, std::string* out) {
  char tag;
  switch (v.type) {
    case ValueType::kNull:
      tag = 'z';
      break;
    case ValueType::kBool:
      tag = 'b';
      break;
    case ValueType::kInt:
    case ValueType::kDouble:
    case ValueType::kDecimal:
      tag = 'n';
      break;
    case ValueType::kString:
      tag = 's';
      break;
    default:
      tag = 'j';  // object or array: by JSON text
      break;
  }
  out->push_back(tag);
  size_t len_at = out->size();
  out->append(4, '\0');
  size_t start = out->size();
  switch (v.type) {
    case ValueType::kNull:
      break;
    case ValueType::kBool:
      out->push_back(v.b ? '1' : '0');
      break;
    case ValueType::kInt:
    case ValueType::kDouble:
    case ValueType::kDecimal:
      AppendCanonicalNumber(v, out);
      break;
    case ValueType::kString:
      out->append(v.s);
      break;
    default:
      v.AppendJson(out);
      break;
  }
  auto n = static_cast<uint32_t>(out->size() - start);
  for (int i = 0; i < 4; ++i) (*out)[len_at + i] = static_cast<char>((n >> (24 - 8 * i)) & 0xff);
}

}  // namespace caravela
