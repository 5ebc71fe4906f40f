// SpecReader: typed reading of a job YAML's values (SPEC §3). Every problem
// becomes one SpecError naming its YAML path, e.g.
//   spec.operators[1].window.tumbling: expected a duration, got "1 hour"
// and reading goes on, so a job's every error is reported at once.
//
// The job parser (job_spec.cc) reads the document's frame through it and
// hands each source's, operator's and sink's mapping to its kind's parser
// (SourceKind::Parse, OperatorKind::Parse, SinkKind::Parse) with a
// *ParseContext, so every kind reports errors in the same words. Each reader
// returns nullopt (after reporting, when the field is present but wrong, or
// required and absent) or the value.
//
// Threading: one reader per parse; not shared.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/job_spec.h"
#include "common/record.h"
#include "yaml-cpp/yaml.h"

namespace caravela {

class SpecReader {
 public:
  using Keys = std::initializer_list<std::string_view>;
  enum class Bound { kNonNegative, kPositive, kAny };

  // A source or operator of the job, for resolving references (`from`).
  struct Node {
    std::string name;
    std::string path;  // of its `name` field
    bool is_source = false;
    int index = 0;  // in sources or operators
    std::vector<std::string> sides;
    bool has_event_time = true;
  };

  explicit SpecReader(std::vector<SpecError>* errors) : errors_(errors) {}

  void Err(std::string path, std::string message);

  static std::string Join(const std::string& path, std::string_view key);
  static std::string Index(const std::string& path, size_t i);
  // A JSON string literal of `s`, for messages.
  static std::string Quote(std::string_view s);
  // What a node holds, for "expected X, got <Describe>" messages.
  static std::string Describe(const YAML::Node& n);
  // The value of `key` in mapping `map` (Undefined when absent or not a map).
  static YAML::Node Field(const YAML::Node& map, std::string_view key);

  // Reports (and returns false) unless `n` is a mapping whose keys are all in
  // `allowed` and appear once. Keys in `also_known` are neither reported nor
  // allowed: the caller reports them. Unknown keys get a spelling hint.
  bool CheckMap(const YAML::Node& n, const std::string& path, Keys allowed, Keys also_known = {});
  // The same, with keys known only at run time (e.g. the registered kinds).
  bool CheckMap(const YAML::Node& n, const std::string& path,
                const std::vector<std::string_view>& allowed);
  // True (and reports when `required`) if `n` is absent.
  bool Missing(const YAML::Node& n, const std::string& path, bool required);

  std::optional<std::string> String(const YAML::Node& map, std::string_view key,
                                    const std::string& parent, bool required);
  std::optional<std::string> OneOf(const YAML::Node& map, std::string_view key,
                                   const std::string& parent, Keys choices);
  // An optional "true"/"false".
  std::optional<bool> Bool(const YAML::Node& map, std::string_view key, const std::string& parent);
  std::optional<int64_t> Duration(const YAML::Node& map, std::string_view key,
                                  const std::string& parent, bool required, Bound bound);
  std::optional<int64_t> DurationValue(const YAML::Node& n, const std::string& path, Bound bound);
  // An optional integer >= 1.
  std::optional<int> PositiveInt(const YAML::Node& map, std::string_view key,
                                 const std::string& parent);
  std::optional<FieldPath> Path(const YAML::Node& n, const std::string& path);
  std::optional<FieldPath> PathField(const YAML::Node& map, std::string_view key,
                                     const std::string& parent, bool required);
  // A list of field paths; `texts` (optional) receives them as written.
  std::vector<FieldPath> PathList(const YAML::Node& map, std::string_view key,
                                  const std::string& parent,
                                  std::vector<std::string>* texts = nullptr);
  // PathList for a list that must name at least one field.
  std::vector<FieldPath> NonEmptyPathList(const YAML::Node& map, std::string_view key,
                                          const std::string& parent,
                                          std::vector<std::string>* texts);
  // Exactly one of `kinds` must be a key of `map`; returns it or "".
  std::string ExactlyOne(const YAML::Node& map, const std::string& path, Keys kinds);
  // An expression field: must be a scalar that compiles.
  std::optional<std::string> ExprString(const YAML::Node& map, std::string_view key,
                                        const std::string& parent);
  std::optional<std::string> ExprValue(const YAML::Node& n, const std::string& path);

  // A window shape: exactly one of `tumbling: D`, `hopping: {size, slide}`
  // and, when `session` is set, `session: {gap}`. Fills what it reads;
  // returns "tumbling", "hopping", "session" or "" (reported).
  struct WindowShape {
    int64_t size = 0, slide = 0, gap = 0;
  };
  std::string Window(const YAML::Node& k, const std::string& kpath, bool session,
                     WindowShape* shape);

  // A join's `on`: a non-empty list whose items are a field name present on
  // both sides or a [<left>_field, <right>_field] pair.
  std::vector<JoinKeySpec> JoinKeys(const YAML::Node& k, const std::string& kpath,
                                    std::string_view left, std::string_view right);
  // Optional `type` (default inner): inner|left|right|full, or inner|left
  // when `outer_right` is false.
  JoinType JoinTypeField(const YAML::Node& k, const std::string& kpath, bool outer_right);

  // ---- The job's nodes (collected before operators are read).
  std::vector<Node>& nodes() { return nodes_; }
  Node* FindNode(std::string_view name);
  // Up to ten names, for "known: ..." hints.
  static std::string KnownList(const std::vector<std::string>& known);
  // Resolves an operator's input field `key` (`from`, or `left`/`right`/
  // `stream` of joins): a source, or an operator listed before operator
  // `op_index`. Returns whether the input carries event time (true when
  // unknown, to avoid follow-up errors).
  bool OperatorInput(const YAML::Node& map, const std::string& parent, int op_index,
                     const std::string& self, std::string* from, std::string_view key = "from");
  void NoEventTime(const std::string& kpath, const std::string& from, std::string_view what,
                   std::string_view key = "from");

 private:
  // `keys`: the first `n_allowed` are allowed (and hinted), the rest known.
  bool CheckMapKeys(const YAML::Node& n, const std::string& path,
                    const std::vector<std::string_view>& keys, size_t n_allowed);

  std::vector<SpecError>* errors_;
  std::vector<Node> nodes_;
};

// What an operator kind's parser reads from (OperatorKind::Parse).
struct OperatorParseContext {
  SpecReader& r;
  const YAML::Node& node;  // the kind's value, e.g. what `window:` maps to
  std::string path;        // its YAML path, e.g. spec.operators[2].window
  int index = 0;           // the operator's index in spec.operators
  std::string self;        // the operator's name
  const JobSpec& job;      // what is parsed so far (checkpoint, sources)
  // Whether the operator's output carries event time; the kind sets it
  // (default: yes).
  bool has_event_time = true;

  // OperatorInput for this operator.
  bool Input(std::string* from, std::string_view key = "from") {
    return r.OperatorInput(node, path, index, self, from, key);
  }
  // An input that must carry event time for `what`.
  void TimedInput(std::string* from, std::string_view what, std::string_view key = "from") {
    if (!Input(from, key)) r.NoEventTime(path, *from, what, key);
  }
};

// What a source kind's parser reads from (SourceKind::Parse).
struct SourceParseContext {
  SpecReader& r;
  const YAML::Node& node;  // the kind's value, e.g. what `kafka:` maps to
  std::string path;        // its YAML path, e.g. spec.sources[0].kafka
  const JobSpec& job;      // what is parsed so far (checkpoint)
};

// What a sink kind's parser reads from (SinkKind::Parse).
struct SinkParseContext {
  SpecReader& r;
  const YAML::Node& node;  // the kind's value, e.g. what `kafka:` maps to
  std::string path;        // its YAML path, e.g. spec.sinks[1].kafka
  const JobSpec& job;      // what is parsed so far (checkpoint, sources, operators)
};

}  // namespace caravela
