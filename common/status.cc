#include "common/status.h"

#include <cstdio>
#include <cstdlib>

namespace caravela {
void CheckFailed(const char* cond, const char* file, int line) {
  std::fprintf(stderr, "CHECK failed: %s at %s:%d\n", cond, file, line);
  std::abort();
}
}  // namespace caravela
