#include "worker/connectors/awaiting_topic_source.h"

#include <algorithm>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "spdlog/spdlog.h"

namespace caravela {
namespace {

constexpr auto kLookEvery = std::chrono::seconds(1);
constexpr int kLookTimeoutMs = 500;

}  // namespace

AwaitingTopicSource::AwaitingTopicSource(KafkaSourceOptions options, bool bounded, int share_tasks,
                                         int share_index)
    : options_(std::move(options)),
      stop_at_end_(bounded),
      share_tasks_(std::max(1, share_tasks)),
      share_index_(share_index) {}

absl::Status AwaitingTopicSource::Open() {
  RETURN_IF_ERROR(TryOpen(kLookTimeoutMs));
  if (source_ == nullptr && !owns_none_) {
    SubsystemLogger("kafka")->info("{}: it starts reading when the topic is created", Waiting());
  }
  return absl::OkStatus();
}

std::string AwaitingTopicSource::Waiting() const {
  if (source_ != nullptr || owns_none_) return "";
  std::string waiting =
      absl::StrCat("waiting for topic ", options_.topic, " on ", options_.bootstrap);
  if (!unreachable_.empty()) absl::StrAppend(&waiting, " (last look: ", unreachable_, ")");
  return waiting;
}

absl::Status AwaitingTopicSource::TryOpen(int timeout_ms) {
  next_look_ = std::chrono::steady_clock::now() + kLookEvery;
  KafkaSourceOptions probe_options;
  probe_options.bootstrap = options_.bootstrap;
  probe_options.topic = options_.topic;
  probe_options.open_timeout_ms = timeout_ms;
  probe_options.config = options_.config;  // the job's properties (SASL, TLS)
  KafkaSource probe(probe_options);
  absl::Status st = probe.Open();
  if (absl::IsNotFound(st)) {  // not there yet
    unreachable_.clear();
    return absl::OkStatus();
  }
  if (absl::IsUnavailable(st)) {
    // The broker did not answer this look (a restart, a slow connection):
    // keep waiting, and say so.
    if (unreachable_.empty()) {
      SubsystemLogger("kafka")->warn("{}; it keeps looking", std::string(st.message()));
    }
    unreachable_ = std::string(st.message());
    return absl::OkStatus();
  }
  RETURN_IF_ERROR(st);
  unreachable_.clear();
  KafkaSourceOptions o = options_;
  if (o.partitions.empty() && share_tasks_ > 1) {
    for (int p = 0; p < probe.PartitionCount(); ++p) {
      if (p % share_tasks_ == share_index_) o.partitions.push_back(p);
    }
    if (o.partitions.empty()) {
      // More tasks than partitions: this one reads nothing.
      owns_none_ = true;
      SubsystemLogger("kafka")->info(
          "topic {} on {} exists now: no partition of its {} is this "
          "task's",
          options_.topic, options_.bootstrap, probe.PartitionCount());
      return absl::OkStatus();
    }
  }
  auto source = std::make_unique<KafkaSource>(std::move(o));
  RETURN_IF_ERROR(source->Open());
  if (stop_at_end_) RETURN_IF_ERROR(source->StopAtCurrentEnd());
  source_ = std::move(source);
  SubsystemLogger("kafka")->info("topic {} on {} exists now: reading it", options_.topic,
                                 options_.bootstrap);
  return absl::OkStatus();
}

absl::StatusOr<int> AwaitingTopicSource::Poll(int max_messages, int timeout_ms,
                                              const std::function<void(const RawMessage&)>& f) {
  if (source_ != nullptr) return source_->Poll(max_messages, timeout_ms, f);
  if (!owns_none_ && std::chrono::steady_clock::now() >= next_look_) {
    RETURN_IF_ERROR(TryOpen(std::min(timeout_ms, kLookTimeoutMs)));
    // The task sizes its per-partition state before the first record.
    if (source_ != nullptr) return 0;
  }
  if (timeout_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(timeout_ms));
  return 0;
}

absl::Status AwaitingTopicSource::StopAtCurrentEnd() {
  stop_at_end_ = true;
  return source_ ? source_->StopAtCurrentEnd() : absl::OkStatus();
}

}  // namespace caravela
