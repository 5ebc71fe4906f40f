#include "common/key_groups.h"

#include "absl/strings/str_cat.h"

namespace caravela {

absl::Status ValidateMaxParallelism(int max_parallelism) {
  if (max_parallelism < 1 || max_parallelism > kMaxMaxParallelism) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_parallelism must be 1..", kMaxMaxParallelism, ", got ", max_parallelism));
  }
  return absl::OkStatus();
}

std::string KeyGroupRange::ToString() const {
  if (empty()) return "none";
  return first == last ? absl::StrCat(first) : absl::StrCat(first, "-", last);
}

KeyGroupRange KeyGroupRangeOfTask(int max_parallelism, int parallelism, int task) {
  const int64_t m = max_parallelism, p = parallelism, t = task;
  KeyGroupRange r;
  r.first = static_cast<int>((t * m + p - 1) / p);
  r.last = static_cast<int>(((t + 1) * m + p - 1) / p - 1);
  return r;
}

}  // namespace caravela
