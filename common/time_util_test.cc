#include "common/time_util.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <random>
#include <string>
#include <thread>

#include "gtest/gtest.h"

namespace caravela {
namespace {

constexpr int64_t kSec = 1000, kMin = 60 * kSec, kHour = 60 * kMin, kDay = 24 * kHour;

TEST(ParseDurationTest, Units) {
  EXPECT_EQ(ParseDuration("500ms"), 500);
  EXPECT_EQ(ParseDuration("30s"), 30 * kSec);
  EXPECT_EQ(ParseDuration("5m"), 5 * kMin);
  EXPECT_EQ(ParseDuration("1h"), kHour);
  EXPECT_EQ(ParseDuration("7d"), 7 * kDay);
  EXPECT_EQ(ParseDuration("0s"), 0);
  EXPECT_EQ(ParseDuration("0ms"), 0);
  EXPECT_EQ(ParseDuration("1h30m"), kHour + 30 * kMin);
  EXPECT_EQ(ParseDuration(" 2s "), 2 * kSec);
}

TEST(ParseDurationTest, Invalid) {
  EXPECT_EQ(ParseDuration("1 hour"), std::nullopt);
  EXPECT_EQ(ParseDuration(""), std::nullopt);
  EXPECT_EQ(ParseDuration("10"), std::nullopt);
  EXPECT_EQ(ParseDuration("h"), std::nullopt);
  EXPECT_EQ(ParseDuration("1.5h"), std::nullopt);
  EXPECT_EQ(ParseDuration("5x"), std::nullopt);
  EXPECT_EQ(ParseDuration("5mm"), std::nullopt);
  EXPECT_EQ(ParseDuration("5m5"), std::nullopt);
  EXPECT_EQ(ParseDuration("-"), std::nullopt);
  EXPECT_EQ(ParseDuration("99999999999999999999d"), std::nullopt);
  EXPECT_EQ(ParseDuration("9999999999999999d"), std::nullopt);  // overflows int64 ms
}

TEST(ParseDurationTest, NegativeOnlyWhenAllowed) {
  EXPECT_EQ(ParseDuration("-5m"), std::nullopt);
  EXPECT_EQ(ParseDuration("-5m", /*allow_negative=*/true), -5 * kMin);
  EXPECT_EQ(ParseDuration("+5m"), 5 * kMin);
  EXPECT_EQ(ParseDuration("-0s", true), 0);
}

TEST(FormatDurationTest, Formats) {
  EXPECT_EQ(FormatDuration(0), "0s");
  EXPECT_EQ(FormatDuration(500), "500ms");
  EXPECT_EQ(FormatDuration(kHour + 30 * kMin), "1h30m");
  EXPECT_EQ(FormatDuration(7 * kDay), "7d");
  EXPECT_EQ(FormatDuration(-5 * kMin), "-5m");
  EXPECT_EQ(FormatDuration(kDay + 1), "1d1ms");
  for (int64_t d : {int64_t{1}, 999 * kSec, 3 * kDay + 4 * kHour + 5 * kMin + 6 * kSec + 7}) {
    EXPECT_EQ(ParseDuration(FormatDuration(d)), d);
  }
  EXPECT_EQ(FormatDuration(kMinTime).front(), '-');  // no overflow
}

TEST(ParseIso8601Test, Forms) {
  EXPECT_EQ(ParseIso8601("1970-01-01T00:00:00Z"), 0);
  EXPECT_EQ(ParseIso8601("2026-10-01T10:00:00Z"), 1790848800000);
  EXPECT_EQ(ParseIso8601("2026-10-01T10:00:00.123Z"), 1790848800123);
  EXPECT_EQ(ParseIso8601("2026-10-01T10:00:00.1Z"), 1790848800100);
  EXPECT_EQ(ParseIso8601("2026-10-01T10:00:00.123456789Z"), 1790848800123);  // truncated
  EXPECT_EQ(ParseIso8601("2026-10-01T12:00:00+02:00"), 1790848800000);
  EXPECT_EQ(ParseIso8601("2026-10-01T12:00:00.123+0200"), 1790848800123);
  EXPECT_EQ(ParseIso8601("2026-10-01T07:30:00-02:30"), 1790848800000);
  EXPECT_EQ(ParseIso8601("2026-10-01T10:00:00+00"), 1790848800000);
  EXPECT_EQ(ParseIso8601("2026-10-01 10:00:00"), 1790848800000);  // no zone = UTC
  EXPECT_EQ(ParseIso8601("2026-10-01t10:00:00z"), 1790848800000);
  EXPECT_EQ(ParseIso8601("2026-10-01T10:00Z"), 1790848800000);     // no seconds
  EXPECT_EQ(ParseIso8601("2026-10-01"), 1790812800000);            // date only = midnight
  EXPECT_EQ(ParseIso8601("2024-02-29"), 1709164800000);            // leap day
  EXPECT_EQ(ParseIso8601("2026-10-01T24:00:00Z"), 1790899200000);  // end of day
  EXPECT_EQ(ParseIso8601("2016-12-31T23:59:60Z"), 1483228799000);  // leap second folded
}

TEST(ParseIso8601Test, NegativeEpochs) {
  EXPECT_EQ(ParseIso8601("1969-12-31T23:59:59.999Z"), -1);
  EXPECT_EQ(ParseIso8601("1497-07-08"), -14910134400000);
  EXPECT_EQ(ParseIso8601("1497-07-08T12:00:00Z"), -14910134400000 + 12 * kHour);
  EXPECT_EQ(ParseIso8601("0000-01-01"), -62167219200000);
  EXPECT_EQ(ParseIso8601("-0001-01-01"), -62198755200000);
  EXPECT_EQ(ParseIso8601("+12026-01-01").has_value(), true);
}

TEST(ParseIso8601Test, Invalid) {
  for (const char* s : {"",
                        "2026",
                        "2026-10",
                        "2026-02-30",
                        "2025-02-29",
                        "1900-02-29",
                        "2026-13-01",
                        "2026-00-10",
                        "2026-10-00",
                        "2026-04-31",
                        "2026-10-01T",
                        "2026-10-01T25:00:00Z",
                        "2026-10-01T10:60:00Z",
                        "2026-10-01T10:00:61Z",
                        "2026-10-01T24:00:01Z",
                        "2026-10-01T10:00:00.Z",
                        "2026-10-01T10:00:00+",
                        "2026-10-01T10:00:00+02:",
                        "2026-10-01T10:00:00+2400",
                        "2026-10-01T10:00:00X",
                        "2026-10-01T10:00:00Z ",
                        " 2026-10-01",
                        "26-10-01",
                        "2026/10/01",
                        "2026-1-01",
                        "hello",
                        "2026-10-01X"}) {
    EXPECT_EQ(ParseIso8601(s), std::nullopt) << s;
  }
}

// The canonical form's fast path keeps the last date's day number: runs
// of one day, days that differ in one digit, and invalid dates among them
// all parse as the general rules say (checked against the formatter).
TEST(ParseIso8601Test, CanonicalTimesInRunsOfDays) {
  std::mt19937_64 rng(3);
  int64_t t = 1790848800123;
  for (int i = 0; i < 200000; ++i) {
    switch (rng() % 4) {
      case 0:  // a jump anywhere in years 0000-9999
        t = static_cast<int64_t>(rng() % 315537897600000ULL) - 62167219200000;
        break;
      case 1:  // the next or the previous day
        t += (rng() % 2 == 0 ? 1 : -1) * 86'400'000;
        break;
      default:  // the same day, another time
        t = t - FloorMod(t, 86'400'000) + static_cast<int64_t>(rng() % 86'400'000);
        break;
    }
    const std::string text = FormatIso8601(t);
    ASSERT_EQ(ParseIso8601(text), t) << text;
    // The same date with a day that does not exist, or a bad digit.
    std::string bad = text;
    bad[8] = '3';
    bad[9] = '2';
    ASSERT_EQ(ParseIso8601(bad), std::nullopt) << bad;
    bad = text;
    bad[rng() % 2 == 0 ? 3 : 15] = 'x';
    ASSERT_EQ(ParseIso8601(bad), std::nullopt) << bad;
  }
}

TEST(FormatIso8601Test, Formats) {
  EXPECT_EQ(FormatIso8601(0), "1970-01-01T00:00:00.000Z");
  EXPECT_EQ(FormatIso8601(1790848800123), "2026-10-01T10:00:00.123Z");
  EXPECT_EQ(FormatIso8601(-1), "1969-12-31T23:59:59.999Z");
  EXPECT_EQ(FormatIso8601(-14910134400000), "1497-07-08T00:00:00.000Z");
  EXPECT_EQ(FormatIso8601(-62198755200000), "-0001-01-01T00:00:00.000Z");
  EXPECT_EQ(FormatIso8601(253402300800000), "+10000-01-01T00:00:00.000Z");
  std::string s = "t=";
  AppendIso8601(1000, &s);
  EXPECT_EQ(s, "t=1970-01-01T00:00:01.000Z");
}

TEST(FormatIso8601Test, RoundTrips) {
  for (int64_t t :
       {int64_t{0}, int64_t{-1}, int64_t{1}, int64_t{-999}, int64_t{-1000}, int64_t{-1001},
        int64_t{1790848800123}, int64_t{-14910134400001}, int64_t{-62198755200000},
        int64_t{-62167219200001}, int64_t{951782400000}, int64_t{253402300799999},
        int64_t{253402300800000}, int64_t{-86400000}, int64_t{-86400001}}) {
    std::string text = FormatIso8601(t);
    EXPECT_EQ(ParseIso8601(text), t) << text;
  }
  // Every day across a few centuries, including negative epochs.
  for (int64_t day = -200000; day <= 200000; day += 37) {
    int64_t t = day * kDay + (day % 1000) * 86'399;
    if (t < day * kDay) t = day * kDay;
    EXPECT_EQ(ParseIso8601(FormatIso8601(t)), t);
  }
}

// "YYYY-MM-DDTHH:MM:SS.sssZ" has a fixed-position fast path; the same
// instants written with an offset ("+00:00") or without milliseconds take
// the general parser: both must agree, and what the fast path does not
// accept must fall through to the general rules.
TEST(ParseIso8601Test, CanonicalFormAgreesWithTheGeneralParser) {
  std::mt19937_64 rng(3);
  for (int i = 0; i < 200'000; ++i) {
    // Years 0000-9999.
    const int64_t t = -62167219200000 + static_cast<int64_t>(rng() % 315537897600000ULL);
    const std::string canonical = FormatIso8601(t);
    ASSERT_EQ(canonical.size(), 24u) << canonical;
    ASSERT_EQ(ParseIso8601(canonical), t) << canonical;
    const std::string offset = canonical.substr(0, 23) + "+00:00";
    ASSERT_EQ(ParseIso8601(offset), t) << offset;
  }
  EXPECT_EQ(ParseIso8601("2026-10-01T24:00:00.000Z"), ParseIso8601("2026-10-02T00:00:00.000Z"));
  EXPECT_EQ(ParseIso8601("2026-10-01T23:59:60.500Z"), ParseIso8601("2026-10-01T23:59:59.500Z"));
  EXPECT_EQ(ParseIso8601("2024-02-29T12:00:00.000Z"), ParseIso8601("2024-02-29T12:00:00Z"));
  for (const char* bad :
       {"2026-02-29T00:00:00.000Z", "2026-13-01T00:00:00.000Z", "2026-00-10T00:00:00.000Z",
        "2026-04-31T00:00:00.000Z", "2026-10-01T24:00:01.000Z", "2026-10-01T12:60:00.000Z",
        "2026-1a-01T00:00:00.000Z", "2026-10-01T00:00:00.0/0Z", "2026-10-01T00:00:00.000X",
        "2026-10-01X00:00:00.000Z"}) {
    EXPECT_EQ(ParseIso8601(bad), std::nullopt) << bad;
  }
}

TEST(FormatIso8601Test, ExtremesDoNotOverflow) {
  EXPECT_FALSE(FormatIso8601(kMinTime).empty());
  EXPECT_FALSE(FormatIso8601(kMaxTime).empty());
}

TEST(CivilTest, DaysFromCivilAndBack) {
  EXPECT_EQ(DaysFromCivil(1970, 1, 1), 0);
  EXPECT_EQ(DaysFromCivil(1969, 12, 31), -1);
  EXPECT_EQ(DaysFromCivil(2000, 3, 1), 11017);
  for (int64_t z : {int64_t{-1000000}, int64_t{-1}, int64_t{0}, int64_t{59}, int64_t{1000000}}) {
    int64_t y;
    unsigned m, d;
    CivilFromDays(z, &y, &m, &d);
    EXPECT_EQ(DaysFromCivil(y, m, d), z);
  }
}

TEST(FloorTest, DivAndMod) {
  EXPECT_EQ(FloorDiv(7, 2), 3);
  EXPECT_EQ(FloorDiv(-7, 2), -4);
  EXPECT_EQ(FloorDiv(-8, 2), -4);
  EXPECT_EQ(FloorMod(-7, 2), 1);
  EXPECT_EQ(FloorMod(7, 2), 1);
  EXPECT_EQ(FloorMod(-1, kHour), kHour - 1);
  EXPECT_EQ(FloorMod(-7, -2), -1);
  EXPECT_EQ(FloorMod(7, -2), -1);
  int64_t r = FloorMod(kMinTime, kHour);
  EXPECT_GE(r, 0);
  EXPECT_LT(r, kHour);
}

TEST(SatAddTest, Saturates) {
  EXPECT_EQ(SatAdd(1, 2), 3);
  EXPECT_EQ(SatAdd(kMaxTime, 1), kMaxTime);
  EXPECT_EQ(SatAdd(kMinTime, -1), kMinTime);
  EXPECT_EQ(SatAdd(kMaxTime, -1), kMaxTime - 1);
}

TEST(ClockTest, ManualClockIsMonotonic) {
  ManualClock c(100);
  EXPECT_EQ(c.NowMs(), 100);
  c.Set(50);
  EXPECT_EQ(c.NowMs(), 100);
  c.Set(200);
  EXPECT_EQ(c.NowMs(), 200);
  c.Advance(5);
  EXPECT_EQ(c.NowMs(), 205);
  SystemClock sys;
  EXPECT_GT(sys.NowMs(), 1'600'000'000'000);
}

// What ClockTest.SystemClockIgnoresStepsOfTheWallClock runs in its child:
// 0 when the wall clock's steps moved WallClockMs and not SystemClock.
int StepTheWallClock(const std::string& file) {
  auto step = [&](int64_t ms) {
    std::ofstream(file) << ms;
    std::this_thread::sleep_for(std::chrono::milliseconds(120));  // read every 50 ms
  };
  step(0);
  setenv("CARAVELA_CLOCK_SKEW_FILE", file.c_str(), 1);
  SystemClock clock;
  const int64_t wall0 = WallClockMs();
  const int64_t clock0 = clock.NowMs();
  bool ok = std::abs(wall0 - clock0) < 100;
  step(2 * kHour);
  ok = ok && WallClockMs() - wall0 >= 2 * kHour && clock.NowMs() - clock0 < 5 * kSec;
  const int64_t clock1 = clock.NowMs();
  step(-2 * kHour);
  ok = ok && wall0 - WallClockMs() >= 2 * kHour - 5 * kSec && clock.NowMs() >= clock1 &&
       clock.NowMs() - clock0 < 5 * kSec;
  std::fprintf(stderr, "after the steps: wall clock %+lld ms, SystemClock %+lld ms\n",
               static_cast<long long>(WallClockMs() - wall0),
               static_cast<long long>(clock.NowMs() - clock0));
  return ok ? 0 : 1;
}

// A step of the wall clock (CARAVELA_CLOCK_SKEW_FILE) moves WallClockMs but
// not SystemClock, which goes on at the monotonic clock's pace. In a child
// process started afresh (threadsafe death tests run the binary again), so
// the variable is read at the clock's first use.
TEST(ClockTest, SystemClockIgnoresStepsOfTheWallClock) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const std::string file = ::testing::TempDir() + "caravela-clock-skew-test";
  EXPECT_EXIT(std::exit(StepTheWallClock(file)), ::testing::ExitedWithCode(0), "");
  std::remove(file.c_str());
}

}  // namespace
}  // namespace caravela
