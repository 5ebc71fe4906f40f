// A free TCP port on 127.0.0.1 for a test server (bound to port 0, then
// released; the server binds it right after).
#pragma once

#include "common/status.h"

namespace caravela {

absl::StatusOr<int> FreeLoopbackPort();

}  // namespace caravela
