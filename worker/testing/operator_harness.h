// OperatorHarness: drives one operator by hand, like Flink's operator test
// harness or Kafka Streams' TopologyTestDriver. Feed records, advance the
// watermark and processing time explicitly, snapshot and restore the state,
// and read what the operator emitted (main and side outputs).
//
//   WindowOperator op(spec);
//   OperatorHarness h(&op);            // in-memory state backend
//   ASSERT_OK(h.Open());
//   h.SetProcessingTime(0);
//   ASSERT_OK(h.ProcessJson(R"({"amount": 5})", /*event_time=*/T(10, 0)));
//   ASSERT_OK(h.AdvanceWatermark(T(11, 0)));
//   EXPECT_THAT(h.TakeOutput(), ElementsAre(HasSubstr("ON_TIME")));
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "common/json.h"
#include "worker/operators/operator.h"

namespace caravela {

// Removes a test directory, best effort: never throws (RocksDB background
// threads may still be deleting files in it).
void RemoveTree(const std::string& dir);

class OperatorHarness {
 public:
  // `op` is not owned. With no backend given, an in-memory one is created.
  explicit OperatorHarness(Operator* op, std::unique_ptr<StateBackend> backend = nullptr,
                           std::string name = "op");

  absl::Status Open();
  // Sets processing time; fires the operator's timers that became due (in
  // order, each at its own due time).
  absl::Status SetProcessingTime(int64_t now);
  // Feeds one batch of records (JSON objects) with the given event times.
  absl::Status ProcessBatch(const std::vector<std::pair<std::string, int64_t>>& records,
                            int input = 0);
  absl::Status ProcessJson(const std::string& json, int64_t event_time, int input = 0) {
    return ProcessBatch({{json, event_time}}, input);
  }
  // Advances the watermark (no-op if not greater than the current one).
  absl::Status AdvanceWatermark(int64_t watermark);
  // Flushes operator state and commits the backend (what the runtime does
  // after each step).
  absl::Status Commit();
  // Commits, then snapshots the backend into `dir`.
  absl::Status Snapshot(const std::string& dir);
  // Restores the backend from `dir` into a fresh operator `op` (which replaces
  // the current one) and opens it with the given watermark and time.
  absl::Status RestoreInto(Operator* op, const std::string& dir, int64_t watermark);

  // Main-output records emitted since the last Take, as JSON lines.
  std::vector<std::string> TakeOutput();
  // Side-output records of side `name` since the last Take.
  std::vector<std::string> TakeSide(const std::string& name);

  // Times the operator handed a burst over early (Output::MaybeDrain).
  int drains() const { return drains_; }
  int64_t watermark() const { return ctx_->watermark(); }
  StateBackend& state() { return *backend_; }
  MetricsRegistry& metrics() { return metrics_; }
  OperatorContext& context() { return *ctx_; }

 private:
  void Collect();
  Operator* op_;
  std::unique_ptr<StateBackend> backend_;
  MetricsRegistry metrics_;
  ManualClock clock_;
  std::unique_ptr<OperatorContext> ctx_;
  std::string name_;
  Output out_;
  int drains_ = 0;
  std::vector<std::string> side_names_;
  std::vector<std::string> main_lines_;
  std::vector<std::vector<std::string>> side_lines_;
  JsonDecoder decoder_;
  RecordBatch batch_;
};

}  // namespace caravela
