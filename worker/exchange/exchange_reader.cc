// ExchangeReader (exchange.h): a KafkaSource over the owned partitions, plus
// per-channel watermarks and barrier alignment.
#include <algorithm>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/time_util.h"
#include "spdlog/spdlog.h"
#include "worker/connectors/kafka_source.h"
#include "worker/exchange/exchange.h"

namespace caravela {
namespace {

class KafkaExchangeReader final : public ExchangeReader {
 public:
  explicit KafkaExchangeReader(ExchangeReaderOptions options) : options_(std::move(options)) {}

  absl::Status Open() {
    const ExchangeReaderOptions& o = options_;
    if (o.partitions.empty() || o.producers < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("exchange reader ", o.topic, " needs partitions and producers >= 1"));
    }
    std::vector<int32_t> owned = o.partitions;
    std::sort(owned.begin(), owned.end());
    if (std::adjacent_find(owned.begin(), owned.end()) != owned.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("exchange reader ", o.topic, ": a partition is listed twice"));
    }
    KafkaSourceOptions so;
    so.bootstrap = o.bootstrap;
    so.topic = o.topic;
    so.partitions = owned;
    so.start = o.start;
    source_ = std::make_unique<KafkaSource>(std::move(so));
    RETURN_IF_ERROR(source_->Open());
    slot_.assign(source_->PartitionCount(), -1);
    for (size_t i = 0; i < owned.size(); ++i) slot_[owned[i]] = static_cast<int>(i);
    owned_ = std::move(owned);
    channels_.resize(owned_.size() * static_cast<size_t>(o.producers));
    return absl::OkStatus();
  }

  absl::StatusOr<int> Poll(int max_frames, int timeout_ms,
                           std::vector<RecordBatch>* by_input) override {
    if (max_frames <= 0) return 0;
    int appended = 0;
    int budget = max_frames;
    // Frames released by ReleaseBarrier() (or by an abandoned alignment)
    // first, channel by channel, in order; a channel stops at its next barrier.
    if (held_ > 0 && !aligned_) {
      for (size_t c = 0; c < channels_.size() && budget > 0 && !aligned_; ++c) {
        Channel& ch = channels_[c];
        while (!ch.blocked && !ch.held.empty() && budget > 0) {
          Held h = std::move(ch.held.front());
          ch.held.pop_front();
          --held_;
          --budget;
          absl::StatusOr<ExchangeFrame> f = DecodeFrame(h.bytes);
          if (!f.ok()) return f.status();  // cannot happen: decoded when it arrived
          RETURN_IF_ERROR(Process(c, *f, h.partition, h.offset, by_input, &appended));
        }
      }
    }
    if (budget > 0) {
      absl::Status status;
      absl::StatusOr<int> polled =
          source_->Poll(budget, budget < max_frames ? 0 : timeout_ms, [&](const RawMessage& m) {
            if (status.ok()) status = OnMessage(m, by_input, &appended);
          });
      if (!polled.ok()) return polled.status();
      RETURN_IF_ERROR(status);
    }
    if (marks_changed_) UpdateWatermark();
    return appended;
  }

  int64_t watermark() const override { return watermark_; }

  bool idle() const override {
    for (const Channel& ch : channels_) {
      if (!Idle(ch)) return false;
    }
    return true;
  }

  bool finished() const override {
    for (const Channel& ch : channels_) {
      if (ch.watermark != kMaxTime) return false;
    }
    return true;
  }

  std::optional<int64_t> AlignedBarrier() const override {
    if (!aligned_) return std::nullopt;
    return aligning_;
  }

  void ReleaseBarrier() override {
    if (!aligned_) return;
    released_ = *aligning_;
    aligning_.reset();
    aligned_ = false;
    blocked_ = 0;
    for (Channel& ch : channels_) ch.blocked = false;
  }

  int64_t Backlog() const override {
    int64_t total = held_;
    for (int32_t p : owned_) total += source_->Backlog(p);
    return total;
  }

  int64_t dropped_old_epoch() const override { return dropped_; }

 private:
  struct Held {
    std::string bytes;
    int32_t partition;
    int64_t offset;
  };
  // One (owned partition, producer) pair.
  struct Channel {
    int64_t watermark = kMinTime;  // last marker
    bool idle = false;
    bool blocked = false;   // barrier `aligning_` arrived; later frames are held
    std::deque<Held> held;  // frames after the barrier (or behind held ones)
  };

  // A channel that ended (kMaxTime) counts as active, so the watermark
  // reaches kMaxTime once every producer ended.
  static bool Idle(const Channel& ch) { return ch.idle && ch.watermark != kMaxTime; }

  std::string Where(int32_t partition, int64_t offset) const {
    return absl::StrCat("exchange ", options_.topic, "[", partition, "]@", offset);
  }

  // One frame fresh from Kafka.
  absl::Status OnMessage(const RawMessage& m, std::vector<RecordBatch>* by_input, int* appended) {
    if (options_.flow != nullptr) {
      options_.flow->Read(m.partition, static_cast<int64_t>(m.payload.size()));
    }
    absl::StatusOr<ExchangeFrame> f = DecodeFrame(m.payload);
    if (!f.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(Where(m.partition, m.offset), ": ", f.status().message()));
    }
    if (f->epoch < options_.epoch) {
      ++dropped_;
      return absl::OkStatus();
    }
    if (f->epoch > options_.epoch) {
      return absl::FailedPreconditionError(
          absl::StrCat(Where(m.partition, m.offset), ": a frame of epoch ", f->epoch,
                       " from producer ", f->producer, " while reading epoch ", options_.epoch,
                       ": this reader was fenced by a newer run"));
    }
    if (f->producer >= options_.producers) {
      return absl::InvalidArgumentError(absl::StrCat(Where(m.partition, m.offset), ": producer ",
                                                     f->producer, " of ", options_.producers));
    }
    const int slot = m.partition >= 0 && m.partition < static_cast<int32_t>(slot_.size())
                         ? slot_[m.partition]
                         : -1;
    if (slot < 0) return absl::OkStatus();  // not ours (KafkaSource never delivers those)
    const size_t c = static_cast<size_t>(slot) * options_.producers + f->producer;
    Channel& ch = channels_[c];
    if (ch.blocked || !ch.held.empty()) {
      ch.held.push_back({std::string(m.payload), m.partition, m.offset});
      ++held_;
      return absl::OkStatus();
    }
    return Process(c, *f, m.partition, m.offset, by_input, appended);
  }

  // Applies a frame of channel `c` that is not held back.
  absl::Status Process(size_t c, const ExchangeFrame& f, int32_t partition, int64_t offset,
                       std::vector<RecordBatch>* by_input, int* appended) {
    Channel& ch = channels_[c];
    switch (f.type) {
      case ExchangeFrame::Type::kRecord: {
        if (by_input->size() <= static_cast<size_t>(f.input)) by_input->resize(f.input + 1);
        Record& r = (*by_input)[f.input].Append();
        UnpackRecordFrame(f, &r);
        r.partition = partition;
        r.offset = offset;
        ++*appended;
        return absl::OkStatus();
      }
      case ExchangeFrame::Type::kWatermark:
        ch.watermark = f.watermark;
        ch.idle = f.idle;
        marks_changed_ = true;
        return absl::OkStatus();
      case ExchangeFrame::Type::kBarrier:
        OnBarrier(c, f.checkpoint_id, partition, offset);
        return absl::OkStatus();
    }
    return absl::OkStatus();
  }

  void OnBarrier(size_t c, int64_t id, int32_t partition, int64_t offset) {
    if (id <= released_ || (aligning_.has_value() && id < *aligning_)) {
      // A checkpoint already taken, or abandoned for a newer one.
      KafkaLogger()->info("{}: ignoring barrier {} (aligning {}, last released {})",
                          Where(partition, offset), id, aligning_.value_or(0), released_);
      return;
    }
    if (aligning_.has_value() && id > *aligning_) {
      // This producer skipped checkpoint *aligning_ (it was abandoned): align
      // on the newer one. The channels blocked on the old one go on with
      // their held frames (which may bring barrier `id` too).
      KafkaLogger()->info("{}: barrier {} while aligning {}: checkpoint {} abandoned",
                          Where(partition, offset), id, *aligning_, *aligning_);
      for (Channel& other : channels_) other.blocked = false;
      blocked_ = 0;
    }
    aligning_ = id;
    channels_[c].blocked = true;
    ++blocked_;
    aligned_ = blocked_ == channels_.size();
  }

  void UpdateWatermark() {
    marks_changed_ = false;
    bool any = false;
    int64_t low = kMaxTime;
    for (const Channel& ch : channels_) {
      if (Idle(ch)) continue;
      any = true;
      low = std::min(low, ch.watermark);
    }
    if (any) watermark_ = std::max(watermark_, low);
  }

  ExchangeReaderOptions options_;
  std::unique_ptr<KafkaSource> source_;
  std::vector<int32_t> owned_;     // sorted
  std::vector<int> slot_;          // partition -> index in owned_, or -1
  std::vector<Channel> channels_;  // slot * producers + producer
  int64_t watermark_ = kMinTime;
  bool marks_changed_ = false;
  std::optional<int64_t> aligning_;  // the barrier blocked channels wait on
  size_t blocked_ = 0;               // channels blocked on aligning_
  bool aligned_ = false;             // every channel is blocked
  int64_t released_ = 0;             // the last barrier released
  int64_t held_ = 0;                 // frames held over all channels
  int64_t dropped_ = 0;
};

}  // namespace

absl::StatusOr<std::unique_ptr<ExchangeReader>> ExchangeReader::Open(
    ExchangeReaderOptions options) {
  auto reader = std::make_unique<KafkaExchangeReader>(std::move(options));
  RETURN_IF_ERROR(reader->Open());
  return reader;
}

}  // namespace caravela
