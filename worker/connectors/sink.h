// Sinks receive serialized results: a key (may be empty) and a JSON value.
// Lifecycle: Open(), Write()* / Flush()*, Close(). Not thread-safe.
#pragma once

#include <string_view>

#include "common/status.h"

namespace caravela {

class Sink {
 public:
  virtual ~Sink() = default;
  virtual absl::Status Open() = 0;
  // `json` is one complete JSON object (no newline).
  virtual absl::Status Write(std::string_view key, std::string_view json) = 0;
  // Makes everything written so far durable/visible (end of a batch).
  virtual absl::Status Flush() = 0;
  virtual absl::Status Close() = 0;
};

}  // namespace caravela
