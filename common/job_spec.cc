// Job spec parser/validator. See job_spec.h for the contract.
//
// The YAML document is loaded with yaml-cpp (the only place that can throw;
// every yaml-cpp exception is caught and reported at path "<yaml>"), then
// walked once in document order by SpecParser, which fills the JobSpec and
// appends one SpecError per problem (through SpecReader, spec_reader.h; each
// operator's mapping is read by its kind, OperatorKind::Parse). Cross references (`from`) are
// resolved against names collected in a first pass, so an error names the real cause (unknown node,
// node defined later, side output read by an operator, ...).
#include "common/job_spec.h"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <functional>
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
#include "common/job_outputs.h"
#include "common/kind_registry.h"
#include "common/spec_reader.h"
#include "common/time_util.h"
#include "xxhash.h"
#include "yaml-cpp/yaml.h"

namespace caravela {

std::string_view SourceSpec::kind_name() const {
  return kind == nullptr ? std::string_view() : kind->name();
}

bool SourceSpec::is(std::string_view name) const { return kind_name() == name; }

std::string_view OperatorSpec::kind_name() const {
  return kind == nullptr ? std::string_view() : kind->name();
}

bool OperatorSpec::is(std::string_view name) const { return kind_name() == name; }

std::vector<std::string> OperatorSpec::Inputs() const {
  return kind == nullptr ? std::vector<std::string>() : kind->Inputs(*this);
}

std::vector<std::string> OperatorSpec::SideOutputs() const {
  return kind == nullptr ? std::vector<std::string>() : kind->SideOutputs();
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
    if (s.kind == nullptr) continue;
    const std::optional<std::string> bootstrap = s.kind->KafkaBootstrap(s);
    if (bootstrap.has_value() && bootstrap->empty()) return true;
  }
  for (const SinkSpec& s : sinks) {
    if (s.kind == nullptr) continue;
    const std::optional<std::string> bootstrap = s.kind->KafkaBootstrap(s);
    if (bootstrap.has_value() && bootstrap->empty()) return true;
  }
  return false;
}

std::string_view SinkSpec::kind_name() const {
  return kind == nullptr ? std::string_view() : kind->name();
}

bool SinkSpec::is(std::string_view name) const { return kind_name() == name; }

std::string SinkSpec::Label() const { return kind == nullptr ? "?" : kind->Label(*this); }

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
    if (s.kind == nullptr) continue;
    for (auto& [yaml_path, path] : s.kind->Files(s)) ResolvePath(base_dir, path);
  }
  for (SinkSpec& s : sinks) {
    if (s.kind == nullptr) continue;
    for (auto& [yaml_path, path] : s.kind->Files(s)) ResolvePath(base_dir, path);
  }
  ResolvePath(base_dir, &dead_letter_path);
}

namespace {

// This abseil build does not alias absl::string_view to std::string_view.
absl::string_view Sv(std::string_view s) { return absl::string_view(s.data(), s.size()); }

std::string Quote(std::string_view s) { return SpecReader::Quote(s); }

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

// CheckJobLimits' two halves: before the YAML is parsed, and after.
bool SizeError(std::string_view text, std::vector<SpecError>* errors) {
  if (text.size() <= kMaxJobYamlBytes) return false;
  errors->push_back(
      {"<yaml>", absl::StrCat("the job is ", text.size(), " bytes; a job's YAML may have at most ",
                              kMaxJobYamlBytes, " (1 MiB): split it into several jobs")});
  return true;
}

bool StepsError(const YAML::Node& root, std::vector<SpecError>* errors) {
  // A missing key reads as an invalid node: IsDefined first, it never throws.
  if (!root.IsDefined() || !root.IsMap()) return false;
  const YAML::Node spec = root["spec"];
  if (!spec.IsDefined() || !spec.IsMap()) return false;
  size_t steps = 0;
  for (const char* list : {"sources", "operators", "sinks"}) {
    const YAML::Node n = spec[list];
    if (n.IsDefined() && n.IsSequence()) steps += n.size();
  }
  if (steps <= static_cast<size_t>(kMaxJobSteps)) return false;
  errors->push_back({"spec", absl::StrCat("the job has ", steps,
                                          " sources, operators and sinks; a job may have at most ",
                                          kMaxJobSteps, ": split it into several jobs")});
  return true;
}

class SpecParser : private SpecReader {
 public:
  explicit SpecParser(const KindRegistry& kinds) : SpecReader(&result_.errors), kinds_(kinds) {}

  ParseResult Run(std::string_view text) {
    if (SizeError(text, &result_.errors)) return std::move(result_);
    YAML::Node root;
    try {
      root = YAML::Load(std::string(text));
    } catch (const YAML::Exception& e) {
      YamlError(e);
      return std::move(result_);
    }
    if (StepsError(root, &result_.errors)) return std::move(result_);
    try {
      Document(root);
    } catch (const YAML::Exception& e) {
      // Not expected (every access is type-checked first); reported, never thrown.
      YamlError(e);
    } catch (const std::exception& e) {
      Err("<yaml>", absl::StrCat("internal error: ", e.what()));
    }
    if (result_.errors.empty()) {
      for (SpecError& e : CheckOwnOutputs(spec())) result_.errors.push_back(std::move(e));
    }
    return std::move(result_);
  }

 private:
  using NodeInfo = SpecReader::Node;

  JobSpec& spec() { return result_.spec; }

  void YamlError(const YAML::Exception& e) {
    if (e.mark.is_null()) {
      Err("<yaml>", e.msg);
    } else {
      Err("<yaml>",
          absl::StrCat("line ", e.mark.line + 1, ", column ", e.mark.column + 1, ": ", e.msg));
    }
  }

  // The operator kinds whose keys `op` (an operator's mapping) has.
  std::vector<const OperatorKind*> KindsOf(const YAML::Node& op) const {
    std::vector<const OperatorKind*> out;
    for (const OperatorKind* k : kinds_.operators.all()) {
      if (Field(op, k->name()).IsDefined()) out.push_back(k);
    }
    return out;
  }

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
                  {"parallelism", "max_parallelism", "exchange", "exchange_compression",
                   "checkpoint", "sources", "operators", "sinks", "dead_letter"})) {
      return;
    }
    CollectNodes(s);
    if (auto p = PositiveInt(s, "parallelism", "spec")) spec().parallelism = *p;
    if (auto m = PositiveInt(s, "max_parallelism", "spec")) {
      if (!ValidateMaxParallelism(*m).ok()) {
        Err("spec.max_parallelism", absl::StrCat("expected 1..", kMaxMaxParallelism, ", got ", *m));
      } else {
        spec().max_parallelism = *m;
        if (spec().parallelism > *m) {
          Err("spec.parallelism", absl::StrCat("expected at most max_parallelism (", *m, "), got ",
                                               spec().parallelism));
        }
      }
    } else if (spec().parallelism > kDefaultMaxParallelism &&
               !Field(s, "max_parallelism").IsDefined()) {
      Err("spec.parallelism",
          absl::StrCat("expected at most max_parallelism (", kDefaultMaxParallelism,
                       " by default; set spec.max_parallelism for more), got ",
                       spec().parallelism));
    }
    if (auto x = OneOf(s, "exchange", "spec", {"network", "kafka"})) spec().exchange = *x;
    if (auto c = OneOf(s, "exchange_compression", "spec", {"none", "lz4"})) {
      spec().exchange_compression = *c == "none" ? "" : *c;
      if (!spec().exchange_compression.empty() && spec().exchange == "network") {
        Err("spec.exchange_compression",
            "compresses Kafka exchanges only; remove it or set spec.exchange: kafka");
      }
    }
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
        nodes().push_back(std::move(info));
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
        // Side outputs as the kind declares them (one source of truth).
        for (const OperatorKind* kind : KindsOf(ops[i])) {
          for (std::string& side : kind->SideOutputs()) {
            if (std::find(info.sides.begin(), info.sides.end(), side) == info.sides.end()) {
              info.sides.push_back(std::move(side));
            }
          }
        }
        nodes().push_back(std::move(info));
      }
    }
  }

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
      const StorageScheme* scheme = nullptr;
      std::vector<std::string> forms;
      for (const StorageScheme* k : kinds_.storages.all()) {
        const std::string prefix = absl::StrCat(Sv(k->name()), "://");
        forms.push_back(prefix);
        if (absl::StartsWith(*st, prefix) && k->Matches(*st)) scheme = k;
      }
      if (scheme == nullptr) {
        Err(storage_path,
            absl::StrCat("expected a ", absl::StrJoin(forms, " or "), " URL, got ", Quote(*st)));
      } else if (absl::Status valid = scheme->Validate(*st); !valid.ok()) {
        Err(storage_path, std::string(valid.message()));
      } else {
        cp.storage = *st;
        cp.scheme = scheme;
      }
    }
    if (auto r = PositiveInt(n, "retain", path)) cp.retain = *r;
  }

  // An optional integer >= 1 at `parent`.`key`; nullopt (with an error if it
  // is present but wrong) otherwise.
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

  // The one kind of `registry` whose key `n` has (a source's `file:` or
  // `kafka:`, a sink's `file:`, `postgres:`, ...); none or several is an
  // error at `path` naming the keys.
  template <class Kind>
  const Kind* OneKind(const YAML::Node& n, const std::string& path,
                      const KindList<Kind>& registry) {
    std::vector<const Kind*> present;
    for (const Kind* k : registry.all()) {
      if (Field(n, k->name()).IsDefined()) present.push_back(k);
    }
    if (present.size() == 1) return present[0];
    std::vector<std::string> names;
    for (std::string_view k : registry.Names()) names.emplace_back(k);
    if (present.empty()) {
      Err(path, absl::StrCat("expected one of ", absl::StrJoin(names, ", ")));
    } else {
      std::vector<std::string> got;
      got.reserve(present.size());
      for (const Kind* k : present) got.emplace_back(k->name());
      Err(path, absl::StrCat("expected exactly one of ", absl::StrJoin(names, ", "), ", got ",
                             absl::StrJoin(got, " and ")));
    }
    return nullptr;
  }

  void Source(const YAML::Node& n, const std::string& path) {
    std::vector<std::string_view> allowed = {"name"};
    for (std::string_view k : kinds_.sources.Names()) allowed.push_back(k);
    for (std::string_view k : {"format", "key", "event_time", "watermark"}) allowed.push_back(k);
    if (!CheckMap(n, path, allowed)) return;
    SourceSpec src;
    if (auto name = NodeName(n, path)) src.name = *name;
    if ((src.kind = OneKind(n, path, kinds_.sources)) != nullptr) {
      const YAML::Node k = Field(n, src.kind->name());
      SourceParseContext ctx{*this, k, Join(path, src.kind->name()), spec()};
      src.config = src.kind->Parse(ctx);
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

  void Operator(const YAML::Node& n, const std::string& path, int index) {
    std::vector<std::string> names = {"name"};
    for (std::string_view k : kinds_.operators.Names()) names.emplace_back(k);
    std::vector<std::string_view> allowed(names.begin(), names.end());
    if (!CheckMap(n, path, allowed)) return;
    OperatorSpec op;
    if (auto name = NodeName(n, path)) op.name = *name;
    std::vector<const OperatorKind*> present = KindsOf(n);
    if (present.size() != 1) {
      std::vector<std::string> kinds(names.begin() + 1, names.end());
      if (present.empty()) {
        Err(path, absl::StrCat("expected one of ", absl::StrJoin(kinds, ", ")));
      } else {
        std::vector<std::string> got;
        got.reserve(present.size());
        for (const OperatorKind* k : present) got.emplace_back(k->name());
        Err(path, absl::StrCat("expected exactly one of ", absl::StrJoin(kinds, ", "), ", got ",
                               absl::StrJoin(got, " and ")));
      }
      spec().operators.push_back(std::move(op));
      return;
    }
    op.kind = present[0];
    const YAML::Node k = Field(n, op.kind->name());
    OperatorParseContext ctx{*this, k, Join(path, op.kind->name()), index, op.name, spec()};
    op.config = op.kind->Parse(ctx);
    if (NodeInfo* self = FindNode(op.name); self != nullptr && !self->is_source) {
      self->has_event_time = ctx.has_event_time;
    }
    spec().operators.push_back(std::move(op));
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
    for (const NodeInfo& ni : nodes()) known.push_back(ni.name);
    for (const NodeInfo& ni : nodes()) {
      if (!ni.is_source) {
        for (const std::string& s : ni.sides) known.push_back(ni.name + "." + s);
      }
    }
    for (const NodeInfo& ni : nodes()) {
      if (ni.is_source) {
        for (const std::string& s : ni.sides) known.push_back(ni.name + "." + s);
      }
    }
    Err(path, absl::StrCat("unknown node ", Quote(*f), " (known: ", KnownList(known), ")"));
  }

  void Sink(const YAML::Node& n, const std::string& path) {
    std::vector<std::string_view> allowed = {"from"};
    for (std::string_view k : kinds_.sinks.Names()) allowed.push_back(k);
    if (!CheckMap(n, path, allowed)) return;
    SinkSpec sink;
    SinkInput(n, path, &sink.from);
    if ((sink.kind = OneKind(n, path, kinds_.sinks)) != nullptr) {
      const YAML::Node k = Field(n, sink.kind->name());
      SinkParseContext ctx{*this, k, Join(path, sink.kind->name()), spec()};
      sink.config = sink.kind->Parse(ctx);
    }
    spec().sinks.push_back(std::move(sink));
  }

  const KindRegistry& kinds_;
  ParseResult result_;
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

std::vector<SpecError> CheckJobLimits(std::string_view yaml_text) {
  std::vector<SpecError> errors;
  if (SizeError(yaml_text, &errors)) return errors;
  try {
    StepsError(YAML::Load(std::string(yaml_text)), &errors);
  } catch (const YAML::Exception&) {
    // Not YAML: ParseJobSpec (on the coordinator) says where.
  }
  return errors;
}

ParseResult ParseJobSpec(std::string_view yaml_text, const KindRegistry& kinds) {
  return SpecParser(kinds).Run(yaml_text);
}

ParseResult LoadJobSpec(const std::string& file_path, const KindRegistry& kinds) {
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
  ParseResult r = ParseJobSpec(buf.str(), kinds);
  if (r.ok()) {
    std::filesystem::path abs = std::filesystem::absolute(file_path, ec);
    std::filesystem::path dir =
        ec ? std::filesystem::path(file_path).parent_path() : abs.parent_path();
    r.spec.ResolvePaths(dir.string());
  }
  return r;
}

std::string WhyNotClusterParallelism(const JobSpec& spec, int parallelism) {
  if (parallelism <= 1 || !ArrivalDriven(spec)) return "";
  return absl::StrCat(
      "every source of the job has an arrival_field: it replays its input in arrival order, "
      "which a cluster does in one task (the answer is then the one `caravela run` gives); "
      "run it with parallelism 1, not ",
      parallelism);
}

bool ArrivalDriven(const JobSpec& spec) {
  if (spec.sources.empty()) return false;
  for (const SourceSpec& s : spec.sources) {
    bool lookup_table = false;
    for (const OperatorSpec& os : spec.operators) {
      if (os.kind == nullptr) continue;
      const std::vector<std::string> inputs = os.Inputs();
      for (int in : os.kind->PreloadedInputs()) {
        lookup_table = lookup_table || inputs[static_cast<size_t>(in)] == s.name;
      }
    }
    if (s.kind == nullptr) return false;
    // A table that ends (a file, a bounded topic) is read whole before
    // anything else; one that keeps changing needs the clock.
    if (lookup_table && s.kind->Bounded(s)) continue;
    if (s.kind->ArrivalField(s).empty()) return false;
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

namespace {

// Calls `f(yaml_path, path)` for every file the job names: its sources'
// and sinks' files, the dead letter and file:// checkpoint storage.
void ForEachFilePath(const JobSpec& spec,
                     const std::function<void(const std::string&, const std::string&)>& f) {
  for (size_t i = 0; i < spec.sources.size(); ++i) {
    SourceSpec source = spec.sources[i];
    if (source.kind == nullptr) continue;
    for (auto& [yaml_path, path] : source.kind->Files(source)) {
      if (!path->empty()) f(absl::StrCat("spec.sources[", i, "].", yaml_path), *path);
    }
  }
  for (size_t i = 0; i < spec.sinks.size(); ++i) {
    // Every file a sink touches: its output, a secret it reads, ...
    SinkSpec sink = spec.sinks[i];
    if (sink.kind == nullptr) continue;
    for (auto& [yaml_path, path] : sink.kind->Files(sink)) {
      if (!path->empty()) f(absl::StrCat("spec.sinks[", i, "].", yaml_path), *path);
    }
  }
  if (!spec.dead_letter_path.empty()) f("spec.dead_letter.path", spec.dead_letter_path);
  if (spec.checkpoint.scheme != nullptr) {
    const std::string local = spec.checkpoint.scheme->LocalPath(spec.checkpoint.storage);
    if (!local.empty()) f("spec.checkpoint.storage", local);
  }
}

}  // namespace

std::string JoinSpecErrors(const std::vector<SpecError>& errors) {
  std::vector<std::string> lines;
  lines.reserve(errors.size());
  for (const SpecError& e : errors) lines.push_back(e.ToString());
  return absl::StrJoin(lines, "; ");
}

std::vector<SpecError> CheckAllowedPaths(const JobSpec& spec,
                                         const std::vector<std::string>& allowed) {
  std::vector<SpecError> errors;
  ForEachFilePath(spec, [&](const std::string& yaml_path, const std::string& path) {
    const std::filesystem::path p = std::filesystem::path(path).lexically_normal();
    if (p.is_relative()) {
      if (!p.empty() && *p.begin() == "..") {
        errors.push_back(
            {yaml_path, absl::StrCat("path ", path, " leaves the workers' shared directory")});
      }
      return;
    }
    if (PathUnder(path, allowed)) return;
    errors.push_back({yaml_path, absl::StrCat("path ", path,
                                              " is outside the directories this service allows "
                                              "(--allow-path, --shared-dir); use a path relative "
                                              "to the workers' shared directory or an allowed "
                                              "one")});
  });
  return errors;
}

std::vector<SpecError> RelativeFilePaths(const JobSpec& spec) {
  std::vector<SpecError> errors;
  ForEachFilePath(spec, [&](const std::string& yaml_path, const std::string& path) {
    if (std::filesystem::path(path).is_relative()) {
      errors.push_back({yaml_path, absl::StrCat("path ", path, " is relative")});
    }
  });
  return errors;
}

namespace {

std::string Xxh3Hex(const std::string& text) {
  // xxh3 is stable across processes and releases (absl::Hash is seeded per process).
  return absl::StrFormat("%016x", XXH3_64bits(text.data(), text.size()));
}

}  // namespace

std::string JobGraphHash(const JobSpec& spec) {
  std::string text = "graph v2\n";
  for (const SourceSpec& ss : spec.sources) {
    absl::StrAppend(&text, "source ", ss.name, " ", Sv(ss.kind_name()), "\n");
  }
  for (const OperatorSpec& os : spec.operators) {
    absl::StrAppend(&text, "operator ", os.name, " ", Sv(os.kind_name()), "\n");
  }
  for (const SinkSpec& ss : spec.sinks) {
    absl::StrAppend(&text, "sink ", ss.from, " ", Sv(ss.kind_name()), "\n");
  }
  return Xxh3Hex(text);
}

std::string LegacyJobGraphHash(const JobSpec& spec) {
  // The enums' numbers as they were: sources, operators and sinks by their
  // kind's legacy_id.
  std::string text;
  for (const SourceSpec& ss : spec.sources) {
    if (ss.kind == nullptr || ss.kind->legacy_id() < 0) return "";
    absl::StrAppend(&text, "source ", ss.name, " ", ss.kind->legacy_id(), "\n");
  }
  for (const OperatorSpec& os : spec.operators) {
    if (os.kind == nullptr || os.kind->legacy_id() < 0) return "";
    absl::StrAppend(&text, "operator ", os.name, " ", os.kind->legacy_id(), "\n");
  }
  for (const SinkSpec& ss : spec.sinks) {
    if (ss.kind == nullptr || ss.kind->legacy_id() < 0) return "";
    absl::StrAppend(&text, "sink ", ss.from, " ", ss.kind->legacy_id(), "\n");
  }
  return Xxh3Hex(text);
}

bool JobGraphHashMatches(const JobSpec& spec, std::string_view hash) {
  if (hash == JobGraphHash(spec)) return true;
  const std::string legacy = LegacyJobGraphHash(spec);
  return !legacy.empty() && hash == legacy;
}

}  // namespace caravela
