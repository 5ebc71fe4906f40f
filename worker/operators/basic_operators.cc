#include "worker/operators/basic_operators.h"

namespace caravela {

absl::Status FilterOperator::ProcessBatch(OperatorContext& ctx, int input, const RecordBatch& batch,
                                          Output& out) {
  for (const Record& r : batch) {
    if (IsTrue(where_->Eval(r))) out.Forward(r);
  }
  return absl::OkStatus();
}

absl::Status ProjectOperator::ProcessBatch(OperatorContext& ctx, int input,
                                           const RecordBatch& batch, Output& out) {
  for (const Record& r : batch) {
    Record& o = out.Emit();
    o.EnsureRoot();
    o.event_time = r.event_time;
    o.arrival = r.arrival;
    o.partition = r.partition;
    o.offset = r.offset;
    for (const auto& [name, expr] : fields_) o.AddValue(name, expr->Eval(r));
  }
  return absl::OkStatus();
}

}  // namespace caravela
