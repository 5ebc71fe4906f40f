// The engine's kinds (common/operator_kind.h), and the job parser with them.
//
// Adding an operator kind: its descriptor in a file of its own under
// worker/operators/ (worker/operators/README.md) and one line in the list in
// builtin_kinds.cc; a source or sink kind: the same under worker/connectors/
// (*_source_kind.cc, *_sink_kind.cc, worker/connectors/README.md).
#pragma once

#include <string>
#include <string_view>

#include "common/job_spec.h"
#include "common/kind_registry.h"

namespace caravela {

// Every builtin kind, registered once (thread-safe static).
const KindRegistry& BuiltinKinds();

// ParseJobSpec / LoadJobSpec (common/job_spec.h) with BuiltinKinds().
ParseResult ParseJobSpec(std::string_view yaml_text);
ParseResult LoadJobSpec(const std::string& file_path);

}  // namespace caravela
