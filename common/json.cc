#include "common/json.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"

namespace caravela {
namespace {

absl::Status JsonError(simdjson::error_code e) {
  switch (e) {
    case simdjson::UTF8_ERROR:
      return absl::InvalidArgumentError("invalid UTF-8");
    case simdjson::TAPE_ERROR:
    case simdjson::INCOMPLETE_ARRAY_OR_OBJECT:
    case simdjson::UNCLOSED_STRING:
      return absl::InvalidArgumentError(
          absl::StrCat("truncated or malformed JSON (", simdjson::error_message(e), ")"));
    case simdjson::EMPTY:
      return absl::InvalidArgumentError("empty line, not JSON");
    case simdjson::DEPTH_ERROR:
      return absl::InvalidArgumentError("JSON nested too deeply");
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("not JSON (", simdjson::error_message(e), ")"));
  }
}

// Fast path of DoubleToDecimal for the common case (prices, rates): a
// non-integral value with 1 <= |d| < 1e12 whose shortest round-trip text has
// at most 3 fractional digits. Such text is always fixed-point (never
// shorter in scientific notation), and with exactly one candidate mantissa
// round-tripping at the smallest scale it is the text std::to_chars prints.
// Returns false when unsure; the caller then takes the general path.
//
// One candidate per scale suffices: if c / p == a (p = 10^s <= 1000), the
// exact quotient is within half an ulp of a, so |c - a*p| <= p*ulp(a)/2 <=
// a*p*2^-53, and the product a*p is computed within a*p*2^-53; with
// a*p < 1e15 both together stay under 0.23, so nearbyint(a*p) is c. And two
// candidates cannot both round-trip: 1/p >= 1e-3 exceeds ulp(a) for a < 1e12.
bool DoubleToDecimalFast(double d, int64_t* mantissa, uint8_t* scale) {
  const double a = std::fabs(d);
  if (!(a >= 1.0 && a < 1e12)) return false;  // mantissas stay < 2^53: exact doubles
  static constexpr double kPow[] = {1.0, 10.0, 100.0, 1000.0};
  for (int s = 1; s <= 3; ++s) {
    const double p = kPow[s];
    const int64_t m = static_cast<int64_t>(std::nearbyint(a * p));
    if (static_cast<double>(m) / p != a) continue;
    if (m % 10 == 0) return false;  // integral at s == 1 (the general path prints it)
    *mantissa = d < 0 ? -m : m;
    *scale = static_cast<uint8_t>(s);
    return true;
  }
  return false;
}

// A double parsed from a JSON number with a fraction, as an exact decimal of
// its shortest round-trip text. False if that text needs an exponent or more
// than 18 digits.
bool DoubleToDecimal(double d, int64_t* mantissa, uint8_t* scale) {
  if (!std::isfinite(d)) return false;
  if (DoubleToDecimalFast(d, mantissa, scale)) return true;
  char buf[40];
  auto r = std::to_chars(buf, buf + sizeof buf, d);
  std::string_view t(buf, r.ptr - buf);
  if (t.find_first_of("eE") != std::string_view::npos) return false;
  bool neg = !t.empty() && t[0] == '-';
  if (neg) t.remove_prefix(1);
  size_t dot = t.find('.');
  size_t frac = dot == std::string_view::npos ? 0 : t.size() - dot - 1;
  if (frac > 18) return false;  // e.g. 0.00012345678901234567: scale must stay <= 18
  uint8_t sc = static_cast<uint8_t>(frac == 0 ? 1 : frac);
  int64_t m = 0;
  int digits = 0;
  for (char c : t) {
    if (c == '.') continue;
    if (m != 0 || c != '0') ++digits;
    m = m * 10 + (c - '0');
    if (digits > 18) return false;
  }
  if (frac == 0) {
    if (digits > 17) return false;
    m *= 10;
  }
  *mantissa = neg ? -m : m;
  *scale = sc;
  return true;
}

// Copies n bytes, W <= n <= 2W, as the first and last W-byte words.
template <typename W>
inline void CopyEnds(char* dst, const char* src, size_t n) {
  W head, tail;
  std::memcpy(&head, src, sizeof(W));
  std::memcpy(&tail, src + n - sizeof(W), sizeof(W));
  std::memcpy(dst, &head, sizeof(W));
  std::memcpy(dst + n - sizeof(W), &tail, sizeof(W));
}

// Copies n bytes with no call into libc for the short keys and strings of
// typical events; never reads or writes past either range.
inline void CopyBytes(char* dst, const char* src, size_t n) {
  if (n >= 8 && n <= 16) {
    CopyEnds<uint64_t>(dst, src, n);
  } else if (n >= 4 && n < 8) {
    CopyEnds<uint32_t>(dst, src, n);
  } else if (n < 4) {
    for (size_t i = 0; i < n; ++i) dst[i] = src[i];
  } else {
    std::memcpy(dst, src, n);
  }
}

// Writes a decoded document's nodes straight into a record: the record's
// arena is sized once to the JSON text's length, a bound on every key and
// string it will hold (unescaping never lengthens text), and each node is
// written in place (a Node built on the stack and copied in whole stalls on
// store forwarding: one-byte fields, then a 16-byte load), with no
// per-field capacity checks or parent updates. Scalars are written in the
// loop over their container; only containers recurse.
class TreeBuilder {
 public:
  TreeBuilder(std::vector<Node>* nodes, char* bytes) : nodes_(nodes), bytes_(bytes) {}

  // Appends the root object and its subtree.
  void AddRoot(simdjson::dom::object root) {
    nodes_->emplace_back().type = ValueType::kObject;
    AddObject(root, 0);
  }

  uint32_t used() const { return used_; }

 private:
  // Appends `e` under `key`, with its subtree.
  __attribute__((always_inline)) void Add(simdjson::dom::element e, std::string_view key) {
    using simdjson::dom::element_type;
    const size_t at = nodes_->size();
    Node& n = nodes_->emplace_back();
    n.key_off = Intern(key);
    n.key_len = static_cast<uint32_t>(key.size());
    switch (e.type()) {
      case element_type::OBJECT:
        n.type = ValueType::kObject;
        AddObject(simdjson::dom::object(e), at);
        return;
      case element_type::ARRAY:
        n.type = ValueType::kArray;
        AddArray(simdjson::dom::array(e), at);
        return;
      case element_type::STRING: {
        const std::string_view v(e);
        n.type = ValueType::kString;
        n.s.off = Intern(v);
        n.s.len = static_cast<uint32_t>(v.size());
        return;
      }
      case element_type::INT64:
        n.type = ValueType::kInt;
        n.i = int64_t(e);
        return;
      case element_type::UINT64:
        n.type = ValueType::kDouble;
        n.d = static_cast<double>(uint64_t(e));
        return;
      case element_type::DOUBLE: {
        const double d = double(e);
        int64_t m;
        uint8_t sc;
        if (DoubleToDecimal(d, &m, &sc)) {
          n.type = ValueType::kDecimal;
          n.i = m;
          n.scale = sc;
        } else {
          n.type = ValueType::kDouble;
          n.d = d;
        }
        return;
      }
      case element_type::BOOL:
        n.type = ValueType::kBool;
        n.b = bool(e);
        return;
      case element_type::NULL_VALUE:
        n.type = ValueType::kNull;
        return;
    }
  }

  // The children of the container node at `at`, then its size.
  __attribute__((noinline)) void AddObject(simdjson::dom::object o, size_t at) {
    for (auto field : o) Add(field.value, field.key);
    (*nodes_)[at].size = static_cast<uint32_t>(nodes_->size() - at);
  }
  __attribute__((noinline)) void AddArray(simdjson::dom::array a, size_t at) {
    for (auto item : a) Add(item, "");
    (*nodes_)[at].size = static_cast<uint32_t>(nodes_->size() - at);
  }

  uint32_t Intern(std::string_view s) {
    const uint32_t off = used_;
    CopyBytes(bytes_ + used_, s.data(), s.size());
    used_ += static_cast<uint32_t>(s.size());
    return off;
  }

  std::vector<Node>* nodes_;
  char* bytes_;
  uint32_t used_ = 0;
};
}  // namespace

std::string_view JsonDecoder::TrimEnd(std::string_view json) {
  while (!json.empty() && (json.back() == '\r' || json.back() == ' ' || json.back() == '\t')) {
    json.remove_suffix(1);
  }
  return json;
}

absl::Status JsonDecoder::Decode(std::string_view json, Record* out) {
  json = TrimEnd(json);
  if (padded_.size() < json.size() + kPadding) padded_.resize(json.size() + kPadding + 256);
  std::memcpy(padded_.data(), json.data(), json.size());
  return Parse(padded_.data(), json.size(), out);
}

absl::Status JsonDecoder::DecodePadded(std::string_view json, Record* out) {
  json = TrimEnd(json);
  return Parse(json.data(), json.size(), out);
}

absl::Status JsonDecoder::DecodeLine(std::string_view json, std::string_view block, Record* out) {
  json = TrimEnd(json);
  simdjson::dom::element doc;
  if (BlockDocument(json, block, &doc)) {
    out->Clear();
    return Build(doc, json.size(), out);
  }
  return Parse(json.data(), json.size(), out);
}

bool JsonDecoder::BlockDocument(std::string_view json, std::string_view block,
                                simdjson::dom::element* doc) {
  if (json.data() < block.data() || json.data() + json.size() > block.data() + block.size()) {
    return false;
  }
  // A new block starts with its first line. A source reuses its buffer, so
  // the same address and length may well hold other lines than the last
  // block: the pass restarts whenever a block's first line comes.
  const size_t at = static_cast<size_t>(json.data() - block.data());
  if (at == 0 || block.data() != block_.data() || block.size() != block_.size()) {
    block_ = block;
    // One batch for the whole block: documents are never cut between
    // batches, and no stage-1 thread is started.
    block_stream_ =
        block_parser_.parse_many(block.data(), block.size(), std::max<size_t>(block.size(), 4096))
            .value_unsafe();
    block_doc_ = block_stream_.begin();
  }
  if (json.empty()) return false;
  // Documents before this line (taken by earlier lines, or not lines at
  // all) are passed over; after an error the pass is finished.
  while (block_doc_ != block_stream_.end() && block_doc_.current_index() < at) ++block_doc_;
  if (!(block_doc_ != block_stream_.end()) || block_doc_.current_index() != at) return false;
  // An object (anything else is an error the line's own parse words), and
  // it must end where the line does: `{"a":1} {"b":2}` is one malformed
  // line, not the record {"a":1}. (source() of an object runs from its
  // opening to its closing brace.)
  if ((*block_doc_).get(*doc) != simdjson::SUCCESS ||
      doc->type() != simdjson::dom::element_type::OBJECT) {
    return false;
  }
  return block_doc_.source().size() == json.size();
}

absl::Status JsonDecoder::Parse(const char* padded, size_t len, Record* out) {
  out->Clear();
  if (len == 0) return absl::InvalidArgumentError("empty line, not JSON");
  simdjson::dom::element doc;
  if (auto e = parser_.parse(padded, len, false).get(doc)) return JsonError(e);
  return Build(doc, len, out);
}

absl::Status JsonDecoder::Build(simdjson::dom::element doc, size_t len, Record* out) {
  if (doc.type() != simdjson::dom::element_type::OBJECT) {
    return absl::InvalidArgumentError("top-level value is not an object");
  }
  // Keys and strings, unescaped, never exceed the text they came from.
  out->arena_.resize(len);
  TreeBuilder b(&out->nodes_, out->arena_.data());
  b.AddRoot(simdjson::dom::object(doc));
  out->arena_.resize(b.used());
  out->open_.push_back(0);  // the root stays open for fields added later
  return absl::OkStatus();
}

}  // namespace caravela
