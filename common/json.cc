#include "common/json.h"

#include <charconv>
#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace caravela {
namespace {

absl::Status JsonError(simdjson::error_code e) {
  switch (e) {
    case simdjson::UTF8_ERROR:
      return absl::InvalidArgumentError("invalid UTF-8");
    case simdjson::TAPE_ERROR:
    case simdjson::INCOMPLETE_ARRAY_OR_OBJECT:
    case simdjson::UNCLOSED_STRING:
      return absl::InvalidArgumentError(
          absl::StrCat("truncated or malformed JSON (", simdjson::error_message(e), ")"));
    case simdjson::EMPTY:
      return absl::InvalidArgumentError("empty line, not JSON");
    case simdjson::DEPTH_ERROR:
      return absl::InvalidArgumentError("JSON nested too deeply");
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("not JSON (", simdjson::error_message(e), ")"));
  }
}

// Fast path of DoubleToDecimal for the common case (prices, rates): a
// non-integral value with 1 <= |d| < 1e12 whose shortest round-trip text has
// at most 3 fractional digits. Such text is always fixed-point (never
// shorter in scientific notation), and with exactly one candidate mantissa
// round-tripping at the smallest scale it is the text std::to_chars prints.
// Returns false when unsure; the caller then takes the general path.
bool DoubleToDecimalFast(double d, int64_t* mantissa, uint8_t* scale) {
  const double a = std::fabs(d);
  if (!(a >= 1.0 && a < 1e12)) return false;  // mantissas stay < 2^53: exact doubles
  static constexpr double kPow[] = {1.0, 10.0, 100.0, 1000.0};
  for (int s = 1; s <= 3; ++s) {
    const double p = kPow[s];
    const int64_t m = static_cast<int64_t>(std::nearbyint(a * p));
    int64_t found = -1;
    int hits = 0;
    for (int64_t c : {m - 1, m, m + 1}) {
      if (static_cast<double>(c) / p == a) {
        found = c;
        ++hits;
      }
    }
    if (hits == 0) continue;
    if (hits > 1 || found % 10 == 0) return false;  // ambiguous, or integral at s == 1
    *mantissa = d < 0 ? -found : found;
    *scale = static_cast<uint8_t>(s);
    return true;
  }
  return false;
}

// A double parsed from a JSON number with a fraction, as an exact decimal of
// its shortest round-trip text. False if that text needs an exponent or more
// than 18 digits.
bool DoubleToDecimal(double d, int64_t* mantissa, uint8_t* scale) {
  if (!std::isfinite(d)) return false;
  if (DoubleToDecimalFast(d, mantissa, scale)) return true;
  char buf[40];
  auto r = std::to_chars(buf, buf + sizeof buf, d);
  std::string_view t(buf, r.ptr - buf);
  if (t.find_first_of("eE") != std::string_view::npos) return false;
  bool neg = !t.empty() && t[0] == '-';
  if (neg) t.remove_prefix(1);
  size_t dot = t.find('.');
  size_t frac = dot == std::string_view::npos ? 0 : t.size() - dot - 1;
  if (frac > 18) return false;  // e.g. 0.00012345678901234567: scale must stay <= 18
  uint8_t sc = static_cast<uint8_t>(frac == 0 ? 1 : frac);
  int64_t m = 0;
  int digits = 0;
  for (char c : t) {
    if (c == '.') continue;
    if (m != 0 || c != '0') ++digits;
    m = m * 10 + (c - '0');
    if (digits > 18) return false;
  }
  if (frac == 0) {
    if (digits > 17) return false;
    m *= 10;
  }
  *mantissa = neg ? -m : m;
  *scale = sc;
  return true;
}

void AddElement(simdjson::dom::element e, std::string_view key, Record* out) {
  using simdjson::dom::element_type;
  switch (e.type()) {
    case element_type::OBJECT:
      out->BeginObject(key);
      for (auto field : simdjson::dom::object(e)) AddElement(field.value, field.key, out);
      out->EndContainer();
      return;
    case element_type::ARRAY:
      out->BeginArray(key);
      for (auto item : simdjson::dom::array(e)) AddElement(item, "", out);
      out->EndContainer();
      return;
    case element_type::STRING:
      out->AddString(key, std::string_view(e));
      return;
    case element_type::INT64:
      out->AddInt(key, int64_t(e));
      return;
    case element_type::UINT64:
      out->AddDouble(key, static_cast<double>(uint64_t(e)));
      return;
    case element_type::DOUBLE: {
      double d = double(e);
      int64_t m;
      uint8_t sc;
      if (DoubleToDecimal(d, &m, &sc)) {
        out->AddDecimal(key, m, sc);
      } else {
        out->AddDouble(key, d);
      }
      return;
    }
    case element_type::BOOL:
      out->AddBool(key, bool(e));
      return;
    case element_type::NULL_VALUE:
      out->AddNull(key);
      return;
  }
}
}  // namespace

absl::Status JsonDecoder::Decode(std::string_view json, Record* out) {
  out->Clear();
  while (!json.empty() && (json.back() == '\r' || json.back() == ' ' || json.back() == '\t')) {
    json.remove_suffix(1);
  }
  if (json.empty()) return absl::InvalidArgumentError("empty line, not JSON");
  if (padded_.size() < json.size() + simdjson::SIMDJSON_PADDING) {
    padded_.resize(json.size() + simdjson::SIMDJSON_PADDING + 256);
  }
  std::memcpy(padded_.data(), json.data(), json.size());
  simdjson::dom::element doc;
  if (auto e = parser_.parse(padded_.data(), json.size(), false).get(doc)) return JsonError(e);
  if (doc.type() != simdjson::dom::element_type::OBJECT) {
    return absl::InvalidArgumentError("top-level value is not an object");
  }
  out->EnsureRoot();
  for (auto field : simdjson::dom::object(doc)) AddElement(field.value, field.key, out);
  return absl::OkStatus();
}

}  // namespace caravela
