// What the join kinds share (interval_join_kind.cc, window_join_kind.cc,
// table_join_kinds.cc).
#pragma once

#include <vector>

#include "common/job_spec.h"

namespace caravela {

// The key paths of each side of `on`: [0] left (stream), [1] right (table).
inline void JoinKeyPaths(const std::vector<JoinKeySpec>& on, std::vector<FieldPath> paths[2]) {
  for (const JoinKeySpec& k : on) {
    paths[0].push_back(k.left_path);
    paths[1].push_back(k.right_path);
  }
}

}  // namespace caravela
