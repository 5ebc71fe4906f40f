// Status helpers shared by every module: errors cross module boundaries as
// absl::Status / absl::StatusOr<T>; these macros propagate them.
#pragma once

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define CARAVELA_CONCAT_INNER(a, b) a##b
#define CARAVELA_CONCAT(a, b) CARAVELA_CONCAT_INNER(a, b)

// Returns from the enclosing function if `expr` yields a non-OK status.
#define RETURN_IF_ERROR(expr)                            \
  do {                                                   \
    ::absl::Status caravela_status_ = (expr);            \
    if (!caravela_status_.ok()) return caravela_status_; \
  } while (0)

// ASSIGN_OR_RETURN(auto x, MakeX()); returns the error if MakeX() failed.
#define ASSIGN_OR_RETURN(lhs, expr) \
  ASSIGN_OR_RETURN_IMPL(CARAVELA_CONCAT(caravela_statusor_, __LINE__), lhs, expr)
#define ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                          \
  if (!tmp.ok()) return tmp.status();         \
  lhs = std::move(tmp).value()

// Invariant check: crashes with a message (never used for bad input).
#define CARAVELA_CHECK(cond)                                         \
  do {                                                               \
    if (!(cond)) ::caravela::CheckFailed(#cond, __FILE__, __LINE__); \
  } while (0)

namespace caravela {
[[noreturn]] void CheckFailed(const char* cond, const char* file, int line);
}  // namespace caravela
