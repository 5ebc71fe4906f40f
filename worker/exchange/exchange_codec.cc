// Exchange frame codec and flow control (exchange.h).
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "worker/exchange/exchange.h"

namespace caravela {
namespace {

// The flags byte a barrier frame carries after its id when its checkpoint
// ends the job (none otherwise).
constexpr uint8_t kBarrierStops = 1;

// Record::PackTo layout (common/record.cc): uint32 node count, uint32 byte
// count, the nodes, the bytes.
constexpr size_t kPackedHeader = 8;
// Inputs of one consuming operator; a larger index in a frame is garbage.
constexpr uint64_t kMaxInput = 1 << 16;

// Writes `v` at `p` (room for 10 bytes); returns the end.
char* WriteVarint(uint64_t v, char* p) {
  while (v >= 0x80) {
    *p++ = static_cast<char>((v & 0x7f) | 0x80);
    v >>= 7;
  }
  *p++ = static_cast<char>(v);
  return p;
}

void PutVarint(uint64_t v, std::string* out) {
  char buf[10];
  out->append(buf, static_cast<size_t>(WriteVarint(v, buf) - buf));
}

uint64_t ZigZag(int64_t v) {
  return (static_cast<uint64_t>(v) << 1) ^ static_cast<uint64_t>(v >> 63);
}
int64_t UnZigZag(uint64_t v) { return static_cast<int64_t>((v >> 1) ^ (~(v & 1) + 1)); }

// Reads frames; every read checks the bounds.
class Reader {
 public:
  explicit Reader(std::string_view in) : in_(in) {}
  bool Varint(uint64_t* v) {
    uint64_t result = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (pos_ >= in_.size()) return false;
      const auto byte = static_cast<uint8_t>(in_[pos_++]);
      if (shift == 63 && byte > 1) return false;  // more than 64 bits
      result |= static_cast<uint64_t>(byte & 0x7f) << shift;
      if ((byte & 0x80) == 0) {
        *v = result;
        return true;
      }
    }
    return false;
  }
  bool Byte(uint8_t* b) {
    if (pos_ >= in_.size()) return false;
    *b = static_cast<uint8_t>(in_[pos_++]);
    return true;
  }
  std::string_view Rest() const { return in_.substr(pos_); }
  bool Skip(uint64_t n) {
    if (n > in_.size() - pos_) return false;
    pos_ += n;
    return true;
  }
  bool AtEnd() const { return pos_ == in_.size(); }

 private:
  std::string_view in_;
  size_t pos_ = 0;
};

absl::Status Garbage(const std::string& what, std::string_view bytes) {
  return absl::InvalidArgumentError(
      absl::StrCat("exchange frame (", bytes.size(), " bytes): ", what));
}

// A record run's length prefix: a varint padded to 4 bytes (patched when the
// run closes), so runs stay below 2^28 bytes.
constexpr size_t kRunPrefix = 4;
constexpr uint64_t kMaxRunBytes = (uint64_t{1} << 28) - 1;

// v - base as a zigzag varint value, modulo 2^64 (no overflow).
uint64_t Delta(int64_t v, int64_t base) {
  return ZigZag(static_cast<int64_t>(static_cast<uint64_t>(v) - static_cast<uint64_t>(base)));
}

// One record of a run at `in`: its four header varints (event_time and
// arrival deltas, origin partition, offset delta) and its packed bytes,
// whose size the packed header gives. False if truncated.
bool ReadRunRecord(Reader& in, uint64_t head[4], std::string_view* packed) {
  for (int i = 0; i < 4; ++i) {
    if (!in.Varint(&head[i])) return false;
  }
  const std::string_view rest = in.Rest();
  if (rest.size() < kPackedHeader) return false;
  uint32_t n = 0;
  uint32_t bytes_len = 0;
  std::memcpy(&n, rest.data(), 4);
  std::memcpy(&bytes_len, rest.data() + 4, 4);
  const uint64_t size = kPackedHeader + uint64_t{n} * sizeof(Node) + bytes_len;
  if (size > rest.size()) return false;
  *packed = rest.substr(0, size);
  return in.Skip(size);
}

// Checks that `packed` is a well-formed Record::PackTo image, so that
// Unpack() and every later read of the record stay inside its buffers: sizes
// add up, node types are known, keys and strings lie in the byte block, and
// every subtree nests inside its parent (root: an object spanning all nodes).
absl::Status ValidatePacked(std::string_view packed) {
  if (packed.size() < kPackedHeader) return Garbage("record truncated", packed);
  uint32_t n = 0;
  uint32_t bytes_len = 0;
  std::memcpy(&n, packed.data(), 4);
  std::memcpy(&bytes_len, packed.data() + 4, 4);
  if (static_cast<uint64_t>(kPackedHeader) + uint64_t{n} * sizeof(Node) + bytes_len !=
      packed.size()) {
    return Garbage(absl::StrCat("record of ", n, " nodes and ", bytes_len, " bytes has the wrong ",
                                "size ", packed.size() - kPackedHeader),
                   packed);
  }
  if (n == 0) return absl::OkStatus();
  const char* nodes = packed.data() + kPackedHeader;
  // Ends (exclusive node index) of the open containers, innermost last.
  thread_local std::vector<uint32_t> open;
  open.clear();
  for (uint32_t i = 0; i < n; ++i) {
    Node node;
    std::memcpy(static_cast<void*>(&node), nodes + size_t{i} * sizeof(Node), sizeof(Node));
    while (!open.empty() && open.back() == i) open.pop_back();
    if (i == 0 ? node.type != ValueType::kObject || node.size != n : open.empty()) {
      return Garbage("record tree malformed", packed);
    }
    if (node.type > ValueType::kArray) return Garbage("unknown value type", packed);
    if (uint64_t{node.key_off} + node.key_len > bytes_len) {
      return Garbage("key outside the record", packed);
    }
    if (node.type == ValueType::kString && uint64_t{node.s.off} + node.s.len > bytes_len) {
      return Garbage("string outside the record", packed);
    }
    if (node.type == ValueType::kBool) {
      uint8_t b = 0;
      std::memcpy(&b, &node.b, 1);
      if (b > 1) return Garbage("bool neither true nor false", packed);
    }
    if (node.type == ValueType::kDecimal && node.scale > 18) {
      return Garbage("decimal scale above 18", packed);
    }
    const bool container = node.type == ValueType::kObject || node.type == ValueType::kArray;
    if (node.size == 0 || (!container && node.size != 1) ||
        (!open.empty() && uint64_t{i} + node.size > open.back())) {
      return Garbage("record tree malformed", packed);
    }
    if (container && node.size > 1) open.push_back(i + node.size);
  }
  return absl::OkStatus();
}

size_t VarintLength(uint64_t v) {
  size_t n = 1;
  while (v >= 0x80) {
    v >>= 7;
    ++n;
  }
  return n;
}

// Appends a frame with its length prefix: `size` bytes written by `body`
// after the header.
template <typename Body>
void AppendFramed(ExchangeFrame::Type type, int64_t epoch, int32_t producer, size_t body_size,
                  std::string* message, const Body& body) {
  const auto e = static_cast<uint64_t>(epoch);
  const auto p = static_cast<uint32_t>(producer);
  const size_t size = 1 + VarintLength(e) + VarintLength(p) + body_size;
  PutVarint(size, message);
  message->push_back(static_cast<char>(type));
  PutVarint(e, message);
  PutVarint(p, message);
  body(message);
}

// Replaces *out with the frame that Append* wrote into it, without its
// length prefix.
template <typename Append>
void EncodeAlone(std::string* out, const Append& append) {
  out->clear();
  append(out);
  size_t prefix = 0;
  while (static_cast<uint8_t>((*out)[prefix]) & 0x80) ++prefix;
  out->erase(0, prefix + 1);
}

}  // namespace

void EncodeRecordFrame(int64_t epoch, int32_t producer, int32_t input, const Record& r,
                       std::string* out) {
  EncodeAlone(out, [&](std::string* m) { AppendRecordFrame(epoch, producer, input, r, m); });
}

void EncodeWatermarkFrame(int64_t epoch, int32_t producer, int64_t watermark, bool idle,
                          std::string* out) {
  EncodeAlone(out,
              [&](std::string* m) { AppendWatermarkFrame(epoch, producer, watermark, idle, m); });
}

void EncodeBarrierFrame(int64_t epoch, int32_t producer, int64_t checkpoint_id, std::string* out,
                        bool stop) {
  EncodeAlone(out,
              [&](std::string* m) { AppendBarrierFrame(epoch, producer, checkpoint_id, m, stop); });
}

void AppendRecordFrame(int64_t epoch, int32_t producer, int32_t input, const Record& r,
                       std::string* message) {
  // The hot path of every exchanged record: the header into a stack buffer,
  // then one resize and two copies.
  char head[1 + 7 * 10];
  char* h = head;
  *h++ = static_cast<char>(ExchangeFrame::Type::kRecord);
  h = WriteVarint(static_cast<uint64_t>(epoch), h);
  h = WriteVarint(static_cast<uint32_t>(producer), h);
  h = WriteVarint(static_cast<uint32_t>(input), h);
  h = WriteVarint(ZigZag(r.event_time), h);
  h = WriteVarint(ZigZag(r.arrival), h);
  h = WriteVarint(ZigZag(r.partition), h);
  h = WriteVarint(ZigZag(r.offset), h);
  const auto head_len = static_cast<size_t>(h - head);
  const size_t packed = r.PackedSize();
  char prefix[10];
  const auto prefix_len = static_cast<size_t>(WriteVarint(head_len + packed, prefix) - prefix);
  const size_t at = message->size();
  message->resize(at + prefix_len + head_len + packed);
  char* dst = message->data() + at;
  std::memcpy(dst, prefix, prefix_len);
  std::memcpy(dst + prefix_len, head, head_len);
  r.PackTo(dst + prefix_len + head_len);
}

void AppendWatermarkFrame(int64_t epoch, int32_t producer, int64_t watermark, bool idle,
                          std::string* message) {
  const uint64_t w = ZigZag(watermark);
  AppendFramed(ExchangeFrame::Type::kWatermark, epoch, producer, VarintLength(w) + 1, message,
               [&](std::string* out) {
                 PutVarint(w, out);
                 out->push_back(idle ? 1 : 0);
               });
}

void AppendBarrierFrame(int64_t epoch, int32_t producer, int64_t checkpoint_id,
                        std::string* message, bool stop) {
  const auto id = static_cast<uint64_t>(checkpoint_id);
  AppendFramed(ExchangeFrame::Type::kBarrier, epoch, producer, VarintLength(id) + (stop ? 1 : 0),
               message, [&](std::string* out) {
                 PutVarint(id, out);
                 if (stop) out->push_back(kBarrierStops);
               });
}

int AppendToRecordRun(int64_t epoch, int32_t producer, int32_t input, const Record& r,
                      RecordRun* run, std::string* message) {
  const size_t packed = r.PackedSize();
  constexpr size_t kMaxHead = 4 * 10;
  if (run->start != std::string::npos &&
      (run->input != input ||
       message->size() - run->start - kRunPrefix + kMaxHead + packed > kMaxRunBytes)) {
    CloseRecordRun(run, message);
  }
  int opened = 0;
  if (run->start == std::string::npos) {
    if (packed + 2 * kMaxHead > kMaxRunBytes) {  // too large for a run
      AppendRecordFrame(epoch, producer, input, r, message);
      return 1;
    }
    *run = RecordRun{message->size(), input, 0, 0, 0};
    char head[kRunPrefix + 1 + 3 * 10] = {};
    char* h = head + kRunPrefix;
    *h++ = static_cast<char>(ExchangeFrame::Type::kRecordRun);
    h = WriteVarint(static_cast<uint64_t>(epoch), h);
    h = WriteVarint(static_cast<uint32_t>(producer), h);
    h = WriteVarint(static_cast<uint32_t>(input), h);
    message->append(head, static_cast<size_t>(h - head));
    opened = 1;
  }
  // The hot path of every exchanged record: the header into a stack buffer,
  // then one resize and two copies.
  char head[kMaxHead];
  char* h = head;
  h = WriteVarint(Delta(r.event_time, run->event_time), h);
  h = WriteVarint(Delta(r.arrival, run->arrival), h);
  h = WriteVarint(ZigZag(r.partition), h);
  h = WriteVarint(Delta(r.offset, run->offset), h);
  const auto head_len = static_cast<size_t>(h - head);
  const size_t at = message->size();
  message->resize(at + head_len + packed);
  char* dst = message->data() + at;
  std::memcpy(dst, head, head_len);
  r.PackTo(dst + head_len);
  run->event_time = r.event_time;
  run->arrival = r.arrival;
  run->offset = r.offset;
  return opened;
}

void CloseRecordRun(RecordRun* run, std::string* message) {
  if (run->start == std::string::npos) return;
  uint64_t len = message->size() - run->start - kRunPrefix;
  char* p = message->data() + run->start;
  for (size_t i = 0; i + 1 < kRunPrefix; ++i, len >>= 7) {
    p[i] = static_cast<char>((len & 0x7f) | 0x80);
  }
  p[kRunPrefix - 1] = static_cast<char>(len & 0x7f);
  run->start = std::string::npos;
}

bool RecordRunReader::Next(Record* r, int32_t* origin_partition, int64_t* origin_offset) {
  if (pos_ >= in_.size()) return false;
  Reader in(in_.substr(pos_));
  uint64_t head[4];
  std::string_view packed;
  if (!ReadRunRecord(in, head, &packed)) {  // DecodeFrame checked: only if trusted bytes lie
    pos_ = in_.size();
    return false;
  }
  event_time_ += static_cast<uint64_t>(UnZigZag(head[0]));
  arrival_ += static_cast<uint64_t>(UnZigZag(head[1]));
  offset_ += static_cast<uint64_t>(UnZigZag(head[3]));
  r->event_time = static_cast<int64_t>(event_time_);
  r->arrival = static_cast<int64_t>(arrival_);
  *origin_partition = static_cast<int32_t>(UnZigZag(head[2]));
  *origin_offset = static_cast<int64_t>(offset_);
  r->Unpack(packed.data());
  pos_ = static_cast<size_t>(packed.data() + packed.size() - in_.data());
  return true;
}

int RecordRunReader::Count() const {
  Reader in(in_.substr(std::min(pos_, in_.size())));
  int n = 0;
  uint64_t head[4];
  std::string_view packed;
  while (!in.AtEnd() && ReadRunRecord(in, head, &packed)) ++n;
  return n;
}

absl::StatusOr<ExchangeFrame> NextFrame(std::string_view message, size_t* pos, bool trusted) {
  Reader in(message.substr(*pos));
  uint64_t size = 0;
  if (!in.Varint(&size) || size > in.Rest().size()) {
    return absl::InvalidArgumentError(absl::StrCat("exchange message (", message.size(),
                                                   " bytes): frame length at byte ", *pos,
                                                   " truncated or past the end"));
  }
  const std::string_view frame = in.Rest().substr(0, size);
  *pos = static_cast<size_t>(frame.data() + frame.size() - message.data());
  return DecodeFrame(frame, trusted);
}

absl::Status ValidateMessage(std::string_view message, int32_t producer, int64_t epoch,
                             int frames) {
  int n = 0;
  for (size_t pos = 0; pos < message.size(); ++n) {
    const size_t start = pos;
    absl::StatusOr<ExchangeFrame> f = NextFrame(message, &pos, /*trusted=*/false);
    if (!f.ok()) return f.status();
    if (f->producer != producer || f->epoch != epoch) {
      return absl::InvalidArgumentError(absl::StrCat(
          "exchange message: the frame at byte ", start, " is of producer ", f->producer, " epoch ",
          f->epoch, " on a channel of producer ", producer, " epoch ", epoch));
    }
  }
  if (n != frames) {
    return absl::InvalidArgumentError(
        absl::StrCat("exchange message: ", n, " frames where it announces ", frames));
  }
  return absl::OkStatus();
}

std::shared_ptr<spdlog::logger> ExchangeLogger() {
  static const std::shared_ptr<spdlog::logger> logger = SubsystemLogger("exchange");
  return logger;
}

int CountFrames(std::string_view message) {
  Reader in(message);
  int frames = 0;
  for (uint64_t size = 0; !in.AtEnd() && in.Varint(&size) && in.Skip(size);) ++frames;
  return frames;
}

absl::StatusOr<ExchangeFrame> DecodeFrame(std::string_view bytes, bool trusted) {
  Reader in(bytes);
  ExchangeFrame f;
  uint8_t type = 0;
  uint64_t epoch = 0;
  uint64_t producer = 0;
  if (!in.Byte(&type) || !in.Varint(&epoch) || !in.Varint(&producer)) {
    return Garbage("header truncated", bytes);
  }
  if (producer > INT32_MAX) return Garbage("producer out of range", bytes);
  f.epoch = static_cast<int64_t>(epoch);
  f.producer = static_cast<int32_t>(producer);
  switch (type) {
    case static_cast<uint8_t>(ExchangeFrame::Type::kRecordRun): {
      f.type = ExchangeFrame::Type::kRecordRun;
      uint64_t input = 0;
      if (!in.Varint(&input)) return Garbage("record run header truncated", bytes);
      if (input >= kMaxInput) return Garbage(absl::StrCat("input ", input, " out of range"), bytes);
      f.input = static_cast<int32_t>(input);
      f.packed = in.Rest();
      if (f.packed.empty()) return Garbage("empty record run", bytes);
      if (trusted) return f;
      for (Reader records(f.packed); !records.AtEnd();) {
        uint64_t head[4];
        std::string_view packed;
        if (!ReadRunRecord(records, head, &packed)) return Garbage("record run truncated", bytes);
        const int64_t origin_partition = UnZigZag(head[2]);
        if (origin_partition < INT32_MIN || origin_partition > INT32_MAX) {
          return Garbage("origin partition out of range", bytes);
        }
        RETURN_IF_ERROR(ValidatePacked(packed));
      }
      return f;
    }
    case static_cast<uint8_t>(ExchangeFrame::Type::kRecord): {
      f.type = ExchangeFrame::Type::kRecord;
      uint64_t input = 0;
      uint64_t event_time = 0;
      uint64_t arrival = 0;
      uint64_t partition = 0;
      uint64_t offset = 0;
      if (!in.Varint(&input) || !in.Varint(&event_time) || !in.Varint(&arrival) ||
          !in.Varint(&partition) || !in.Varint(&offset)) {
        return Garbage("record header truncated", bytes);
      }
      const int64_t origin_partition = UnZigZag(partition);
      if (origin_partition < INT32_MIN || origin_partition > INT32_MAX) {
        return Garbage("origin partition out of range", bytes);
      }
      f.origin_partition = static_cast<int32_t>(origin_partition);
      f.origin_offset = UnZigZag(offset);
      if (input >= kMaxInput) return Garbage(absl::StrCat("input ", input, " out of range"), bytes);
      f.input = static_cast<int32_t>(input);
      f.event_time = UnZigZag(event_time);
      f.arrival = UnZigZag(arrival);
      f.packed = in.Rest();
      if (trusted) {
        if (f.packed.size() < kPackedHeader) return Garbage("record truncated", bytes);
      } else if (absl::Status s = ValidatePacked(f.packed); !s.ok()) {
        return s;
      }
      return f;
    }
    case static_cast<uint8_t>(ExchangeFrame::Type::kWatermark): {
      f.type = ExchangeFrame::Type::kWatermark;
      uint64_t watermark = 0;
      uint8_t idle = 0;
      if (!in.Varint(&watermark) || !in.Byte(&idle)) return Garbage("watermark truncated", bytes);
      if (idle > 1 || !in.AtEnd()) return Garbage("watermark malformed", bytes);
      f.watermark = UnZigZag(watermark);
      f.idle = idle == 1;
      return f;
    }
    case static_cast<uint8_t>(ExchangeFrame::Type::kBarrier): {
      f.type = ExchangeFrame::Type::kBarrier;
      uint64_t id = 0;
      if (!in.Varint(&id)) return Garbage("barrier truncated", bytes);
      uint8_t flags = 0;
      if (!in.AtEnd() && (!in.Byte(&flags) || flags != kBarrierStops || !in.AtEnd())) {
        return Garbage("barrier malformed", bytes);
      }
      f.checkpoint_id = static_cast<int64_t>(id);
      f.stop = flags == kBarrierStops;
      return f;
    }
    default:
      return Garbage(absl::StrCat("unknown frame type ", static_cast<int>(type)), bytes);
  }
}

void UnpackRecordFrame(const ExchangeFrame& f, Record* r) {
  r->event_time = f.event_time;
  r->arrival = f.arrival;
  r->Unpack(f.packed.data());
}

// ---- Flow control ------------------------------------------------------------

ExchangeFlowControl::ExchangeFlowControl(int partitions, int64_t limit_bytes)
    : limit_(limit_bytes),
      written_(new std::atomic<int64_t>[partitions > 0 ? partitions : 0]),
      read_(new std::atomic<int64_t>[partitions > 0 ? partitions : 0]),
      partitions_(partitions > 0 ? partitions : 0) {
  for (int p = 0; p < partitions_; ++p) {
    written_[p].store(0, std::memory_order_relaxed);
    read_[p].store(0, std::memory_order_relaxed);
  }
}

void ExchangeFlowControl::Wrote(int partition, int64_t bytes) {
  if (partition >= 0 && partition < partitions_) {
    written_[partition].fetch_add(bytes, std::memory_order_relaxed);
  }
}

void ExchangeFlowControl::Read(int partition, int64_t bytes) {
  if (partition >= 0 && partition < partitions_) {
    read_[partition].fetch_add(bytes, std::memory_order_relaxed);
  }
}

int64_t ExchangeFlowControl::Outstanding(int partition) const {
  if (partition < 0 || partition >= partitions_) return 0;
  return written_[partition].load(std::memory_order_relaxed) -
         read_[partition].load(std::memory_order_relaxed);
}

}  // namespace caravela
