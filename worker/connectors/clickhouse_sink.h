// ClickHouse sink (SPEC §7, issue 14): results into a table over the HTTP
// interface, `INSERT ... FORMAT JSONEachRow`, one request per flush.
//
// Table (created if missing, at the first flush that has rows: the key
// fields and the types of fields no hint covers come from the first result):
//   * keyed results (windows): ENGINE = ReplacingMergeTree(revision)
//     ORDER BY (the key fields): a key's row with the highest revision wins
//     at merge time and in `SELECT ... FINAL`;
//   * keyless rows (joins, side outputs): ENGINE = MergeTree ORDER BY tuple(),
//     appended (at least once: a recovery can append a row twice).
// Columns, in order: the key fields, the other fields of the result, then
// revision UInt64, state String, reconciled UInt8 (keyed only) and
// `_result` String, the whole result as JSON (nothing is lost whatever the
// typed columns hold). Types:
//   * window_start / window_end: DateTime64(3, 'UTC') where the server has it
//     (20.1 and later), else Int64 epoch milliseconds (Debian's 18.16 has no
//     DateTime64, and DateTime has neither milliseconds nor dates before
//     1970);
//   * `hints` (the window's aggregates: counts Int64, sums, averages, min and
//     max Nullable(Float64), arg_max/arg_min Nullable(String));
//   * else by the first result's value: a key field String or Int64 (other
//     JSON as its text in a String); a value field Nullable(Float64) for
//     numbers, Nullable(UInt8) for booleans, Nullable(String) otherwise.
// An existing table is read at Open() (system.columns) and used as it is:
// rows fill the columns it has; a keyed table without `revision` or without
// a column of the key fails with a message naming them. A value that does not
// fit its column (text in a number column) is written as NULL (or the
// column's default) and counted (`mismatched()`); `_result` keeps it.
//
// Batching: ClickHouse wants few, large INSERTs (each one is a part that
// merges must fold), so Flush() at the end of a runtime batch sends only
// once `max_buffered_bytes` are buffered or the oldest buffered row waited
// `flush_interval_ms`; PreCommit (every checkpoint) and Close send
// everything. One INSERT is in flight at a time, on a thread of its own,
// while the task goes on building the next one; PreCommit and Close wait
// for it, and its error comes back from the next call.
//
// Checkpoints: no transaction; PreCommit sends the buffer. After a crash the runtime
// re-delivers the results computed after the checkpoint; the same revision of
// a key is the same row, which the ReplacingMergeTree collapses, so a batch
// written twice is harmless and the table converges to the job's results.
// Between merges a key can have several rows: read with `SELECT ... FINAL`
// or `argMax(col, revision) ... GROUP BY key` (docs/semantics.md,
// "ClickHouse sink"). A keyed result without a revision is an error (the
// PostgreSQL sink's rule).
//
// Errors name the YAML path and the URL; connection errors are retried with
// backoff (ClickHouseClient). Logs go to the spdlog logger "clickhouse".
// Not thread-safe: one task thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <future>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "common/json.h"
#include "common/record.h"
#include "common/status.h"
#include "worker/connectors/clickhouse_client.h"
#include "worker/connectors/sink.h"

namespace caravela {

// `clickhouse: {url, database?, table, user?, password_file?}`
// (clickhouse_sink_kind.cc): the server's HTTP interface, the database
// (default "default"), the table, the user (default "default") and a file
// holding the password (no secrets in the job YAML; empty: no password).
struct ClickHouseSinkSpec {
  std::string url;
  std::string database = "default";
  std::string table;
  std::string user = "default";
  std::string password_file;
};

struct OperatorSpec;

struct ClickHouseSinkOptions {
  std::string url;
  std::string database = "default";
  std::string table;
  std::string user = "default";
  std::string password_file;  // empty: no password
  // Column types by field name, used when the sink creates the table.
  absl::flat_hash_map<std::string, std::string> hints;
  // Named in error messages, e.g. "spec.sinks[0].clickhouse".
  std::string yaml_path = "clickhouse sink";
  size_t max_buffered_bytes = size_t{8} << 20;  // Write and Flush send past this
  int64_t flush_interval_ms = 1000;             // Flush sends rows older than this
  int retries = 5;
  int64_t backoff_ms = 100;
};

// Reads back every result the sink wrote to its table: the `_result`
// column, one JSON object per row, in no order and with the revisions a
// ReplacingMergeTree has not collapsed yet (`caravela reconcile` keeps the
// highest per window). `each` gets each. Errors name the table and the URL;
// a missing table is FailedPrecondition. The answer is held whole in memory
// (a few hundred bytes per row: ~200 MB for a million rows), unlike the
// PostgreSQL read-back, which streams rows.
absl::Status ReadClickHouseResults(const ClickHouseSinkOptions& options,
                                   const std::function<void(std::string_view)>& each);

// The column types a window's results get (hints for the sink): its
// aggregates, and `events` / `id_digest` with reconcile: {id}.
absl::flat_hash_map<std::string, std::string> ClickHouseTypeHints(const OperatorSpec& op);

// The ClickHouse type of the window bounds on a server of `version`
// ("18.16.1", "23.8.2.7"): DateTime64(3, 'UTC') from 20.1, else Int64.
std::string ClickHouseTimeType(std::string_view version);

class ClickHouseSink : public Sink {
 public:
  explicit ClickHouseSink(ClickHouseSinkOptions options);
  ~ClickHouseSink() override;

  // Reads the password file, asks the server's version, creates the database
  // if missing and reads the table's columns if it exists.
  absl::Status Open() override;
  absl::Status WriteRecord(const SinkRecord& r) override;
  // Sends the buffer if it is big or old enough (see Batching).
  absl::Status Flush() override;
  // Sends the buffer.
  absl::StatusOr<std::string> PreCommit(int64_t checkpoint_id) override;
  absl::Status Close() override;

  int64_t written() const { return written_.load(); }
  int64_t mismatched() const { return mismatched_; }
  int64_t retried() const { return client_ == nullptr ? 0 : client_->retried(); }
  const std::string& time_type() const { return time_type_; }

 private:
  enum class ColumnKind { kString, kInt, kFloat, kBool, kTimeMs, kDateTime64, kJson, kOther };
  struct Column {
    std::string name;
    std::string type;
    ColumnKind kind = ColumnKind::kOther;
    bool nullable = false;
  };
  static Column MakeColumn(std::string name, std::string type);
  absl::Status CreateTable(const SinkRecord& first);
  absl::Status ReadTable();
  // An existing table against the first result: its key fields and revision.
  absl::Status CheckTable(const SinkRecord& first);
  void AppendRow(const SinkRecord& r);
  void AppendCell(const Column& c, const Value& v);
  absl::Status Error(const absl::Status& st) const;
  // Starts sending the buffer (after the INSERT in flight finished).
  absl::Status Send();
  // Waits for the INSERT in flight; its status.
  absl::Status Wait();

  ClickHouseSinkOptions options_;
  std::unique_ptr<ClickHouseClient> client_;
  std::string qualified_;  // `db`.`table`
  std::string time_type_;
  bool table_ready_ = false;
  bool keyed_ = false;
  bool checked_ = false;
  std::vector<Column> columns_;
  std::string insert_;  // INSERT INTO ... (columns) FORMAT JSONEachRow
  std::string buf_;     // JSONEachRow lines
  size_t buffered_rows_ = 0;
  int64_t oldest_ms_ = 0;  // steady clock, when the first buffered row came
  JsonDecoder decoder_;
  Record rec_;
  std::string scratch_;
  std::string sending_;  // the body of the INSERT in flight
  std::future<absl::Status> inflight_;
  std::atomic<int64_t> written_{0};
  int64_t mismatched_ = 0;
};

}  // namespace caravela
