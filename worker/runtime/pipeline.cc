#include "worker/runtime/pipeline.h"

#include "common/time_util.h"
#include "worker/runtime/job_runner.h"
#include "worker/runtime/task.h"

namespace caravela {

Pipeline::~Pipeline() = default;

absl::StatusOr<std::unique_ptr<Pipeline>> Pipeline::Create(const JobSpec& spec,
                                                           const RunOptions& options) {
  std::unique_ptr<Pipeline> p(new Pipeline());
  p->job_name_ = spec.name;
  ASSIGN_OR_RETURN(p->runner_, JobRunner::Create(spec, options, &p->metrics_));
  return p;
}

absl::Status Pipeline::Run() { return runner_->Run(); }

StateBackend& Pipeline::state() { return runner_->task(0).state(); }

int Pipeline::task_count() const { return runner_->task_count(); }

void Pipeline::RefreshMetrics() {
  const int64_t now = SystemClock().NowMs();
  for (int i = 0; i < runner_->task_count(); ++i) {
    Task::PublishPartitionMetrics(job_name_, runner_->task(i).partitions(), now, &metrics_);
  }
}

std::string Pipeline::Summary() const {
  return JobSummary(metrics_, runner_->records_in(), runner_->records_out());
}

}  // namespace caravela
