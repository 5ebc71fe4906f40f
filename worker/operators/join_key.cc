#include "worker/operators/join_key.h"

#include "common/key_encoding.h"
#include "worker/state/key_codec.h"

namespace caravela {

bool AppendJoinKey(const Record& r, const std::vector<FieldPath>& paths, std::string* out) {
  for (const FieldPath& p : paths) {
    Value v = r.GetPath(p);
    if (v.is_null()) return false;
    AppendKeyField(v, out);
  }
  return true;
}

void SplitJoinKeyPaths(const std::vector<JoinKeySpec>& on, std::vector<FieldPath> paths[2]) {
  for (const JoinKeySpec& k : on) {
    paths[0].push_back(k.left_path);
    paths[1].push_back(k.right_path);
  }
}

bool IsOuterSide(JoinType type, int side) {
  if (type == JoinType::kFull) return true;
  return side == 0 ? type == JoinType::kLeft : type == JoinType::kRight;
}

absl::Status JoinSequence::Load(StateTable* meta, const std::string& where) {
  next_ = 0;
  dirty_ = false;
  std::string seq;
  ASSIGN_OR_RETURN(bool has_seq, meta->Get("seq", &seq));
  if (!has_seq) return absl::OkStatus();
  std::string_view in = seq;
  int64_t v = 0;
  if (!ReadBigEndian64(&in, &v)) {
    return absl::DataLossError("corrupt join state in " + where + ": bad sequence");
  }
  next_ = static_cast<uint64_t>(v);
  return absl::OkStatus();
}

absl::Status JoinSequence::AdoptMax(StateTable* from, StateTable* to, const std::string& where) {
  JoinSequence a, b;
  RETURN_IF_ERROR(a.Load(from, where));
  RETURN_IF_ERROR(b.Load(to, where));
  if (a.next_ > b.next_) to->Put("seq", EncodeBigEndian64(static_cast<int64_t>(a.next_)));
  return absl::OkStatus();
}

void JoinSequence::Flush(StateTable* meta) {
  if (!dirty_) return;
  meta->Put("seq", EncodeBigEndian64(static_cast<int64_t>(next_)));
  dirty_ = false;
}

}  // namespace caravela
