// Record: the engine's decoded, typed representation of one event.
//
// A record is decoded from JSON exactly once, at the source, into a flat
// pre-order tree of fixed-size `Node`s plus one byte arena that holds every key
// and string. Operators read fields through precompiled `FieldPath`s and never
// re-parse. Clearing a record keeps its capacity, so a runtime that reuses
// records in batches allocates nothing per record in the steady state.
//
// Threading: a Record is a plain value; not synchronized.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace caravela {

enum class ValueType : uint8_t {
  kNull,
  kBool,
  kInt,      // int64
  kDouble,   // IEEE double (numbers with exponent or too many digits)
  kDecimal,  // exact decimal: mantissa * 10^-scale (JSON numbers with a fraction)
  kString,
  kObject,
  kArray,
};

const char* ValueTypeName(ValueType t);

// 10^n for n in [0, 18]: the scales of kDecimal values.
inline constexpr int64_t kPow10[19] = {1LL,
                                       10LL,
                                       100LL,
                                       1000LL,
                                       10000LL,
                                       100000LL,
                                       1000000LL,
                                       10000000LL,
                                       100000000LL,
                                       1000000000LL,
                                       10000000000LL,
                                       100000000000LL,
                                       1000000000000LL,
                                       10000000000000LL,
                                       100000000000000LL,
                                       1000000000000000LL,
                                       10000000000000000LL,
                                       100000000000000000LL,
                                       1000000000000000000LL};

// One node of the flat tree. Node 0 of a non-empty record is the root object.
struct Node {
  uint32_t key_off = 0;  // key bytes in the arena (empty for root / array items)
  uint32_t key_len = 0;
  ValueType type = ValueType::kNull;
  uint8_t scale = 0;  // kDecimal only
  uint32_t size = 1;  // nodes in this subtree, including this one
  union {
    bool b;
    int64_t i;
    double d;
    struct {
      uint32_t off, len;
    } s;  // kString
  };
  Node() : i(0) {}
};

class Record;
class JsonDecoder;

// A value read from a record or computed by an expression. Strings, objects and
// arrays are views: valid while the record (or expression scratch) they point
// into is alive and unchanged.
struct Value {
  ValueType type = ValueType::kNull;
  uint8_t scale = 0;
  bool b = false;
  int64_t i = 0;  // kInt; kDecimal mantissa
  double d = 0;
  std::string_view s;           // kString
  const Record* rec = nullptr;  // kObject / kArray: subtree root
  uint32_t node = 0;

  static Value Null() { return {}; }
  static Value Bool(bool v) {
    Value x;
    x.type = ValueType::kBool;
    x.b = v;
    return x;
  }
  static Value Int(int64_t v) {
    Value x;
    x.type = ValueType::kInt;
    x.i = v;
    return x;
  }
  static Value Double(double v) {
    Value x;
    x.type = ValueType::kDouble;
    x.d = v;
    return x;
  }
  static Value Decimal(int64_t mantissa, uint8_t scale) {
    Value x;
    x.type = ValueType::kDecimal;
    x.i = mantissa;
    x.scale = scale;
    return x;
  }
  static Value String(std::string_view v) {
    Value x;
    x.type = ValueType::kString;
    x.s = v;
    return x;
  }

  bool is_null() const { return type == ValueType::kNull; }
  bool is_number() const {
    return type == ValueType::kInt || type == ValueType::kDouble || type == ValueType::kDecimal;
  }
  // Numeric value as double (0 for non-numbers).
  double AsDouble() const;
  // Appends the JSON text of this value.
  void AppendJson(std::string* out) const;
  std::string ToJson() const {
    std::string s;
    AppendJson(&s);
    return s;
  }
};

// Total order used for min/max and comparisons: numbers compare numerically
// (int/decimal exactly), strings bytewise. Returns <0, 0, >0. Values of
// different non-numeric kinds compare by kind.
int CompareValues(const Value& a, const Value& b);
// Equality as used for keys and `==` (1 == 1.0 is true).
bool ValuesEqual(const Value& a, const Value& b);

// A dot path such as `navio_info.navio_id`, split once at compile time.
struct FieldPath {
  std::vector<std::string> parts;
  static FieldPath Parse(std::string_view dotted);
  std::string ToString() const;
  bool empty() const { return parts.empty(); }
};

class Record {
 public:
  // Metadata, filled by sources and propagated by operators.
  int64_t event_time = 0;  // epoch milliseconds (may be negative)
  int64_t arrival = 0;     // processing time (epoch ms) when the record entered
  int32_t partition = 0;   // source partition
  int64_t offset = -1;     // source offset (file line number or Kafka offset)
  // A deletion of the table row whose key fields this record holds (a Kafka
  // tombstone on a lookup-table source; the fields come from the message key).
  bool tombstone = false;

  Record() = default;

  // Drops all fields; keeps allocated capacity.
  void Clear();
  // Exchanges the contents of two records (no copy: buffers change hands).
  void swap(Record& other) noexcept {
    nodes_.swap(other.nodes_);
    arena_.swap(other.arena_);
    open_.swap(other.open_);
    std::swap(event_time, other.event_time);
    std::swap(arrival, other.arrival);
    std::swap(partition, other.partition);
    std::swap(offset, other.offset);
    std::swap(tombstone, other.tombstone);
  }
  bool empty() const { return nodes_.empty(); }

  // ---- Building (pre-order). A fresh record starts its root object on first add.
  inline void AddNull(std::string_view key);
  inline void AddBool(std::string_view key, bool v);
  inline void AddInt(std::string_view key, int64_t v);
  inline void AddDouble(std::string_view key, double v);
  inline void AddDecimal(std::string_view key, int64_t mantissa, uint8_t scale);
  inline void AddString(std::string_view key, std::string_view v);
  // Copies `v` (including object/array subtrees) under `key`.
  void AddValue(std::string_view key, const Value& v);
  void BeginObject(std::string_view key);
  void BeginArray(std::string_view key);
  void EndContainer();  // ends the innermost open object/array
  // Makes the root an (empty) object if nothing was added yet.
  inline void EnsureRoot();

  // ---- Reading.
  // Index of the direct child of container `parent` named `key`, or -1.
  inline int32_t FindChild(uint32_t parent, std::string_view key) const;
  // Node index at `path` from the root, or -1 if absent.
  inline int32_t Find(const FieldPath& path) const;
  inline Value Get(int32_t node) const;  // Null for -1
  Value GetPath(const FieldPath& path) const { return Get(Find(path)); }
  std::string_view Key(uint32_t node) const {
    return std::string_view(arena_.data() + nodes_[node].key_off, nodes_[node].key_len);
  }
  const std::vector<Node>& nodes() const { return nodes_; }
  // Calls f(node_index) for each direct child of container `parent`.
  template <typename F>
  void ForEachChild(uint32_t parent, F&& f) const {
    if (parent >= nodes_.size()) return;
    uint32_t end = parent + nodes_[parent].size;
    for (uint32_t c = parent + 1; c < end; c += nodes_[c].size) f(c);
  }

  // ---- Serialization.
  void AppendJson(std::string* out) const;  // "{}" for an empty record
  std::string ToJson() const {
    std::string s;
    AppendJson(&s);
    return s;
  }
  void AppendNodeJson(uint32_t node, std::string* out) const;
  // Appends the object {"<names[k]>": <value at paths[k]>, ...} (null for a
  // missing field), e.g. a sink key or a row kept by arg_max.
  void AppendFieldsJson(const std::vector<std::string>& names, const std::vector<FieldPath>& paths,
                        std::string* out) const;

  size_t MemoryBytes() const { return nodes_.capacity() * sizeof(Node) + arena_.capacity(); }

  // ---- Packed form: the nodes and bytes of a record in one block, for
  // operators that buffer many rows (one allocation per row, copied out in
  // bulk). Layout: uint32 node count, uint32 byte count, the nodes, the
  // bytes. Metadata (event_time, ...) is not packed.
  size_t PackedSize() const { return kPackedHeader + nodes_.size() * sizeof(Node) + arena_.size(); }
  // Writes PackedSize() bytes to `out` (any alignment).
  void PackTo(char* out) const;
  // Replaces the fields with those of a packed record (any alignment); keeps
  // metadata.
  void Unpack(const char* packed);
  // Adds the packed record under `key`, as AddValue(key, packed.Get(0)) would
  // (null for an empty record; `packed` 8-byte aligned).
  void AddPacked(std::string_view key, const char* packed);

 private:
  friend class JsonDecoder;  // builds nodes and arena in bulk
  static constexpr size_t kPackedHeader = 8;
  // The parts of a packed record.
  struct PackedView {
    const Node* nodes;
    uint32_t n;
    const char* bytes;
    uint32_t bytes_len;
  };
  static PackedView ReadPacked(const char* packed);
  // Appends the complete subtree `src[0..n)` (src[0] an object or array whose
  // keys and strings point into `bytes`) under `key`, in bulk.
  void AppendTree(std::string_view key, const Node* src, uint32_t n, const char* bytes,
                  uint32_t bytes_len);
  inline Node& Push(std::string_view key, ValueType type);
  inline uint32_t Intern(std::string_view bytes);
  void CopySubtree(std::string_view key, const Record& src, uint32_t node);

  std::vector<Node> nodes_;
  std::string arena_;
  std::vector<uint32_t> open_;  // indices of open containers
};

// ---- Inline definitions of the per-field hot path (decode, field reads).

inline uint32_t Record::Intern(std::string_view bytes) {
  uint32_t off = static_cast<uint32_t>(arena_.size());
  arena_.append(bytes.data(), bytes.size());
  return off;
}

inline void Record::EnsureRoot() {
  if (nodes_.empty()) {
    Node root;
    root.type = ValueType::kObject;
    nodes_.push_back(root);
    open_.push_back(0);
  }
}

inline Node& Record::Push(std::string_view key, ValueType type) {
  EnsureRoot();
  Node n;
  n.type = type;
  n.key_off = Intern(key);
  n.key_len = static_cast<uint32_t>(key.size());
  for (uint32_t idx : open_) nodes_[idx].size++;
  nodes_.push_back(n);
  return nodes_.back();
}

inline void Record::AddNull(std::string_view key) { Push(key, ValueType::kNull); }
inline void Record::AddBool(std::string_view key, bool v) { Push(key, ValueType::kBool).b = v; }
inline void Record::AddInt(std::string_view key, int64_t v) { Push(key, ValueType::kInt).i = v; }
inline void Record::AddDouble(std::string_view key, double v) {
  Push(key, ValueType::kDouble).d = v;
}
inline void Record::AddDecimal(std::string_view key, int64_t mantissa, uint8_t scale) {
  Node& n = Push(key, ValueType::kDecimal);
  n.i = mantissa;
  n.scale = scale;
}
inline void Record::AddString(std::string_view key, std::string_view v) {
  uint32_t off = Intern(v);
  Node& n = Push(key, ValueType::kString);
  n.s.off = off;
  n.s.len = static_cast<uint32_t>(v.size());
}

// Equality of two byte ranges of length n; field names of 4 to 16 bytes
// compare as two overlapping words each (the first and last W bytes cover
// all n when W <= n <= 2W), with no call into libc.
template <typename W>
inline bool EndsEqual(const char* a, const char* b, size_t n) {
  W a0, a1, b0, b1;
  std::memcpy(&a0, a, sizeof(W));
  std::memcpy(&b0, b, sizeof(W));
  std::memcpy(&a1, a + n - sizeof(W), sizeof(W));
  std::memcpy(&b1, b + n - sizeof(W), sizeof(W));
  return ((a0 ^ b0) | (a1 ^ b1)) == 0;
}
inline bool BytesEqual(const char* a, const char* b, size_t n) {
  if (n >= 8 && n <= 16) return EndsEqual<uint64_t>(a, b, n);
  if (n >= 4 && n < 8) return EndsEqual<uint32_t>(a, b, n);
  return std::memcmp(a, b, n) == 0;
}

inline int32_t Record::FindChild(uint32_t parent, std::string_view key) const {
  if (parent >= nodes_.size() || nodes_[parent].type != ValueType::kObject) return -1;
  uint32_t end = parent + nodes_[parent].size;
  const char* a = arena_.data();
  for (uint32_t c = parent + 1; c < end; c += nodes_[c].size) {
    const Node& n = nodes_[c];
    if (n.key_len == key.size() && BytesEqual(a + n.key_off, key.data(), key.size())) {
      return static_cast<int32_t>(c);
    }
  }
  return -1;
}

inline int32_t Record::Find(const FieldPath& path) const {
  if (nodes_.empty() || path.parts.empty()) return -1;
  int32_t cur = 0;
  for (const std::string& part : path.parts) {
    cur = FindChild(static_cast<uint32_t>(cur), part);
    if (cur < 0) return -1;
  }
  return cur;
}

inline Value Record::Get(int32_t idx) const {
  Value v;
  if (idx < 0 || static_cast<size_t>(idx) >= nodes_.size()) return v;
  const Node& n = nodes_[idx];
  v.type = n.type;
  switch (n.type) {
    case ValueType::kBool:
      v.b = n.b;
      break;
    case ValueType::kInt:
      v.i = n.i;
      break;
    case ValueType::kDouble:
      v.d = n.d;
      break;
    case ValueType::kDecimal:
      v.i = n.i;
      v.scale = n.scale;
      break;
    case ValueType::kString:
      v.s = std::string_view(arena_.data() + n.s.off, n.s.len);
      break;
    case ValueType::kObject:
    case ValueType::kArray:
      v.rec = this;
      v.node = static_cast<uint32_t>(idx);
      break;
    case ValueType::kNull:
      break;
  }
  return v;
}

// Appends `s` as a JSON string literal (with quotes and escapes).
void AppendJsonString(std::string_view s, std::string* out);
// Shortest round-trip text for a double; always has a '.' or exponent.
void AppendDouble(double d, std::string* out);
void AppendDecimal(int64_t mantissa, uint8_t scale, std::string* out);

}  // namespace caravela
