// The task runtime's fields of a checkpoint manifest (proto/caravela/v1/
// checkpoint.proto), read in either form: the typed fields, or what releases
// before them kept in the string map `extra` ("wm/<source>",
// "pids/<source>", "last_arrival/<source>", "clock") and in an operator's
// `state` (its watermark as decimal text). The setters write both forms for
// one release, so that the previous binary can still restore (rollback).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "caravela/v1/checkpoint.pb.h"

namespace caravela {

using ManifestProto = ::caravela::v1::CheckpointManifest;
using SourceCheckpointProto = ::caravela::v1::SourceCheckpoint;
using OperatorCheckpointProto = ::caravela::v1::OperatorCheckpoint;

// The source's watermark tracker state (nullopt: none recorded).
std::optional<std::string> SourceWatermarkState(const ManifestProto& m,
                                                const SourceCheckpointProto& sc);
void SetSourceWatermarkState(ManifestProto* m, SourceCheckpointProto* sc, const std::string& state);

// Values of the partition field, by partition id (empty: none).
std::vector<std::string> SourcePartitionIds(const ManifestProto& m,
                                            const SourceCheckpointProto& sc);
void SetSourcePartitionIds(ManifestProto* m, SourceCheckpointProto* sc,
                           const std::vector<std::string>& ids);

// The arrival time of the source's last applied record (arrival-driven runs).
std::optional<int64_t> SourceLastArrival(const ManifestProto& m, const SourceCheckpointProto& sc);
void SetSourceLastArrival(ManifestProto* m, SourceCheckpointProto* sc, int64_t arrival);

// The arrival clock when the checkpoint was taken (arrival-driven runs).
std::optional<int64_t> ManifestClock(const ManifestProto& m);
void SetManifestClock(ManifestProto* m, int64_t now_ms);

// The operator's watermark (nullopt: missing or unreadable).
std::optional<int64_t> OperatorWatermark(const OperatorCheckpointProto& oc);
void SetOperatorWatermark(OperatorCheckpointProto* oc, int64_t watermark);

}  // namespace caravela
