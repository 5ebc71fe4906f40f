#include "common/metrics.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>

namespace caravela {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

TEST(HistogramTest, BucketsAreInclusiveUpperBoundsWithInfLast) {
  Histogram h({10, 100});
  EXPECT_EQ(h.BucketOf(-5), 0u);
  EXPECT_EQ(h.BucketOf(10), 0u);
  EXPECT_EQ(h.BucketOf(11), 1u);
  EXPECT_EQ(h.BucketOf(100), 1u);
  EXPECT_EQ(h.BucketOf(101), 2u);
  h.Observe(5);
  h.Observe(50);
  h.Observe(5000);
  EXPECT_EQ(h.counts(), (std::vector<int64_t>{1, 1, 1}));
  EXPECT_EQ(h.sum(), 5055);
  EXPECT_EQ(h.count(), 3);
}

TEST(HistogramTest, LocalAddsABatchOnFlushOnly) {
  Histogram h({10, 100});
  Histogram::Local local(&h);
  for (int i = 0; i < 4; ++i) local.Observe(20);
  EXPECT_EQ(h.count(), 0);
  local.Flush();
  EXPECT_EQ(h.counts(), (std::vector<int64_t>{0, 4, 0}));
  EXPECT_EQ(h.sum(), 80);
  local.Flush();  // nothing new
  EXPECT_EQ(h.count(), 4);
}

TEST(HistogramTest, QuantileInterpolatesWithinTheBucketLikePromQL) {
  Histogram h({100, 200, 400});
  EXPECT_EQ(h.Quantile(0.5), 0);                // no observations
  for (int i = 0; i < 10; ++i) h.Observe(50);   // (0, 100]
  for (int i = 0; i < 10; ++i) h.Observe(150);  // (100, 200]
  EXPECT_EQ(h.Quantile(0.25), 50);              // rank 5 of 10 in the first bucket
  EXPECT_EQ(h.Quantile(0.5), 100);              // rank 10: the first bucket's top
  EXPECT_EQ(h.Quantile(0.75), 150);             // rank 15: half into (100, 200]
  h.Observe(1000);                              // +Inf: the last bound
  EXPECT_EQ(h.Quantile(0.99), 400);
}

TEST(MetricsRegistryTest, ExportsHistogramsInSecondsWithCumulativeBuckets) {
  MetricsRegistry m;
  Histogram* h = m.GetHistogram("arrival_delay_ms", R"(source="s")", {100, 1000});
  EXPECT_EQ(m.GetHistogram("arrival_delay_ms", R"(source="s")", {1}), h);  // same one
  h->Observe(50);
  h->Observe(500);
  h->Observe(5000);
  const std::string text = m.ToPrometheusText("caravela_");
  EXPECT_THAT(text, HasSubstr("# TYPE caravela_arrival_delay_seconds histogram\n"));
  EXPECT_THAT(text, HasSubstr(R"(caravela_arrival_delay_seconds_bucket{source="s",le="0.100"} 1)"));
  EXPECT_THAT(text, HasSubstr(R"(caravela_arrival_delay_seconds_bucket{source="s",le="1.000"} 2)"));
  EXPECT_THAT(text, HasSubstr(R"(caravela_arrival_delay_seconds_bucket{source="s",le="+Inf"} 3)"));
  EXPECT_THAT(text, HasSubstr(R"(caravela_arrival_delay_seconds_sum{source="s"} 5.550)"));
  EXPECT_THAT(text, HasSubstr(R"(caravela_arrival_delay_seconds_count{source="s"} 3)"));
  EXPECT_EQ(m.Snapshot().at(R"(arrival_delay_ms_count{source="s"})"), 3);
  EXPECT_EQ(m.FindHistogram("arrival_delay_ms", R"(source="s")"), h);
  EXPECT_EQ(m.FindHistogram("nope"), nullptr);
}

TEST(MetricsRegistryTest, ATotalOfMillisecondsIsACounterOfSeconds) {
  MetricsRegistry m;
  m.Get("task_alignment_ms_total", R"(task="t")")->Set(1250);
  m.Get("task_checkpoint_sync_last_ms", R"(task="t",part="snapshot")")->Set(40);
  const std::string text = m.ToPrometheusText("caravela_");
  EXPECT_THAT(text, HasSubstr("# TYPE caravela_task_alignment_seconds_total counter\n"));
  EXPECT_THAT(text, HasSubstr("# HELP caravela_task_alignment_seconds_total Time a task"));
  EXPECT_THAT(text, HasSubstr(R"(caravela_task_alignment_seconds_total{task="t"} 1.250)"));
  EXPECT_THAT(text, HasSubstr("# TYPE caravela_task_checkpoint_sync_last_seconds gauge\n"));
  EXPECT_THAT(
      text,
      HasSubstr(R"(caravela_task_checkpoint_sync_last_seconds{task="t",part="snapshot"} 0.040)"));
}

TEST(MetricsRegistryTest, UnlabelledHistogramGetsOnlyTheLeLabel) {
  MetricsRegistry m;
  m.GetHistogram("grpc_latency", "", {5})->Observe(1);
  const std::string text = m.ToPrometheusText();
  EXPECT_THAT(text, HasSubstr("grpc_latency_bucket{le=\"5\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("grpc_latency_sum 1\n"));
}

TEST(MetricsRegistryTest, AViewPutsItsScopeBeforeEveryLabelInTheParent) {
  MetricsRegistry worker;
  MetricsRegistry a(&worker, R"(job_id="a-1",job_name="a")");
  MetricsRegistry b(&worker, R"(job_id="b-1",job_name="b")");
  a.Get("records_in_total", R"(source="s")")->Add(3);
  b.Get("records_in_total", R"(source="s")")->Add(5);
  a.Get("restores_total")->Add();
  a.GetHistogram("arrival_delay_ms", R"(source="s")", {10})->Observe(4);
  EXPECT_EQ(worker.Value("records_in_total", R"(job_id="a-1",job_name="a",source="s")"), 3);
  EXPECT_EQ(worker.Value("records_in_total", R"(job_id="b-1",job_name="b",source="s")"), 5);
  EXPECT_EQ(worker.Value("restores_total", R"(job_id="a-1",job_name="a")"), 1);
  EXPECT_EQ(a.Value("records_in_total", R"(source="s")"), 3) << "a view reads its own series";
  EXPECT_EQ(a.Sum("records_in_total"), 3);
  EXPECT_EQ(worker.Sum("records_in_total"), 8);
  EXPECT_NE(a.FindHistogram("arrival_delay_ms", R"(source="s")"), nullptr);
  // Its snapshot: its own series, without its scope.
  const std::map<std::string, int64_t> own = {{R"(arrival_delay_ms_count{source="s"})", 1},
                                              {R"(arrival_delay_ms_sum{source="s"})", 4},
                                              {R"(records_in_total{source="s"})", 3},
                                              {"restores_total", 1}};
  EXPECT_EQ(a.Snapshot(), own);
  const std::string text = a.ToPrometheusText("caravela_");
  EXPECT_EQ(text, worker.ToPrometheusText("caravela_")) << "a view exports the parent's text";
  EXPECT_THAT(text,
              HasSubstr(R"(caravela_records_in_total{job_id="b-1",job_name="b",source="s"} 5)"));
  EXPECT_THAT(text, HasSubstr(R"(caravela_restores_total{job_id="a-1",job_name="a"} 1)"));
}

TEST(MetricsRegistryTest, AViewsSeriesLeaveWithTheLastViewHoldingThem) {
  MetricsRegistry worker;
  worker.Get("grpc_calls_total")->Add();
  auto epoch1 = std::make_unique<MetricsRegistry>(&worker, R"(job_id="a-1",job_name="a")");
  epoch1->Get("records_in_total", R"(source="s")")->Add(3);
  epoch1->GetHistogram("arrival_delay_ms", R"(source="s")", {10})->Observe(4);
  epoch1->GetDouble("window_amount_total", R"(op="w")")->Add(1.5);
  epoch1->Get("operator_watermark_ms", R"(op="w")")->Set(1000);
  worker.SetAges("operator_watermark_ms", "operator_watermark_lag_ms", 5000);
  EXPECT_EQ(worker.Value("operator_watermark_lag_ms", R"(job_id="a-1",job_name="a",op="w")"), 4000);
  // The next epoch's part takes the same series before the last one ends.
  auto epoch2 = std::make_unique<MetricsRegistry>(&worker, R"(job_id="a-1",job_name="a")");
  Counter* in = epoch2->Get("records_in_total", R"(source="s")");
  epoch1.reset();
  in->Add(2);  // still the live series
  EXPECT_EQ(worker.Value("records_in_total", R"(job_id="a-1",job_name="a",source="s")"), 5);
  EXPECT_EQ(worker.FindHistogram("arrival_delay_ms", R"(job_id="a-1",job_name="a",source="s")"),
            nullptr)
      << "held by the ended view only";
  EXPECT_EQ(worker.DoubleValue("window_amount_total", R"(job_id="a-1",job_name="a",op="w")"), 0);
  worker.SetAges("operator_watermark_ms", "operator_watermark_lag_ms", 6000);
  epoch2.reset();
  const std::string text = worker.ToPrometheusText("caravela_");
  EXPECT_THAT(text, Not(HasSubstr("a-1"))) << text;
  EXPECT_THAT(text, HasSubstr("caravela_grpc_calls_total 1")) << "the worker's own series stay";
}

}  // namespace
}  // namespace caravela
