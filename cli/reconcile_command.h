// `caravela reconcile JOB.yaml`: recompute a job's window results from its
// raw input with no lateness cut-off and compare them with the FINAL results
// in one of its sinks (worker/reconcile/reconcile.h); --apply publishes the
// differences as higher FINAL revisions.
#pragma once

#include "CLI/CLI.hpp"

namespace caravela {

// Adds `reconcile` to `app`.
void AddReconcileCommand(CLI::App& app);
// Runs it if it was parsed: the exit code (0 every window matches, 3
// differences were found, 2 usage errors, 1 other failures), or -1 when no
// reconcile command was given.
int RunReconcileCommand();

}  // namespace caravela
