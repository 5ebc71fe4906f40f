#include "common/source_kind.h"

#include "absl/strings/str_cat.h"

namespace caravela {

absl::StatusOr<int> SourceKind::PartitionCount(const SourceSpec& source,
                                               const std::string& embedded_bootstrap) const {
  return absl::UnimplementedError(
      absl::StrCat(std::string(name()), " sources are not partitioned logs"));
}

}  // namespace caravela
