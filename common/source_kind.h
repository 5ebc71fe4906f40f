// Source kinds: everything the engine knows about one kind of source, in one
// descriptor in the kind's own file under worker/connectors/
// (*_source_kind.cc), listed in worker/registry/builtin_kinds.cc:
//
//   name()        its YAML key ("file", "kafka"), also its identity in
//                 checkpoints (JobGraphHash);
//   Parse()       its typed spec (SourceSpec::config) from its YAML value;
//   Label()       what it reads, for messages ("topic clicks");
//   Files() / KafkaBootstrap()   what it touches outside the engine (paths
//                 resolved against the job file and checked for jobs from
//                 the network; brokers);
//   ArrivalField() / PartitionField() / Bounded()   what drives processing
//                 time (ArrivalDriven), where a record's partition comes
//                 from, whether it ends;
//   partitioned_log() / PartitionCount()   whether the tasks of a stage can
//                 share it (the planner, the task);
//   MakeBounded() a replay of everything it holds (`caravela reconcile`);
//   Create()      its RawSource (worker/connectors/source.h), open.
#pragma once

#include <any>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/status.h"

namespace caravela {

class RawSource;            // worker/connectors/source.h
struct SourceContext;       // worker/connectors/source.h
struct SourceParseContext;  // common/spec_reader.h
struct SourceSpec;          // common/job_spec.h

class SourceKind {
 public:
  virtual ~SourceKind() = default;

  // The YAML key, e.g. "file".
  virtual std::string_view name() const = 0;
  // The number this kind had in the job graph hash of checkpoints written
  // before kinds had names (file 0, kafka 1); -1 for kinds added since
  // (LegacyJobGraphHash).
  virtual int legacy_id() const { return -1; }

  // Reads the kind's YAML value into its typed spec (on errors, what could
  // be read).
  virtual std::any Parse(SourceParseContext& ctx) const = 0;
  // What it reads, for messages: "file PATH", "topic TOPIC".
  virtual std::string Label(const SourceSpec& source) const = 0;
  // The local files it reads: (YAML path below the source, e.g.
  // "file.path", the path in the spec). Empty paths are not files.
  virtual std::vector<std::pair<std::string, std::string*>> Files(SourceSpec& source) const {
    return {};
  }
  // The Kafka bootstrap it reads from ("" for the embedded broker); nullopt
  // when it reads no Kafka.
  virtual std::optional<std::string> KafkaBootstrap(const SourceSpec& source) const {
    return std::nullopt;
  }

  // The field processing time follows ("" for the wall clock).
  virtual std::string ArrivalField(const SourceSpec& source) const { return ""; }
  // The field a record's partition comes from ("": the partition it was
  // read from).
  virtual std::string PartitionField(const SourceSpec& source) const { return ""; }
  // Whether it ends (a file, a bounded topic): a lookup table that ends is
  // read whole before anything else.
  virtual bool Bounded(const SourceSpec& source) const = 0;
  // Makes it read everything it holds now, from its start, and then end
  // (reconcile recomputes a job over its whole input). No-op for sources
  // that end anyway.
  virtual void MakeBounded(SourceSpec& source) const {}

  // True for a partitioned log (Kafka): a record's partition is the one it
  // was read from, with offsets and a backlog (consumer lag) of its own;
  // the tasks of a stage of several share the partitions (PartitionCount);
  // every partition is tracked by the watermark from the start; a replay
  // by arrival merges the partitions. False for one stream (a file): one
  // task reads it, its position is that of partition 0 (records'
  // partitions come from PartitionField), its backlog only says whether
  // it has ended.
  virtual bool partitioned_log() const { return false; }
  // A partitioned log's partition count, asked of the log (Kafka through
  // `embedded_bootstrap` when the source names none).
  virtual absl::StatusOr<int> PartitionCount(const SourceSpec& source,
                                             const std::string& embedded_bootstrap) const;

  // Its RawSource, open, positioned at ctx.start_offsets.
  virtual absl::StatusOr<std::unique_ptr<RawSource>> Create(const SourceSpec& source,
                                                            const SourceContext& ctx) const = 0;
};

}  // namespace caravela
