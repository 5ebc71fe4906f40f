#include "worker/runtime/event_time.h"

#include <charconv>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "common/time_util.h"

namespace caravela {
namespace {

const char* FormatName(TimeFormat f) {
  switch (f) {
    case TimeFormat::kIso8601:
      return "iso8601";
    case TimeFormat::kEpochMs:
      return "epoch_ms";
    case TimeFormat::kEpochS:
      return "epoch_s";
  }
  return "?";
}

// Number of `unit` ms as exact epoch milliseconds (floor), false on overflow.
bool NumberToMs(const Value& v, int64_t unit, int64_t* out) {
  switch (v.type) {
    case ValueType::kInt:
      return !__builtin_mul_overflow(v.i, unit, out);
    case ValueType::kDecimal: {
      __int128 m = static_cast<__int128>(v.i) * unit;
      __int128 p = kPow10[v.scale];
      __int128 q = m / p;
      if ((m % p != 0) && (m < 0)) --q;
      if (q > INT64_MAX || q < INT64_MIN) return false;
      *out = static_cast<int64_t>(q);
      return true;
    }
    case ValueType::kDouble: {
      double ms = std::floor(v.d * static_cast<double>(unit));
      if (!std::isfinite(ms) || ms > 9.2e18 || ms < -9.2e18) return false;
      *out = static_cast<int64_t>(ms);
      return true;
    }
    default:
      return false;
  }
}
}  // namespace

bool ExtractEventTime(const Record& r, const EventTimeSpec& spec, int64_t* out,
                      std::string* reason) {
  int32_t n = r.Find(spec.field);
  Value v = r.Get(n);
  if (n < 0 || v.is_null()) {
    *reason = absl::StrCat("missing event time field \"", spec.field.ToString(), "\"");
    return false;
  }
  bool ok = false;
  if (spec.format == TimeFormat::kIso8601) {
    if (v.type == ValueType::kString) {
      auto t = ParseIso8601(v.s);
      if (t.has_value()) {
        *out = *t;
        ok = true;
      }
    }
  } else {
    int64_t unit = spec.format == TimeFormat::kEpochMs ? 1 : 1000;
    if (v.type == ValueType::kString) {
      int64_t i;
      auto res = std::from_chars(v.s.data(), v.s.data() + v.s.size(), i);
      if (res.ec == std::errc() && res.ptr == v.s.data() + v.s.size()) {
        ok = NumberToMs(Value::Int(i), unit, out);
      }
    } else {
      ok = NumberToMs(v, unit, out);
    }
  }
  if (!ok) {
    *reason = absl::StrCat("unparseable event time ", v.ToJson(), " in field \"",
                           spec.field.ToString(), "\" (expected ", FormatName(spec.format), ")");
  }
  return ok;
}

}  // namespace caravela
