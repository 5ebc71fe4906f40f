#include "worker/testing/operator_harness.h"

#include <filesystem>
#include <system_error>

namespace caravela {

void RemoveTree(const std::string& dir) {
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
}

OperatorHarness::OperatorHarness(Operator* op, std::unique_ptr<StateBackend> backend,
                                 std::string name)
    : op_(op), backend_(std::move(backend)), name_(std::move(name)) {
  if (!backend_) backend_ = NewMemoryBackend();
  ctx_ = std::make_unique<OperatorContext>(name_, backend_.get(), &metrics_, &clock_);
}

absl::Status OperatorHarness::Open() {
  side_names_ = op_->SideOutputs();
  out_.Resize(side_names_.size());
  // Like the runtime: a burst is taken in pieces (Output::MaybeDrain).
  out_.SetDrain([this] {
    ++drains_;
    Collect();
    return absl::OkStatus();
  });
  side_lines_.resize(side_names_.size());
  return op_->Open(*ctx_);
}

void OperatorHarness::Collect() {
  for (const Record& r : out_.main()) main_lines_.push_back(r.ToJson());
  for (size_t s = 0; s < out_.side_count(); ++s) {
    for (const Record& r : out_.side(s)) side_lines_[s].push_back(r.ToJson());
  }
  out_.clear();
}

absl::Status OperatorHarness::SetProcessingTime(int64_t now) {
  while (op_->NextTimer() <= now) {
    clock_.Set(op_->NextTimer());
    RETURN_IF_ERROR(op_->OnProcessingTime(*ctx_, out_));
    Collect();
  }
  clock_.Set(now);
  return absl::OkStatus();
}

absl::Status OperatorHarness::ProcessBatch(
    const std::vector<std::pair<std::string, int64_t>>& records, int input) {
  batch_.clear();
  for (const auto& [json, t] : records) {
    Record& r = batch_.Append();
    RETURN_IF_ERROR(decoder_.Decode(json, &r));
    r.event_time = t;
    r.arrival = clock_.NowMs();
  }
  // Handed over, as the runtime hands a batch to its only reader: records
  // the operator passes on as they are move (Output::Forward).
  out_.set_movable_input(&batch_);
  const absl::Status st = op_->ProcessBatch(*ctx_, input, batch_, out_);
  out_.set_movable_input(nullptr);
  RETURN_IF_ERROR(st);
  Collect();
  return absl::OkStatus();
}

absl::Status OperatorHarness::AdvanceWatermark(int64_t watermark) {
  if (watermark <= ctx_->watermark()) return absl::OkStatus();
  ctx_->set_watermark(watermark);
  RETURN_IF_ERROR(op_->OnWatermark(*ctx_, out_));
  Collect();
  return absl::OkStatus();
}

absl::Status OperatorHarness::Commit() {
  RETURN_IF_ERROR(op_->Flush(*ctx_));
  return backend_->Commit();
}

absl::Status OperatorHarness::Snapshot(const std::string& dir) {
  RETURN_IF_ERROR(Commit());
  return backend_->Snapshot(dir);
}

absl::Status OperatorHarness::RestoreInto(Operator* op, const std::string& dir, int64_t watermark) {
  RETURN_IF_ERROR(backend_->Restore(dir));
  op_ = op;
  ctx_->set_watermark(watermark);
  return Open();
}

std::vector<std::string> OperatorHarness::TakeOutput() {
  std::vector<std::string> out;
  out.swap(main_lines_);
  return out;
}

std::vector<std::string> OperatorHarness::TakeSide(const std::string& name) {
  for (size_t s = 0; s < side_names_.size(); ++s) {
    if (side_names_[s] == name) {
      std::vector<std::string> out;
      out.swap(side_lines_[s]);
      return out;
    }
  }
  return {};
}

}  // namespace caravela
