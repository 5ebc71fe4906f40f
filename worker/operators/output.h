// RecordBatch and Output: how records move between sources, operators,
// exchanges and sinks in a task. An operator reads a RecordBatch and writes
// into an Output (its main output and its side outputs); the runtime hands
// the Output's batches on (Task::Impl::Dispatch, worker/runtime/).
#pragma once

#include <cstddef>
#include <functional>
#include <utility>
#include <vector>

#include "common/record.h"
#include "common/status.h"

namespace caravela {

// A reusable vector of records. clear() keeps the records (and their buffers)
// for reuse, so steady-state batches allocate nothing.
class RecordBatch {
 public:
  Record& Append() {
    if (size_ == records_.size()) records_.emplace_back();
    Record& r = records_[size_++];
    r.Clear();
    return r;
  }
  // Appends `r`'s contents, leaving `r` with what the slot held before (to
  // be cleared by the Append that reuses it): a move with no copy and no
  // Clear of the slot.
  void AppendSwapped(Record& r) {
    if (size_ == records_.size()) records_.emplace_back();
    records_[size_++].swap(r);
  }
  void PopBack() { --size_; }
  void clear() { size_ = 0; }
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  Record& operator[](size_t i) { return records_[i]; }
  const Record& operator[](size_t i) const { return records_[i]; }
  const Record* begin() const { return records_.data(); }
  const Record* end() const { return records_.data() + size_; }

 private:
  std::vector<Record> records_;
  size_t size_ = 0;
};

// Where an operator writes: the main output and its declared side outputs.
class Output {
 public:
  explicit Output(size_t side_outputs = 0) : sides_(side_outputs) {}
  // Appends a fresh (empty) record to the main output.
  Record& Emit() { return main_.Append(); }
  // Appends `r`, a record of the batch being processed, to the main output
  // as it is (a filter, a dedup): moved out of the batch when the runtime
  // handed that batch over (no other operator or sink reads it), else
  // copied. `r` is not to be read after.
  void Forward(const Record& r) {
    if (movable_ != nullptr && !std::less<const Record*>()(&r, movable_->begin()) &&
        std::less<const Record*>()(&r, movable_->end())) {
      main_.AppendSwapped((*movable_)[static_cast<size_t>(&r - movable_->begin())]);
    } else {
      main_.Append() = r;
    }
  }
  // The runtime: the batch of the coming ProcessBatch call, which Forward
  // may move records out of (nullptr: none).
  void set_movable_input(RecordBatch* batch) { movable_ = batch; }
  // Appends a fresh record to side output `i` (index into SideOutputs()).
  Record& EmitSide(size_t i) { return sides_[i].Append(); }
  RecordBatch& main() { return main_; }
  RecordBatch& side(size_t i) { return sides_[i]; }
  size_t side_count() const { return sides_.size(); }
  void Resize(size_t side_outputs) { sides_.resize(side_outputs); }
  void clear() {
    main_.clear();
    for (auto& s : sides_) s.clear();
  }
  // Operators that emit in bursts (a watermark completing many windows) call
  // MaybeDrain between records: once kDrainAt main records are waiting, the
  // runtime's drain hands them downstream and clears the output, so a burst
  // is passed on in pieces instead of held whole. Without a drain (tests,
  // harness) it does nothing.
  static constexpr size_t kDrainAt = 4096;
  void SetDrain(std::function<absl::Status()> drain) { drain_ = std::move(drain); }
  absl::Status MaybeDrain() {
    if (drain_ == nullptr || main_.size() < kDrainAt) return absl::OkStatus();
    return drain_();
  }

 private:
  RecordBatch main_;
  RecordBatch* movable_ = nullptr;
  std::vector<RecordBatch> sides_;
  std::function<absl::Status()> drain_;
};

}  // namespace caravela
