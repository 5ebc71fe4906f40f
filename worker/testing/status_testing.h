// gtest helpers for absl::Status and absl::StatusOr: ASSERT_OK(expr) /
// EXPECT_OK(expr) print the expression and the status message on failure.
#pragma once

#include <gtest/gtest.h>

#include "common/status.h"

namespace caravela::testing_internal {

inline const absl::Status& AsStatus(const absl::Status& s) { return s; }
template <typename T>
const absl::Status& AsStatus(const absl::StatusOr<T>& s) {
  return s.status();
}

}  // namespace caravela::testing_internal

#define ASSERT_OK(expr)                                                                           \
  do {                                                                                            \
    const absl::Status caravela_assert_ok_status_ = ::caravela::testing_internal::AsStatus(expr); \
    ASSERT_TRUE(caravela_assert_ok_status_.ok()) << #expr ": " << caravela_assert_ok_status_;     \
  } while (0)

#define EXPECT_OK(expr)                                                                           \
  do {                                                                                            \
    const absl::Status caravela_expect_ok_status_ = ::caravela::testing_internal::AsStatus(expr); \
    EXPECT_TRUE(caravela_expect_ok_status_.ok()) << #expr ": " << caravela_expect_ok_status_;     \
  } while (0)
