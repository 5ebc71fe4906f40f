// Order-preserving key encoding helpers for state tables.
//
// State tables order keys bytewise (memcmp, unsigned bytes). To make byte
// order equal numeric order, integers are stored big-endian with the sign bit
// flipped, so INT64_MIN encodes as 00..00, -1 as 7f ff..ff, 0 as 80 00..00 and
// INT64_MAX as ff..ff. A table keyed by AppendBigEndian64(event_time) therefore
// scans in time order, and Scan("", encoded(t)) visits exactly the times < t.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace caravela {

// Appends the 8-byte order-preserving encoding of `v` to `out`.
inline void AppendBigEndian64(std::string* out, int64_t v) {
  uint64_t u = static_cast<uint64_t>(v) ^ (uint64_t{1} << 63);
  char buf[8];
  for (int i = 7; i >= 0; --i) {
    buf[i] = static_cast<char>(u & 0xff);
    u >>= 8;
  }
  out->append(buf, sizeof(buf));
}

// Returns the 8-byte encoding of `v` as a new string.
inline std::string EncodeBigEndian64(int64_t v) {
  std::string out;
  AppendBigEndian64(&out, v);
  return out;
}

// Decodes the first 8 bytes of `*in` (written by AppendBigEndian64) into `*v`
// and removes them from `*in`. Returns false, leaving both untouched, if `*in`
// is shorter than 8 bytes.
inline bool ReadBigEndian64(std::string_view* in, int64_t* v) {
  if (in->size() < 8) return false;
  uint64_t u = 0;
  for (int i = 0; i < 8; ++i) u = (u << 8) | static_cast<uint8_t>((*in)[i]);
  *v = static_cast<int64_t>(u ^ (uint64_t{1} << 63));
  in->remove_prefix(8);
  return true;
}

// Returns the smallest key greater than every key starting with `prefix`, for
// use as the exclusive end of a prefix scan: Scan(prefix, PrefixEnd(prefix)).
// Returns "" (meaning "to the end of the table" for Scan/DeleteRange) if no
// such key exists, i.e. when `prefix` is empty or all 0xff bytes.
inline std::string PrefixEnd(std::string_view prefix) {
  std::string end(prefix);
  while (!end.empty()) {
    auto last = static_cast<uint8_t>(end.back());
    if (last != 0xff) {
      end.back() = static_cast<char>(last + 1);
      return end;
    }
    end.pop_back();
  }
  return end;
}

// Key-group prefix (SPEC §8, common/key_groups.h): operators that lay keyed
// rows out by key group put 0x02 + the key group (2 bytes, big-endian)
// before a key part that itself starts with 0x00 or 0x01 (a join key), so
// rows stored without it (older checkpoints) sort before every prefixed one.
inline constexpr char kKeyGroupMarker = '\x02';
inline constexpr size_t kKeyGroupPrefixBytes = 3;

inline void AppendKeyGroupPrefix(std::string* out, int key_group) {
  out->push_back(kKeyGroupMarker);
  out->push_back(static_cast<char>((key_group >> 8) & 0xff));
  out->push_back(static_cast<char>(key_group & 0xff));
}

// If `*in` starts with a key-group prefix: returns its key group and
// consumes it; else -1, `*in` unchanged.
inline int ReadKeyGroupPrefix(std::string_view* in) {
  if (in->size() < kKeyGroupPrefixBytes || (*in)[0] != kKeyGroupMarker) return -1;
  const int g = (static_cast<uint8_t>((*in)[1]) << 8) | static_cast<uint8_t>((*in)[2]);
  in->remove_prefix(kKeyGroupPrefixBytes);
  return g;
}

// [begin, end) of the rows of key groups [first, last] under `prefix`.
inline void KeyGroupRangeKeys(std::string_view prefix, int first, int last, std::string* begin,
                              std::string* end) {
  begin->assign(prefix);
  AppendKeyGroupPrefix(begin, first);
  end->assign(prefix);
  AppendKeyGroupPrefix(end, last + 1);
}

}  // namespace caravela
