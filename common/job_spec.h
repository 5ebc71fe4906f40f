// Job spec (SPEC §3): the typed form of a job YAML, and its parser/validator.
//
// ParseJobSpec never stops at the first problem: it returns every error it
// finds, each naming its YAML path, e.g.
//   spec.operators[1].window.tumbling: expected a duration, got "1 hour"
// Durations are milliseconds. Relative file paths are kept as written; the
// caller resolves them against the job file's directory (ResolvePaths).
#pragma once

#include <any>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/key_groups.h"
#include "common/record.h"
#include "common/status.h"

namespace caravela {

class OperatorKind;   // common/operator_kind.h
class SinkKind;       // common/sink_kind.h
class SourceKind;     // common/source_kind.h
struct KindRegistry;  // common/kind_registry.h
class StorageScheme;  // common/storage_scheme.h

enum class TimeFormat { kIso8601, kEpochMs, kEpochS };

struct EventTimeSpec {
  FieldPath field;
  TimeFormat format = TimeFormat::kIso8601;
};

struct WatermarkSpec {
  int64_t max_out_of_orderness = 0;
  int64_t idle_timeout = 0;     // 0 = partitions never become idle
  int64_t max_future_skew = 0;  // 0 = no future check
};

// One equality of a join's `on` list: a field name present on both sides
// (`left == right`) or a [left_field, right_field] pair. For temporal and
// lookup joins "left" is the stream and "right" the table.
struct JoinKeySpec {
  std::string left, right;  // as written
  FieldPath left_path, right_path;
};

enum class JoinType { kInner, kLeft, kRight, kFull };
const char* JoinTypeName(JoinType t);

// A kind's typed spec (a source's, an operator's, a sink's), read with As<T>() (null
// if it is of another kind), Mutable<T>(), or Get<T>() by the kind's own
// code, which knows it.
struct KindConfig {
  std::any config;

  template <class T>
  const T* As() const {
    return std::any_cast<T>(&config);
  }
  template <class T>
  T* Mutable() {
    return std::any_cast<T>(&config);
  }
  template <class T>
  const T& Get() const {
    const T* t = As<T>();
    CARAVELA_CHECK(t != nullptr);
    return *t;
  }
};

// One source of the job: its name, its kind (common/source_kind.h) and the
// kind's typed spec (e.g. KafkaSourceSpec, declared beside its source in
// worker/connectors/), then what every kind shares: the records' format, key,
// event time and watermark.
struct SourceSpec : KindConfig {
  std::string name;
  const SourceKind* kind = nullptr;  // null only in a spec that has errors
  std::string format = "json";
  std::vector<FieldPath> key;
  std::optional<EventTimeSpec> event_time;  // absent: lookup-table source
  WatermarkSpec watermark;

  // The kind's YAML key ("" without a kind).
  std::string_view kind_name() const;
  bool is(std::string_view kind_name) const;
};

// One operator of the job: its name, its kind (common/operator_kind.h) and
// the kind's typed spec (e.g. WindowSpec, declared beside its operator in
// worker/operators/), read with As<T>().
struct OperatorSpec : KindConfig {
  std::string name;
  const OperatorKind* kind = nullptr;  // null only in a spec that has errors

  // The kind's YAML key ("" without a kind).
  std::string_view kind_name() const;
  bool is(std::string_view kind_name) const;
  // Names of the upstream nodes (sources or operators) this operator reads,
  // in input-index order: {left, right} for interval/window joins, {stream,
  // table} for temporal/lookup joins.
  std::vector<std::string> Inputs() const;
  // Side outputs this operator produces, without the "<name>." prefix.
  std::vector<std::string> SideOutputs() const;
};

// One sink of the job: what it writes (`from`: a source, an operator, or
// "<node>.<side output>"), its kind (common/sink_kind.h) and the kind's typed
// spec (e.g. KafkaSinkSpec, declared beside its sink in worker/connectors/).
struct SinkSpec : KindConfig {
  std::string from;
  const SinkKind* kind = nullptr;  // null only in a spec that has errors

  std::string_view kind_name() const;
  bool is(std::string_view kind_name) const;
  // "file:PATH", "kafka:TOPIC", "postgres:TABLE", "clickhouse:DB.TABLE",
  // "discard" or "stdout": the metrics' `sink` label and `caravela reconcile
  // --sink`.
  std::string Label() const;
};

// True for an unquoted SQL identifier: [A-Za-z_][A-Za-z0-9_]*, at most 63 bytes
// (PostgreSQL's NAMEDATALEN - 1). The postgres sink folds it to lower case, as
// PostgreSQL does for unquoted names.
bool IsSqlIdentifier(std::string_view name);

// True for an S3 bucket name: 3-63 characters of [a-z0-9.-], starting and
// ending with a letter or digit.
bool IsS3BucketName(std::string_view name);

// An s3://bucket/prefix URL (checkpoint storage), split; the prefix without
// its trailing slashes.
struct S3Url {
  std::string bucket;
  std::string prefix;
};
// InvalidArgument saying what is wrong: not s3://, no bucket, not a bucket
// name, a query, an empty part in the prefix. The job spec's validation and
// the S3 storage both parse with it, so a job that validates can start.
absl::StatusOr<S3Url> ParseS3Url(std::string_view url);

struct CheckpointSpec {
  int64_t interval = 0;                   // 0 = no checkpoints
  std::string storage;                    // a URL; empty: file://<data dir>/checkpoints
  const StorageScheme* scheme = nullptr;  // of `storage` (null when empty)
  int retain = 3;
};

struct JobSpec {
  std::string name;
  // spec.parallelism: tasks per stage (SPEC §8, common/job_plan.h); >= 1.
  int parallelism = 1;
  // spec.max_parallelism: the job's key groups (common/key_groups.h), the
  // most tasks a keyed stage can have; 1..32768, >= parallelism.
  int max_parallelism = kDefaultMaxParallelism;
  // spec.exchange: how records cross stages (SPEC §8). Empty: the default
  // (`memory` inside one process, `network` in a cluster); "network" or
  // "kafka" (durable shuffles through topics caravela.<job>.<operator>).
  std::string exchange;
  // spec.exchange_compression: "lz4" compresses the messages of Kafka
  // exchanges (the producer's compression.codec; readers decompress); empty:
  // none. Not for `exchange: network`.
  std::string exchange_compression;
  CheckpointSpec checkpoint;
  std::vector<SourceSpec> sources;
  std::vector<OperatorSpec> operators;
  std::vector<SinkSpec> sinks;
  std::string dead_letter_path;  // spec.dead_letter.path; empty: <data dir>/dead-letter.jsonl

  const SourceSpec* FindSource(std::string_view name) const;
  const OperatorSpec* FindOperator(std::string_view name) const;
  // True if any source or sink uses Kafka without an explicit bootstrap.
  bool NeedsEmbeddedBroker() const;
  // Makes relative file paths absolute against `base_dir`.
  void ResolvePaths(const std::string& base_dir);
};

// True when processing time follows the records' arrival fields: every
// source names an arrival_field, but lookup tables that end (files, bounded
// topics), which are read whole first.
bool ArrivalDriven(const JobSpec& spec);
// Why the job cannot run with `parallelism` tasks per stage on a cluster
// ("" when it can): a replay in arrival order (ArrivalDriven) runs in one
// task there, so that its revisions and too_late records are those of
// `caravela run` (docs/semantics.md "One answer").
std::string WhyNotClusterParallelism(const JobSpec& spec, int parallelism);

struct SpecError {
  std::string path;     // e.g. "spec.operators[1].window.tumbling"
  std::string message;  // e.g. "expected a duration, got \"1 hour\""
  std::string ToString() const { return path + ": " + message; }
};

// "path: message; path: message".
std::string JoinSpecErrors(const std::vector<SpecError>& errors);

// For a job that arrives over the network (SPEC §8: untrusted input): every
// file it reads or writes (file sources and sinks, the dead letter, file://
// checkpoint storage) must be relative without escaping upwards ("..", then
// it lands in the workers' shared directory), or lie under one of `allowed`
// (absolute directories). One error per offending path, naming its YAML path.
std::vector<SpecError> CheckAllowedPaths(const JobSpec& spec,
                                         const std::vector<std::string>& allowed);
// The job's relative file paths (sources, sinks, dead letter), one entry
// per path, naming its YAML path.
std::vector<SpecError> RelativeFilePaths(const JobSpec& spec);
// True if absolute `path` lies inside one of `dirs` (lexically: "..", "."
// and repeated slashes resolved; symlinks are not followed).
bool PathUnder(const std::string& path, const std::vector<std::string>& dirs);

// The job graph's hash: source, operator and sink names and kind names (16
// hex digits, xxh3; stable across processes and releases). Checkpoints carry
// it: state of one graph cannot be restored into another.
std::string JobGraphHash(const JobSpec& spec);
// The hash as code before kind registries wrote it (kinds by number,
// OperatorKind::legacy_id); empty if the graph has a kind added since.
std::string LegacyJobGraphHash(const JobSpec& spec);
// Whether a checkpoint's `hash` names this graph, in either form.
bool JobGraphHashMatches(const JobSpec& spec, std::string_view hash);

struct ParseResult {
  JobSpec spec;  // meaningful only when errors is empty
  std::vector<SpecError> errors;
  bool ok() const { return errors.empty(); }
};

// The limits of one job (docs/operations.md, "Limits"), the same for
// `caravela run` and the cluster: its YAML text, and its sources,
// operators and sinks together.
inline constexpr size_t kMaxJobYamlBytes = 1 << 20;
inline constexpr int kMaxJobSteps = 1000;

// Checks `yaml_text` against the limits above before any other validation:
// errors at "<yaml>" (its size) or "spec" (its steps), each naming the limit.
// Cheap and independent of the operator kinds: `caravela submit` checks a
// job with it before sending it.
std::vector<SpecError> CheckJobLimits(std::string_view yaml_text);

// Parses and validates a job YAML document with the operator kinds of
// `kinds`. worker/registry/builtin_kinds.h has the one-argument forms, with
// the engine's kinds.
ParseResult ParseJobSpec(std::string_view yaml_text, const KindRegistry& kinds);
// Reads the file, parses, validates and resolves relative paths against the
// file's directory. A file that cannot be read is one error with path "<file>".
ParseResult LoadJobSpec(const std::string& file_path, const KindRegistry& kinds);

}  // namespace caravela
