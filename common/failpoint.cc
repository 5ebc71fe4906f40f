#include "common/failpoint.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>

#include <chrono>
#include <map>
#include <mutex>
#include <string>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace caravela {
namespace failpoint_internal {
namespace {

struct Point {
  long long kill_at = 1;  // n-th hit acts
  long long hits = 0;
  bool stall = false;  // act: block the hitting thread forever instead of killing
};

std::mutex& Mu() {
  static std::mutex* mu = new std::mutex;
  return *mu;
}

// name -> point; guarded by Mu(). Leaked on purpose (usable during exit).
std::map<std::string, Point, std::less<>>& Points() {
  static auto* points = new std::map<std::string, Point, std::less<>>;
  return *points;
}

bool Parse(std::string_view spec) {
  std::lock_guard<std::mutex> lock(Mu());
  auto& points = Points();
  points.clear();
  for (absl::string_view entry :
       absl::StrSplit(absl::string_view(spec.data(), spec.size()), ',', absl::SkipWhitespace())) {
    entry = absl::StripAsciiWhitespace(entry);
    bool stall = false;
    if (absl::ConsumeSuffix(&entry, "=stall")) stall = true;
    absl::string_view name = entry;
    long long n = 1;
    size_t colon = entry.rfind(':');
    if (colon != absl::string_view::npos) {
      name = entry.substr(0, colon);
      if (!absl::SimpleAtoi(entry.substr(colon + 1), &n) || n < 1) n = 0;
    }
    if (name.empty() || n < 1) {
      fprintf(stderr, "caravela: ignoring malformed failpoint '%.*s' (expected name[:n][=stall])\n",
              static_cast<int>(entry.size()), entry.data());
      continue;
    }
    Point& p = points[std::string(name)];
    p.kill_at = n;
    p.stall = stall;
  }
  return !points.empty();
}

bool InitFromEnv() {
  const char* spec = getenv("CARAVELA_FAILPOINT");
  return spec != nullptr && *spec != '\0' && Parse(spec);
}

}  // namespace

std::atomic<bool> g_enabled{InitFromEnv()};

void Hit(std::string_view name) {
  long long hits = 0;
  bool stall = false;
  {
    std::lock_guard<std::mutex> lock(Mu());
    auto& points = Points();
    auto it = points.find(name);
    if (it == points.end()) return;
    hits = ++it->second.hits;
    if (hits != it->second.kill_at) return;
    stall = it->second.stall;
  }
  if (stall) {
    fprintf(stderr, "caravela: failpoint %.*s hit %lld: stalling this thread\n",
            static_cast<int>(name.size()), name.data(), hits);
    fflush(stderr);
    for (;;) std::this_thread::sleep_for(std::chrono::hours(1));
  }
  fprintf(stderr, "caravela: failpoint %.*s hit %lld: killing process with SIGKILL\n",
          static_cast<int>(name.size()), name.data(), hits);
  fflush(stderr);
  raise(SIGKILL);
}

}  // namespace failpoint_internal

void ConfigureFailpoints(std::string_view spec) {
  failpoint_internal::g_enabled.store(failpoint_internal::Parse(spec), std::memory_order_relaxed);
}

}  // namespace caravela
