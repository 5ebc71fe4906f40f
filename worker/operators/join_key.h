// Pieces shared by the interval and window joins: the join-key encoding,
// which sides get padded rows, and the persisted row sequence counter.
//
// AppendJoinKey appends one self-delimiting field per key path (a type tag, a
// 4-byte big-endian length, the bytes: common/key_encoding.h, the encoding the
// exchange partitioner hashes too), so an encoded key is never a prefix of
// another and (key, time) state keys range-scan exactly one key.
// Equality is that of `==`: numbers by value (1, 1.0 and 1.00 encode alike),
// strings bytewise, booleans, objects and arrays by JSON text; "1" is not 1.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/job_spec.h"
#include "common/record.h"
#include "common/status.h"
#include "worker/state/state_backend.h"

namespace caravela {

// Appends the encoded key of `r` read through `paths` to `out`. Returns false
// (with `out` partly written) if any key field is null or missing: such a
// record never matches anything.
bool AppendJoinKey(const Record& r, const std::vector<FieldPath>& paths, std::string* out);

// The key paths of `on`, per side: paths[0] left, paths[1] right.
void SplitJoinKeyPaths(const std::vector<JoinKeySpec>& on, std::vector<FieldPath> paths[2]);

// True if unmatched rows of `side` (0 left, 1 right) are emitted padded.
bool IsOuterSide(JoinType type, int side);

// The next sequence number for buffered rows (ties in time stay in arrival
// order), persisted under "seq" in the operator's meta table.
class JoinSequence {
 public:
  // Reads the counter from `meta` (0 if absent); `where` names the operator
  // in the DataLoss error for a corrupt value.
  absl::Status Load(StateTable* meta, const std::string& where);
  uint64_t Next() {
    dirty_ = true;
    return next_++;
  }
  // Writes the counter if it changed since the last Load/Flush.
  void Flush(StateTable* meta);
  // Rescaling: raises `to`'s counter to `from`'s if that is higher (rows
  // adopted from several old tasks keep unique sequence numbers per key).
  static absl::Status AdoptMax(StateTable* from, StateTable* to, const std::string& where);

 private:
  uint64_t next_ = 0;
  bool dirty_ = false;
};

}  // namespace caravela
