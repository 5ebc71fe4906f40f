// Job spec (SPEC §3): the typed form of a job YAML, and its parser/validator.
//
// ParseJobSpec never stops at the first problem: it returns every error it
// finds, each naming its YAML path, e.g.
//   spec.operators[1].window.tumbling: expected a duration, got "1 hour"
// Durations are milliseconds. Relative file paths are kept as written; the
// caller resolves them against the job file's directory (ResolvePaths).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/record.h"
#include "common/status.h"

namespace caravela {

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

struct FileSourceSpec {
  std::string path;
  std::string partition_field;  // empty: a single partition 0
  std::string arrival_field;    // empty: processing time is the wall clock
};

struct KafkaSourceSpec {
  std::string topic;
  std::string bootstrap;           // empty: the embedded broker
  std::string start = "earliest";  // earliest | latest
  // Read only what exists when the job starts, then end (watermark +inf),
  // like a file: replays, reconciliation, benchmarks.
  bool bounded = false;
  // As for files: processing time follows this field (needs bounded: the
  // partitions are merged by it, ties by partition then offset).
  std::string arrival_field;
};

struct SourceSpec {
  std::string name;
  enum class Kind { kFile, kKafka } kind = Kind::kFile;
  FileSourceSpec file;
  KafkaSourceSpec kafka;
  std::string format = "json";
  std::vector<FieldPath> key;
  std::optional<EventTimeSpec> event_time;  // absent: lookup-table source
  WatermarkSpec watermark;
};

struct FilterSpec {
  std::string from;
  std::string where;
};

struct ProjectSpec {
  std::string from;
  std::vector<std::pair<std::string, std::string>> fields;  // out name -> expr, in YAML order
};

struct DedupSpec {
  std::string from;
  FieldPath id;
  int64_t retention = 0;
  std::vector<FieldPath> fingerprint;  // empty: every field but the arrival field
  // Not in YAML: set by `caravela reconcile`, whose batch run never expires
  // an id nor restores state: ids live in an in-memory set only.
  bool batch = false;
  // Not in YAML: with `batch`, how many ids reconcile expects (estimated
  // from the input files' sizes; 0 if unknown). The set is sized once.
  size_t expected_ids = 0;
};

// kArgMax / kArgMin: the rows with the highest / lowest value of `field`
// (every tied row, in arrival order), each as an object of the `keep`
// fields (all fields when `keep` is empty): a list.
enum class AggFn { kCount, kSum, kMin, kMax, kAvg, kCountDistinct, kArgMax, kArgMin };

struct AggregateSpec {
  std::string as;
  AggFn fn = AggFn::kCount;
  std::string field;  // "*" for count(*)
  FieldPath path;     // parsed `field` (empty for "*")
  // arg_max / arg_min: the fields each kept row has (output names: their
  // dotted paths); empty: the whole record.
  std::vector<std::string> keep;
  std::vector<FieldPath> keep_paths;
};

struct WindowSpec {
  std::string from;
  enum class Kind { kTumbling, kHopping, kSession } kind = Kind::kTumbling;
  int64_t size = 0;                   // tumbling/hopping
  int64_t slide = 0;                  // hopping (== size for tumbling)
  int64_t gap = 0;                    // session
  std::vector<std::string> group_by;  // as written; output field names
  std::vector<FieldPath> group_paths;
  std::vector<AggregateSpec> aggregates;
  int64_t early_fire_every = 0;  // 0 = no EARLY results
  int64_t allowed_lateness = 0;
  // `reconcile: {id: field}`: every result also carries `events` (records
  // aggregated) and `id_digest` (order-independent digest of their ids), so a
  // batch recompute can compare a window cheaply (SPEC §10).
  std::string reconcile_id;  // as written; empty = off
  FieldPath reconcile_path;
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

// SPEC §5 interval join: keys equal and right.time - left.time in
// [lower, upper] (both inclusive; bounds may be negative, lower <= upper).
struct IntervalJoinSpec {
  std::string left, right;
  std::vector<JoinKeySpec> on;
  int64_t lower = 0;
  int64_t upper = 0;
  JoinType type = JoinType::kInner;
  int64_t allowed_lateness = 0;
  // Optional join condition over the combined record (`left.x`, `right.y`);
  // empty: none. Part of the join condition, i.e. applied before padding.
  std::string where;
};

// Both sides in the same tumbling or hopping window, with equal keys.
struct WindowJoinSpec {
  std::string left, right;
  std::vector<JoinKeySpec> on;
  enum class Kind { kTumbling, kHopping } kind = Kind::kTumbling;
  int64_t size = 0;
  int64_t slide = 0;  // == size for tumbling
  JoinType type = JoinType::kInner;
  int64_t allowed_lateness = 0;
  // keep: {left: [fields], right: [fields]}: each side's rows are buffered
  // and emitted with only these fields (dotted paths keep their dotted
  // names); a side without a list keeps its whole rows. Less state for
  // joins that use a few fields of wide rows (Nexmark q8).
  std::vector<std::string> keep[2];
  std::vector<FieldPath> keep_paths[2];
};

// temporal_join and lookup_join: a stream against a table source (`table`
// always names a source). type is kInner or kLeft.
struct TableJoinSpec {
  std::string stream, table;
  std::vector<JoinKeySpec> on;  // left = stream field, right = table field
  JoinType type = JoinType::kInner;
};

struct OperatorSpec {
  std::string name;
  enum class Kind {
    kFilter,
    kProject,
    kDedup,
    kWindow,
    kIntervalJoin,
    kWindowJoin,
    kTemporalJoin,
    kLookupJoin,
  } kind = Kind::kFilter;
  FilterSpec filter;
  ProjectSpec project;
  DedupSpec dedup;
  WindowSpec window;
  IntervalJoinSpec interval_join;
  WindowJoinSpec window_join;
  TableJoinSpec table_join;  // temporal_join and lookup_join
  bool is_join() const { return kind >= Kind::kIntervalJoin; }
  // Names of the upstream nodes (sources or operators) this operator reads,
  // in input-index order: {left, right} for interval/window joins, {stream,
  // table} for temporal/lookup joins.
  std::vector<std::string> Inputs() const;
  // Side outputs this operator produces, without the "<name>." prefix.
  std::vector<std::string> SideOutputs() const;
};

// The operator's YAML key ("filter", "interval_join", ...).
std::string_view OperatorKindName(OperatorSpec::Kind kind);

struct SinkSpec {
  std::string from;  // a source, an operator, or "<node>.<side output>"
  // kDiscard: results are serialized and dropped (benchmarks, dry runs).
  enum class Kind { kFile, kKafka, kStdout, kPostgres, kDiscard, kClickHouse } kind = Kind::kFile;
  std::string path;       // file
  std::string topic;      // kafka
  std::string bootstrap;  // kafka; empty: the embedded broker
  // kafka.mode: kChangelog (default) produces every revision, in order;
  // kUpsert produces only the highest revision per key within a flush
  // (compaction-friendly, for readers that only want the latest result).
  enum class KafkaMode { kUpsert, kChangelog } kafka_mode = KafkaMode::kChangelog;
  // kafka.exactly_once: a transactional producer whose transaction commits
  // with each checkpoint (needs spec.checkpoint.interval > 0). Default false:
  // idempotent producer, at-least-once.
  bool exactly_once = false;
  std::string dsn;    // postgres: libpq connection string or postgresql:// URI
  std::string table;  // postgres: [schema.]table, SQL identifiers (see IsSqlIdentifier);
                      // clickhouse: the table (an identifier)
  // clickhouse: the server's HTTP interface (http://host:port), the database
  // (default "default"), the user (default "default") and a file holding the
  // password (no secrets in the job YAML; empty: no password).
  std::string url;
  std::string database = "default";
  std::string user = "default";
  std::string password_file;

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
  int64_t interval = 0;  // 0 = no checkpoints
  std::string storage;
  int retain = 3;
};

struct JobSpec {
  std::string name;
  // spec.parallelism: tasks per stage (SPEC §8, common/job_plan.h); >= 1.
  int parallelism = 1;
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

struct SpecError {
  std::string path;     // e.g. "spec.operators[1].window.tumbling"
  std::string message;  // e.g. "expected a duration, got \"1 hour\""
  std::string ToString() const { return path + ": " + message; }
};

// For a job that arrives over the network (SPEC §8: untrusted input): every
// file it reads or writes (file sources and sinks, the dead letter, file://
// checkpoint storage) must be relative without escaping upwards ("..", then
// it lands in the worker's data dir), or lie under one of `allowed`
// (absolute directories). One error per offending path, naming its YAML path.
std::vector<SpecError> CheckAllowedPaths(const JobSpec& spec,
                                         const std::vector<std::string>& allowed);
// True if absolute `path` lies inside one of `dirs` (lexically: "..", "."
// and repeated slashes resolved; symlinks are not followed).
bool PathUnder(const std::string& path, const std::vector<std::string>& dirs);

// The job graph's hash: source, operator and sink names and kinds (16 hex
// digits, xxh3; stable across processes and releases). Checkpoints carry it:
// state of one graph cannot be restored into another.
std::string JobGraphHash(const JobSpec& spec);

struct ParseResult {
  JobSpec spec;  // meaningful only when errors is empty
  std::vector<SpecError> errors;
  bool ok() const { return errors.empty(); }
};

// Parses and validates a job YAML document.
ParseResult ParseJobSpec(std::string_view yaml_text);
// Reads the file, parses, validates and resolves relative paths against the
// file's directory. A file that cannot be read is one error with path "<file>".
ParseResult LoadJobSpec(const std::string& file_path);

}  // namespace caravela
