// ExchangeReader (exchange.h): messages from a transport (exchange_transport.h:
// Kafka or memory) split into frames, with per-channel watermarks and
// barrier alignment.
#include <algorithm>
#include <chrono>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/time_util.h"
#include "spdlog/spdlog.h"
#include "worker/exchange/exchange.h"
#include "worker/exchange/exchange_transport.h"

namespace caravela {
namespace {

using exchange_internal::MessageIn;

class ExchangeReaderImpl final : public ExchangeReader {
 public:
  explicit ExchangeReaderImpl(ExchangeReaderOptions options) : options_(std::move(options)) {}

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
    if (o.memory != nullptr) {
      ASSIGN_OR_RETURN(in_, exchange_internal::OpenMemoryIn(o, owned));
    } else if (o.network != nullptr) {
      ASSIGN_OR_RETURN(in_, exchange_internal::OpenNetworkIn(o, owned));
    } else {
      ASSIGN_OR_RETURN(in_, exchange_internal::OpenKafkaIn(o, owned));
    }
    slot_.assign(in_->PartitionCount(), -1);
    for (size_t i = 0; i < owned.size(); ++i) slot_[owned[i]] = static_cast<int>(i);
    owned_ = std::move(owned);
    channels_.resize(owned_.size() * static_cast<size_t>(o.producers));
    return absl::OkStatus();
  }

  absl::StatusOr<int> Poll(int max_frames, int timeout_ms,
                           std::vector<RecordBatch>* by_input) override {
    if (max_frames <= 0) return 0;
    Sink sink{by_input, 0, max_frames};
    // Frames released by ReleaseBarrier() (or by an abandoned alignment)
    // first, channel by channel, in order; a channel stops at its next barrier.
    if (held_ > 0 && !aligned_) {
      for (size_t c = 0; c < channels_.size() && sink.budget > 0 && !aligned_; ++c) {
        Channel& ch = channels_[c];
        while (!ch.blocked && !ch.held.empty() && sink.budget > 0) {
          Held h = std::move(ch.held.front());
          ch.held.pop_front();
          held_ -= h.frames;
          RETURN_IF_ERROR(ApplyFrames(h.bytes, h.partition, h.offset, /*replay=*/true, &sink));
        }
      }
    }
    // Then the transport, a message at a time while the budget lasts.
    bool first = sink.budget == max_frames;
    while (sink.budget > 0) {
      absl::Status status;
      ASSIGN_OR_RETURN(int n, in_->Poll(1, first ? timeout_ms : 0, [&](const RawMessage& m) {
        if (status.ok()) status = ApplyFrames(m.payload, m.partition, m.offset, false, &sink);
      }));
      RETURN_IF_ERROR(status);
      if (n == 0) break;
      first = false;
    }
    if (marks_changed_) UpdateWatermark();
    return sink.appended;
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
    const auto now = std::chrono::steady_clock::now();
    times_.last_ns =
        std::chrono::duration_cast<std::chrono::nanoseconds>(now - first_blocked_at_).count();
    times_.last_skew_ns =
        std::chrono::duration_cast<std::chrono::nanoseconds>(aligned_at_ - first_blocked_at_)
            .count();
    times_.total_ns += times_.last_ns;
    times_.last_id = *aligning_;
    released_ = *aligning_;
    aligning_.reset();
    aligned_ = false;
    blocked_ = 0;
    for (Channel& ch : channels_) ch.blocked = false;
  }

  AlignmentTimes alignment_times() const override { return times_; }

  int64_t Backlog() const override { return held_ + in_->Backlog(); }

  int64_t dropped_old_epoch() const override { return dropped_; }
  std::vector<ExchangeChannelStatus> Channels() const override {
    std::vector<ExchangeChannelStatus> out;
    out.reserve(channels_.size());
    const size_t producers = static_cast<size_t>(std::max(options_.producers, 1));
    for (size_t c = 0; c < channels_.size(); ++c) {
      ExchangeChannelStatus st;
      st.partition = owned_[c / producers];
      st.producer = static_cast<int32_t>(c % producers);
      st.watermark = channels_[c].watermark;
      st.idle = Idle(channels_[c]);
      out.push_back(st);
    }
    return out;
  }

 private:
  // Frames of one message not delivered yet: a tail of the message, from a
  // frame boundary on.
  struct Held {
    std::string bytes;
    int frames;
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
  struct Sink {
    std::vector<RecordBatch>* by_input;
    int appended;
    int budget;  // frames
  };

  // Frames written in this process or checked on arrival are not validated
  // field by field again.
  bool trusted() const { return in_->validated(); }

  // A channel that ended (kMaxTime) counts as active, so the watermark
  // reaches kMaxTime once every producer ended.
  static bool Idle(const Channel& ch) { return ch.idle && ch.watermark != kMaxTime; }

  std::string Where(int32_t partition, int64_t offset) const {
    return absl::StrCat("exchange ", options_.topic, "[", partition, "]@", offset);
  }

  // Applies the frames of `bytes` (a message, or a held tail of one) in
  // order. Once its channel is blocked by a barrier (or, for a fresh
  // message, still has held frames), the rest is held: at the back of the
  // channel's queue, or at the front when `replay` (it came from there).
  absl::Status ApplyFrames(std::string_view bytes, int32_t partition, int64_t offset, bool replay,
                           Sink* sink) {
    const int slot =
        partition >= 0 && partition < static_cast<int32_t>(slot_.size()) ? slot_[partition] : -1;
    if (slot < 0) return absl::OkStatus();  // not ours (transports never deliver those)
    size_t pos = 0;
    int32_t producer = -1;
    while (pos < bytes.size()) {
      const size_t start = pos;
      absl::StatusOr<ExchangeFrame> f = NextFrame(bytes, &pos, trusted());
      if (!f.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat(Where(partition, offset), ": ", f.status().message()));
      }
      --sink->budget;
      if (f->epoch < options_.epoch) {
        dropped_ += f->type == ExchangeFrame::Type::kRecordRun ? RecordRunReader(*f).Count() : 1;
        continue;
      }
      if (f->epoch > options_.epoch) {
        return absl::FailedPreconditionError(
            absl::StrCat(Where(partition, offset), ": a frame of epoch ", f->epoch,
                         " from producer ", f->producer, " while reading epoch ", options_.epoch,
                         ": this reader was fenced by a newer run"));
      }
      if (f->producer >= options_.producers) {
        return absl::InvalidArgumentError(absl::StrCat(Where(partition, offset), ": producer ",
                                                       f->producer, " of ", options_.producers));
      }
      if (producer >= 0 && f->producer != producer) {
        return absl::InvalidArgumentError(absl::StrCat(Where(partition, offset),
                                                       ": a message mixes producers ", producer,
                                                       " and ", f->producer));
      }
      producer = f->producer;
      const size_t c = static_cast<size_t>(slot) * options_.producers + f->producer;
      Channel& ch = channels_[c];
      if (ch.blocked || (!replay && !ch.held.empty())) {
        Hold(ch, bytes.substr(start), partition, offset, replay);
        ++sink->budget;  // not applied
        return absl::OkStatus();
      }
      Apply(c, *f, partition, offset, sink);
    }
    return absl::OkStatus();
  }

  void Hold(Channel& ch, std::string_view tail, int32_t partition, int64_t offset, bool front) {
    // A bad frame in the tail fails when it is replayed.
    const int frames = CountFrames(tail);
    Held h{std::string(tail), std::max(frames, 1), partition, offset};
    held_ += h.frames;
    if (front) {
      ch.held.push_front(std::move(h));
    } else {
      ch.held.push_back(std::move(h));
    }
  }

  // Applies a frame of channel `c` that is not held back.
  void Apply(size_t c, const ExchangeFrame& f, int32_t partition, int64_t offset, Sink* sink) {
    Channel& ch = channels_[c];
    switch (f.type) {
      case ExchangeFrame::Type::kRecordRun: {
        std::vector<RecordBatch>& by_input = *sink->by_input;
        if (by_input.size() <= static_cast<size_t>(f.input)) by_input.resize(f.input + 1);
        RecordBatch& batch = by_input[f.input];
        RecordRunReader run(f);
        int32_t origin_partition = 0;
        int64_t origin_offset = 0;
        int n = 0;
        for (Record* r = &batch.Append(); run.Next(r, &origin_partition, &origin_offset);
             r = &batch.Append(), ++n) {
          r->partition = options_.origin ? origin_partition : partition;
          r->offset = options_.origin ? origin_offset : offset;
        }
        batch.PopBack();  // the slot after the last record
        sink->appended += n;
        sink->budget -= n - 1;  // the budget counts records; the frame was counted once
        return;
      }
      case ExchangeFrame::Type::kRecord: {
        std::vector<RecordBatch>& by_input = *sink->by_input;
        if (by_input.size() <= static_cast<size_t>(f.input)) by_input.resize(f.input + 1);
        Record& r = by_input[f.input].Append();
        UnpackRecordFrame(f, &r);
        r.partition = options_.origin ? f.origin_partition : partition;
        r.offset = options_.origin ? f.origin_offset : offset;
        ++sink->appended;
        return;
      }
      case ExchangeFrame::Type::kWatermark:
        ch.watermark = f.watermark;
        ch.idle = f.idle;
        marks_changed_ = true;
        return;
      case ExchangeFrame::Type::kBarrier:
        if (f.checkpoint_id > highest_barrier_) {
          highest_barrier_ = f.checkpoint_id;
          if (options_.on_barrier) options_.on_barrier(f.checkpoint_id, f.stop);
        }
        OnBarrier(c, f.checkpoint_id, partition, offset);
        return;
    }
  }

  void OnBarrier(size_t c, int64_t id, int32_t partition, int64_t offset) {
    if (id <= released_ || (aligning_.has_value() && id < *aligning_)) {
      // A checkpoint already taken, or abandoned for a newer one.
      ExchangeLogger()->info("{}: ignoring barrier {} (aligning {}, last released {})",
                             Where(partition, offset), id, aligning_.value_or(0), released_);
      return;
    }
    if (aligning_.has_value() && id > *aligning_) {
      // This producer skipped checkpoint *aligning_ (it was abandoned): align
      // on the newer one. The channels blocked on the old one go on with
      // their held frames (which may bring barrier `id` too).
      ExchangeLogger()->info("{}: barrier {} while aligning {}: checkpoint {} abandoned",
                             Where(partition, offset), id, *aligning_, *aligning_);
      for (Channel& other : channels_) other.blocked = false;
      blocked_ = 0;
    }
    aligning_ = id;
    channels_[c].blocked = true;
    if (blocked_ == 0) first_blocked_at_ = std::chrono::steady_clock::now();
    ++blocked_;
    aligned_ = blocked_ == channels_.size();
    if (aligned_) aligned_at_ = std::chrono::steady_clock::now();
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
  std::unique_ptr<MessageIn> in_;
  std::vector<int32_t> owned_;     // sorted
  std::vector<int> slot_;          // partition -> index in owned_, or -1
  std::vector<Channel> channels_;  // slot * producers + producer
  int64_t watermark_ = kMinTime;
  bool marks_changed_ = false;
  std::optional<int64_t> aligning_;  // the barrier blocked channels wait on
  size_t blocked_ = 0;               // channels blocked on aligning_
  bool aligned_ = false;             // every channel is blocked
  int64_t released_ = 0;             // the last barrier released
  int64_t highest_barrier_ = 0;      // the newest barrier seen (on_barrier)
  int64_t held_ = 0;                 // frames held over all channels
  int64_t dropped_ = 0;
  std::chrono::steady_clock::time_point first_blocked_at_{};  // of aligning_
  std::chrono::steady_clock::time_point aligned_at_{};
  AlignmentTimes times_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<ExchangeReader>> ExchangeReader::Open(
    ExchangeReaderOptions options) {
  auto reader = std::make_unique<ExchangeReaderImpl>(std::move(options));
  RETURN_IF_ERROR(reader->Open());
  return reader;
}

}  // namespace caravela
