// JobSeries: rates from successive samples, since-when per partition, and
// which partition holds the job's watermark back.
#include "coordinator/job_series.h"

#include <limits>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace caravela {
namespace {

void AddPartition(v1::TaskStatus* t, int partition, int64_t offset, int64_t watermark,
                  bool idle = false) {
  v1::SourcePartitionStatus* p = t->add_sources();
  p->set_source("purchases");
  p->set_partition(partition);
  p->set_offset(offset);
  p->set_watermark_ms(watermark);
  p->set_idle(idle);
}

v1::Job Job(int64_t offset0, int64_t wm0, int64_t wm1, bool idle1) {
  v1::Job job;
  job.set_id("revenue-1");
  job.set_last_checkpoint(4);
  v1::TaskStatus* a = job.add_tasks();
  a->set_worker("worker-1");
  a->set_consumer_lag(7);
  AddPartition(a, 0, offset0, wm0);
  v1::TaskStatus* b = job.add_tasks();
  b->set_worker("worker-2");
  AddPartition(b, 1, 10, wm1, idle1);
  return job;
}

TEST(JobSeriesTest, RatesSinceWhenAndWhatHoldsTheWatermarkBack) {
  JobSeries series(3);
  EXPECT_EQ(series.Json("revenue-1"), "");
  const int64_t none = std::numeric_limits<int64_t>::min();
  series.Sample(Job(100, 5'000, none, false), 10'000);
  series.Sample(Job(300, 6'000, none, false), 12'000);  // 200 records in 2 s
  nlohmann::json j = nlohmann::json::parse(series.Json("revenue-1"));
  EXPECT_EQ(j["records_per_s"][1], 100.0);
  EXPECT_EQ(j["consumer_lag"][1], 7);
  EXPECT_EQ(j["last_checkpoint"][1], 4);
  EXPECT_EQ(j["watermark_lag_s"][1], 6.0);  // 12 s - 6 s: partition 1 has none
  // Partition 1 has had no record: it holds the job back, since 10 s.
  EXPECT_EQ(j["holdback"]["partition"], 1);
  EXPECT_EQ(j["holdback"]["worker"], "worker-2");
  EXPECT_TRUE(j["holdback"]["watermark_ms"].is_null());
  EXPECT_EQ(j["holdback"]["since_ms"], 10'000);
  EXPECT_THAT(j["holdback"]["reason"].get<std::string>(), ::testing::HasSubstr("no record yet"));
  EXPECT_EQ(j["partitions"][0]["since_ms"], 12'000);  // its watermark moved at 12 s

  // Partition 1 idle: partition 0 (the only other) holds it back.
  series.Sample(Job(300, 6'000, 9'000, true), 13'000);
  j = nlohmann::json::parse(series.Json("revenue-1"));
  EXPECT_EQ(j["holdback"]["partition"], 0);
  EXPECT_EQ(j["holdback"]["since_ms"], 12'000);
  EXPECT_EQ(j["partitions"][1]["idle"], true);
  // Both speak: the lower watermark holds it back.
  series.Sample(Job(400, 8'000, 7'000, false), 14'000);
  j = nlohmann::json::parse(series.Json("revenue-1"));
  EXPECT_EQ(j["holdback"]["partition"], 1);
  EXPECT_EQ(j["holdback"]["watermark_ms"], 7'000);
  EXPECT_EQ(j["t_ms"].size(), 3u);  // the capacity
  EXPECT_EQ(j["t_ms"][0], 12'000);

  series.Retain({});
  EXPECT_EQ(series.Json("revenue-1"), "");
}

// Every partition idle: nothing lags, and the watermark lag is unknown
// (null), not 0 s; the holdback is null too.
TEST(JobSeriesTest, WatermarkLagIsNullWhileEveryPartitionIsIdle) {
  JobSeries series;
  v1::Job job;
  job.set_id("idle-1");
  v1::TaskStatus* t = job.add_tasks();
  AddPartition(t, 0, 10, 5'000, /*idle=*/true);
  AddPartition(t, 1, 10, 6'000, /*idle=*/true);
  series.Sample(job, 10'000);
  t->mutable_sources(1)->set_idle(false);
  series.Sample(job, 11'000);
  const nlohmann::json j = nlohmann::json::parse(series.Json("idle-1"));
  EXPECT_TRUE(j["watermark_lag_s"][0].is_null()) << j.dump();
  EXPECT_EQ(j["watermark_lag_s"][1], 5.0);  // 11 s - 6 s
}

// A two-stage job: task 0 reads the source and feeds task 1 (the window)
// through an exchange.
v1::Job Staged(int64_t source_wm, int64_t marker, int64_t late, int64_t too_late) {
  v1::Job job;
  job.set_id("staged-1");
  v1::TaskStatus* reader = job.add_tasks();
  reader->set_worker("worker-1");
  AddPartition(reader, 0, 10, source_wm);
  (*reader->mutable_activity()->mutable_side_records())["purchases.invalid"] = 2;
  v1::TaskStatus* window = job.add_tasks();
  window->set_worker("worker-2");
  v1::TaskActivity* a = window->mutable_activity();
  a->set_records_late(late);
  a->set_records_too_late(too_late);
  (*a->mutable_side_records())["hourly.too_late"] = too_late;
  v1::ExchangeInputStatus* e = a->add_exchange_inputs();
  e->set_exchange("caravela.staged.hourly");
  e->set_partition(0);
  e->set_producer_task(0);
  e->set_watermark_ms(marker);
  return job;
}

TEST(JobSeriesTest, AnExchangeProducerBehindItsSourcesHoldsTheWatermarkBack) {
  JobSeries series;
  // The producer's markers follow its source: the source partition is named.
  series.Sample(Staged(5'000, 5'000, 0, 0), 10'000);
  nlohmann::json j = nlohmann::json::parse(series.Json("staged-1"));
  EXPECT_EQ(j["holdback"]["kind"], "source");
  EXPECT_EQ(j["holdback"]["partition"], 0);
  // Its source moved on, its markers did not (stalled producer): the
  // exchange channel is named, with the producer and since when.
  series.Sample(Staged(9'000, 5'000, 4, 1), 12'000);
  j = nlohmann::json::parse(series.Json("staged-1"));
  EXPECT_EQ(j["holdback"]["kind"], "exchange");
  EXPECT_EQ(j["holdback"]["exchange"], "caravela.staged.hourly");
  EXPECT_EQ(j["holdback"]["producer_task"], 0);
  EXPECT_EQ(j["holdback"]["task"], 1);
  EXPECT_EQ(j["holdback"]["worker"], "worker-2");
  EXPECT_EQ(j["holdback"]["watermark_ms"], 5'000);
  EXPECT_EQ(j["holdback"]["since_ms"], 10'000);
  EXPECT_THAT(j["holdback"]["reason"].get<std::string>(),
              ::testing::HasSubstr("producer task 0 of exchange caravela.staged.hourly"));
  // Late and too-late rates over the 2 s, and side outputs summed over tasks.
  EXPECT_EQ(j["late_per_s"][1], 2.0);
  EXPECT_EQ(j["too_late_per_s"][1], 0.5);
  EXPECT_EQ(j["side_records"]["purchases.invalid"], 2);
  EXPECT_EQ(j["side_records"]["hourly.too_late"], 1);
}

}  // namespace
}  // namespace caravela
