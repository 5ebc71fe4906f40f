// JobSeries: what the dashboard charts and explains, sampled in the
// coordinator (issue 11): per job a ring buffer of samples over time (input
// rate, consumer lag, watermark lag, last checkpoint), and per source
// partition since when its watermark has not moved, to name what holds a
// job's watermark back ("why is this window not final").
//
// Threading: thread-safe (the coordinator's ticker samples, HTTP threads
// read).
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "caravela/v1/job.pb.h"
#include "common/http_server.h"

namespace caravela {

class JobSeries {
 public:
  // `capacity` samples per job (at one per second: 10 minutes).
  explicit JobSeries(size_t capacity = 600) : capacity_(capacity) {}

  // Adds a sample of `job` (with its live task statuses) taken at `now_ms`.
  void Sample(const v1::Job& job, int64_t now_ms);
  // Forgets jobs not in `keep` (ended or deleted).
  void Retain(const std::vector<std::string>& keep);

  // {"t_ms":[...],"records_per_s":[...],"consumer_lag":[...],
  //  "watermark_lag_s":[...],"last_checkpoint":[...],"state_bytes":[...],
  //  "late_per_s":[...],"too_late_per_s":[...],
  //  "partitions":[{"task","source","partition","worker","watermark_ms",
  //                 "idle","lag","offset","since_ms"}...],
  //  "side_records":{"<node>.<output>":n,...},
  //  "holdback":{"kind":"source"|"exchange",...} or null}: the job's
  // samples and what holds the job's event time back, with since when its
  // watermark has not moved and why: of the non-idle source partitions the
  // one with the lowest watermark, unless an exchange channel is lower
  // still (its producer task is behind its own sources: stalled, or not
  // sending watermark markers). "" if the job was never sampled.
  std::string Json(const std::string& job_id) const;
  // GET /api/v1/jobs/ID/series: Json(ID), 404 for a job never sampled.
  HttpRoute Route() const;

 private:
  struct Point {
    int64_t t_ms = 0;
    double records_per_s = 0;
    int64_t consumer_lag = 0;
    // Unknown (JSON null) while no source partition that is not idle has a
    // watermark: every one idle, or none read yet. Not 0: nothing lags.
    std::optional<double> watermark_lag_s;
    int64_t last_checkpoint = 0;
    int64_t state_bytes = 0;
    double late_per_s = 0;      // records behind their operator's watermark
    double too_late_per_s = 0;  // of them, dropped to too_late side outputs
  };
  struct Partition {
    int task = 0;
    std::string worker;
    v1::SourcePartitionStatus status;
    int64_t since_ms = 0;  // when its watermark last changed (or first seen)
  };
  // An exchange channel feeding a task: (consumer task, exchange,
  // partition, producer task).
  struct Channel {
    int task = 0;        // the consumer
    std::string worker;  // the consumer's
    v1::ExchangeInputStatus status;
    int64_t since_ms = 0;
  };
  struct Series {
    std::deque<Point> points;
    int64_t last_records_in = -1;
    int64_t last_late = -1;
    int64_t last_too_late = -1;
    std::map<std::string, int64_t> side_records;  // summed over tasks, latest
    std::map<std::tuple<int, std::string, int32_t, int32_t>, Channel> channels;
    int64_t last_t_ms = 0;
    // By (source, partition).
    std::map<std::tuple<std::string, int32_t>, Partition> partitions;
  };

  const size_t capacity_;
  mutable std::mutex mu_;
  std::map<std::string, Series> series_;
};

}  // namespace caravela
