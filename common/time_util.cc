#include "common/time_util.h"

#include <atomic>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"

namespace caravela {

std::optional<int64_t> ParseDuration(std::string_view text, bool allow_negative) {
  std::string_view s = text;
  while (!s.empty() && s.front() == ' ') s.remove_prefix(1);
  while (!s.empty() && s.back() == ' ') s.remove_suffix(1);
  bool neg = false;
  if (!s.empty() && (s.front() == '-' || s.front() == '+')) {
    neg = s.front() == '-';
    s.remove_prefix(1);
    if (neg && !allow_negative) return std::nullopt;
  }
  if (s.empty() || s.front() < '0' || s.front() > '9') return std::nullopt;
  int64_t total = 0;
  // Allow compound forms such as "1h30m".
  while (!s.empty()) {
    int64_t n = 0;
    auto r = std::from_chars(s.data(), s.data() + s.size(), n);
    if (r.ec != std::errc() || r.ptr == s.data()) return std::nullopt;
    s.remove_prefix(r.ptr - s.data());
    int64_t unit;
    if (s.substr(0, 2) == "ms") {
      unit = 1;
      s.remove_prefix(2);
    } else if (!s.empty() && s[0] == 's') {
      unit = 1000;
      s.remove_prefix(1);
    } else if (!s.empty() && s[0] == 'm') {
      unit = 60'000;
      s.remove_prefix(1);
    } else if (!s.empty() && s[0] == 'h') {
      unit = 3'600'000;
      s.remove_prefix(1);
    } else if (!s.empty() && s[0] == 'd') {
      unit = 86'400'000;
      s.remove_prefix(1);
    } else {
      return std::nullopt;
    }
    int64_t part;
    if (__builtin_mul_overflow(n, unit, &part) || __builtin_add_overflow(total, part, &total)) {
      return std::nullopt;
    }
  }
  return neg ? -total : total;
}

std::string FormatDuration(int64_t signed_ms) {
  if (signed_ms == 0) return "0s";
  std::string out;
  uint64_t ms = static_cast<uint64_t>(signed_ms);
  if (signed_ms < 0) {
    out = "-";
    ms = 0 - ms;  // also correct for INT64_MIN
  }
  struct U {
    uint64_t ms;
    const char* name;
  };
  static const U units[] = {
      {86'400'000, "d"}, {3'600'000, "h"}, {60'000, "m"}, {1000, "s"}, {1, "ms"}};
  for (const U& u : units) {
    if (ms >= u.ms) {
      absl::StrAppend(&out, ms / u.ms, u.name);
      ms %= u.ms;
    }
  }
  return out;
}

// Howard Hinnant's algorithms (public domain).
int64_t DaysFromCivil(int64_t y, unsigned m, unsigned d) {
  y -= m <= 2;
  const int64_t era = (y >= 0 ? y : y - 399) / 400;
  const unsigned yoe = static_cast<unsigned>(y - era * 400);
  const unsigned doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
  const unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + static_cast<int64_t>(doe) - 719468;
}

void CivilFromDays(int64_t z, int64_t* y, unsigned* m, unsigned* d) {
  z += 719468;
  const int64_t era = (z >= 0 ? z : z - 146096) / 146097;
  const unsigned doe = static_cast<unsigned>(z - era * 146097);
  const unsigned yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
  const int64_t yy = static_cast<int64_t>(yoe) + era * 400;
  const unsigned doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
  const unsigned mp = (5 * doy + 2) / 153;
  *d = doy - (153 * mp + 2) / 5 + 1;
  *m = mp < 10 ? mp + 3 : mp - 9;
  *y = yy + (*m <= 2);
}

namespace {
bool Digits(std::string_view s, size_t pos, size_t n, int64_t* out) {
  if (pos + n > s.size()) return false;
  int64_t v = 0;
  for (size_t i = 0; i < n; ++i) {
    char c = s[pos + i];
    if (c < '0' || c > '9') return false;
    v = v * 10 + (c - '0');
  }
  *out = v;
  return true;
}
bool IsLeap(int64_t y) { return (y % 4 == 0 && y % 100 != 0) || y % 400 == 0; }
unsigned DaysInMonth(int64_t y, unsigned m) {
  static const unsigned kDays[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  return m == 2 && IsLeap(y) ? 29 : kDays[m - 1];
}

// The form FormatIso8601 writes and most producers send,
// "YYYY-MM-DDTHH:MM:SS.sssZ", at fixed positions. Returns false for
// anything else, and for what needs the general parser's rules (a day that
// does not exist, 24:00, a leap second), which then decides.
bool ParseCanonicalIso8601(std::string_view s, int64_t* out) {
  if (s.size() != 24 || s[4] != '-' || s[7] != '-' || s[10] != 'T' || s[13] != ':' ||
      s[16] != ':' || s[19] != '.' || s[23] != 'Z') {
    return false;
  }
  const auto digit = [&](size_t i) {
    return static_cast<unsigned>(static_cast<unsigned char>(s[i])) - '0';
  };
  // Consecutive event times mostly fall on one day: the last valid date's
  // day number is kept per thread with the 10 bytes it was read from.
  struct LastDay {
    char text[10] = {};
    int64_t days = 0;
  };
  thread_local LastDay last;
  int64_t days;
  if (std::memcmp(last.text, s.data(), 10) == 0) {
    days = last.days;
  } else {
    unsigned bad = 0;
    for (size_t i : {0, 1, 2, 3, 5, 6, 8, 9}) bad |= digit(i) > 9 ? 1u : 0u;
    if (bad != 0) return false;
    const int64_t year = digit(0) * 1000 + digit(1) * 100 + digit(2) * 10 + digit(3);
    const unsigned month = digit(5) * 10 + digit(6), day = digit(8) * 10 + digit(9);
    if (month < 1 || month > 12 || day < 1 || day > DaysInMonth(year, month)) return false;
    days = DaysFromCivil(year, month, day);
    std::memcpy(last.text, s.data(), 10);
    last.days = days;
  }
  unsigned bad = 0;
  for (size_t i : {11, 12, 14, 15, 17, 18, 20, 21, 22}) bad |= digit(i) > 9 ? 1u : 0u;
  if (bad != 0) return false;
  const int64_t hh = digit(11) * 10 + digit(12), mm = digit(14) * 10 + digit(15),
                ss = digit(17) * 10 + digit(18);
  const int64_t ms = digit(20) * 100 + digit(21) * 10 + digit(22);
  if (hh > 23 || mm > 59 || ss > 59) return false;
  *out = ((days * 24 + hh) * 60 + mm) * 60'000 + ss * 1000 + ms;
  return true;
}
}  // namespace

std::optional<int64_t> ParseIso8601(std::string_view s) {
  if (int64_t t; ParseCanonicalIso8601(s, &t)) return t;
  size_t p = 0;
  int sign = 1;
  if (!s.empty() && (s[0] == '-' || s[0] == '+')) {
    sign = s[0] == '-' ? -1 : 1;
    p = 1;
  }
  // Year: 4+ digits.
  size_t ys = p;
  while (p < s.size() && s[p] >= '0' && s[p] <= '9') ++p;
  if (p - ys < 4 || p - ys > 6) return std::nullopt;
  int64_t year;
  if (!Digits(s, ys, p - ys, &year)) return std::nullopt;
  year *= sign;
  int64_t month, day;
  if (p >= s.size() || s[p] != '-' || !Digits(s, p + 1, 2, &month)) return std::nullopt;
  p += 3;
  if (p >= s.size() || s[p] != '-' || !Digits(s, p + 1, 2, &day)) return std::nullopt;
  p += 3;
  if (month < 1 || month > 12 || day < 1 || day > DaysInMonth(year, static_cast<unsigned>(month)))
    return std::nullopt;
  int64_t hh = 0, mm = 0, ss = 0, frac_ms = 0, offset_min = 0;
  if (p < s.size()) {
    if (s[p] != 'T' && s[p] != 't' && s[p] != ' ') return std::nullopt;
    ++p;
    if (!Digits(s, p, 2, &hh) || p + 2 >= s.size() || s[p + 2] != ':' || !Digits(s, p + 3, 2, &mm))
      return std::nullopt;
    p += 5;
    if (p < s.size() && s[p] == ':') {
      if (!Digits(s, p + 1, 2, &ss)) return std::nullopt;
      p += 3;
      if (p < s.size() && (s[p] == '.' || s[p] == ',')) {
        ++p;
        size_t fs = p;
        int64_t scale = 100;
        while (p < s.size() && s[p] >= '0' && s[p] <= '9') {
          frac_ms += (s[p] - '0') * scale;  // truncates below 1 ms
          scale /= 10;
          ++p;
        }
        if (p == fs) return std::nullopt;
      }
    }
    if (hh > 24 || mm > 59 || ss > 60) return std::nullopt;  // 60: leap second, folded
    if (hh == 24 && (mm != 0 || ss != 0 || frac_ms != 0)) return std::nullopt;
    if (p < s.size()) {
      if (s[p] == 'Z' || s[p] == 'z') {
        ++p;
      } else if (s[p] == '+' || s[p] == '-') {
        int osign = s[p] == '-' ? -1 : 1;
        int64_t oh, om = 0;
        if (!Digits(s, p + 1, 2, &oh)) return std::nullopt;
        p += 3;
        bool colon = p < s.size() && s[p] == ':';
        if (colon) ++p;
        if (colon || p < s.size()) {
          if (!Digits(s, p, 2, &om)) return std::nullopt;
          p += 2;
        }
        if (oh > 23 || om > 59) return std::nullopt;
        offset_min = osign * (oh * 60 + om);
      } else {
        return std::nullopt;
      }
    }
    if (p != s.size()) return std::nullopt;
  }
  if (ss == 60) ss = 59;
  int64_t days = DaysFromCivil(year, static_cast<unsigned>(month), static_cast<unsigned>(day));
  return ((days * 24 + hh) * 60 + mm - offset_min) * 60'000 + ss * 1000 + frac_ms;
}

void AppendIso8601(int64_t ms, std::string* out) {
  int64_t days = FloorDiv(ms, 86'400'000);
  int64_t rem = FloorMod(ms, 86'400'000);
  int64_t y;
  unsigned m, d;
  CivilFromDays(days, &y, &m, &d);
  char buf[48];
  int hh = static_cast<int>(rem / 3'600'000);
  int mi = static_cast<int>(rem / 60'000 % 60);
  int ss = static_cast<int>(rem / 1000 % 60);
  int mss = static_cast<int>(rem % 1000);
  int n;
  if (y >= 0 && y <= 9999) {
    // Hot path (every window result carries two of these): no snprintf.
    char* p = buf;
    auto put = [&p](unsigned v, int digits) {
      for (int i = digits - 1; i >= 0; --i) {
        p[i] = static_cast<char>('0' + v % 10);
        v /= 10;
      }
      p += digits;
    };
    put(static_cast<unsigned>(y), 4);
    *p++ = '-';
    put(m, 2);
    *p++ = '-';
    put(d, 2);
    *p++ = 'T';
    put(hh, 2);
    *p++ = ':';
    put(mi, 2);
    *p++ = ':';
    put(ss, 2);
    *p++ = '.';
    put(mss, 3);
    *p++ = 'Z';
    out->append(buf, p - buf);
    return;
  }
  n = std::snprintf(buf, sizeof buf, "%+05lld-%02u-%02uT%02d:%02d:%02d.%03dZ",
                    static_cast<long long>(y), m, d, hh, mi, ss, mss);
  out->append(buf, n);
}

std::string FormatIso8601(int64_t ms) {
  std::string s;
  AppendIso8601(ms, &s);
  return s;
}

namespace {

// CARAVELA_CLOCK_SKEW_FILE: the offset it holds, read again at most every
// 50 ms (by whichever thread finds it due first).
class ClockSkew {
 public:
  ClockSkew() {
    const char* path = std::getenv("CARAVELA_CLOCK_SKEW_FILE");
    if (path != nullptr) path_ = path;
  }
  bool enabled() const { return !path_.empty(); }

  int64_t OffsetMs() const {
    const int64_t now = std::chrono::duration_cast<std::chrono::milliseconds>(
                            std::chrono::steady_clock::now().time_since_epoch())
                            .count();
    int64_t due = next_read_ms_.load(std::memory_order_relaxed);
    if (now >= due && next_read_ms_.compare_exchange_strong(due, now + 50)) {
      if (std::FILE* f = std::fopen(path_.c_str(), "re")) {
        long long v = 0;
        if (std::fscanf(f, "%lld", &v) == 1) offset_ms_.store(v, std::memory_order_relaxed);
        std::fclose(f);
      }
    }
    return offset_ms_.load(std::memory_order_relaxed);
  }

 private:
  std::string path_;
  mutable std::atomic<int64_t> next_read_ms_{0};
  mutable std::atomic<int64_t> offset_ms_{0};
};

}  // namespace

int64_t WallClockMs() {
  const int64_t wall = std::chrono::duration_cast<std::chrono::milliseconds>(
                           std::chrono::system_clock::now().time_since_epoch())
                           .count();
  static const ClockSkew skew;
  return skew.enabled() ? wall + skew.OffsetMs() : wall;
}

int64_t SystemClock::NowMs() const {
  using std::chrono::steady_clock;
  struct Anchor {
    int64_t wall_ms = WallClockMs();
    steady_clock::time_point steady = steady_clock::now();
  };
  static const Anchor anchor;
  return anchor.wall_ms +
         std::chrono::duration_cast<std::chrono::milliseconds>(steady_clock::now() - anchor.steady)
             .count();
}

std::string FormatWatermark(int64_t watermark) {
  if (watermark == kMinTime) return "-inf";
  if (watermark == kMaxTime) return "+inf";
  return FormatIso8601(watermark);
}

}  // namespace caravela
