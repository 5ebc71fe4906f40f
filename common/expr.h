// Expression language of job specs (SPEC §3), used by `filter.where` and
// `project.fields`:
//   field refs (dot paths, e.g. `navio_info.navio_id`), string literals in single
//   or double quotes, numbers, true/false/null, `== != < <= > >=`, `and or not`,
//   `x in (a, b, ...)`, `+ - * / %`, `x is null`, `x is not null`, parentheses.
// Semantics are SQL-like three-valued logic: a missing field reads as null; a
// comparison or arithmetic with null yields null; `filter` keeps a record only
// when its predicate is exactly `true`. Int arithmetic is exact (overflow falls
// back to double), decimals stay exact for + and -, `/` always yields a double;
// division or modulo by zero yields null. Evaluation never throws or crashes.
//
// Threading: a compiled Expr is immutable; Eval may be called concurrently.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/record.h"
#include "common/status.h"

namespace caravela {

class Expr {
 public:
  virtual ~Expr() = default;

  // Parses `text`. Errors are InvalidArgument with a message that quotes the
  // offending token and its 1-based column, e.g.
  // "unexpected token ')' at column 7 in 'a == )'".
  static absl::StatusOr<std::unique_ptr<Expr>> Compile(std::string_view text);

  // Evaluates against `record`. String/object results may be views into the
  // record or into this Expr (literals); copy them before the record changes.
  virtual Value Eval(const Record& record) const = 0;

  // Field paths this expression reads (for validation and docs).
  virtual void CollectFields(std::vector<FieldPath>* out) const = 0;

  // The source text, as compiled.
  const std::string& text() const { return text_; }

 protected:
  std::string text_;
};

// True iff `v` is the boolean true.
inline bool IsTrue(const Value& v) { return v.type == ValueType::kBool && v.b; }

}  // namespace caravela
