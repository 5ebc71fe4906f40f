// Time helpers: durations ("500ms", "30s", "5m", "1h", "7d"), ISO-8601 parsing
// and formatting of epoch milliseconds (proleptic Gregorian, any year, so
// 1497-07-08 is a negative epoch), and the injectable Clock.
#pragma once

#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>

namespace caravela {

inline constexpr int64_t kMinTime = std::numeric_limits<int64_t>::min();
inline constexpr int64_t kMaxTime = std::numeric_limits<int64_t>::max();

// Parses a duration such as "500ms", "30s", "5m", "1h", "7d", "0s", "-5m"
// (negative only when `allow_negative`). Returns milliseconds or nullopt.
std::optional<int64_t> ParseDuration(std::string_view text, bool allow_negative = false);
std::string FormatDuration(int64_t ms);

// Parses ISO-8601 / RFC 3339: "2026-10-01T10:00:00Z", "...10:00:00.123+02:00",
// "2026-10-01 10:00:00", "1497-07-08" (date only = midnight UTC), optional
// leading '-' or '+' on the year. Returns epoch milliseconds or nullopt.
std::optional<int64_t> ParseIso8601(std::string_view text);
// Formats as "YYYY-MM-DDTHH:MM:SS.mmmZ" (UTC). Years outside 0..9999 get a sign.
std::string FormatIso8601(int64_t epoch_ms);
// A watermark for people: "-inf" (kMinTime), "+inf" (kMaxTime) or ISO-8601.
std::string FormatWatermark(int64_t watermark);
void AppendIso8601(int64_t epoch_ms, std::string* out);

// Days since 1970-01-01 for a proleptic Gregorian civil date, and back.
int64_t DaysFromCivil(int64_t y, unsigned m, unsigned d);
void CivilFromDays(int64_t z, int64_t* y, unsigned* m, unsigned* d);

// Floor division/modulo (correct for negative times).
inline int64_t FloorDiv(int64_t a, int64_t b) {
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}
inline int64_t FloorMod(int64_t a, int64_t b) {
  int64_t r = a % b;  // not a - FloorDiv(a, b) * b: that overflows near the int64 limits
  if (r != 0 && ((r < 0) != (b < 0))) r += b;
  return r;
}
// Windows [s, s + size) whose starts are multiples of `slide` (tumbling:
// slide == size): the latest start at or before t, and the earliest start of
// a window that can hold t. Every window holding t starts between them
// (stepping by slide); with size not a multiple of slide, check t < s + size.
inline int64_t LastWindowStart(int64_t t, int64_t slide) { return FloorDiv(t, slide) * slide; }
inline int64_t FirstWindowStart(int64_t t, int64_t size, int64_t slide) {
  return LastWindowStart(t, slide) - ((size - 1) / slide) * slide;
}

// Saturating add for times near the int64 limits (watermarks at +/- infinity).
inline int64_t SatAdd(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_add_overflow(a, b, &r)) return b > 0 ? kMaxTime : kMinTime;
  return r;
}

// Processing-time clock. Injected everywhere time is read so tests are
// deterministic. Implementations must be monotonic non-decreasing.
class Clock {
 public:
  virtual ~Clock() = default;
  virtual int64_t NowMs() const = 0;
};

// The machine's wall clock (ms since the Unix epoch) as the OS reports it
// now: it jumps when the clock is stepped (NTP, `date -s`). For timestamps
// people read; intervals are measured with SystemClock. Fault tests jump one
// process's wall clock with CARAVELA_CLOCK_SKEW_FILE: a file holding an
// offset in ms, added to what this returns and read again at most every
// 50 ms (unset: no file is read).
int64_t WallClockMs();

// The processes' clock (processing time, leases, worker timeouts, timers,
// idleness): the wall clock when the process first reads it, advanced by the
// monotonic clock from then on. Non-decreasing, and a step of the wall clock
// neither fires every timer at once nor keeps a dead worker alive; it follows
// the wall clock's slewing (NTP adjusts both alike), not its steps.
class SystemClock : public Clock {
 public:
  int64_t NowMs() const override;
};

// A clock moved by hand (tests, and file sources with `arrival_field`).
class ManualClock : public Clock {
 public:
  explicit ManualClock(int64_t now = 0) : now_(now) {}
  int64_t NowMs() const override { return now_; }
  void Set(int64_t now) {
    if (now > now_) now_ = now;
  }
  void Advance(int64_t by) { now_ += by; }

 private:
  int64_t now_;
};

}  // namespace caravela
