#include "worker/runtime/pipeline.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/job_plan.h"
#include "common/time_util.h"
#include "worker/runtime/job_runner.h"
#include "worker/runtime/task.h"

namespace caravela {

Pipeline::~Pipeline() = default;

absl::StatusOr<std::unique_ptr<Pipeline>> Pipeline::Create(const JobSpec& spec,
                                                           const RunOptions& options) {
  std::unique_ptr<Pipeline> p(new Pipeline());
  p->job_name_ = spec.name;
  p->job_metrics_ = std::make_unique<MetricsRegistry>(
      &p->metrics_, absl::StrCat("job_id=\"", spec.name, "\",job_name=\"", spec.name, "\""));
  ASSIGN_OR_RETURN(p->runner_, JobRunner::Create(spec, options, p->job_metrics_.get()));
  return p;
}

absl::Status Pipeline::Run() { return runner_->Run(); }

StateBackend& Pipeline::state() { return runner_->task(0).state(); }

int Pipeline::task_count() const { return runner_->task_count(); }

v1::Job Pipeline::Status() {
  v1::Job job;
  job.set_id(job_name_);
  job.set_name(job_name_);
  job.set_state(v1::RUNNING);
  const JobPlan& plan = runner_->plan();
  job.set_stages(static_cast<int32_t>(plan.stages.size()));
  job.set_exchanges(static_cast<int32_t>(plan.exchanges.size()));
  job.set_last_checkpoint(std::max(job_metrics_->Value("job_checkpoint_last_id"),
                                   job_metrics_->Value("checkpoint_last_id")));
  // One task for the whole job unless it runs as one per stage and index.
  const bool one = runner_->task_count() == 1;
  int g = 0;
  for (const StagePlan& st : plan.stages) {
    job.set_parallelism(std::max(job.parallelism(), static_cast<int32_t>(st.tasks)));
    for (int i = 0; i < st.tasks && g < runner_->task_count(); ++i, ++g) {
      Task& t = runner_->task(g);
      v1::TaskStatus* ts = job.add_tasks();
      ts->set_stage(one ? 0 : st.id);
      ts->set_index(i);
      ts->set_worker("local");
      ts->set_state(v1::TASK_RUNNING);
      ts->set_watermark_ms(t.watermark());
      ts->set_consumer_lag(t.consumer_lag());
      ts->set_records_in(t.records_in());
      ts->set_records_out(t.records_out());
      ts->set_last_checkpoint(job.last_checkpoint());
      ts->set_state_bytes(t.state_bytes());
      Task::ActivityToProto(t.activity(), ts->mutable_activity());
      for (const Task::PartitionStatus& p : t.partitions()) {
        ts->add_partitions(p.partition);
        Task::PartitionToProto(p, ts->add_sources());
      }
    }
    if (one) break;
  }
  return job;
}

void Pipeline::RefreshMetrics() {
  const int64_t now = SystemClock().NowMs();
  for (int i = 0; i < runner_->task_count(); ++i) {
    Task::PublishPartitionMetrics(runner_->task(i).partitions(), now, job_metrics_.get());
  }
  metrics_.SetAges("operator_watermark_ms", "operator_watermark_lag_ms", now);
  metrics_.SetAges("job_checkpoint_last_completed_timestamp_ms", "job_checkpoint_age_ms", now);
}

std::string Pipeline::Summary() const {
  return JobSummary(*job_metrics_, runner_->records_in(), runner_->records_out());
}

}  // namespace caravela
