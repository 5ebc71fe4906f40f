// A Kafka source whose topic does not exist yet (Kafka Streams and Flink
// wait for it too): it reads nothing, says what it waits for (Waiting()),
// and looks for the topic about once a second; once the topic exists it
// opens the KafkaSource (from the start offsets the spec or a checkpoint
// gives) and from then on passes every call through. PartitionCount() is 0
// until then: the task notices the change and sizes its per-partition
// state (Task::Impl::StepSources).
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "worker/connectors/kafka_source.h"

namespace caravela {

class AwaitingTopicSource final : public RawSource {
 public:
  // `options` as for the KafkaSource it opens, except `partitions`: with an
  // unknown partition count the task owns the partitions p with
  // p % share_tasks == share_index (share_tasks 1: all). `bounded`: stop at
  // the end the topic has once it appears.
  AwaitingTopicSource(KafkaSourceOptions options, bool bounded, int share_tasks, int share_index);

  // Opens the source at once if the topic exists; OK without it (waiting).
  absl::Status Open() override;
  int PartitionCount() const override { return source_ ? source_->PartitionCount() : 0; }
  absl::StatusOr<int> Poll(int max_messages, int timeout_ms,
                           const std::function<void(const RawMessage&)>& f) override;
  bool Bounded() const override {
    return source_ != nullptr ? source_->Bounded() : owns_none_ && stop_at_end_;
  }
  bool Exhausted() const override {
    return source_ != nullptr ? source_->Exhausted() : owns_none_ && stop_at_end_;
  }
  int64_t Backlog(int32_t partition) const override {
    return source_ ? source_->Backlog(partition) : 0;
  }
  int64_t HighWatermark(int32_t partition) const override {
    return source_ ? source_->HighWatermark(partition) : -1;
  }
  std::vector<int64_t> Positions() const override {
    return source_ ? source_->Positions() : std::vector<int64_t>();
  }
  absl::Status StopAtCurrentEnd() override;
  absl::Status CommitOffsets(const std::vector<int64_t>& next_offsets) override {
    return source_ ? source_->CommitOffsets(next_offsets) : absl::OkStatus();
  }
  std::string Waiting() const override;

 private:
  // Opens the KafkaSource if the topic exists now (waiting at most
  // `timeout_ms` for metadata); OK and no source while it is missing.
  absl::Status TryOpen(int timeout_ms);

  KafkaSourceOptions options_;
  bool stop_at_end_;
  int share_tasks_, share_index_;
  std::unique_ptr<KafkaSource> source_;
  std::string unreachable_;  // why the last look got no answer, if it did not
  bool owns_none_ = false;   // the topic exists, but none of its partitions is this task's
  std::chrono::steady_clock::time_point next_look_;
};

}  // namespace caravela
