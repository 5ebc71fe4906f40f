// Failpoints: named places where a test can make the process die, to check
// crash safety (SPEC §6) with real crashes instead of mocks.
//
//   CARAVELA_FAILPOINT=checkpoint.after_files        die on the 1st hit
//   CARAVELA_FAILPOINT=checkpoint.after_files:3      die on the 3rd hit
//   CARAVELA_FAILPOINT=a,b:2                          several at once
//   CARAVELA_FAILPOINT=source.after_batch=stall       block instead of dying
//
// Failpoint("name") counts the hits of `name`; on the n-th hit (default 1) it
// logs one line to stderr ("caravela: failpoint <name> hit <n>: killing
// process with SIGKILL") and raise(SIGKILL)s the process: no destructors, no
// flushing, exactly like a power cut for everything the process had not yet
// handed to the kernel. With `=stall` the hitting thread blocks forever
// instead (the rest of the process goes on): a stuck task or sink, for tests
// of what operators see then (lag, watermark panels).
//
// Cost: the environment variable is read once, during static initialization;
// when it is unset (production) Failpoint() is one load of a global bool and
// a predictable branch. Threading: Failpoint() may be called from any thread
// (hit counting takes a mutex, only when failpoints are configured).
#pragma once

#include <atomic>
#include <string_view>

namespace caravela {

namespace failpoint_internal {
extern std::atomic<bool> g_enabled;
void Hit(std::string_view name);
}  // namespace failpoint_internal

inline void Failpoint(std::string_view name) {
  if (__builtin_expect(failpoint_internal::g_enabled.load(std::memory_order_relaxed), 0)) {
    failpoint_internal::Hit(name);
  }
}

// Replaces the configuration with `spec` (same syntax as CARAVELA_FAILPOINT;
// empty disables all failpoints) and resets the hit counters. For tests (e.g.
// inside an EXPECT_EXIT statement); not for concurrent use with Failpoint().
// Malformed entries (":x", "a:0") are ignored with a warning on stderr.
void ConfigureFailpoints(std::string_view spec);

}  // namespace caravela
