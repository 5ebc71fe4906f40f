// Job spec parser/validator. See job_spec.h for the contract.
//
// The YAML document is loaded with yaml-cpp (the only place that can throw;
// every yaml-cpp exception is caught and reported at path "<yaml>"), then
// walked once in document order by SpecParser, which fills the JobSpec and
// appends one SpecError per problem. Cross references (`from`) are resolved
// against names collected in a first pass, so an error names the real cause
// (unknown node, node defined later, side output read by an operator, ...).
#include "common/job_spec.h"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <map>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/expr.h"
#include "common/time_util.h"
#include "xxhash.h"
#include "yaml-cpp/yaml.h"

namespace caravela {

std::vector<std::string> OperatorSpec::Inputs() const {
  switch (kind) {
    case Kind::kFilter:
      return {filter.from};
    case Kind::kProject:
      return {project.from};
    case Kind::kDedup:
      return {dedup.from};
    case Kind::kWindow:
      return {window.from};
    case Kind::kIntervalJoin:
      return {interval_join.left, interval_join.right};
    case Kind::kWindowJoin:
      return {window_join.left, window_join.right};
    case Kind::kTemporalJoin:
    case Kind::kLookupJoin:
      return {table_join.stream, table_join.table};
  }
  return {};
}

std::vector<std::string> OperatorSpec::SideOutputs() const {
  switch (kind) {
    case Kind::kDedup:
      return {"conflicts", "too_late"};
    case Kind::kWindow:
    case Kind::kIntervalJoin:
    case Kind::kWindowJoin:
    case Kind::kTemporalJoin:
      return {"too_late"};
    default:
      return {};
  }
}

const char* JoinTypeName(JoinType t) {
  switch (t) {
    case JoinType::kInner:
      return "inner";
    case JoinType::kLeft:
      return "left";
    case JoinType::kRight:
      return "right";
    case JoinType::kFull:
      return "full";
  }
  return "inner";
}

const SourceSpec* JobSpec::FindSource(std::string_view name) const {
  for (const SourceSpec& s : sources) {
    if (s.name == name) return &s;
  }
  return nullptr;
}

const OperatorSpec* JobSpec::FindOperator(std::string_view name) const {
  for (const OperatorSpec& o : operators) {
    if (o.name == name) return &o;
  }
  return nullptr;
}

bool JobSpec::NeedsEmbeddedBroker() const {
  for (const SourceSpec& s : sources) {
    if (s.kind == SourceSpec::Kind::kKafka && s.kafka.bootstrap.empty()) return true;
  }
  for (const SinkSpec& s : sinks) {
    if (s.kind == SinkSpec::Kind::kKafka && s.bootstrap.empty()) return true;
  }
  return false;
}

std::string SinkSpec::Label() const {
  switch (kind) {
    case Kind::kFile:
      return "file:" + path;
    case Kind::kKafka:
      return "kafka:" + topic;
    case Kind::kPostgres:
      return "postgres:" + table;
    case Kind::kClickHouse:
      return "clickhouse:" + database + "." + table;
    case Kind::kDiscard:
      return "discard";
    case Kind::kStdout:
      return "stdout";
  }
  return "?";
}

bool IsS3BucketName(std::string_view b) {
  if (b.size() < 3 || b.size() > 63) return false;
  for (char c : b) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' || c == '-';
    if (!ok) return false;
  }
  auto alnum = [](char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); };
  return alnum(b.front()) && alnum(b.back());
}

bool IsSqlIdentifier(std::string_view name) {
  if (name.empty() || name.size() > 63) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    char c = name[i];
    bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
    bool digit = c >= '0' && c <= '9';
    if (!alpha && !(digit && i > 0)) return false;
  }
  return true;
}

namespace {

void ResolvePath(const std::string& base_dir, std::string* path) {
  if (path->empty() || base_dir.empty()) return;
  std::filesystem::path p(*path);
  if (p.is_absolute()) return;
  *path = (std::filesystem::path(base_dir) / p).lexically_normal().string();
}

}  // namespace

void JobSpec::ResolvePaths(const std::string& base_dir) {
  for (SourceSpec& s : sources) {
    if (s.kind == SourceSpec::Kind::kFile) ResolvePath(base_dir, &s.file.path);
  }
  for (SinkSpec& s : sinks) {
    if (s.kind == SinkSpec::Kind::kFile) ResolvePath(base_dir, &s.path);
    if (!s.password_file.empty()) ResolvePath(base_dir, &s.password_file);
  }
  ResolvePath(base_dir, &dead_letter_path);
}

namespace {

// This abseil build does not alias absl::string_view to std::string_view.
absl::string_view Sv(std::string_view s) { return absl::string_view(s.data(), s.size()); }

std::string Quote(std::string_view s) {
  std::string out;
  AppendJsonString(s, &out);
  return out;
}

// What a node holds, for "expected X, got <Describe>" messages.
std::string Describe(const YAML::Node& n) {
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

// Names of sources and operators: they appear in `from`, in "<node>.<side>"
// references and as nested field names, so no dots or spaces.
bool IsNodeName(std::string_view s) {
  if (s.empty()) return false;
  for (char c : s) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '-';
    if (!ok) return false;
  }
  return true;
}

bool IsJobName(std::string_view s) {
  if (s.empty()) return false;
  for (char c : s) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_' || c == '.';
    if (!ok) return false;
  }
  return true;
}

constexpr std::string_view kOperatorKinds[] = {"filter",        "project",       "dedup",
                                               "window",        "interval_join", "window_join",
                                               "temporal_join", "lookup_join"};
constexpr OperatorSpec::Kind kOperatorKindValues[] = {
    OperatorSpec::Kind::kFilter,       OperatorSpec::Kind::kProject,
    OperatorSpec::Kind::kDedup,        OperatorSpec::Kind::kWindow,
    OperatorSpec::Kind::kIntervalJoin, OperatorSpec::Kind::kWindowJoin,
    OperatorSpec::Kind::kTemporalJoin, OperatorSpec::Kind::kLookupJoin};

// A source or operator, as seen by reference resolution.
struct NodeInfo {
  std::string name;
  std::string path;  // of its `name` field
  bool is_source = false;
  int index = 0;  // in sources or operators
  std::vector<std::string> sides;
  bool has_event_time = true;
};

class SpecParser {
 public:
  ParseResult Run(std::string_view text) {
    YAML::Node root;
    try {
      root = YAML::Load(std::string(text));
    } catch (const YAML::Exception& e) {
      YamlError(e);
      return std::move(result_);
    }
    try {
      Document(root);
    } catch (const YAML::Exception& e) {
      // Not expected (every access is type-checked first); reported, never thrown.
      YamlError(e);
    } catch (const std::exception& e) {
      Err("<yaml>", absl::StrCat("internal error: ", e.what()));
    }
    return std::move(result_);
  }

 private:
  using Keys = std::initializer_list<std::string_view>;

  JobSpec& spec() { return result_.spec; }

  void Err(std::string path, std::string message) {
    if (path.empty()) path = "<yaml>";  // the top-level mapping itself
    result_.errors.push_back({std::move(path), std::move(message)});
  }

  void YamlError(const YAML::Exception& e) {
    if (e.mark.is_null()) {
      Err("<yaml>", e.msg);
    } else {
      Err("<yaml>",
          absl::StrCat("line ", e.mark.line + 1, ", column ", e.mark.column + 1, ": ", e.msg));
    }
  }

  static std::string Join(const std::string& path, std::string_view key) {
    return path.empty() ? std::string(key) : absl::StrCat(path, ".", Sv(key));
  }
  static std::string Index(const std::string& path, size_t i) {
    return absl::StrCat(path, "[", i, "]");
  }

  // Reports (and returns false) unless `n` is a mapping whose keys are all in
  // `allowed` and appear once. Keys in `also_known` are neither reported nor
  // allowed: the caller reports them. Unknown keys get a spelling hint.
  bool CheckMap(const YAML::Node& n, const std::string& path, Keys allowed, Keys also_known = {}) {
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
      bool known = std::find(allowed.begin(), allowed.end(), key) != allowed.end() ||
                   std::find(also_known.begin(), also_known.end(), key) != also_known.end();
      if (known) continue;
      std::string msg = absl::StrCat("unknown field ", Quote(key));
      std::string_view best;
      size_t best_d = 3;
      for (std::string_view a : allowed) {
        size_t d = EditDistance(key, a);
        if (d < best_d && d < a.size()) {
          best = a;
          best_d = d;
        }
      }
      if (!best.empty()) absl::StrAppend(&msg, " (did you mean ", Quote(best), "?)");
      Err(Join(path, key), msg);
    }
    return true;
  }

  // ---- Typed field readers. Each returns nullopt (after reporting, if the
  // field is present but wrong, or required and absent) or the value.

  static YAML::Node Field(const YAML::Node& map, std::string_view key) {
    if (!map.IsMap()) return YAML::Node(YAML::NodeType::Undefined);
    for (auto it = map.begin(); it != map.end(); ++it) {
      if (it->first.IsScalar() && it->first.Scalar() == key) return it->second;
    }
    return YAML::Node(YAML::NodeType::Undefined);
  }

  bool Missing(const YAML::Node& n, const std::string& path, bool required) {
    if (n.IsDefined()) return false;
    if (required) Err(path, "required field is missing");
    return true;
  }

  std::optional<std::string> String(const YAML::Node& map, std::string_view key,
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

  std::optional<std::string> OneOf(const YAML::Node& map, std::string_view key,
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

  enum class Bound { kNonNegative, kPositive, kAny };

  std::optional<int64_t> Duration(const YAML::Node& map, std::string_view key,
                                  const std::string& parent, bool required, Bound bound) {
    std::string path = Join(parent, key);
    YAML::Node n = Field(map, key);
    if (Missing(n, path, required)) return std::nullopt;
    return DurationValue(n, path, bound);
  }

  std::optional<int64_t> DurationValue(const YAML::Node& n, const std::string& path, Bound bound) {
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

  std::optional<FieldPath> Path(const YAML::Node& n, const std::string& path) {
    if (!n.IsScalar() || !IsFieldPathText(n.Scalar())) {
      Err(path, absl::StrCat("expected a field name or dot path, got ", Describe(n)));
      return std::nullopt;
    }
    return FieldPath::Parse(n.Scalar());
  }

  std::optional<FieldPath> PathField(const YAML::Node& map, std::string_view key,
                                     const std::string& parent, bool required) {
    std::string path = Join(parent, key);
    YAML::Node n = Field(map, key);
    if (Missing(n, path, required)) return std::nullopt;
    return Path(n, path);
  }

  // A list of field paths; `texts` (optional) receives them as written.
  std::vector<FieldPath> PathList(const YAML::Node& map, std::string_view key,
                                  const std::string& parent,
                                  std::vector<std::string>* texts = nullptr) {
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

  // PathList for a list that must name at least one field (an empty or
  // non-list value is an error naming the path).
  std::vector<FieldPath> NonEmptyPathList(const YAML::Node& map, std::string_view key,
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

  // Exactly one of `kinds` must be a key of `map`; returns it or "".
  std::string ExactlyOne(const YAML::Node& map, const std::string& path, Keys kinds) {
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

  // ---- Document.

  void Document(const YAML::Node& root) {
    if (!root.IsDefined() || root.IsNull()) {
      Err("<yaml>", "the document is empty");
      return;
    }
    if (!root.IsMap()) {
      Err("<yaml>", absl::StrCat("expected a mapping at the top level, got ", Describe(root)));
      return;
    }
    CheckMap(root, "", {"apiVersion", "kind", "metadata", "spec"});
    if (std::optional<std::string> v = String(root, "apiVersion", "", true)) {
      if (*v != "caravela/v1") {
        Err("apiVersion", absl::StrCat("expected \"caravela/v1\", got ", Quote(*v)));
      }
    }
    if (std::optional<std::string> v = String(root, "kind", "", true)) {
      if (*v != "Job") Err("kind", absl::StrCat("expected \"Job\", got ", Quote(*v)));
    }
    YAML::Node meta = Field(root, "metadata");
    if (!Missing(meta, "metadata", true) && CheckMap(meta, "metadata", {"name"})) {
      if (std::optional<std::string> name = String(meta, "name", "metadata", true)) {
        if (IsJobName(*name)) {
          spec().name = *name;
        } else {
          Err("metadata.name",
              absl::StrCat("expected lowercase letters, digits, '-', '_' or '.', got ",
                           Quote(*name)));
        }
      }
    }
    YAML::Node s = Field(root, "spec");
    if (Missing(s, "spec", true)) return;
    if (!CheckMap(s, "spec",
                  {"parallelism", "checkpoint", "sources", "operators", "sinks", "dead_letter"})) {
      return;
    }
    CollectNodes(s);
    if (auto p = PositiveInt(s, "parallelism", "spec")) spec().parallelism = *p;
    Checkpoint(Field(s, "checkpoint"));
    Sources(Field(s, "sources"));
    Operators(Field(s, "operators"));
    Sinks(Field(s, "sinks"));
    YAML::Node dl = Field(s, "dead_letter");
    if (dl.IsDefined() && CheckMap(dl, "spec.dead_letter", {"path"})) {
      if (auto p = String(dl, "path", "spec.dead_letter", true)) spec().dead_letter_path = *p;
    }
  }

  // First pass: every well-formed source/operator name, for `from` checks.
  void CollectNodes(const YAML::Node& s) {
    YAML::Node sources = Field(s, "sources");
    if (sources.IsSequence()) {
      for (size_t i = 0; i < sources.size(); ++i) {
        YAML::Node name = Field(sources[i], "name");
        if (!name.IsScalar() || !IsNodeName(name.Scalar())) continue;
        NodeInfo info;
        info.name = name.Scalar();
        info.path = Index("spec.sources", i) + ".name";
        info.is_source = true;
        info.index = static_cast<int>(i);
        info.sides = {"invalid"};
        info.has_event_time = Field(sources[i], "event_time").IsDefined();
        nodes_.push_back(std::move(info));
      }
    }
    YAML::Node ops = Field(s, "operators");
    if (ops.IsSequence()) {
      for (size_t i = 0; i < ops.size(); ++i) {
        YAML::Node name = Field(ops[i], "name");
        if (!name.IsScalar() || !IsNodeName(name.Scalar())) continue;
        NodeInfo info;
        info.name = name.Scalar();
        info.path = Index("spec.operators", i) + ".name";
        info.index = static_cast<int>(i);
        // Side outputs come from OperatorSpec::SideOutputs (one source of truth).
        OperatorSpec probe;
        for (size_t k = 0; k < std::size(kOperatorKinds); ++k) {
          if (!Field(ops[i], kOperatorKinds[k]).IsDefined()) continue;
          probe.kind = kOperatorKindValues[k];
          for (std::string& side : probe.SideOutputs()) {
            if (std::find(info.sides.begin(), info.sides.end(), side) == info.sides.end()) {
              info.sides.push_back(std::move(side));
            }
          }
        }
        nodes_.push_back(std::move(info));
      }
    }
  }

  NodeInfo* FindNode(std::string_view name) {
    for (NodeInfo& n : nodes_) {
      if (n.name == name) return &n;
    }
    return nullptr;
  }

  // Checks a source/operator name for syntax and uniqueness.
  std::optional<std::string> NodeName(const YAML::Node& map, const std::string& parent) {
    std::optional<std::string> name = String(map, "name", parent, true);
    if (!name) return std::nullopt;
    std::string path = Join(parent, "name");
    if (!IsNodeName(*name)) {
      Err(path, absl::StrCat("expected letters, digits, '-' or '_', got ", Quote(*name)));
      return std::nullopt;
    }
    NodeInfo* first = FindNode(*name);
    if (first != nullptr && first->path != path) {
      Err(path, absl::StrCat("duplicate name ", Quote(*name), " (also at ", first->path, ")"));
    }
    return name;
  }

  void Checkpoint(const YAML::Node& n) {
    const std::string path = "spec.checkpoint";
    if (!n.IsDefined() || !CheckMap(n, path, {"interval", "storage", "retain"})) return;
    CheckpointSpec& cp = spec().checkpoint;
    if (auto d = Duration(n, "interval", path, true, Bound::kNonNegative)) cp.interval = *d;
    if (auto st = String(n, "storage", path, false)) {
      const std::string storage_path = Join(path, "storage");
      if (st->rfind("file://", 0) == 0 && st->size() > 7) {
        cp.storage = *st;
      } else if (st->rfind("s3://", 0) == 0) {
        if (auto url = ParseS3Url(*st); url.ok()) {
          cp.storage = *st;
        } else {
          Err(storage_path, std::string(url.status().message()));
        }
      } else {
        Err(storage_path, absl::StrCat("expected a file:// or s3:// URL, got ", Quote(*st)));
      }
    }
    if (auto r = PositiveInt(n, "retain", path)) cp.retain = *r;
  }

  // An optional integer >= 1 at `parent`.`key`; nullopt (with an error if it
  // is present but wrong) otherwise.
  std::optional<int> PositiveInt(const YAML::Node& map, const char* key,
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

  // ---- Sources.

  void Sources(const YAML::Node& n) {
    const std::string path = "spec.sources";
    if (Missing(n, path, true)) return;
    if (!n.IsSequence()) {
      Err(path, absl::StrCat("expected a list, got ", Describe(n)));
      return;
    }
    if (n.size() == 0) {
      Err(path, "at least one source is required");
      return;
    }
    for (size_t i = 0; i < n.size(); ++i) Source(n[i], Index(path, i));
  }

  void Source(const YAML::Node& n, const std::string& path) {
    if (!CheckMap(n, path, {"name", "file", "kafka", "format", "key", "event_time", "watermark"})) {
      return;
    }
    SourceSpec src;
    if (auto name = NodeName(n, path)) src.name = *name;
    std::string kind = ExactlyOne(n, path, {"file", "kafka"});
    if (kind == "file") {
      src.kind = SourceSpec::Kind::kFile;
      std::string fpath = Join(path, "file");
      YAML::Node f = Field(n, "file");
      if (CheckMap(f, fpath, {"path", "partition_field", "arrival_field"})) {
        if (auto p = String(f, "path", fpath, true)) src.file.path = *p;
        if (auto p = PathField(f, "partition_field", fpath, false)) {
          src.file.partition_field = p->ToString();
        }
        if (auto p = PathField(f, "arrival_field", fpath, false)) {
          src.file.arrival_field = p->ToString();
        }
      }
    } else if (kind == "kafka") {
      src.kind = SourceSpec::Kind::kKafka;
      std::string kpath = Join(path, "kafka");
      YAML::Node k = Field(n, "kafka");
      if (CheckMap(k, kpath, {"topic", "bootstrap", "start", "bounded", "arrival_field"})) {
        if (auto t = String(k, "topic", kpath, true)) src.kafka.topic = *t;
        if (auto b = String(k, "bootstrap", kpath, false)) src.kafka.bootstrap = *b;
        if (auto s = OneOf(k, "start", kpath, {"earliest", "latest"})) src.kafka.start = *s;
        if (auto b = OneOf(k, "bounded", kpath, {"true", "false"})) {
          src.kafka.bounded = *b == "true";
        }
        if (auto p = PathField(k, "arrival_field", kpath, false)) {
          src.kafka.arrival_field = p->ToString();
          if (!src.kafka.bounded) {
            Err(Join(kpath, "arrival_field"),
                "needs bounded: true (a replay merges the partitions in arrival order up to "
                "their end at the start)");
          }
        }
      }
    }
    if (auto f = OneOf(n, "format", path, {"json"})) src.format = *f;
    src.key = PathList(n, "key", path);
    YAML::Node et = Field(n, "event_time");
    std::string etpath = Join(path, "event_time");
    if (et.IsDefined() && CheckMap(et, etpath, {"field", "format"})) {
      EventTimeSpec ets;
      if (auto p = PathField(et, "field", etpath, true)) ets.field = *p;
      if (auto f = OneOf(et, "format", etpath, {"iso8601", "epoch_ms", "epoch_s"})) {
        ets.format = *f == "iso8601"    ? TimeFormat::kIso8601
                     : *f == "epoch_ms" ? TimeFormat::kEpochMs
                                        : TimeFormat::kEpochS;
      }
      src.event_time = ets;
    }
    YAML::Node wm = Field(n, "watermark");
    std::string wmpath = Join(path, "watermark");
    if (wm.IsDefined()) {
      if (!et.IsDefined()) {
        Err(wmpath, "a watermark needs event_time (a source without event_time is a lookup table)");
      } else if (CheckMap(wm, wmpath,
                          {"max_out_of_orderness", "idle_timeout", "max_future_skew"})) {
        WatermarkSpec& w = src.watermark;
        if (auto d = Duration(wm, "max_out_of_orderness", wmpath, false, Bound::kNonNegative)) {
          w.max_out_of_orderness = *d;
        }
        if (auto d = Duration(wm, "idle_timeout", wmpath, false, Bound::kNonNegative)) {
          w.idle_timeout = *d;
        }
        if (auto d = Duration(wm, "max_future_skew", wmpath, false, Bound::kNonNegative)) {
          w.max_future_skew = *d;
        }
      }
    }
    spec().sources.push_back(std::move(src));
  }

  // ---- Operators.

  void Operators(const YAML::Node& n) {
    const std::string path = "spec.operators";
    if (!n.IsDefined()) return;
    if (!n.IsSequence()) {
      Err(path, absl::StrCat("expected a list, got ", Describe(n)));
      return;
    }
    for (size_t i = 0; i < n.size(); ++i) Operator(n[i], Index(path, i), static_cast<int>(i));
  }

  std::string KnownList(const std::vector<std::string>& known) {
    constexpr size_t kMaxShown = 10;
    if (known.empty()) return "none";
    if (known.size() <= kMaxShown) return absl::StrJoin(known, ", ");
    std::vector<std::string> head(known.begin(), known.begin() + kMaxShown);
    return absl::StrCat(absl::StrJoin(head, ", "), ", ...");
  }

  // Resolves an operator's input field `key` (`from`, or `left`/`right`/
  // `stream` of joins): a source, or an operator listed before operator
  // `op_index`. Returns whether the input carries event time (true when
  // unknown, to avoid follow-up errors).
  bool OperatorInput(const YAML::Node& map, const std::string& parent, int op_index,
                     const std::string& self, std::string* from, std::string_view key = "from") {
    std::optional<std::string> f = String(map, key, parent, true);
    if (!f) return true;
    *from = *f;
    std::string path = Join(parent, key);
    if (*f == self) {
      Err(path, "an operator cannot read its own output");
      return true;
    }
    NodeInfo* node = FindNode(*f);
    if (node != nullptr) {
      if (node->is_source || node->index < op_index) return node->has_event_time;
      Err(path, absl::StrCat("node ", Quote(*f),
                             " is defined after this operator (operators read "
                             "sources and operators listed before them)"));
      return true;
    }
    size_t dot = f->rfind('.');
    if (dot != std::string::npos) {
      NodeInfo* owner = FindNode(std::string_view(*f).substr(0, dot));
      std::string side = f->substr(dot + 1);
      if (owner != nullptr &&
          std::find(owner->sides.begin(), owner->sides.end(), side) != owner->sides.end()) {
        Err(path, absl::StrCat("side output ", Quote(*f), " can only be read by a sink"));
        return true;
      }
    }
    std::vector<std::string> known;
    for (const NodeInfo& ni : nodes_) {
      if (ni.is_source || ni.index < op_index) known.push_back(ni.name);
    }
    Err(path, absl::StrCat("unknown node ", Quote(*f), " (known: ", KnownList(known), ")"));
    return true;
  }

  void Operator(const YAML::Node& n, const std::string& path, int index) {
    if (!CheckMap(n, path,
                  {"name", "filter", "project", "dedup", "window", "interval_join", "window_join",
                   "temporal_join", "lookup_join"})) {
      return;
    }
    OperatorSpec op;
    if (auto name = NodeName(n, path)) op.name = *name;
    std::vector<std::string> present;
    for (std::string_view k : kOperatorKinds) {
      if (Field(n, k).IsDefined()) present.emplace_back(k);
    }
    if (present.size() != 1) {
      std::vector<std::string> names(std::begin(kOperatorKinds), std::end(kOperatorKinds));
      if (present.empty()) {
        Err(path, absl::StrCat("expected one of ", absl::StrJoin(names, ", ")));
      } else {
        Err(path, absl::StrCat("expected exactly one of ", absl::StrJoin(names, ", "), ", got ",
                               absl::StrJoin(present, " and ")));
      }
      spec().operators.push_back(std::move(op));
      return;
    }
    const std::string& kind = present[0];
    std::string kpath = Join(path, kind);
    YAML::Node k = Field(n, kind);
    bool has_time = true;
    if (kind == "filter") {
      op.kind = OperatorSpec::Kind::kFilter;
      if (CheckMap(k, kpath, {"from", "where"})) {
        has_time = OperatorInput(k, kpath, index, op.name, &op.filter.from);
        if (auto w = ExprString(k, "where", kpath)) op.filter.where = *w;
      }
    } else if (kind == "project") {
      op.kind = OperatorSpec::Kind::kProject;
      if (CheckMap(k, kpath, {"from", "fields"})) {
        has_time = OperatorInput(k, kpath, index, op.name, &op.project.from);
        Project(k, kpath, &op.project);
      }
    } else if (kind == "dedup") {
      op.kind = OperatorSpec::Kind::kDedup;
      if (CheckMap(k, kpath, {"from", "id", "retention", "fingerprint"})) {
        has_time = OperatorInput(k, kpath, index, op.name, &op.dedup.from);
        if (!has_time) NoEventTime(kpath, op.dedup.from, "dedup");
        if (auto p = PathField(k, "id", kpath, true)) op.dedup.id = *p;
        if (auto d = Duration(k, "retention", kpath, true, Bound::kPositive)) {
          op.dedup.retention = *d;
        }
        op.dedup.fingerprint = PathList(k, "fingerprint", kpath);
      }
    } else if (kind == "interval_join") {
      op.kind = OperatorSpec::Kind::kIntervalJoin;
      IntervalJoin(k, kpath, index, op.name, &op.interval_join);
    } else if (kind == "window_join") {
      op.kind = OperatorSpec::Kind::kWindowJoin;
      WindowJoin(k, kpath, index, op.name, &op.window_join);
    } else if (kind == "temporal_join" || kind == "lookup_join") {
      bool temporal = kind == "temporal_join";
      op.kind = temporal ? OperatorSpec::Kind::kTemporalJoin : OperatorSpec::Kind::kLookupJoin;
      has_time = TableJoin(k, kpath, index, op.name, temporal, &op.table_join);
    } else {
      op.kind = OperatorSpec::Kind::kWindow;
      if (CheckMap(k, kpath,
                   {"from", "tumbling", "hopping", "session", "group_by", "aggregates",
                    "early_fire_every", "allowed_lateness", "reconcile"})) {
        has_time = OperatorInput(k, kpath, index, op.name, &op.window.from);
        if (!has_time) NoEventTime(kpath, op.window.from, "window");
        Window(k, kpath, &op.window);
      }
    }
    if (NodeInfo* self = FindNode(op.name); self != nullptr && !self->is_source) {
      self->has_event_time = has_time;
    }
    spec().operators.push_back(std::move(op));
  }

  void NoEventTime(const std::string& kpath, const std::string& from, std::string_view what,
                   std::string_view key = "from") {
    Err(Join(kpath, key),
        absl::StrCat(Quote(from), " has no event time (its source declares no event_time), but ",
                     Sv(what), " needs event time"));
  }

  // An expression field: must be a scalar that compiles.
  std::optional<std::string> ExprString(const YAML::Node& map, std::string_view key,
                                        const std::string& parent) {
    std::string path = Join(parent, key);
    YAML::Node n = Field(map, key);
    if (Missing(n, path, true)) return std::nullopt;
    return ExprValue(n, path);
  }

  std::optional<std::string> ExprValue(const YAML::Node& n, const std::string& path) {
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

  // ---- Joins.

  // `on`: a non-empty list whose items are a field name present on both sides
  // or a [<left>_field, <right>_field] pair.
  std::vector<JoinKeySpec> JoinKeys(const YAML::Node& k, const std::string& kpath,
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
        Err(ipath,
            absl::StrCat("duplicate key ", Quote(key.left),
                         key.left == key.right ? "" : absl::StrCat(" = ", Quote(key.right))));
        continue;
      }
      out.push_back(std::move(key));
    }
    return out;
  }

  // Optional `type` (default inner): inner|left|right|full, or inner|left
  // when `outer_right` is false (temporal and lookup joins).
  JoinType JoinTypeField(const YAML::Node& k, const std::string& kpath, bool outer_right) {
    std::optional<std::string> t = outer_right
                                       ? OneOf(k, "type", kpath, {"inner", "left", "right", "full"})
                                       : OneOf(k, "type", kpath, {"inner", "left"});
    if (!t || *t == "inner") return JoinType::kInner;
    if (*t == "left") return JoinType::kLeft;
    if (*t == "right") return JoinType::kRight;
    return JoinType::kFull;
  }

  // Both inputs of an interval/window join; they need event time.
  void JoinSides(const YAML::Node& k, const std::string& kpath, int index, const std::string& self,
                 std::string_view what, std::string* left, std::string* right) {
    if (!OperatorInput(k, kpath, index, self, left, "left")) {
      NoEventTime(kpath, *left, what, "left");
    }
    if (!OperatorInput(k, kpath, index, self, right, "right")) {
      NoEventTime(kpath, *right, what, "right");
    }
  }

  void IntervalJoin(const YAML::Node& k, const std::string& kpath, int index,
                    const std::string& self, IntervalJoinSpec* j) {
    if (!CheckMap(k, kpath,
                  {"left", "right", "on", "between", "type", "allowed_lateness", "where"})) {
      return;
    }
    JoinSides(k, kpath, index, self, "interval_join", &j->left, &j->right);
    j->on = JoinKeys(k, kpath, "left", "right");
    std::string bpath = Join(kpath, "between");
    YAML::Node b = Field(k, "between");
    if (!Missing(b, bpath, true) && CheckMap(b, bpath, {"lower", "upper"})) {
      auto lower = Duration(b, "lower", bpath, true, Bound::kAny);
      auto upper = Duration(b, "upper", bpath, true, Bound::kAny);
      if (lower) j->lower = *lower;
      if (upper) j->upper = *upper;
      if (lower && upper && *lower > *upper) {
        Err(bpath, absl::StrCat("expected lower <= upper, got lower ", Describe(Field(b, "lower")),
                                " and upper ", Describe(Field(b, "upper"))));
      }
    }
    j->type = JoinTypeField(k, kpath, true);
    if (auto d = Duration(k, "allowed_lateness", kpath, false, Bound::kNonNegative)) {
      j->allowed_lateness = *d;
    }
    std::string wpath = Join(kpath, "where");
    YAML::Node w = Field(k, "where");
    if (w.IsDefined()) {
      std::optional<std::string> text = ExprValue(w, wpath);
      if (!text) return;
      // Fields are read from the combined record: left.<field> or right.<field>.
      std::vector<FieldPath> fields;
      (*Expr::Compile(*text))->CollectFields(&fields);
      bool ok = true;
      for (const FieldPath& f : fields) {
        if (f.parts.size() >= 2 && (f.parts[0] == "left" || f.parts[0] == "right")) continue;
        Err(wpath, absl::StrCat("field ", Quote(f.ToString()),
                                " must be read as left.<field> or right.<field>"));
        ok = false;
      }
      if (ok) j->where = *text;
    }
  }

  void WindowJoin(const YAML::Node& k, const std::string& kpath, int index, const std::string& self,
                  WindowJoinSpec* j) {
    if (!CheckMap(
            k, kpath,
            {"left", "right", "on", "tumbling", "hopping", "type", "allowed_lateness", "keep"})) {
      return;
    }
    JoinSides(k, kpath, index, self, "window_join", &j->left, &j->right);
    if (YAML::Node keep = Field(k, "keep"); keep.IsDefined()) {
      const std::string kp = Join(kpath, "keep");
      if (CheckMap(keep, kp, {"left", "right"})) {
        for (int side = 0; side < 2; ++side) {
          j->keep_paths[side] =
              NonEmptyPathList(keep, side == 0 ? "left" : "right", kp, &j->keep[side]);
        }
      }
    }
    j->on = JoinKeys(k, kpath, "left", "right");
    std::string kind = ExactlyOne(k, kpath, {"tumbling", "hopping"});
    if (kind == "tumbling") {
      j->kind = WindowJoinSpec::Kind::kTumbling;
      if (auto d = DurationValue(Field(k, "tumbling"), Join(kpath, "tumbling"), Bound::kPositive)) {
        j->size = j->slide = *d;
      }
    } else if (kind == "hopping") {
      j->kind = WindowJoinSpec::Kind::kHopping;
      std::string hpath = Join(kpath, "hopping");
      YAML::Node h = Field(k, "hopping");
      if (CheckMap(h, hpath, {"size", "slide"})) {
        auto size = Duration(h, "size", hpath, true, Bound::kPositive);
        auto slide = Duration(h, "slide", hpath, true, Bound::kPositive);
        if (size) j->size = *size;
        if (slide) j->slide = *slide;
        if (size && slide && *slide > *size) {
          Err(Join(hpath, "slide"),
              absl::StrCat("expected a slide no larger than size (", FormatDuration(*size),
                           "), got ", Describe(Field(h, "slide"))));
        }
      }
    }
    j->type = JoinTypeField(k, kpath, true);
    if (auto d = Duration(k, "allowed_lateness", kpath, false, Bound::kNonNegative)) {
      j->allowed_lateness = *d;
    }
  }

  // temporal_join / lookup_join. Returns whether the output carries event
  // time (the stream's).
  bool TableJoin(const YAML::Node& k, const std::string& kpath, int index, const std::string& self,
                 bool temporal, TableJoinSpec* j) {
    std::string_view what = temporal ? "temporal_join" : "lookup_join";
    if (!CheckMap(k, kpath, {"stream", "table", "on", "type"})) return true;
    bool has_time = OperatorInput(k, kpath, index, self, &j->stream, "stream");
    if (temporal && !has_time) {
      NoEventTime(kpath, j->stream, what, "stream");
      has_time = true;
    }
    if (auto t = String(k, "table", kpath, true)) {
      j->table = *t;
      std::string tpath = Join(kpath, "table");
      NodeInfo* node = FindNode(*t);
      if (node == nullptr || !node->is_source) {
        std::vector<std::string> known;
        for (const NodeInfo& ni : nodes_) {
          if (ni.is_source) known.push_back(ni.name);
        }
        Err(tpath,
            absl::StrCat("expected a source (", Sv(what), " reads its table from a source), got ",
                         node == nullptr ? "unknown node " : "operator ", Quote(*t),
                         " (sources: ", KnownList(known), ")"));
      } else if (temporal && !node->has_event_time) {
        Err(tpath, absl::StrCat("source ", Quote(*t),
                                " declares no event_time, but temporal_join versions are valid "
                                "from their event time"));
      }
    }
    j->on = JoinKeys(k, kpath, "stream", "table");
    j->type = JoinTypeField(k, kpath, false);
    return has_time;
  }

  void Project(const YAML::Node& k, const std::string& kpath, ProjectSpec* out) {
    std::string path = Join(kpath, "fields");
    YAML::Node f = Field(k, "fields");
    if (Missing(f, path, true)) return;
    if (!f.IsMap()) {
      Err(path, absl::StrCat("expected a mapping of output name to expression, got ", Describe(f)));
      return;
    }
    if (f.size() == 0) {
      Err(path, "at least one field is required");
      return;
    }
    std::vector<std::string> seen;
    for (auto it = f.begin(); it != f.end(); ++it) {
      if (!it->first.IsScalar() || it->first.Scalar().empty()) {
        Err(path, absl::StrCat("expected output field names, got ", Describe(it->first)));
        continue;
      }
      const std::string& name = it->first.Scalar();
      std::string fpath = Join(path, name);
      if (std::find(seen.begin(), seen.end(), name) != seen.end()) {
        Err(fpath, absl::StrCat("duplicate field ", Quote(name)));
        continue;
      }
      seen.push_back(name);
      if (auto e = ExprValue(it->second, fpath)) out->fields.emplace_back(name, *e);
    }
  }

  void Window(const YAML::Node& k, const std::string& kpath, WindowSpec* w) {
    std::string kind = ExactlyOne(k, kpath, {"tumbling", "hopping", "session"});
    if (kind == "tumbling") {
      w->kind = WindowSpec::Kind::kTumbling;
      if (auto d = DurationValue(Field(k, "tumbling"), Join(kpath, "tumbling"), Bound::kPositive)) {
        w->size = w->slide = *d;
      }
    } else if (kind == "hopping") {
      w->kind = WindowSpec::Kind::kHopping;
      std::string hpath = Join(kpath, "hopping");
      YAML::Node h = Field(k, "hopping");
      if (CheckMap(h, hpath, {"size", "slide"})) {
        auto size = Duration(h, "size", hpath, true, Bound::kPositive);
        auto slide = Duration(h, "slide", hpath, true, Bound::kPositive);
        if (size) w->size = *size;
        if (slide) w->slide = *slide;
        if (size && slide && *slide > *size) {
          Err(Join(hpath, "slide"),
              absl::StrCat("expected a slide no larger than size (", FormatDuration(*size),
                           "), got ", Describe(Field(h, "slide"))));
        }
      }
    } else if (kind == "session") {
      w->kind = WindowSpec::Kind::kSession;
      std::string spath = Join(kpath, "session");
      YAML::Node s = Field(k, "session");
      if (CheckMap(s, spath, {"gap"})) {
        if (auto g = Duration(s, "gap", spath, true, Bound::kPositive)) w->gap = *g;
      }
    }
    w->group_paths = PathList(k, "group_by", kpath, &w->group_by);
    if (auto d = Duration(k, "early_fire_every", kpath, false, Bound::kPositive)) {
      w->early_fire_every = *d;
    }
    if (auto d = Duration(k, "allowed_lateness", kpath, false, Bound::kNonNegative)) {
      w->allowed_lateness = *d;
    }
    if (YAML::Node r = Field(k, "reconcile"); r.IsDefined()) {
      const std::string rpath = Join(kpath, "reconcile");
      if (CheckMap(r, rpath, {"id"})) {
        if (auto id = String(r, "id", rpath, true)) {
          w->reconcile_id = *id;
          w->reconcile_path = FieldPath::Parse(*id);
        }
      }
    }
    Aggregates(k, kpath, w);
  }

  void Aggregates(const YAML::Node& k, const std::string& kpath, WindowSpec* w) {
    static constexpr std::string_view kFns[] = {"count",          "sum",     "min",    "max", "avg",
                                                "count_distinct", "arg_max", "arg_min"};
    static constexpr AggFn kFnValues[] = {AggFn::kCount,  AggFn::kSum,   AggFn::kMin,
                                          AggFn::kMax,    AggFn::kAvg,   AggFn::kCountDistinct,
                                          AggFn::kArgMax, AggFn::kArgMin};
    std::string path = Join(kpath, "aggregates");
    YAML::Node a = Field(k, "aggregates");
    if (Missing(a, path, true)) return;
    if (!a.IsSequence()) {
      Err(path, absl::StrCat("expected a list, got ", Describe(a)));
      return;
    }
    if (a.size() == 0) {
      Err(path, "at least one aggregate is required");
      return;
    }
    // Output names taken so far: reserved result fields and group-by fields.
    std::map<std::string, std::string> taken = {{"window_start", "a reserved result field"},
                                                {"window_end", "a reserved result field"},
                                                {"revision", "a reserved result field"},
                                                {"state", "a reserved result field"}};
    for (const std::string& g : w->group_by) taken.emplace(g, "a group_by field");
    for (size_t i = 0; i < a.size(); ++i) {
      std::string ipath = Index(path, i);
      YAML::Node item = a[i];
      if (!CheckMap(item, ipath,
                    {"as", "count", "sum", "min", "max", "avg", "count_distinct", "arg_max",
                     "arg_min", "keep"})) {
        continue;
      }
      AggregateSpec agg;
      if (auto as = String(item, "as", ipath, true)) {
        agg.as = *as;
        auto [it, inserted] = taken.emplace(*as, "aggregates[" + std::to_string(i) + "]");
        if (!inserted) {
          Err(Join(ipath, "as"),
              absl::StrCat("duplicate output name ", Quote(*as), " (also ", it->second, ")"));
        }
      }
      std::string fn =
          ExactlyOne(item, ipath,
                     {"count", "sum", "min", "max", "avg", "count_distinct", "arg_max", "arg_min"});
      if (!fn.empty()) {
        for (size_t f = 0; f < std::size(kFns); ++f) {
          if (kFns[f] == fn) agg.fn = kFnValues[f];
        }
        std::string fpath = Join(ipath, fn);
        YAML::Node v = Field(item, fn);
        if (v.IsScalar() && v.Scalar() == "*") {
          if (agg.fn == AggFn::kCount) {
            agg.field = "*";
          } else {
            Err(fpath, absl::StrCat("\"*\" is only valid for count; ", Sv(fn), " needs a field"));
          }
        } else if (auto p = Path(v, fpath)) {
          agg.field = v.Scalar();
          agg.path = *p;
        }
      }
      if (YAML::Node keep = Field(item, "keep"); keep.IsDefined()) {
        const std::string kpath2 = Join(ipath, "keep");
        if (agg.fn != AggFn::kArgMax && agg.fn != AggFn::kArgMin) {
          Err(kpath2, "keep is only valid with arg_max or arg_min (the fields of each kept row)");
        } else {
          agg.keep_paths = NonEmptyPathList(item, "keep", ipath, &agg.keep);
        }
      }
      w->aggregates.push_back(std::move(agg));
    }
  }

  // ---- Sinks.

  void Sinks(const YAML::Node& n) {
    const std::string path = "spec.sinks";
    if (!n.IsDefined()) return;
    if (!n.IsSequence()) {
      Err(path, absl::StrCat("expected a list, got ", Describe(n)));
      return;
    }
    for (size_t i = 0; i < n.size(); ++i) Sink(n[i], Index(path, i));
  }

  void SinkInput(const YAML::Node& map, const std::string& parent, std::string* from) {
    std::optional<std::string> f = String(map, "from", parent, true);
    if (!f) return;
    *from = *f;
    if (FindNode(*f) != nullptr) return;
    std::string path = Join(parent, "from");
    size_t dot = f->rfind('.');
    if (dot != std::string::npos) {
      NodeInfo* owner = FindNode(std::string_view(*f).substr(0, dot));
      if (owner != nullptr) {
        std::string side = f->substr(dot + 1);
        if (std::find(owner->sides.begin(), owner->sides.end(), side) != owner->sides.end()) {
          return;
        }
        Err(path, absl::StrCat(Quote(owner->name), " has no side output ", Quote(side),
                               " (it has: ", absl::StrJoin(owner->sides, ", "), ")"));
        return;
      }
    }
    std::vector<std::string> known;
    for (const NodeInfo& ni : nodes_) known.push_back(ni.name);
    for (const NodeInfo& ni : nodes_) {
      if (!ni.is_source) {
        for (const std::string& s : ni.sides) known.push_back(ni.name + "." + s);
      }
    }
    for (const NodeInfo& ni : nodes_) {
      if (ni.is_source) {
        for (const std::string& s : ni.sides) known.push_back(ni.name + "." + s);
      }
    }
    Err(path, absl::StrCat("unknown node ", Quote(*f), " (known: ", KnownList(known), ")"));
  }

  void Sink(const YAML::Node& n, const std::string& path) {
    if (!CheckMap(n, path,
                  {"from", "file", "kafka", "postgres", "clickhouse", "stdout", "discard"})) {
      return;
    }
    SinkSpec sink;
    SinkInput(n, path, &sink.from);
    std::string kind =
        ExactlyOne(n, path, {"file", "kafka", "postgres", "clickhouse", "stdout", "discard"});
    std::string kpath = Join(path, kind);
    YAML::Node k = Field(n, kind);
    if (kind == "file") {
      sink.kind = SinkSpec::Kind::kFile;
      if (CheckMap(k, kpath, {"path"})) {
        if (auto p = String(k, "path", kpath, true)) sink.path = *p;
      }
    } else if (kind == "kafka") {
      sink.kind = SinkSpec::Kind::kKafka;
      if (CheckMap(k, kpath, {"topic", "bootstrap", "mode", "exactly_once"})) {
        if (auto t = String(k, "topic", kpath, true)) sink.topic = *t;
        if (auto b = String(k, "bootstrap", kpath, false)) sink.bootstrap = *b;
        if (auto m = OneOf(k, "mode", kpath, {"upsert", "changelog"})) {
          sink.kafka_mode =
              *m == "upsert" ? SinkSpec::KafkaMode::kUpsert : SinkSpec::KafkaMode::kChangelog;
        }
        if (auto e = OneOf(k, "exactly_once", kpath, {"true", "false"})) {
          sink.exactly_once = *e == "true";
          // The transaction commits with each checkpoint: without checkpoints
          // nothing would ever become visible to read_committed consumers.
          if (sink.exactly_once && spec().checkpoint.interval <= 0) {
            Err(Join(kpath, "exactly_once"),
                "needs checkpoints (spec.checkpoint.interval > 0): the Kafka transaction "
                "commits with each checkpoint");
          }
        }
      }
    } else if (kind == "postgres") {
      sink.kind = SinkSpec::Kind::kPostgres;
      if (CheckMap(k, kpath, {"dsn", "table"})) {
        if (auto d = String(k, "dsn", kpath, true)) sink.dsn = *d;
        if (auto t = String(k, "table", kpath, true)) {
          sink.table = *t;
          std::string_view name = *t;
          size_t dot = name.find('.');
          bool ok = dot == std::string_view::npos ? IsSqlIdentifier(name)
                                                  : IsSqlIdentifier(name.substr(0, dot)) &&
                                                        IsSqlIdentifier(name.substr(dot + 1));
          if (!ok) {
            Err(Join(kpath, "table"),
                absl::StrCat("expected a table name such as hourly_revenue or "
                             "analytics.hourly_revenue (letters, digits and _, not starting "
                             "with a digit, at most 63 characters per part), got ",
                             Quote(*t)));
          }
        }
      }
    } else if (kind == "clickhouse") {
      sink.kind = SinkSpec::Kind::kClickHouse;
      ClickHouseSink(k, kpath, &sink);
    } else if (kind == "stdout" || kind == "discard") {
      sink.kind = kind == "stdout" ? SinkSpec::Kind::kStdout : SinkSpec::Kind::kDiscard;
      bool ok =
          k.IsNull() || (k.IsScalar() && k.Scalar() == "true") || (k.IsMap() && k.size() == 0);
      if (!ok) Err(kpath, absl::StrCat("expected {} or true, got ", Describe(k)));
    }
    spec().sinks.push_back(std::move(sink));
  }

  // clickhouse: {url, database?, table, user?, password_file?}
  void ClickHouseSink(const YAML::Node& k, const std::string& kpath, SinkSpec* sink) {
    if (!CheckMap(k, kpath, {"url", "database", "table", "user", "password_file"})) return;
    if (auto u = String(k, "url", kpath, true)) {
      sink->url = *u;
      const bool http = absl::StartsWith(*u, "http://") || absl::StartsWith(*u, "https://");
      if (!http || u->find('?') != std::string::npos) {
        Err(Join(kpath, "url"),
            absl::StrCat("expected the server's HTTP interface such as http://127.0.0.1:8123 ",
                         "(scheme http or https, no query), got ", Quote(*u)));
      }
    }
    for (const char* field : {"database", "table"}) {
      const bool required = std::string_view(field) == "table";
      if (auto v = String(k, field, kpath, required)) {
        if (!IsSqlIdentifier(*v)) {
          Err(Join(kpath, field),
              absl::StrCat("expected a ClickHouse name such as hourly_revenue (letters, digits ",
                           "and _, not starting with a digit), got ", Quote(*v)));
        } else if (required) {
          sink->table = *v;
        } else {
          sink->database = *v;
        }
      }
    }
    if (auto u = String(k, "user", kpath, false)) sink->user = *u;
    if (auto f = String(k, "password_file", kpath, false)) sink->password_file = *f;
  }

  ParseResult result_;
  std::vector<NodeInfo> nodes_;
};

}  // namespace

absl::StatusOr<S3Url> ParseS3Url(std::string_view url) {
  constexpr absl::string_view kExpected = "expected s3://bucket/prefix";
  const std::string quoted = Quote(url);
  std::string_view rest = url;
  if (rest.substr(0, 5) != "s3://") {
    return absl::InvalidArgumentError(absl::StrCat(quoted, " is not an s3:// URL; ", kExpected));
  }
  rest.remove_prefix(5);
  S3Url u;
  const size_t slash = rest.find('/');
  u.bucket = std::string(rest.substr(0, slash));
  std::string_view prefix = slash == std::string_view::npos ? "" : rest.substr(slash + 1);
  while (!prefix.empty() && prefix.back() == '/') prefix.remove_suffix(1);
  u.prefix = std::string(prefix);
  if (u.bucket.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("names no bucket: ", kExpected, ", got ", quoted));
  }
  if (!IsS3BucketName(u.bucket)) {
    return absl::InvalidArgumentError(absl::StrCat(
        Quote(u.bucket),
        " is not a bucket name (3-63 characters: lower-case letters, digits, '.' and '-')"));
  }
  if (u.prefix.find('?') != std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("takes no query: ", kExpected,
                     " (endpoint, region and credentials come from the environment, "
                     "docs/deploy.md), got ",
                     quoted));
  }
  if (u.prefix.find("//") != std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("has an empty part in its prefix: ", kExpected, ", got ", quoted));
  }
  return u;
}

ParseResult ParseJobSpec(std::string_view yaml_text) { return SpecParser().Run(yaml_text); }

ParseResult LoadJobSpec(const std::string& file_path) {
  auto fail = [&](absl::string_view why) {
    ParseResult r;
    r.errors.push_back({"<file>", absl::StrCat("cannot read ", Quote(file_path), ": ", why)});
    return r;
  };
  std::error_code ec;
  if (std::filesystem::is_directory(file_path, ec)) return fail("is a directory");
  std::ifstream in(file_path, std::ios::binary);
  if (!in) return fail(std::strerror(errno));
  std::stringstream buf;
  buf << in.rdbuf();
  if (in.bad()) return fail("read error");
  ParseResult r = ParseJobSpec(buf.str());
  if (r.ok()) {
    std::filesystem::path abs = std::filesystem::absolute(file_path, ec);
    std::filesystem::path dir =
        ec ? std::filesystem::path(file_path).parent_path() : abs.parent_path();
    r.spec.ResolvePaths(dir.string());
  }
  return r;
}

std::string_view OperatorKindName(OperatorSpec::Kind kind) {
  for (size_t k = 0; k < std::size(kOperatorKindValues); ++k) {
    if (kOperatorKindValues[k] == kind) return kOperatorKinds[k];
  }
  return "operator";
}

bool ArrivalDriven(const JobSpec& spec) {
  if (spec.sources.empty()) return false;
  for (const SourceSpec& s : spec.sources) {
    bool lookup_table = false;
    for (const OperatorSpec& os : spec.operators) {
      lookup_table = lookup_table ||
                     (os.kind == OperatorSpec::Kind::kLookupJoin && os.table_join.table == s.name);
    }
    // A table that ends (a file, a bounded topic) is read whole before
    // anything else; one that keeps changing needs the clock.
    const bool bounded = s.kind == SourceSpec::Kind::kFile || s.kafka.bounded;
    if (lookup_table && bounded) continue;
    const std::string& field =
        s.kind == SourceSpec::Kind::kFile ? s.file.arrival_field : s.kafka.arrival_field;
    if (field.empty()) return false;
  }
  return true;
}

bool PathUnder(const std::string& path, const std::vector<std::string>& dirs) {
  const std::filesystem::path p = std::filesystem::path(path).lexically_normal();
  for (const std::string& dir : dirs) {
    const std::filesystem::path d = std::filesystem::path(dir).lexically_normal();
    const auto rel = p.lexically_relative(d);
    if (!rel.empty() && *rel.begin() != "..") return true;
  }
  return false;
}

std::vector<SpecError> CheckAllowedPaths(const JobSpec& spec,
                                         const std::vector<std::string>& allowed) {
  std::vector<SpecError> errors;
  auto check = [&](const std::string& yaml_path, const std::string& path) {
    if (path.empty()) return;
    const std::filesystem::path p = std::filesystem::path(path).lexically_normal();
    if (p.is_relative()) {
      if (!p.empty() && *p.begin() == "..") {
        errors.push_back(
            {yaml_path, absl::StrCat("path ", path, " leaves the worker's data directory")});
      }
      return;
    }
    if (PathUnder(path, allowed)) return;
    errors.push_back({yaml_path, absl::StrCat("path ", path,
                                              " is outside the directories this service allows "
                                              "(--allow-path); use a path relative to the "
                                              "worker's data directory or an allowed one")});
  };
  for (size_t i = 0; i < spec.sources.size(); ++i) {
    if (spec.sources[i].kind == SourceSpec::Kind::kFile) {
      check(absl::StrCat("spec.sources[", i, "].file.path"), spec.sources[i].file.path);
    }
  }
  for (size_t i = 0; i < spec.sinks.size(); ++i) {
    if (spec.sinks[i].kind == SinkSpec::Kind::kFile) {
      check(absl::StrCat("spec.sinks[", i, "].file.path"), spec.sinks[i].path);
    }
    // A secret the worker reads and sends to the job's URL: same rule.
    check(absl::StrCat("spec.sinks[", i, "].clickhouse.password_file"),
          spec.sinks[i].password_file);
  }
  check("spec.dead_letter.path", spec.dead_letter_path);
  const std::string& storage = spec.checkpoint.storage;
  if (storage.rfind("file://", 0) == 0) check("spec.checkpoint.storage", storage.substr(7));
  return errors;
}

std::string JobGraphHash(const JobSpec& spec) {
  std::string text;
  for (const SourceSpec& ss : spec.sources) {
    absl::StrAppend(&text, "source ", ss.name, " ", static_cast<int>(ss.kind), "\n");
  }
  for (const OperatorSpec& os : spec.operators) {
    absl::StrAppend(&text, "operator ", os.name, " ", static_cast<int>(os.kind), "\n");
  }
  for (const SinkSpec& ss : spec.sinks) {
    absl::StrAppend(&text, "sink ", ss.from, " ", static_cast<int>(ss.kind), "\n");
  }
  // xxh3 is stable across processes and releases (absl::Hash is seeded per process).
  return absl::StrFormat("%016x", XXH3_64bits(text.data(), text.size()));
}

}  // namespace caravela
