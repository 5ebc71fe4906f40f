#include "common/record.h"

#include <charconv>
#include <cmath>
#include <cstring>

#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/status.h"

namespace caravela {

const char* ValueTypeName(ValueType t) {
  switch (t) {
    case ValueType::kNull:
      return "null";
    case ValueType::kBool:
      return "bool";
    case ValueType::kInt:
      return "int";
    case ValueType::kDouble:
      return "double";
    case ValueType::kDecimal:
      return "decimal";
    case ValueType::kString:
      return "string";
    case ValueType::kObject:
      return "object";
    case ValueType::kArray:
      return "array";
  }
  return "?";
}

namespace {
int NumKind(ValueType t) {
  switch (t) {
    case ValueType::kNull:
      return 0;
    case ValueType::kBool:
      return 1;
    case ValueType::kInt:
    case ValueType::kDouble:
    case ValueType::kDecimal:
      return 2;
    case ValueType::kString:
      return 3;
    case ValueType::kObject:
      return 4;
    case ValueType::kArray:
      return 5;
  }
  return 6;
}

// Compares two exact numbers given as (mantissa, scale) using 128-bit math.
int CompareExact(int64_t ma, uint8_t sa, int64_t mb, uint8_t sb) {
  __int128 a = ma, b = mb;
  if (sa < sb) a *= kPow10[sb - sa];
  if (sb < sa) b *= kPow10[sa - sb];
  return a < b ? -1 : (a > b ? 1 : 0);
}
}  // namespace

double Value::AsDouble() const {
  switch (type) {
    case ValueType::kInt:
      return static_cast<double>(i);
    case ValueType::kDouble:
      return d;
    case ValueType::kDecimal:
      return static_cast<double>(i) / static_cast<double>(kPow10[scale]);
    default:
      return 0;
  }
}

int CompareValues(const Value& a, const Value& b) {
  int ka = NumKind(a.type), kb = NumKind(b.type);
  if (ka != kb) return ka < kb ? -1 : 1;
  switch (a.type) {
    case ValueType::kNull:
      return 0;
    case ValueType::kBool:
      return int(a.b) - int(b.b);
    case ValueType::kString: {
      int c = a.s.compare(b.s);
      return c < 0 ? -1 : (c > 0 ? 1 : 0);
    }
    case ValueType::kObject:
    case ValueType::kArray: {
      std::string x = a.ToJson(), y = b.ToJson();
      int c = x.compare(y);
      return c < 0 ? -1 : (c > 0 ? 1 : 0);
    }
    default:
      break;
  }
  // numbers
  bool exact_a = a.type != ValueType::kDouble, exact_b = b.type != ValueType::kDouble;
  if (exact_a && exact_b) {
    uint8_t sa = a.type == ValueType::kDecimal ? a.scale : 0;
    uint8_t sb = b.type == ValueType::kDecimal ? b.scale : 0;
    return CompareExact(a.i, sa, b.i, sb);
  }
  double x = a.AsDouble(), y = b.AsDouble();
  return x < y ? -1 : (x > y ? 1 : 0);
}

bool ValuesEqual(const Value& a, const Value& b) { return CompareValues(a, b) == 0; }

void Value::AppendJson(std::string* out) const {
  switch (type) {
    case ValueType::kNull:
      out->append("null");
      return;
    case ValueType::kBool:
      out->append(b ? "true" : "false");
      return;
    case ValueType::kInt: {
      char buf[24];
      auto r = std::to_chars(buf, buf + sizeof buf, i);
      out->append(buf, r.ptr);
      return;
    }
    case ValueType::kDouble:
      AppendDouble(d, out);
      return;
    case ValueType::kDecimal:
      AppendDecimal(i, scale, out);
      return;
    case ValueType::kString:
      AppendJsonString(s, out);
      return;
    case ValueType::kObject:
    case ValueType::kArray:
      if (rec != nullptr) {
        rec->AppendNodeJson(node, out);
      } else {
        out->append(type == ValueType::kObject ? "{}" : "[]");
      }
      return;
  }
}

FieldPath FieldPath::Parse(std::string_view dotted) {
  FieldPath p;
  if (dotted.empty()) return p;
  for (absl::string_view part :
       absl::StrSplit(absl::string_view(dotted.data(), dotted.size()), '.'))
    p.parts.emplace_back(part);
  return p;
}

std::string FieldPath::ToString() const { return absl::StrJoin(parts, "."); }

void Record::Clear() {
  nodes_.clear();
  arena_.clear();
  open_.clear();
  event_time = 0;
  arrival = 0;
  partition = 0;
  offset = -1;
  tombstone = false;
}

void Record::BeginObject(std::string_view key) {
  Push(key, ValueType::kObject);
  open_.push_back(static_cast<uint32_t>(nodes_.size() - 1));
}
void Record::BeginArray(std::string_view key) {
  Push(key, ValueType::kArray);
  open_.push_back(static_cast<uint32_t>(nodes_.size() - 1));
}
void Record::EndContainer() {
  CARAVELA_CHECK(open_.size() > 1);
  open_.pop_back();
}

void Record::CopySubtree(std::string_view key, const Record& src, uint32_t node) {
  const Node& n = src.nodes_[node];
  switch (n.type) {
    case ValueType::kObject:
    case ValueType::kArray: {
      if (n.type == ValueType::kObject) {
        BeginObject(key);
      } else {
        BeginArray(key);
      }
      src.ForEachChild(node, [&](uint32_t c) { CopySubtree(src.Key(c), src, c); });
      EndContainer();
      return;
    }
    default:
      AddValue(key, src.Get(static_cast<int32_t>(node)));
  }
}

void Record::AddValue(std::string_view key, const Value& v) {
  switch (v.type) {
    case ValueType::kNull:
      AddNull(key);
      return;
    case ValueType::kBool:
      AddBool(key, v.b);
      return;
    case ValueType::kInt:
      AddInt(key, v.i);
      return;
    case ValueType::kDouble:
      AddDouble(key, v.d);
      return;
    case ValueType::kDecimal:
      AddDecimal(key, v.i, v.scale);
      return;
    case ValueType::kString: {
      // The view may point into our own arena, which AddString may grow.
      if (!arena_.empty() && v.s.data() >= arena_.data() &&
          v.s.data() < arena_.data() + arena_.size()) {
        std::string copy(v.s);
        AddString(key, copy);
      } else {
        AddString(key, v.s);
      }
      return;
    }
    case ValueType::kObject:
    case ValueType::kArray:
      if (v.rec == nullptr) {
        if (v.type == ValueType::kObject) {
          BeginObject(key);
        } else {
          BeginArray(key);
        }
        EndContainer();
      } else if (v.rec == this) {
        Record copy = *this;
        CopySubtree(key, copy, v.node);
      } else if (v.node == 0) {
        // A whole record: its arena holds exactly the subtree's bytes.
        AppendTree(key, v.rec->nodes_.data(), v.rec->nodes_[0].size, v.rec->arena_.data(),
                   static_cast<uint32_t>(v.rec->arena_.size()));
      } else {
        CopySubtree(key, *v.rec, v.node);
      }
      return;
  }
}

void Record::AppendTree(std::string_view key, const Node* src, uint32_t n, const char* bytes,
                        uint32_t bytes_len) {
  EnsureRoot();
  const uint32_t key_off = Intern(key);
  const auto delta = static_cast<uint32_t>(arena_.size());
  arena_.append(bytes, bytes_len);
  for (uint32_t idx : open_) nodes_[idx].size += n;
  const size_t base = nodes_.size();
  nodes_.insert(nodes_.end(), src, src + n);
  for (size_t i = base; i < nodes_.size(); ++i) {
    Node& x = nodes_[i];
    x.key_off += delta;
    if (x.type == ValueType::kString) x.s.off += delta;
  }
  nodes_[base].key_off = key_off;
  nodes_[base].key_len = static_cast<uint32_t>(key.size());
}

void Record::PackTo(char* out) const {
  const auto n = static_cast<uint32_t>(nodes_.size());
  const auto bytes = static_cast<uint32_t>(arena_.size());
  std::memcpy(out, &n, 4);
  std::memcpy(out + 4, &bytes, 4);
  if (n > 0) std::memcpy(out + kPackedHeader, nodes_.data(), n * sizeof(Node));
  if (bytes > 0) std::memcpy(out + kPackedHeader + n * sizeof(Node), arena_.data(), bytes);
}

void Record::Unpack(const char* packed) {
  uint32_t n = 0, bytes = 0;
  std::memcpy(&n, packed, 4);
  std::memcpy(&bytes, packed + 4, 4);
  const auto* nodes = reinterpret_cast<const Node*>(packed + kPackedHeader);
  nodes_.assign(nodes, nodes + n);
  arena_.assign(packed + kPackedHeader + n * sizeof(Node), bytes);
  open_.clear();
}

void Record::AddPacked(std::string_view key, const char* packed) {
  uint32_t n = 0, bytes = 0;
  std::memcpy(&n, packed, 4);
  std::memcpy(&bytes, packed + 4, 4);
  if (n == 0) {
    AddNull(key);
    return;
  }
  AppendTree(key, reinterpret_cast<const Node*>(packed + kPackedHeader), n,
             packed + kPackedHeader + n * sizeof(Node), bytes);
}

void Record::AppendNodeJson(uint32_t node, std::string* out) const {
  const Node& n = nodes_[node];
  if (n.type == ValueType::kObject || n.type == ValueType::kArray) {
    bool obj = n.type == ValueType::kObject;
    out->push_back(obj ? '{' : '[');
    bool first = true;
    ForEachChild(node, [&](uint32_t c) {
      if (!first) out->push_back(',');
      first = false;
      if (obj) {
        AppendJsonString(Key(c), out);
        out->push_back(':');
      }
      AppendNodeJson(c, out);
    });
    out->push_back(obj ? '}' : ']');
    return;
  }
  Get(static_cast<int32_t>(node)).AppendJson(out);
}

void Record::AppendJson(std::string* out) const {
  if (nodes_.empty()) {
    out->append("{}");
    return;
  }
  AppendNodeJson(0, out);
}

void AppendJsonString(std::string_view s, std::string* out) {
  static const char kHex[] = "0123456789abcdef";
  out->push_back('"');
  size_t start = 0;
  size_t i = 0;
  // Skip 8 bytes at a time while none of them is '"', '\\' or < 0x20 (SWAR:
  // a byte b is flagged by (b - k) & ~b & 0x80 for each k tested).
  constexpr uint64_t kOnes = 0x0101010101010101ULL, kHigh = 0x8080808080808080ULL;
  for (; i + 8 <= s.size(); i += 8) {
    uint64_t v;
    std::memcpy(&v, s.data() + i, 8);
    const uint64_t quote = v ^ (kOnes * '"'), slash = v ^ (kOnes * '\\');
    const uint64_t flags =
        ((quote - kOnes) & ~quote) | ((slash - kOnes) & ~slash) | ((v - kOnes * 0x20) & ~v);
    if ((flags & kHigh) != 0) break;
  }
  for (; i < s.size(); ++i) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c != '"' && c != '\\') continue;
    out->append(s.data() + start, i - start);
    start = i + 1;
    switch (c) {
      case '"':
        out->append("\\\"");
        break;
      case '\\':
        out->append("\\\\");
        break;
      case '\n':
        out->append("\\n");
        break;
      case '\r':
        out->append("\\r");
        break;
      case '\t':
        out->append("\\t");
        break;
      case '\b':
        out->append("\\b");
        break;
      case '\f':
        out->append("\\f");
        break;
      default:
        out->append("\\u00");
        out->push_back(kHex[c >> 4]);
        out->push_back(kHex[c & 15]);
    }
  }
  out->append(s.data() + start, s.size() - start);
  out->push_back('"');
}

void AppendDouble(double d, std::string* out) {
  if (!std::isfinite(d)) {
    out->append("null");
    return;
  }
  char buf[32];
  auto r = std::to_chars(buf, buf + sizeof buf, d);
  std::string_view text(buf, r.ptr - buf);
  out->append(text);
  if (text.find_first_of(".e") == std::string_view::npos) out->append(".0");
}

void AppendDecimal(int64_t mantissa, uint8_t scale, std::string* out) {
  char buf[24];
  bool neg = mantissa < 0;
  uint64_t m = neg ? 0 - static_cast<uint64_t>(mantissa) : static_cast<uint64_t>(mantissa);
  auto r = std::to_chars(buf, buf + sizeof buf, m);
  std::string_view digits(buf, r.ptr - buf);
  if (neg) out->push_back('-');
  if (scale == 0) {
    out->append(digits);
    return;
  }
  if (digits.size() <= scale) {
    out->append("0.");
    out->append(scale - digits.size(), '0');
    out->append(digits);
    return;
  }
  out->append(digits.substr(0, digits.size() - scale));
  out->push_back('.');
  out->append(digits.substr(digits.size() - scale));
}

}  // namespace caravela
