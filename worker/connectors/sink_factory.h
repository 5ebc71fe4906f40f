// Builds the sink a job's `spec.sinks[i]` describes, through its kind
// (common/sink_kind.h; the kinds are *_sink_kind.cc here, listed in
// worker/registry/builtin_kinds.cc).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "common/job_spec.h"
#include "common/status.h"
#include "worker/connectors/sink.h"

namespace caravela {

struct SinkContext {
  std::string job_name;
  // The job's id in the cluster (file sinks' fences name the job that
  // writes the output); empty in `caravela run`.
  std::string job_id;
  // Bootstrap of the embedded broker for Kafka sinks that name none.
  std::string embedded_bootstrap;
  // Index of the sink in spec.sinks (transactional ids, table names).
  int sink_index = 0;
  // The task writing this sink in a parallel job (its id in the job), -1 for
  // a job that runs as one task: transactional ids get a "-task<id>" suffix.
  int task = -1;
  // The run's epoch: 0 for a fresh job, +1 on every start from a checkpoint.
  int64_t epoch = 0;
  // The job checkpoints: file sinks publish per checkpoint (see FileSink).
  bool checkpointed = false;
  // The epoch comes from a coordinator (cluster jobs): sinks fence writers of
  // older epochs of the job (PostgreSQL: caravela_fences).
  bool fence = false;
  // File sinks under this directory live on this worker's own disk (see
  // FileSink's `local`); empty: none.
  std::string local_dir;
  // The operator whose results the sink writes (nullptr for a source or a
  // side output): what the sink may know of them beforehand (ClickHouse's
  // column types).
  const OperatorSpec* from = nullptr;
  // The writer publishes one batch, flushed once (`caravela reconcile
  // --apply`): no transactions.
  bool single_batch = false;
};

// Returns the sink, not yet opened.
absl::StatusOr<std::unique_ptr<Sink>> MakeSink(const SinkSpec& spec, const SinkContext& ctx);

}  // namespace caravela
