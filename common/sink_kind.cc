#include "common/sink_kind.h"

#include "absl/strings/str_cat.h"

namespace caravela {

absl::Status SinkKind::ReadBack(const SinkSpec& sink, const std::string& bootstrap,
                                const std::function<void(std::string_view)>& add) const {
  const std::string_view kind = name();
  return absl::UnimplementedError(absl::StrCat(std::string(kind), " sinks cannot be read back"));
}

}  // namespace caravela
