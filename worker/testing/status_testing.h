// gtest helpers for absl::Status: ASSERT_OK(expr) / EXPECT_OK(expr) print the
// expression and the status message on failure.
#pragma once

#include <gtest/gtest.h>

#include "common/status.h"

#define ASSERT_OK(expr)                                                                       \
  do {                                                                                        \
    const absl::Status caravela_assert_ok_status_ = (expr);                                   \
    ASSERT_TRUE(caravela_assert_ok_status_.ok()) << #expr ": " << caravela_assert_ok_status_; \
  } while (0)

#define EXPECT_OK(expr)                                                                       \
  do {                                                                                        \
    const absl::Status caravela_expect_ok_status_ = (expr);                                   \
    EXPECT_TRUE(caravela_expect_ok_status_.ok()) << #expr ": " << caravela_expect_ok_status_; \
  } while (0)
