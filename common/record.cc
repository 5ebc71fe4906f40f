#include "common/record.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <memory>

#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/status.h"

namespace caravela {

static_assert(sizeof(Node) == 24, "docs/architecture.md describes 24-byte nodes");

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

Record::PackedView Record::ReadPacked(const char* packed) {
  PackedView v{};
  std::memcpy(&v.n, packed, 4);
  std::memcpy(&v.bytes_len, packed + 4, 4);
  v.nodes = reinterpret_cast<const Node*>(packed + kPackedHeader);
  v.bytes = packed + kPackedHeader + v.n * sizeof(Node);
  return v;
}

void Record::Unpack(const char* packed) {
  // memcpy only: `packed` need not be aligned.
  uint32_t n = 0;
  uint32_t bytes = 0;
  std::memcpy(&n, packed, 4);
  std::memcpy(&bytes, packed + 4, 4);
  nodes_.resize(n);
  if (n > 0)
    std::memcpy(static_cast<void*>(nodes_.data()), packed + kPackedHeader, n * sizeof(Node));
  arena_.assign(packed + kPackedHeader + size_t{n} * sizeof(Node), bytes);
  open_.clear();
}

void Record::AddPacked(std::string_view key, const char* packed) {
  const PackedView v = ReadPacked(packed);
  if (v.n == 0) {
    AddNull(key);
    return;
  }
  AppendTree(key, v.nodes, v.n, v.bytes, v.bytes_len);
}

void Record::AppendFieldsJson(const std::vector<std::string>& names,
                              const std::vector<FieldPath>& paths, std::string* out) const {
  out->push_back('{');
  for (size_t k = 0; k < paths.size() && k < names.size(); ++k) {
    if (k > 0) out->push_back(',');
    AppendJsonString(names[k], out);
    out->push_back(':');
    GetPath(paths[k]).AppendJson(out);
  }
  out->push_back('}');
}

void Record::AppendJson(std::string* out) const {
  if (nodes_.empty()) {
    out->append("{}");
    return;
  }
  AppendNodeJson(0, out);
}

namespace {

constexpr uint64_t kOnes = 0x0101010101010101ULL, kHigh = 0x8080808080808080ULL;

// Copies `text` (no terminator) to `p`; returns the end.
char* Put(char* p, std::string_view text) {
  std::memcpy(p, text.data(), text.size());
  return p + text.size();
}

// True if no byte of the 8 in `v` needs an escape (SWAR: a byte b is
// flagged by (b - k) & ~b & 0x80 for each k tested).
bool CleanChunk(uint64_t v) {
  const uint64_t quote = v ^ (kOnes * '"'), slash = v ^ (kOnes * '\\');
  const uint64_t flags =
      ((quote - kOnes) & ~quote) | ((slash - kOnes) & ~slash) | ((v - kOnes * 0x20) & ~v);
  return (flags & kHigh) == 0;
}

// True if `s` needs no escape at all (8 bytes at a time, then the tail).
bool IsClean(std::string_view s) {
  size_t i = 0;
  uint64_t v;
  for (; i + 8 <= s.size(); i += 8) {
    std::memcpy(&v, s.data() + i, 8);
    if (!CleanChunk(v)) return false;
  }
  // The tail byte by byte (a short variable-length copy into a padded word
  // costs a call and a store-forwarding stall).
  unsigned dirty = 0;
  for (; i < s.size(); ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    dirty |= static_cast<unsigned>(c < 0x20) | static_cast<unsigned>(c == '"') |
             static_cast<unsigned>(c == '\\');
  }
  return dirty == 0;
}

// Most bytes WriteJsonString writes for `s`.
size_t JsonStringBound(std::string_view s) { return 6 * s.size() + 2; }

// Writes `s` as a JSON string literal at `p` (JsonStringBound(s) bytes
// available); returns the end.
char* WriteJsonString(std::string_view s, char* p) {
  static const char kHex[] = "0123456789abcdef";
  *p++ = '"';
  if (IsClean(s)) {
    std::memcpy(p, s.data(), s.size());
    p += s.size();
    *p++ = '"';
    return p;
  }
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    if (c >= 0x20 && c != '"' && c != '\\') {
      *p++ = ch;
      continue;
    }
    *p++ = '\\';
    switch (c) {
      case '"':
      case '\\':
        *p++ = ch;
        break;
      case '\n':
        *p++ = 'n';
        break;
      case '\r':
        *p++ = 'r';
        break;
      case '\t':
        *p++ = 't';
        break;
      case '\b':
        *p++ = 'b';
        break;
      case '\f':
        *p++ = 'f';
        break;
      default:
        p = Put(p, "u00");
        *p++ = kHex[c >> 4];
        *p++ = kHex[c & 15];
    }
  }
  *p++ = '"';
  return p;
}

// A per-thread scratch buffer of at least `n` bytes (not initialized).
char* Scratch(size_t n) {
  thread_local std::unique_ptr<char[]> buf;
  thread_local size_t size = 0;
  if (size < n) {
    size = std::max(n, 2 * size);
    buf.reset(new char[size]);
  }
  return buf.get();
}

// Longest text WriteDouble / WriteDecimal / a literal can produce.
constexpr size_t kScalarBound = 48;

char* WriteDouble(double d, char* p) {
  if (!std::isfinite(d)) {
    return Put(p, "null");
  }
  char* start = p;
  p = std::to_chars(p, p + 32, d).ptr;
  if (std::string_view(start, p - start).find_first_of(".e") == std::string_view::npos) {
    p = Put(p, ".0");
  }
  return p;
}

char* WriteDecimal(int64_t mantissa, uint8_t scale, char* p) {
  char buf[24];
  const bool neg = mantissa < 0;
  const uint64_t m = neg ? 0 - static_cast<uint64_t>(mantissa) : static_cast<uint64_t>(mantissa);
  const size_t n = std::to_chars(buf, buf + sizeof buf, m).ptr - buf;
  if (neg) *p++ = '-';
  if (scale == 0) {
    std::memcpy(p, buf, n);
    return p + n;
  }
  if (n <= scale) {
    *p++ = '0';
    *p++ = '.';
    std::memset(p, '0', scale - n);
    p += scale - n;
    std::memcpy(p, buf, n);
    return p + n;
  }
  std::memcpy(p, buf, n - scale);
  p += n - scale;
  *p++ = '.';
  std::memcpy(p, buf + n - scale, scale);
  return p + scale;
}

}  // namespace

void AppendJsonString(std::string_view s, std::string* out) {
  char* buf = Scratch(JsonStringBound(s));
  out->append(buf, WriteJsonString(s, buf));
}

void AppendDouble(double d, std::string* out) {
  char buf[kScalarBound];
  out->append(buf, WriteDouble(d, buf));
}

void AppendDecimal(int64_t mantissa, uint8_t scale, std::string* out) {
  char buf[kScalarBound];
  out->append(buf, WriteDecimal(mantissa, scale, buf));
}

void Record::AppendNodeJson(uint32_t node, std::string* out) const {
  if (node >= nodes_.size()) return;
  const Node* nodes = nodes_.data();
  const char* bytes = arena_.data();
  const uint32_t end = node + nodes[node].size;
  auto text = [bytes](uint32_t off, uint32_t len) { return std::string_view(bytes + off, len); };
  // One pass for an upper bound of the output, one to write it into a
  // scratch buffer: no reallocation, no per-character capacity checks.
  size_t bound = 0;
  for (uint32_t i = node; i < end; ++i) {
    const Node& n = nodes[i];
    bound += 2 + JsonStringBound(text(n.key_off, n.key_len));  // ',' ':' "key"
    bound += n.type == ValueType::kString ? JsonStringBound(text(n.s.off, n.s.len)) : kScalarBound;
  }
  char* const start = Scratch(bound);
  char* p = start;
  struct Open {
    uint32_t end;  // first node after the container
    bool object;
    bool first;
  };
  // Open containers: a plain array (records are rarely deeply nested),
  // grown on the heap past kInline levels.
  constexpr size_t kInline = 32;
  Open inline_open[kInline];
  std::unique_ptr<Open[]> heap_open;
  Open* open = inline_open;
  size_t depth = 0, capacity = kInline;
  for (uint32_t i = node; i < end;) {
    const Node& n = nodes[i];
    if (depth > 0) {
      Open& o = open[depth - 1];
      if (!o.first) *p++ = ',';
      o.first = false;
      if (o.object) {
        p = WriteJsonString(text(n.key_off, n.key_len), p);
        *p++ = ':';
      }
    }
    switch (n.type) {
      case ValueType::kObject:
      case ValueType::kArray: {
        const bool object = n.type == ValueType::kObject;
        *p++ = object ? '{' : '[';
        if (depth == capacity) {
          auto grown = std::make_unique<Open[]>(2 * capacity);
          std::copy(open, open + depth, grown.get());
          heap_open = std::move(grown);
          open = heap_open.get();
          capacity *= 2;
        }
        open[depth++] = Open{i + n.size, object, true};
        break;
      }
      case ValueType::kNull:
        p = Put(p, "null");
        break;
      case ValueType::kBool:
        p = Put(p, n.b ? "true" : "false");
        break;
      case ValueType::kInt:
        p = std::to_chars(p, p + 24, n.i).ptr;
        break;
      case ValueType::kDouble:
        p = WriteDouble(n.d, p);
        break;
      case ValueType::kDecimal:
        p = WriteDecimal(n.i, n.scale, p);
        break;
      case ValueType::kString:
        p = WriteJsonString(text(n.s.off, n.s.len), p);
        break;
    }
    ++i;
    while (depth > 0 && open[depth - 1].end == i) {
      *p++ = open[--depth].object ? '}' : ']';
    }
  }
  out->append(start, p);
}

}  // namespace caravela
