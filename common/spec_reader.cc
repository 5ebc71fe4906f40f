// SpecReader: see spec_reader.h.
#include "common/spec_reader.h"

#include <algorithm>
#include <charconv>
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/expr.h"
#include "common/time_util.h"

namespace caravela {
namespace {

// This abseil build does not alias absl::string_view to std::string_view.
absl::string_view Sv(std::string_view s) { return absl::string_view(s.data(), s.size()); }

size_t EditDistance(std::string_view a, std::string_view b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] != b[j - 1])});
    }
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

bool IsFieldPathText(std::string_view s) {
  if (s.empty() || s.front() == '.' || s.back() == '.') return false;
  return s.find("..") == std::string_view::npos;
}

}  // namespace

void SpecReader::Err(std::string path, std::string message) {
  if (path.empty()) path = "<yaml>";  // the top-level mapping itself
  errors_->push_back({std::move(path), std::move(message)});
}

std::string SpecReader::Join(const std::string& path, std::string_view key) {
  return path.empty() ? std::string(key) : absl::StrCat(path, ".", Sv(key));
}

std::string SpecReader::Index(const std::string& path, size_t i) {
  return absl::StrCat(path, "[", i, "]");
}

std::string SpecReader::Quote(std::string_view s) {
  std::string out;
  AppendJsonString(s, &out);
  return out;
}

std::string SpecReader::Describe(const YAML::Node& n) {
  switch (n.Type()) {
    case YAML::NodeType::Scalar:
      return Quote(n.Scalar());
    case YAML::NodeType::Sequence:
      return "a list";
    case YAML::NodeType::Map:
      return "a mapping";
    case YAML::NodeType::Null:
      return "null";
    case YAML::NodeType::Undefined:
      break;
  }
  return "nothing";
}

YAML::Node SpecReader::Field(const YAML::Node& map, std::string_view key) {
  if (!map.IsMap()) return YAML::Node(YAML::NodeType::Undefined);
  for (auto it = map.begin(); it != map.end(); ++it) {
    if (it->first.IsScalar() && it->first.Scalar() == key) return it->second;
  }
  return YAML::Node(YAML::NodeType::Undefined);
}

bool SpecReader::CheckMap(const YAML::Node& n, const std::string& path, Keys allowed,
                          Keys also_known) {
  std::vector<std::string_view> keys(allowed.begin(), allowed.end());
  const size_t n_allowed = keys.size();
  keys.insert(keys.end(), also_known.begin(), also_known.end());
  return CheckMapKeys(n, path, keys, n_allowed);
}

bool SpecReader::CheckMap(const YAML::Node& n, const std::string& path,
                          const std::vector<std::string_view>& allowed) {
  return CheckMapKeys(n, path, allowed, allowed.size());
}

bool SpecReader::CheckMapKeys(const YAML::Node& n, const std::string& path,
                              const std::vector<std::string_view>& keys, size_t n_allowed) {
  const auto allowed_end = keys.begin() + static_cast<std::ptrdiff_t>(n_allowed);
  if (!n.IsMap()) {
    Err(path, absl::StrCat("expected a mapping, got ", Describe(n)));
    return false;
  }
  std::vector<std::string> seen;
  for (auto it = n.begin(); it != n.end(); ++it) {
    if (!it->first.IsScalar()) {
      Err(path, absl::StrCat("expected field names, got ", Describe(it->first), " as a key"));
      continue;
    }
    const std::string& key = it->first.Scalar();
    if (std::find(seen.begin(), seen.end(), key) != seen.end()) {
      Err(Join(path, key), absl::StrCat("duplicate field ", Quote(key)));
      continue;
    }
    seen.push_back(key);
    if (std::find(keys.begin(), keys.end(), key) != keys.end()) continue;
    std::string msg = absl::StrCat("unknown field ", Quote(key));
    std::string_view best;
    size_t best_d = 3;
    for (auto a = keys.begin(); a != allowed_end; ++a) {
      size_t d = EditDistance(key, *a);
      if (d < best_d && d < a->size()) {
        best = *a;
        best_d = d;
      }
    }
    if (!best.empty()) absl::StrAppend(&msg, " (did you mean ", Quote(best), "?)");
    Err(Join(path, key), msg);
  }
  return true;
}

bool SpecReader::Missing(const YAML::Node& n, const std::string& path, bool required) {
  if (n.IsDefined()) return false;
  if (required) Err(path, "required field is missing");
  return true;
}

std::optional<std::string> SpecReader::String(const YAML::Node& map, std::string_view key,
                                              const std::string& parent, bool required) {
  std::string path = Join(parent, key);
  YAML::Node n = Field(map, key);
  if (Missing(n, path, required)) return std::nullopt;
  if (!n.IsScalar()) {
    Err(path, absl::StrCat("expected a string, got ", Describe(n)));
    return std::nullopt;
  }
  if (required && n.Scalar().empty()) {
    Err(path, "expected a non-empty string");
    return std::nullopt;
  }
  return n.Scalar();
}

std::optional<std::string> SpecReader::OneOf(const YAML::Node& map, std::string_view key,
                                             const std::string& parent, Keys choices) {
  std::string path = Join(parent, key);
  YAML::Node n = Field(map, key);
  if (Missing(n, path, false)) return std::nullopt;
  if (n.IsScalar() && std::find(choices.begin(), choices.end(), n.Scalar()) != choices.end()) {
    return n.Scalar();
  }
  std::vector<std::string> names(choices.begin(), choices.end());
  Err(path, absl::StrCat("expected one of ", absl::StrJoin(names, ", "), ", got ", Describe(n)));
  return std::nullopt;
}

std::optional<bool> SpecReader::Bool(const YAML::Node& map, std::string_view key,
                                     const std::string& parent) {
  std::optional<std::string> b = OneOf(map, key, parent, {"true", "false"});
  if (!b) return std::nullopt;
  return *b == "true";
}

std::optional<int64_t> SpecReader::Duration(const YAML::Node& map, std::string_view key,
                                            const std::string& parent, bool required, Bound bound) {
  std::string path = Join(parent, key);
  YAML::Node n = Field(map, key);
  if (Missing(n, path, required)) return std::nullopt;
  return DurationValue(n, path, bound);
}

std::optional<int64_t> SpecReader::DurationValue(const YAML::Node& n, const std::string& path,
                                                 Bound bound) {
  std::optional<int64_t> d;
  if (n.IsScalar()) d = ParseDuration(n.Scalar(), /*allow_negative=*/bound == Bound::kAny);
  if (!d) {
    Err(path, absl::StrCat("expected a duration, got ", Describe(n)));
    return std::nullopt;
  }
  if (bound == Bound::kPositive && *d <= 0) {
    Err(path, absl::StrCat("expected a duration greater than 0, got ", Describe(n)));
    return std::nullopt;
  }
  return d;
}

std::optional<int> SpecReader::PositiveInt(const YAML::Node& map, std::string_view key,
                                           const std::string& parent) {
  YAML::Node r = Field(map, key);
  if (!r.IsDefined()) return std::nullopt;
  int v = 0;
  if (r.IsScalar()) {
    const std::string& t = r.Scalar();
    auto res = std::from_chars(t.data(), t.data() + t.size(), v);
    if (res.ec == std::errc() && res.ptr == t.data() + t.size() && v >= 1) return v;
  }
  Err(Join(parent, key), absl::StrCat("expected an integer >= 1, got ", Describe(r)));
  return std::nullopt;
}

std::optional<FieldPath> SpecReader::Path(const YAML::Node& n, const std::string& path) {
  if (!n.IsScalar() || !IsFieldPathText(n.Scalar())) {
    Err(path, absl::StrCat("expected a field name or dot path, got ", Describe(n)));
    return std::nullopt;
  }
  return FieldPath::Parse(n.Scalar());
}

std::optional<FieldPath> SpecReader::PathField(const YAML::Node& map, std::string_view key,
                                               const std::string& parent, bool required) {
  std::string path = Join(parent, key);
  YAML::Node n = Field(map, key);
  if (Missing(n, path, required)) return std::nullopt;
  return Path(n, path);
}

std::vector<FieldPath> SpecReader::PathList(const YAML::Node& map, std::string_view key,
                                            const std::string& parent,
                                            std::vector<std::string>* texts) {
  std::vector<FieldPath> out;
  std::string path = Join(parent, key);
  YAML::Node n = Field(map, key);
  if (!n.IsDefined()) return out;
  if (!n.IsSequence()) {
    Err(path, absl::StrCat("expected a list of field names, got ", Describe(n)));
    return out;
  }
  std::vector<std::string> seen;
  for (size_t i = 0; i < n.size(); ++i) {
    std::string ipath = Index(path, i);
    std::optional<FieldPath> p = Path(n[i], ipath);
    if (!p) continue;
    if (std::find(seen.begin(), seen.end(), n[i].Scalar()) != seen.end()) {
      Err(ipath, absl::StrCat("duplicate field ", Quote(n[i].Scalar())));
      continue;
    }
    seen.push_back(n[i].Scalar());
    if (texts != nullptr) texts->push_back(n[i].Scalar());
    out.push_back(std::move(*p));
  }
  return out;
}

std::vector<FieldPath> SpecReader::NonEmptyPathList(const YAML::Node& map, std::string_view key,
                                                    const std::string& parent,
                                                    std::vector<std::string>* texts) {
  YAML::Node n = Field(map, key);
  if (n.IsDefined() && (!n.IsSequence() || n.size() == 0)) {
    Err(Join(parent, key),
        absl::StrCat("expected a non-empty list of fields, got ",
                     n.IsSequence() ? std::string("an empty list") : Describe(n)));
    return {};
  }
  return PathList(map, key, parent, texts);
}

std::string SpecReader::ExactlyOne(const YAML::Node& map, const std::string& path, Keys kinds) {
  std::vector<std::string> present;
  for (std::string_view k : kinds) {
    if (Field(map, k).IsDefined()) present.emplace_back(k);
  }
  if (present.size() == 1) return present[0];
  std::vector<std::string> names(kinds.begin(), kinds.end());
  if (present.empty()) {
    Err(path, absl::StrCat("expected one of ", absl::StrJoin(names, ", ")));
  } else {
    Err(path, absl::StrCat("expected exactly one of ", absl::StrJoin(names, ", "), ", got ",
                           absl::StrJoin(present, " and ")));
  }
  return "";
}

std::optional<std::string> SpecReader::ExprString(const YAML::Node& map, std::string_view key,
                                                  const std::string& parent) {
  std::string path = Join(parent, key);
  YAML::Node n = Field(map, key);
  if (Missing(n, path, true)) return std::nullopt;
  return ExprValue(n, path);
}

std::optional<std::string> SpecReader::ExprValue(const YAML::Node& n, const std::string& path) {
  if (!n.IsScalar()) {
    Err(path, absl::StrCat("expected an expression, got ", Describe(n)));
    return std::nullopt;
  }
  absl::StatusOr<std::unique_ptr<Expr>> e = Expr::Compile(n.Scalar());
  if (!e.ok()) {
    Err(path, std::string(e.status().message()));
    return std::nullopt;
  }
  return n.Scalar();
}

std::string SpecReader::Window(const YAML::Node& k, const std::string& kpath, bool session,
                               WindowShape* shape) {
  std::string kind = session ? ExactlyOne(k, kpath, {"tumbling", "hopping", "session"})
                             : ExactlyOne(k, kpath, {"tumbling", "hopping"});
  if (kind == "tumbling") {
    if (auto d = DurationValue(Field(k, "tumbling"), Join(kpath, "tumbling"), Bound::kPositive)) {
      shape->size = shape->slide = *d;
    }
  } else if (kind == "hopping") {
    std::string hpath = Join(kpath, "hopping");
    YAML::Node h = Field(k, "hopping");
    if (CheckMap(h, hpath, {"size", "slide"})) {
      auto size = Duration(h, "size", hpath, true, Bound::kPositive);
      auto slide = Duration(h, "slide", hpath, true, Bound::kPositive);
      if (size) shape->size = *size;
      if (slide) shape->slide = *slide;
      if (size && slide && *slide > *size) {
        Err(Join(hpath, "slide"),
            absl::StrCat("expected a slide no larger than size (", FormatDuration(*size), "), got ",
                         Describe(Field(h, "slide"))));
      }
    }
  } else if (kind == "session") {
    std::string spath = Join(kpath, "session");
    YAML::Node s = Field(k, "session");
    if (CheckMap(s, spath, {"gap"})) {
      if (auto g = Duration(s, "gap", spath, true, Bound::kPositive)) shape->gap = *g;
    }
  }
  return kind;
}

std::vector<JoinKeySpec> SpecReader::JoinKeys(const YAML::Node& k, const std::string& kpath,
                                              std::string_view left, std::string_view right) {
  std::vector<JoinKeySpec> out;
  std::string path = Join(kpath, "on");
  YAML::Node n = Field(k, "on");
  if (Missing(n, path, true)) return out;
  std::string shape =
      absl::StrCat("a field name or a [", Sv(left), "_field, ", Sv(right), "_field] pair");
  if (!n.IsSequence()) {
    Err(path, absl::StrCat("expected a list of keys (each ", shape, "), got ", Describe(n)));
    return out;
  }
  if (n.size() == 0) {
    Err(path, "at least one key is required");
    return out;
  }
  for (size_t i = 0; i < n.size(); ++i) {
    std::string ipath = Index(path, i);
    YAML::Node item = n[i];
    JoinKeySpec key;
    if (item.IsScalar()) {
      std::optional<FieldPath> p = Path(item, ipath);
      if (!p) continue;
      key.left = key.right = item.Scalar();
      key.left_path = key.right_path = *p;
    } else if (item.IsSequence() && item.size() == 2) {
      std::optional<FieldPath> l = Path(item[0], Index(ipath, 0));
      std::optional<FieldPath> r = Path(item[1], Index(ipath, 1));
      if (!l || !r) continue;
      key.left = item[0].Scalar();
      key.right = item[1].Scalar();
      key.left_path = *l;
      key.right_path = *r;
    } else {
      std::string got =
          item.IsSequence() ? absl::StrCat("a list of ", item.size(), " items") : Describe(item);
      Err(ipath, absl::StrCat("expected ", shape, ", got ", got));
      continue;
    }
    bool dup = std::any_of(out.begin(), out.end(), [&](const JoinKeySpec& o) {
      return o.left == key.left && o.right == key.right;
    });
    if (dup) {
      Err(ipath, absl::StrCat("duplicate key ", Quote(key.left),
                              key.left == key.right ? "" : absl::StrCat(" = ", Quote(key.right))));
      continue;
    }
    out.push_back(std::move(key));
  }
  return out;
}

JoinType SpecReader::JoinTypeField(const YAML::Node& k, const std::string& kpath,
                                   bool outer_right) {
  std::optional<std::string> t = outer_right
                                     ? OneOf(k, "type", kpath, {"inner", "left", "right", "full"})
                                     : OneOf(k, "type", kpath, {"inner", "left"});
  if (!t || *t == "inner") return JoinType::kInner;
  if (*t == "left") return JoinType::kLeft;
  if (*t == "right") return JoinType::kRight;
  return JoinType::kFull;
}

SpecReader::Node* SpecReader::FindNode(std::string_view name) {
  for (Node& n : nodes_) {
    if (n.name == name) return &n;
  }
  return nullptr;
}

std::string SpecReader::KnownList(const std::vector<std::string>& known) {
  constexpr size_t kMaxShown = 10;
  if (known.empty()) return "none";
  if (known.size() <= kMaxShown) return absl::StrJoin(known, ", ");
  std::vector<std::string> head(known.begin(), known.begin() + kMaxShown);
  return absl::StrCat(absl::StrJoin(head, ", "), ", ...");
}

bool SpecReader::OperatorInput(const YAML::Node& map, const std::string& parent, int op_index,
                               const std::string& self, std::string* from, std::string_view key) {
  std::optional<std::string> f = String(map, key, parent, true);
  if (!f) return true;
  *from = *f;
  std::string path = Join(parent, key);
  if (*f == self) {
    Err(path, "an operator cannot read its own output");
    return true;
  }
  Node* node = FindNode(*f);
  if (node != nullptr) {
    if (node->is_source || node->index < op_index) return node->has_event_time;
    Err(path, absl::StrCat("node ", Quote(*f),
                           " is defined after this operator (operators read "
                           "sources and operators listed before them)"));
    return true;
  }
  size_t dot = f->rfind('.');
  if (dot != std::string::npos) {
    Node* owner = FindNode(std::string_view(*f).substr(0, dot));
    std::string side = f->substr(dot + 1);
    if (owner != nullptr &&
        std::find(owner->sides.begin(), owner->sides.end(), side) != owner->sides.end()) {
      Err(path, absl::StrCat("side output ", Quote(*f), " can only be read by a sink"));
      return true;
    }
  }
  std::vector<std::string> known;
  for (const Node& ni : nodes_) {
    if (ni.is_source || ni.index < op_index) known.push_back(ni.name);
  }
  Err(path, absl::StrCat("unknown node ", Quote(*f), " (known: ", KnownList(known), ")"));
  return true;
}

void SpecReader::NoEventTime(const std::string& kpath, const std::string& from,
                             std::string_view what, std::string_view key) {
  Err(Join(kpath, key),
      absl::StrCat(Quote(from), " has no event time (its source declares no event_time), but ",
                   Sv(what), " needs event time"));
}

}  // namespace caravela
