// PostgreSQL sink (SPEC §7): upserts each keyed result into one table, keeping
// only the highest revision per key.
//
// Table (created if missing; "t" is the configured table, folded to lower case
// like an unquoted SQL name):
//   one `text not null` column per key field, named as the field (strings
//   unquoted, other JSON values as their JSON text), then
//   revision bigint not null, state text, epoch bigint not null,
//   value jsonb not null, updated_at timestamptz not null default now(),
//   primary key (the key columns).
// The key fields are only known from the first keyed record, so a missing
// table is created at the first Flush() that has rows. An existing table is
// read at Open() and checked (primary key columns must be text, revision/epoch
// bigint, state text, value jsonb; extra columns are allowed); a table or a
// record key that does not fit fails with a message saying what differs.
//
// Upsert: INSERT .. ON CONFLICT (key) DO UPDATE .. WHERE excluded.revision >
// t.revision. Replaying an older or equal revision never overwrites. Since
// revisions are epoch * 1e9 + n (n consecutive within a run), a stale writer of
// an older epoch is fenced by the same guard; the epoch column records which
// run wrote a row.
//
// Batching: Write buffers (collapsed to the highest revision per key, since one
// INSERT .. ON CONFLICT cannot touch a key twice); Flush sends the buffer as
// one statement per `max_rows_per_statement` rows, the rows passed as arrays
// (unnest), so one round trip per chunk. Write flushes by itself once
// `max_buffered` rows are pending.
//
// Fencing (cluster jobs, `fence_job` set): every task's sink registers its
// epoch in `caravela_fences (job, target, epoch)` (created if missing) at
// Open, raising the row to the highest epoch seen; each write statement
// applies only while that row is not above the sink's own epoch, in the same
// statement. So once a new epoch of the job opened its sinks, a stale worker
// of an older one (paused, partitioned) lands no row at all, even for keys
// the new epoch has not written yet; its Flush fails with
// FailedPrecondition "fenced" and Open refuses an epoch below the fence.
//
// Checkpoints: no transaction protocol; PreCommit = Flush. After a recovery the
// runtime re-delivers results computed after the checkpoint; the guard makes
// that idempotent (an equal revision is rejected, a replayed run's higher
// revisions rewrite the same content), so the table converges to the final
// results of an offline recompute.
//
// Records with an empty key (side outputs, operators without key fields) are
// appended with a plain INSERT to a keyless table (same columns, no key
// columns, revision nullable, no primary key). That is at-least-once: a
// recovery can append a re-delivered record twice. A table receives either
// keyed or keyless records, never both. A keyed record without a revision is an
// error (the guard needs one).
//
// Errors are absl::Status naming the YAML path and the DSN (password masked);
// a lost connection is reconnected and the statement retried once (safe: the
// upsert is idempotent). Logs go to the spdlog logger "postgres".
// Not thread-safe: one task thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "common/json.h"
#include "common/record.h"
#include "common/status.h"
#include "worker/connectors/sink.h"

typedef struct pg_conn PGconn;
typedef struct pg_result PGresult;

namespace caravela {

// `postgres: {dsn, table}` (postgres_sink_kind.cc).
struct PostgresSinkSpec {
  std::string dsn;    // libpq connection string or postgresql:// URI
  std::string table;  // [schema.]table, SQL identifiers (IsSqlIdentifier)
};

// The DSN with its password hidden, for messages.
std::string MaskPostgresDsn(std::string_view dsn);
// A libpq error message on one line, without its trailing newline.
std::string PostgresMessage(const char* message);
// `table` ([schema.]table of unquoted SQL identifiers) as the sink names it:
// (lower-cased display name, quoted SQL name). InvalidArgument if malformed.
absl::StatusOr<std::pair<std::string, std::string>> PostgresTableNames(std::string_view table);

struct PostgresSinkOptions {
  std::string dsn;    // libpq "key=value ..." string or postgresql:// URI
  std::string table;  // [schema.]table, unquoted SQL identifiers
  int64_t epoch = 0;  // stored in the epoch column
  // Non-empty: fence writers of older epochs of this job (see above).
  std::string fence_job;
  // Named in error messages, e.g. "spec.sinks[0].postgres".
  std::string yaml_path = "postgres sink";
  size_t max_buffered = 20000;
  size_t max_rows_per_statement = 5000;
};

class PostgresSink : public Sink {
 public:
  explicit PostgresSink(PostgresSinkOptions options);
  ~PostgresSink() override;

  // Connects and reads the table's columns if it exists.
  absl::Status Open() override;
  // A record without revision (keyless only).
  absl::Status WriteRecord(const SinkRecord& r) override;
  absl::Status Flush() override;
  // Flushes and disconnects.
  absl::Status Close() override;

  // Rows inserted or updated in the table.
  int64_t written() const { return written_; }
  // Records not applied because the table (or the buffer) already held an
  // equal or higher revision of their key: stale replays, fenced writers.
  int64_t rejected() const { return rejected_; }
  int64_t rejected_revisions() const override { return rejected_; }
  // Records replaced in the buffer by a higher revision of their key before
  // they were sent (normal progress, not staleness).
  int64_t superseded() const { return superseded_; }
  size_t pending() const { return keyed_.size() + keyless_.size(); }
  // The quoted table name used in SQL, e.g. "public"."t" or "t".
  const std::string& quoted_table() const { return qtable_; }

 private:
  enum class Shape { kUnknown, kKeyed, kKeyless };
  struct Row {
    std::vector<std::string> key;  // in key_columns_ order
    int64_t revision = -1;
    std::string state;  // empty: NULL
    std::string value;
  };

  struct ResultDeleter {
    void operator()(PGresult* r) const;
  };
  using Result = std::unique_ptr<PGresult, ResultDeleter>;
  // What the catalog says about the table.
  struct TableInfo {
    bool exists = false;
    std::vector<std::string> key_columns;  // primary key; empty: keyless
    bool has_updated_at = false;
    std::vector<std::string> problems;  // why it does not fit, if it does not
  };

  absl::Status Connect();
  void Disconnect();
  // Runs a statement, reconnecting and retrying once if the connection is lost.
  absl::StatusOr<Result> Exec(const std::string& sql, const std::vector<std::string>& params,
                              std::string_view what);
  absl::StatusOr<TableInfo> ReadTable();
  // Adopts an existing table's shape, or fails saying why it does not fit.
  absl::Status UseTable(const TableInfo& info);
  absl::Status CreateTable();
  // Key columns from the first keyed record (table not created yet).
  absl::Status SetKeyColumns(const std::vector<std::string>& names);
  // Fills values_scratch_ in key_columns_ order from the parsed record key.
  absl::Status MapKey();
  // Registers the epoch in caravela_fences; FailedPrecondition if a newer
  // epoch of the job is there.
  absl::Status RaiseFence();
  // FailedPrecondition if a newer epoch raised the fence (after a statement
  // applied fewer rows than it sent).
  absl::Status CheckFence();
  std::string FenceClause(int job_param, int epoch_param) const;
  // FailedPrecondition if the fence epoch in `r` (one row) is above ours.
  absl::Status FencedBy(const Result& r) const;
  absl::Status FlushKeyed();
  absl::Status FlushKeyless();
  // "spec.sinks[0].postgres (table t)" for messages.
  std::string Where() const;

  PostgresSinkOptions options_;
  std::string qtable_;   // quoted, for SQL
  std::string regname_;  // for to_regclass()
  std::string table_display_;
  PGconn* conn_ = nullptr;

  Shape shape_ = Shape::kUnknown;
  bool table_exists_ = false;
  bool has_updated_at_ = true;
  std::vector<std::string> key_columns_;

  JsonDecoder decoder_;
  Record key_record_;
  std::vector<std::string> names_scratch_;   // key fields of the current record
  std::vector<std::string> fields_scratch_;  // their values, same order
  std::vector<std::string> values_scratch_;  // values in key_columns_ order
  std::string canon_;
  std::string upsert_sql_;  // built once the key columns are known

  std::vector<Row> keyed_;
  absl::flat_hash_map<std::string, size_t> keyed_index_;  // canonical key -> keyed_ index
  std::vector<Row> keyless_;

  int64_t written_ = 0;
  int64_t rejected_ = 0;
  int64_t superseded_ = 0;
};

}  // namespace caravela
