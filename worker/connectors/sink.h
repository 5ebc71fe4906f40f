// Sinks receive serialized results: a key (may be empty) and a JSON value.
//
// Lifecycle: Open(), then WriteRecord()* / Flush()* interleaved with the checkpoint
// protocol, then Close(). Not thread-safe (one task thread).
//
// Checkpoint protocol (SPEC §6/§7; the runtime drives it):
//   1. PreCommit(id)   - everything written since the last checkpoint is made
//                        durable but need not be visible yet (a Kafka
//                        transaction flushed, a pending file fsynced). Returns an
//                        opaque sink state that goes into checkpoint `id`'s
//                        manifest.
//   2. the runtime writes the manifest (the commit point);
//   3. Commit(id)      - makes the output of checkpoint `id` visible (commit the
//                        transaction, rename the pending file).
//   On start from checkpoint `id`, Recover(id, state) gets the state PreCommit
//   returned for it, before any Write: the sink finishes a commit that was cut
//   short (step 3 never ran) or discards output written after the checkpoint.
//   A sink whose Commit cannot be redone after a crash (a Kafka transaction
//   is aborted when a new producer fences the old one) reports
//   LastCommittedCheckpoint(); the runtime then restores that checkpoint
//   instead of a newer one whose output was lost, and replays from it.
// Non-transactional sinks keep the defaults: PreCommit = Flush, nothing else.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/status.h"

namespace caravela {

// One result as the runtime hands it to a sink.
struct SinkRecord {
  std::string_view key;    // JSON object of the key fields, or empty
  std::string_view value;  // one complete JSON object (no newline)
  int64_t revision = -1;   // the record's "revision" field, -1 if it has none
  std::string_view state;  // the record's "state" field (EARLY, ...), or empty
};

class Sink {
 public:
  virtual ~Sink() = default;
  virtual absl::Status Open() = 0;
  // Writes one result; the runtime calls this.
  virtual absl::Status WriteRecord(const SinkRecord& r) = 0;
  // A result without revision or state; `json` is one complete JSON object
  // (no newline).
  absl::Status Write(std::string_view key, std::string_view json) {
    SinkRecord r;
    r.key = key;
    r.value = json;
    return WriteRecord(r);
  }
  // Makes everything written so far durable/visible (end of a batch) for
  // non-transactional sinks; transactional sinks may only flush.
  virtual absl::Status Flush() = 0;
  virtual absl::StatusOr<std::string> PreCommit(int64_t checkpoint_id) {
    RETURN_IF_ERROR(Flush());
    return std::string();
  }
  virtual absl::Status Commit(int64_t checkpoint_id) { return absl::OkStatus(); }
  virtual absl::Status Recover(int64_t checkpoint_id, std::string_view state) {
    return absl::OkStatus();
  }
  // After Open(), before Recover(): the id of the newest checkpoint whose
  // output this sink has durably committed (0: it tracks commits and none has
  // committed yet, so the job starts from scratch), or -1 if the sink does not
  // track it (non-transactional sinks: every checkpoint's output is
  // recoverable).
  virtual absl::StatusOr<int64_t> LastCommittedCheckpoint() { return -1; }
  // Revisions the sink's store refused so far because it already held the
  // same or a newer revision of the key (the PostgreSQL upsert's guard); 0
  // for sinks that append every revision (files, Kafka: readers keep the
  // highest). Read after Flush/PreCommit (sink_revisions_rejected_total).
  virtual int64_t rejected_revisions() const { return 0; }
  virtual absl::Status Close() = 0;
};

}  // namespace caravela
