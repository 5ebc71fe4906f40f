// For tests and benches that play workers without running tasks: the
// reports a worker sends for what an answer assigned it (header-only).
#pragma once

#include <cstdint>

#include "caravela/v1/worker.pb.h"

namespace caravela {

// Appends to `next` one report per task `answer` assigned, in `phase`, with
// `stored` as the last stored checkpoint; returns how many.
inline int ReportAssigned(const v1::HeartbeatResponse& answer, v1::TaskPhase phase,
                          v1::HeartbeatRequest* next, int64_t stored = 0) {
  int n = 0;
  for (const v1::Assignment& a : answer.assignments()) {
    for (int t : a.tasks()) {
      v1::TaskReport* r = next->add_tasks();
      r->set_job_id(a.job_id());
      r->set_epoch(a.epoch());
      r->set_task(t);
      r->set_phase(phase);
      r->set_stored_checkpoint(stored);
      ++n;
    }
  }
  return n;
}

}  // namespace caravela
