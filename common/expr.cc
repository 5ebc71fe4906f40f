// Expression compiler and evaluator. See expr.h for the language and its
// semantics.
//
// Compile() lexes the whole text, parses it by recursive descent into a tree of
// small immutable node classes, and folds constant subtrees. Evaluation walks
// the tree with one virtual call per node; Values are PODs that view into the
// record or into literal storage owned by the tree, so evaluation allocates
// nothing (except when comparing whole objects/arrays, which is rare).
#include "common/expr.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace caravela {
namespace {

// Deepest tree (and parser recursion) accepted; bounds Eval's stack use.
constexpr int kMaxDepth = 256;
// `in` lists of literal strings/ints at least this long are looked up in a set.
constexpr size_t kInSetThreshold = 8;

constexpr int kMaxScale = 18;

// This abseil build does not alias absl::string_view to std::string_view.
inline absl::string_view Sv(std::string_view s) { return absl::string_view(s.data(), s.size()); }

// ---------------------------------------------------------------------------
// Value helpers (the semantics in expr.h).

// Kinds that may be compared with each other: numbers with numbers, strings
// with strings, and so on. Null is handled before.
int CompareKind(ValueType t) {
  switch (t) {
    case ValueType::kInt:
    case ValueType::kDouble:
    case ValueType::kDecimal:
      return 2;
    default:
      return static_cast<int>(t) + 10;
  }
}

double ToDouble(const Value& v) {
  switch (v.type) {
    case ValueType::kInt:
      return static_cast<double>(v.i);
    case ValueType::kDouble:
      return v.d;
    case ValueType::kDecimal:
      return v.scale <= kMaxScale ? static_cast<double>(v.i) / static_cast<double>(kPow10[v.scale])
                                  : static_cast<double>(v.i) / std::pow(10.0, v.scale);
    default:
      return 0;
  }
}

// An int or a decimal as mantissa * 10^-scale.
struct Exact {
  int64_t m;
  int scale;
  bool is_int;
};

bool GetExact(const Value& v, Exact* e) {
  if (v.type == ValueType::kInt) {
    *e = {v.i, 0, true};
    return true;
  }
  if (v.type == ValueType::kDecimal && v.scale <= kMaxScale) {
    *e = {v.i, v.scale, false};
    return true;
  }
  return false;
}

bool Rescale(int64_t m, int from, int to, int64_t* out) {
  return !__builtin_mul_overflow(m, kPow10[to - from], out);
}

// Brings both operands to the larger scale; false on overflow.
bool Align(const Exact& x, const Exact& y, int64_t* mx, int64_t* my, int* scale) {
  *scale = std::max(x.scale, y.scale);
  return Rescale(x.m, x.scale, *scale, mx) && Rescale(y.m, y.scale, *scale, my);
}

Value MakeExact(int64_t m, int scale, bool is_int) {
  return is_int ? Value::Int(m) : Value::Decimal(m, static_cast<uint8_t>(scale));
}

// Non-finite doubles (overflow to infinity, NaN) become null.
Value MakeDouble(double d) { return std::isfinite(d) ? Value::Double(d) : Value::Null(); }

enum class CmpOp { kEq, kNe, kLt, kLe, kGt, kGe };
enum class ArithOp { kAdd, kSub, kMul, kDiv, kMod };

// Three-valued comparison: null if either side is null or the kinds differ.
inline Value Compare(CmpOp op, const Value& a, const Value& b) {
  if (a.is_null() || b.is_null()) return Value::Null();
  if (a.type != b.type && CompareKind(a.type) != CompareKind(b.type)) return Value::Null();
  int c;
  if (a.type == ValueType::kString && b.type == ValueType::kString) {
    c = a.s.compare(b.s);
  } else if (a.type == ValueType::kInt && b.type == ValueType::kInt) {
    c = a.i < b.i ? -1 : (a.i > b.i ? 1 : 0);
  } else {
    if ((a.type == ValueType::kDouble && std::isnan(a.d)) ||
        (b.type == ValueType::kDouble && std::isnan(b.d))) {
      return Value::Null();
    }
    c = CompareValues(a, b);
  }
  switch (op) {
    case CmpOp::kEq:
      return Value::Bool(c == 0);
    case CmpOp::kNe:
      return Value::Bool(c != 0);
    case CmpOp::kLt:
      return Value::Bool(c < 0);
    case CmpOp::kLe:
      return Value::Bool(c <= 0);
    case CmpOp::kGt:
      return Value::Bool(c > 0);
    case CmpOp::kGe:
      return Value::Bool(c >= 0);
  }
  return Value::Null();
}

Value Arith(ArithOp op, const Value& a, const Value& b) {
  if (!a.is_number() || !b.is_number()) return Value::Null();  // includes null
  Exact x, y;
  bool exact = GetExact(a, &x) && GetExact(b, &y);
  switch (op) {
    case ArithOp::kAdd:
    case ArithOp::kSub: {
      int64_t mx, my, r;
      int s;
      if (exact && Align(x, y, &mx, &my, &s) &&
          !(op == ArithOp::kAdd ? __builtin_add_overflow(mx, my, &r)
                                : __builtin_sub_overflow(mx, my, &r))) {
        return MakeExact(r, s, x.is_int && y.is_int);
      }
      double da = ToDouble(a), db = ToDouble(b);
      return MakeDouble(op == ArithOp::kAdd ? da + db : da - db);
    }
    case ArithOp::kMul: {
      int64_t r;
      if (exact && !__builtin_mul_overflow(x.m, y.m, &r)) {
        // Drop trailing zeros the product gained beyond the operands' scale:
        // 1.5 * 2.0 = 3.0, 19.99 * 1.10 = 21.989.
        int s = x.scale + y.scale;
        int keep = std::max(x.scale, y.scale);
        while (s > keep && r % 10 == 0) {
          r /= 10;
          --s;
        }
        while (s > kMaxScale && r % 10 == 0) {
          r /= 10;
          --s;
        }
        if (s <= kMaxScale) return MakeExact(r, s, x.is_int && y.is_int);
      }
      return MakeDouble(ToDouble(a) * ToDouble(b));
    }
    case ArithOp::kDiv: {
      if (exact) {
        if (y.m == 0) return Value::Null();
        int64_t mx, my;
        int s;
        // Dividing aligned mantissas keeps 0.3 / 0.1 == 3.0 exactly.
        if (Align(x, y, &mx, &my, &s)) {
          return MakeDouble(static_cast<double>(mx) / static_cast<double>(my));
        }
      }
      double db = ToDouble(b);
      if (db == 0) return Value::Null();
      return MakeDouble(ToDouble(a) / db);
    }
    case ArithOp::kMod: {
      if (exact) {
        if (y.m == 0) return Value::Null();
        int64_t mx, my;
        int s;
        if (Align(x, y, &mx, &my, &s)) {
          if (my == 0) return Value::Null();
          int64_t r = my == -1 ? 0 : mx % my;
          return MakeExact(r, s, x.is_int && y.is_int);
        }
      }
      double db = ToDouble(b);
      if (db == 0) return Value::Null();
      return MakeDouble(std::fmod(ToDouble(a), db));
    }
  }
  return Value::Null();
}

Value Negate(const Value& v) {
  switch (v.type) {
    case ValueType::kInt:
      if (v.i == std::numeric_limits<int64_t>::min()) return MakeDouble(-static_cast<double>(v.i));
      return Value::Int(-v.i);
    case ValueType::kDecimal:
      if (v.i == std::numeric_limits<int64_t>::min()) return MakeDouble(-ToDouble(v));
      return Value::Decimal(-v.i, v.scale);
    case ValueType::kDouble:
      return Value::Double(-v.d);
    default:
      return Value::Null();
  }
}

// ---------------------------------------------------------------------------
// Tree nodes.

class Node {
 public:
  virtual ~Node() = default;
  virtual Value Eval(const Record& r) const = 0;
  virtual void Collect(std::vector<FieldPath>* out) const = 0;
  // Non-null for literal nodes.
  virtual const Value* literal() const { return nullptr; }
  // Non-null for plain field references.
  virtual const FieldPath* field() const { return nullptr; }

  int depth = 1;
};

using NodePtr = std::unique_ptr<Node>;

void AddPath(const FieldPath& p, std::vector<FieldPath>* out) {
  for (const FieldPath& q : *out) {
    if (q.parts == p.parts) return;
  }
  out->push_back(p);
}

class LiteralNode final : public Node {
 public:
  explicit LiteralNode(const Value& v) : value_(v) {}
  explicit LiteralNode(std::string s) : storage_(std::move(s)) { value_ = Value::String(storage_); }
  LiteralNode(const LiteralNode&) = delete;
  LiteralNode& operator=(const LiteralNode&) = delete;

  Value Eval(const Record&) const override { return value_; }
  void Collect(std::vector<FieldPath>*) const override {}
  const Value* literal() const override { return &value_; }

 private:
  std::string storage_;  // string literals; value_.s views it
  Value value_;
};

class FieldNode final : public Node {
 public:
  explicit FieldNode(FieldPath p) : path_(std::move(p)) {}
  Value Eval(const Record& r) const override { return r.GetPath(path_); }
  void Collect(std::vector<FieldPath>* out) const override { AddPath(path_, out); }
  const FieldPath* field() const override { return &path_; }

 private:
  FieldPath path_;
};

template <CmpOp kOp>
class CompareNode final : public Node {
 public:
  CompareNode(NodePtr l, NodePtr r) : l_(std::move(l)), r_(std::move(r)) {}
  Value Eval(const Record& rec) const override {
    return Compare(kOp, l_->Eval(rec), r_->Eval(rec));
  }
  void Collect(std::vector<FieldPath>* out) const override {
    l_->Collect(out);
    r_->Collect(out);
  }

 private:
  NodePtr l_, r_;
};

// The common filter shape `field <op> literal`: one virtual call, no
// allocation.
template <CmpOp kOp>
class CompareFieldLiteralNode final : public Node {
 public:
  CompareFieldLiteralNode(FieldPath path, NodePtr lit)
      : path_(std::move(path)), lit_(std::move(lit)), value_(*lit_->literal()) {}
  Value Eval(const Record& rec) const override { return Compare(kOp, rec.GetPath(path_), value_); }
  void Collect(std::vector<FieldPath>* out) const override { AddPath(path_, out); }

 private:
  FieldPath path_;
  NodePtr lit_;  // owns the storage value_ may view
  Value value_;
};

template <ArithOp kOp>
class ArithNode final : public Node {
 public:
  ArithNode(NodePtr l, NodePtr r) : l_(std::move(l)), r_(std::move(r)) {}
  Value Eval(const Record& rec) const override { return Arith(kOp, l_->Eval(rec), r_->Eval(rec)); }
  void Collect(std::vector<FieldPath>* out) const override {
    l_->Collect(out);
    r_->Collect(out);
  }

 private:
  NodePtr l_, r_;
};

class NegNode final : public Node {
 public:
  explicit NegNode(NodePtr x) : x_(std::move(x)) {}
  Value Eval(const Record& rec) const override { return Negate(x_->Eval(rec)); }
  void Collect(std::vector<FieldPath>* out) const override { x_->Collect(out); }

 private:
  NodePtr x_;
};

class NotNode final : public Node {
 public:
  explicit NotNode(NodePtr x) : x_(std::move(x)) {}
  Value Eval(const Record& rec) const override {
    Value v = x_->Eval(rec);
    return v.type == ValueType::kBool ? Value::Bool(!v.b) : Value::Null();
  }
  void Collect(std::vector<FieldPath>* out) const override { x_->Collect(out); }

 private:
  NodePtr x_;
};

class IsNullNode final : public Node {
 public:
  IsNullNode(NodePtr x, bool negated) : x_(std::move(x)), negated_(negated) {}
  Value Eval(const Record& rec) const override {
    return Value::Bool(x_->Eval(rec).is_null() != negated_);
  }
  void Collect(std::vector<FieldPath>* out) const override { x_->Collect(out); }

 private:
  NodePtr x_;
  bool negated_;
};

// N-ary `and` (kIsAnd) or `or` with SQL three-valued logic; non-boolean
// operands count as unknown (null). Short-circuits on the deciding value.
template <bool kIsAnd>
class LogicNode final : public Node {
 public:
  explicit LogicNode(std::vector<NodePtr> xs) : xs_(std::move(xs)) {}
  Value Eval(const Record& rec) const override {
    bool unknown = false;
    for (const NodePtr& x : xs_) {
      Value v = x->Eval(rec);
      if (v.type != ValueType::kBool) {
        unknown = true;
      } else if (v.b != kIsAnd) {
        return Value::Bool(!kIsAnd);
      }
    }
    return unknown ? Value::Null() : Value::Bool(kIsAnd);
  }
  void Collect(std::vector<FieldPath>* out) const override {
    for (const NodePtr& x : xs_) x->Collect(out);
  }
  // Moves the operands out (to flatten nested chains).
  std::vector<NodePtr> Release() { return std::move(xs_); }

 private:
  std::vector<NodePtr> xs_;
};

// `x [not] in (a, b, ...)`: equivalent to `x == a or x == b ...` (negated for
// `not in`), so an incomparable or null element makes a non-match unknown.
class InNode final : public Node {
 public:
  InNode(NodePtr x, std::vector<NodePtr> items, bool negated)
      : x_(std::move(x)), items_(std::move(items)), negated_(negated) {
    bool all_literal = true, all_strings = true, all_ints = true;
    for (const NodePtr& it : items_) {
      const Value* v = it->literal();
      if (v == nullptr) {
        all_literal = all_strings = all_ints = false;
        break;
      }
      all_strings &= v->type == ValueType::kString;
      all_ints &= v->type == ValueType::kInt;
    }
    if (all_literal && items_.size() >= kInSetThreshold) {
      if (all_strings) {
        for (const NodePtr& it : items_) strings_.insert(it->literal()->s);
        use_strings_ = true;
      } else if (all_ints) {
        for (const NodePtr& it : items_) ints_.insert(it->literal()->i);
        use_ints_ = true;
      }
    }
  }

  Value Eval(const Record& rec) const override {
    Value x = x_->Eval(rec);
    if (x.is_null()) return Value::Null();
    if (use_strings_) {
      if (x.type != ValueType::kString) return Value::Null();  // incomparable with all
      return Value::Bool(strings_.contains(x.s) != negated_);
    }
    if (use_ints_ && x.type == ValueType::kInt) {
      return Value::Bool(ints_.contains(x.i) != negated_);
    }
    bool unknown = false;
    for (const NodePtr& it : items_) {
      Value eq = Compare(CmpOp::kEq, x, it->Eval(rec));
      if (eq.type != ValueType::kBool) {
        unknown = true;
      } else if (eq.b) {
        return Value::Bool(!negated_);
      }
    }
    return unknown ? Value::Null() : Value::Bool(negated_);
  }
  void Collect(std::vector<FieldPath>* out) const override {
    x_->Collect(out);
    for (const NodePtr& it : items_) it->Collect(out);
  }

 private:
  NodePtr x_;
  std::vector<NodePtr> items_;
  bool negated_;
  bool use_strings_ = false, use_ints_ = false;
  absl::flat_hash_set<std::string_view> strings_;  // views into items_' storage
  absl::flat_hash_set<int64_t> ints_;
};

class CompiledExpr final : public Expr {
 public:
  CompiledExpr(std::string text, NodePtr root) : root_(std::move(root)) { text_ = std::move(text); }
  Value Eval(const Record& record) const override { return root_->Eval(record); }
  void CollectFields(std::vector<FieldPath>* out) const override { root_->Collect(out); }

 private:
  NodePtr root_;
};

// ---------------------------------------------------------------------------
// Lexer.

enum class Tok {
  kEnd,
  kIdent,
  kQuotedIdent,
  kString,
  kNumber,
  kLParen,
  kRParen,
  kComma,
  kDot,
  kEq,
  kNe,
  kLt,
  kLe,
  kGt,
  kGe,
  kPlus,
  kMinus,
  kStar,
  kSlash,
  kPercent,
  kAnd,
  kOr,
  kNot,
  kIn,
  kIs,
  kNull,
  kTrue,
  kFalse,
};

struct Token {
  Tok kind = Tok::kEnd;
  size_t pos = 0;    // byte offset in the text
  size_t len = 0;    // raw length
  std::string text;  // decoded string / identifier
  Value number;      // kNumber
};

bool IsIdentStart(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool IsIdentChar(char c) { return IsIdentStart(c) || (c >= '0' && c <= '9'); }
bool IsDigit(char c) { return c >= '0' && c <= '9'; }

void AppendUtf8(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

class Lexer {
 public:
  explicit Lexer(std::string_view text) : s_(text) {}

  absl::Status Run(std::vector<Token>* out) {
    size_t p = 0;
    while (true) {
      while (p < s_.size() && (s_[p] == ' ' || s_[p] == '\t' || s_[p] == '\n' || s_[p] == '\r')) {
        ++p;
      }
      Token t;
      t.pos = p;
      if (p == s_.size()) {
        out->push_back(std::move(t));
        return absl::OkStatus();
      }
      char c = s_[p];
      if (IsIdentStart(c)) {
        size_t e = p;
        while (e < s_.size() && IsIdentChar(s_[e])) ++e;
        t.text = std::string(s_.substr(p, e - p));
        t.kind = Keyword(t.text);
        p = e;
      } else if (c == '`') {
        RETURN_IF_ERROR(QuotedIdent(&p, &t));
      } else if (c == '\'' || c == '"') {
        RETURN_IF_ERROR(StringLit(&p, &t));
      } else if (IsDigit(c)) {
        RETURN_IF_ERROR(Number(&p, &t));
      } else {
        RETURN_IF_ERROR(Punct(&p, &t));
      }
      t.len = p - t.pos;
      out->push_back(std::move(t));
    }
  }

 private:
  absl::Status Error(absl::string_view what, size_t pos) const {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " at column ", pos + 1, " in '", Sv(s_), "'"));
  }

  static Tok Keyword(std::string_view w) {
    if (w.size() > 5) return Tok::kIdent;
    std::string l(w);
    for (char& c : l) c = absl::ascii_tolower(static_cast<unsigned char>(c));
    if (l == "and") return Tok::kAnd;
    if (l == "or") return Tok::kOr;
    if (l == "not") return Tok::kNot;
    if (l == "in") return Tok::kIn;
    if (l == "is") return Tok::kIs;
    if (l == "null") return Tok::kNull;
    if (l == "true") return Tok::kTrue;
    if (l == "false") return Tok::kFalse;
    return Tok::kIdent;
  }

  // `name with spaces`; a doubled backquote stands for one.
  absl::Status QuotedIdent(size_t* p, Token* t) {
    size_t start = *p;
    size_t i = start + 1;
    while (true) {
      if (i >= s_.size()) return Error("unterminated quoted name", start);
      if (s_[i] == '`') {
        if (i + 1 < s_.size() && s_[i + 1] == '`') {
          t->text.push_back('`');
          i += 2;
          continue;
        }
        ++i;
        break;
      }
      t->text.push_back(s_[i++]);
    }
    if (t->text.empty()) return Error("empty quoted name '``'", start);
    t->kind = Tok::kQuotedIdent;
    *p = i;
    return absl::OkStatus();
  }

  absl::Status StringLit(size_t* p, Token* t) {
    size_t start = *p;
    char q = s_[start];
    size_t i = start + 1;
    while (true) {
      if (i >= s_.size()) return Error("unterminated string", start);
      char c = s_[i];
      if (c == q) {
        ++i;
        break;
      }
      if (c != '\\') {
        t->text.push_back(c);
        ++i;
        continue;
      }
      if (i + 1 >= s_.size()) return Error("unterminated string", start);
      char e = s_[i + 1];
      switch (e) {
        case 'n':
          t->text.push_back('\n');
          break;
        case 't':
          t->text.push_back('\t');
          break;
        case 'r':
          t->text.push_back('\r');
          break;
        case 'b':
          t->text.push_back('\b');
          break;
        case 'f':
          t->text.push_back('\f');
          break;
        case '0':
          t->text.push_back('\0');
          break;
        case '\\':
        case '\'':
        case '"':
        case '/':
        case '`':
          t->text.push_back(e);
          break;
        case 'u': {
          uint32_t cp = 0;
          for (size_t k = 0; k < 4; ++k) {
            char h = i + 2 + k < s_.size() ? s_[i + 2 + k] : '\0';
            int d = (h >= '0' && h <= '9')   ? h - '0'
                    : (h >= 'a' && h <= 'f') ? h - 'a' + 10
                    : (h >= 'A' && h <= 'F') ? h - 'A' + 10
                                             : -1;
            if (d < 0) return Error("invalid escape '\\u' (expected 4 hex digits)", i);
            cp = cp * 16 + static_cast<uint32_t>(d);
          }
          if (cp >= 0xD800 && cp <= 0xDFFF) {
            return Error(absl::StrCat("invalid escape '", Sv(s_.substr(i, 6)), "' (surrogate)"), i);
          }
          AppendUtf8(cp, &t->text);
          i += 6;
          continue;
        }
        default:
          return Error(absl::StrCat("invalid escape '\\", Sv(std::string_view(&e, 1)), "'"), i);
      }
      i += 2;
    }
    t->kind = Tok::kString;
    *p = i;
    return absl::OkStatus();
  }

  // digits ['.' digits] [('e'|'E') ['+'|'-'] digits]. Integers that fit int64
  // are ints, plain fractions with at most 18 significant digits and 18
  // fractional digits exact decimals, everything else a double.
  absl::Status Number(size_t* p, Token* t) {
    size_t start = *p, i = start;
    while (i < s_.size() && IsDigit(s_[i])) ++i;
    size_t int_end = i;
    size_t frac_start = i, frac_end = i;
    bool has_frac = false, has_exp = false;
    if (i < s_.size() && s_[i] == '.') {
      has_frac = true;
      frac_start = ++i;
      while (i < s_.size() && IsDigit(s_[i])) ++i;
      frac_end = i;
      if (frac_end == frac_start) return BadNumber(start, i);
    }
    if (i < s_.size() && (s_[i] == 'e' || s_[i] == 'E')) {
      has_exp = true;
      ++i;
      if (i < s_.size() && (s_[i] == '+' || s_[i] == '-')) ++i;
      size_t ds = i;
      while (i < s_.size() && IsDigit(s_[i])) ++i;
      if (i == ds) return BadNumber(start, i);
    }
    if (i < s_.size() && (IsIdentChar(s_[i]) || s_[i] == '.')) return BadNumber(start, i);
    *p = i;
    t->kind = Tok::kNumber;
    std::string_view raw = s_.substr(start, i - start);
    if (!has_frac && !has_exp) {
      int64_t v;
      auto r = std::from_chars(raw.data(), raw.data() + raw.size(), v);
      if (r.ec == std::errc() && r.ptr == raw.data() + raw.size()) {
        t->number = Value::Int(v);
        return absl::OkStatus();
      }
    } else if (!has_exp && frac_end - frac_start <= static_cast<size_t>(kMaxScale)) {
      int64_t m = 0;
      int significant = 0;
      bool ok = true;
      for (size_t k = start; k < frac_end && ok; ++k) {
        if (k == int_end) continue;  // the '.'
        int d = s_[k] - '0';
        if (m != 0 || d != 0) ++significant;
        ok = significant <= kMaxScale;
        m = m * 10 + d;
      }
      if (ok) {
        t->number = Value::Decimal(m, static_cast<uint8_t>(frac_end - frac_start));
        return absl::OkStatus();
      }
    }
    std::string copy(raw);
    double d = std::strtod(copy.c_str(), nullptr);
    if (!std::isfinite(d))
      return Error(absl::StrCat("number '", Sv(raw), "' is out of range"), start);
    t->number = Value::Double(d);
    return absl::OkStatus();
  }

  absl::Status BadNumber(size_t start, size_t i) const {
    size_t e = i;
    while (e < s_.size() && (IsIdentChar(s_[e]) || s_[e] == '.')) ++e;
    return Error(absl::StrCat("invalid number '", Sv(s_.substr(start, e - start)), "'"), start);
  }

  absl::Status Punct(size_t* p, Token* t) {
    size_t i = *p;
    char c = s_[i];
    char n = i + 1 < s_.size() ? s_[i + 1] : '\0';
    auto one = [&](Tok k) {
      t->kind = k;
      *p = i + 1;
      return absl::OkStatus();
    };
    auto two = [&](Tok k) {
      t->kind = k;
      *p = i + 2;
      return absl::OkStatus();
    };
    switch (c) {
      case '(':
        return one(Tok::kLParen);
      case ')':
        return one(Tok::kRParen);
      case ',':
        return one(Tok::kComma);
      case '.':
        return one(Tok::kDot);
      case '+':
        return one(Tok::kPlus);
      case '-':
        return one(Tok::kMinus);
      case '*':
        return one(Tok::kStar);
      case '/':
        return one(Tok::kSlash);
      case '%':
        return one(Tok::kPercent);
      case '=':
        return n == '=' ? two(Tok::kEq) : one(Tok::kEq);  // SQL's `=` is accepted too
      case '!':
        if (n == '=') return two(Tok::kNe);
        break;
      case '<':
        if (n == '=') return two(Tok::kLe);
        if (n == '>') return two(Tok::kNe);  // SQL's `<>`
        return one(Tok::kLt);
      case '>':
        if (n == '=') return two(Tok::kGe);
        return one(Tok::kGt);
      default:
        break;
    }
    unsigned char u = static_cast<unsigned char>(c);
    if (u < 0x20 || u >= 0x7f) {
      return Error(absl::StrCat("invalid character 0x", absl::Hex(u, absl::kZeroPad2)), i);
    }
    return Error(absl::StrCat("invalid character '", Sv(std::string_view(&c, 1)), "'"), i);
  }

  std::string_view s_;
};

// ---------------------------------------------------------------------------
// Parser (recursive descent, one function per precedence level):
//   or      := and (OR and)*
//   and     := not (AND not)*
//   not     := NOT not | cmp
//   cmp     := add [cmpop add | [NOT] IN '(' or (',' or)* ')' | IS [NOT] NULL]
//   add     := mul (('+'|'-') mul)*
//   mul     := unary (('*'|'/'|'%') unary)*
//   unary   := '-' unary | primary
//   primary := number | string | TRUE | FALSE | NULL | path | '(' or ')'
//   path    := name ('.' name)*      (name: identifier, keyword or `quoted`)

class Parser {
 public:
  Parser(std::string_view text, std::vector<Token> toks) : s_(text), toks_(std::move(toks)) {}

  absl::StatusOr<NodePtr> Run() {
    if (Peek().kind == Tok::kEnd) return absl::InvalidArgumentError("empty expression");
    ASSIGN_OR_RETURN(NodePtr root, ParseOr());
    if (Peek().kind != Tok::kEnd) return Unexpected(Peek());
    return root;
  }

 private:
  const Token& Peek(size_t ahead = 0) const {
    size_t i = std::min(pos_ + ahead, toks_.size() - 1);
    return toks_[i];
  }
  const Token& Next() {
    const Token& t = toks_[pos_];
    if (pos_ + 1 < toks_.size()) ++pos_;
    return t;
  }
  bool Accept(Tok k) {
    if (Peek().kind != k) return false;
    Next();
    return true;
  }

  absl::Status Unexpected(const Token& t, std::string_view expected = "") const {
    std::string msg;
    if (t.kind == Tok::kEnd) {
      msg =
          absl::StrCat("unexpected end of expression at column ", t.pos + 1, " in '", Sv(s_), "'");
    } else {
      msg = absl::StrCat("unexpected token '", Sv(s_.substr(t.pos, t.len)), "' at column ",
                         t.pos + 1, " in '", Sv(s_), "'");
    }
    if (!expected.empty()) absl::StrAppend(&msg, " (expected ", Sv(expected), ")");
    return absl::InvalidArgumentError(msg);
  }

  // Checks the depth of a freshly built node.
  absl::StatusOr<NodePtr> Checked(NodePtr n, size_t pos) const {
    if (n->depth > kMaxDepth) {
      return absl::InvalidArgumentError(absl::StrCat("expression is nested too deeply (more than ",
                                                     kMaxDepth, " levels) at column ", pos + 1,
                                                     " in '", Sv(s_), "'"));
    }
    return n;
  }

  // Replaces a node whose operands are all literals by its value (unless the
  // value would view into the operands' storage).
  static NodePtr Fold(NodePtr n) {
    std::vector<FieldPath> fields;
    n->Collect(&fields);
    if (!fields.empty()) return n;
    Record empty;
    Value v = n->Eval(empty);
    if (v.type == ValueType::kString || v.type == ValueType::kObject ||
        v.type == ValueType::kArray) {
      return n;
    }
    return std::make_unique<LiteralNode>(v);
  }

  struct DepthGuard {
    explicit DepthGuard(int* d) : d_(d) { ++*d_; }
    ~DepthGuard() { --*d_; }
    int* d_;
  };
  absl::Status Enter(const Token& at) const {
    if (recursion_ > kMaxDepth) {
      return absl::InvalidArgumentError(absl::StrCat("expression is nested too deeply (more than ",
                                                     kMaxDepth, " levels) at column ", at.pos + 1,
                                                     " in '", Sv(s_), "'"));
    }
    return absl::OkStatus();
  }

  template <bool kIsAnd>
  absl::StatusOr<NodePtr> ParseLogic() {
    Tok op = kIsAnd ? Tok::kAnd : Tok::kOr;
    ASSIGN_OR_RETURN(NodePtr first, kIsAnd ? ParseNot() : ParseLogic<true>());
    if (Peek().kind != op) return first;
    size_t pos = Peek().pos;
    std::vector<NodePtr> xs;
    xs.push_back(std::move(first));
    while (Accept(op)) {
      ASSIGN_OR_RETURN(NodePtr x, kIsAnd ? ParseNot() : ParseLogic<true>());
      xs.push_back(std::move(x));
    }
    int depth = 0;
    bool all_literal = true;
    for (const NodePtr& x : xs) {
      depth = std::max(depth, x->depth);
      all_literal &= x->literal() != nullptr;
    }
    NodePtr n = std::make_unique<LogicNode<kIsAnd>>(std::move(xs));
    n->depth = depth + 1;
    if (all_literal) n = Fold(std::move(n));
    return Checked(std::move(n), pos);
  }

  absl::StatusOr<NodePtr> ParseOr() { return ParseLogic<false>(); }

  absl::StatusOr<NodePtr> ParseNot() {
    if (Peek().kind == Tok::kNot) {
      DepthGuard g(&recursion_);
      RETURN_IF_ERROR(Enter(Peek()));
      size_t pos = Next().pos;
      ASSIGN_OR_RETURN(NodePtr x, ParseNot());
      return Unary<NotNode>(std::move(x), pos);
    }
    return ParseCompare();
  }

  template <typename N>
  absl::StatusOr<NodePtr> Unary(NodePtr x, size_t pos) const {
    bool lit = x->literal() != nullptr;
    int d = x->depth + 1;
    NodePtr n = std::make_unique<N>(std::move(x));
    n->depth = d;
    if (lit) n = Fold(std::move(n));
    return Checked(std::move(n), pos);
  }

  template <CmpOp kOp>
  static NodePtr MakeCompare(NodePtr l, NodePtr r) {
    if (l->field() != nullptr && r->literal() != nullptr) {
      FieldPath p = *l->field();
      return std::make_unique<CompareFieldLiteralNode<kOp>>(std::move(p), std::move(r));
    }
    return std::make_unique<CompareNode<kOp>>(std::move(l), std::move(r));
  }

  static NodePtr MakeCompare(CmpOp op, NodePtr l, NodePtr r) {
    // Literal on the left: mirror, so `5 < x` takes the field-literal path.
    if (l->literal() != nullptr && r->field() != nullptr) {
      std::swap(l, r);
      switch (op) {
        case CmpOp::kLt:
          op = CmpOp::kGt;
          break;
        case CmpOp::kLe:
          op = CmpOp::kGe;
          break;
        case CmpOp::kGt:
          op = CmpOp::kLt;
          break;
        case CmpOp::kGe:
          op = CmpOp::kLe;
          break;
        default:
          break;
      }
    }
    switch (op) {
      case CmpOp::kEq:
        return MakeCompare<CmpOp::kEq>(std::move(l), std::move(r));
      case CmpOp::kNe:
        return MakeCompare<CmpOp::kNe>(std::move(l), std::move(r));
      case CmpOp::kLt:
        return MakeCompare<CmpOp::kLt>(std::move(l), std::move(r));
      case CmpOp::kLe:
        return MakeCompare<CmpOp::kLe>(std::move(l), std::move(r));
      case CmpOp::kGt:
        return MakeCompare<CmpOp::kGt>(std::move(l), std::move(r));
      case CmpOp::kGe:
        return MakeCompare<CmpOp::kGe>(std::move(l), std::move(r));
    }
    return nullptr;
  }

  static std::optional<CmpOp> CmpOpOf(Tok k) {
    switch (k) {
      case Tok::kEq:
        return CmpOp::kEq;
      case Tok::kNe:
        return CmpOp::kNe;
      case Tok::kLt:
        return CmpOp::kLt;
      case Tok::kLe:
        return CmpOp::kLe;
      case Tok::kGt:
        return CmpOp::kGt;
      case Tok::kGe:
        return CmpOp::kGe;
      default:
        return std::nullopt;
    }
  }

  absl::StatusOr<NodePtr> ParseCompare() {
    ASSIGN_OR_RETURN(NodePtr l, ParseAdd());
    const Token& t = Peek();
    size_t pos = t.pos;
    if (std::optional<CmpOp> op = CmpOpOf(t.kind)) {
      Next();
      ASSIGN_OR_RETURN(NodePtr r, ParseAdd());
      bool lit = l->literal() != nullptr && r->literal() != nullptr;
      int d = std::max(l->depth, r->depth) + 1;
      NodePtr n = MakeCompare(*op, std::move(l), std::move(r));
      n->depth = d;
      if (lit) n = Fold(std::move(n));
      return Checked(std::move(n), pos);
    }
    if (t.kind == Tok::kIs) {
      Next();
      bool negated = Accept(Tok::kNot);
      if (Peek().kind != Tok::kNull)
        return Unexpected(Peek(), negated ? "null" : "null or not null");
      Next();
      int d = l->depth + 1;
      bool lit = l->literal() != nullptr;
      NodePtr n = std::make_unique<IsNullNode>(std::move(l), negated);
      n->depth = d;
      if (lit) n = Fold(std::move(n));
      return Checked(std::move(n), pos);
    }
    bool negated = false;
    if (t.kind == Tok::kNot && Peek(1).kind == Tok::kIn) {
      Next();
      negated = true;
    }
    if (Peek().kind == Tok::kIn) {
      Next();
      if (!Accept(Tok::kLParen)) return Unexpected(Peek(), "'('");
      std::vector<NodePtr> items;
      int d = l->depth;
      bool lit = l->literal() != nullptr;
      while (true) {
        ASSIGN_OR_RETURN(NodePtr it, ParseOr());
        d = std::max(d, it->depth);
        lit &= it->literal() != nullptr;
        items.push_back(std::move(it));
        if (Accept(Tok::kComma)) continue;
        if (Accept(Tok::kRParen)) break;
        return Unexpected(Peek(), "',' or ')'");
      }
      NodePtr n = std::make_unique<InNode>(std::move(l), std::move(items), negated);
      n->depth = d + 1;
      if (lit) n = Fold(std::move(n));
      return Checked(std::move(n), pos);
    }
    return l;
  }

  template <typename Level, typename OpOf>
  absl::StatusOr<NodePtr> ParseBinary(Level next, OpOf op_of) {
    ASSIGN_OR_RETURN(NodePtr l, (this->*next)());
    while (true) {
      const Token& t = Peek();
      std::optional<ArithOp> op = op_of(t.kind);
      if (!op) return l;
      size_t pos = Next().pos;
      ASSIGN_OR_RETURN(NodePtr r, (this->*next)());
      bool lit = l->literal() != nullptr && r->literal() != nullptr;
      int d = std::max(l->depth, r->depth) + 1;
      NodePtr n;
      switch (*op) {
        case ArithOp::kAdd:
          n = std::make_unique<ArithNode<ArithOp::kAdd>>(std::move(l), std::move(r));
          break;
        case ArithOp::kSub:
          n = std::make_unique<ArithNode<ArithOp::kSub>>(std::move(l), std::move(r));
          break;
        case ArithOp::kMul:
          n = std::make_unique<ArithNode<ArithOp::kMul>>(std::move(l), std::move(r));
          break;
        case ArithOp::kDiv:
          n = std::make_unique<ArithNode<ArithOp::kDiv>>(std::move(l), std::move(r));
          break;
        case ArithOp::kMod:
          n = std::make_unique<ArithNode<ArithOp::kMod>>(std::move(l), std::move(r));
          break;
      }
      n->depth = d;
      if (lit) n = Fold(std::move(n));
      ASSIGN_OR_RETURN(l, Checked(std::move(n), pos));
    }
  }

  absl::StatusOr<NodePtr> ParseAdd() {
    return ParseBinary(&Parser::ParseMul, [](Tok k) -> std::optional<ArithOp> {
      if (k == Tok::kPlus) return ArithOp::kAdd;
      if (k == Tok::kMinus) return ArithOp::kSub;
      return std::nullopt;
    });
  }

  absl::StatusOr<NodePtr> ParseMul() {
    return ParseBinary(&Parser::ParseUnary, [](Tok k) -> std::optional<ArithOp> {
      if (k == Tok::kStar) return ArithOp::kMul;
      if (k == Tok::kSlash) return ArithOp::kDiv;
      if (k == Tok::kPercent) return ArithOp::kMod;
      return std::nullopt;
    });
  }

  absl::StatusOr<NodePtr> ParseUnary() {
    if (Peek().kind == Tok::kMinus) {
      DepthGuard g(&recursion_);
      RETURN_IF_ERROR(Enter(Peek()));
      size_t pos = Next().pos;
      ASSIGN_OR_RETURN(NodePtr x, ParseUnary());
      return Unary<NegNode>(std::move(x), pos);
    }
    return ParsePrimary();
  }

  absl::StatusOr<NodePtr> ParsePrimary() {
    const Token& t = Peek();
    switch (t.kind) {
      case Tok::kNumber:
        Next();
        return NodePtr(std::make_unique<LiteralNode>(t.number));
      case Tok::kString:
        Next();
        return NodePtr(std::make_unique<LiteralNode>(t.text));
      case Tok::kTrue:
      case Tok::kFalse:
        Next();
        return NodePtr(std::make_unique<LiteralNode>(Value::Bool(t.kind == Tok::kTrue)));
      case Tok::kNull:
        Next();
        return NodePtr(std::make_unique<LiteralNode>(Value::Null()));
      case Tok::kIdent:
      case Tok::kQuotedIdent:
        return ParsePath();
      case Tok::kLParen: {
        DepthGuard g(&recursion_);
        RETURN_IF_ERROR(Enter(t));
        Next();
        ASSIGN_OR_RETURN(NodePtr x, ParseOr());
        if (!Accept(Tok::kRParen)) return Unexpected(Peek(), "')'");
        return x;
      }
      default:
        return Unexpected(t);
    }
  }

  absl::StatusOr<NodePtr> ParsePath() {
    FieldPath path;
    path.parts.push_back(Next().text);
    while (Peek().kind == Tok::kDot) {
      Next();
      const Token& t = Peek();
      // Any word may follow a dot (`a.in` is a field), keywords included.
      if (t.kind == Tok::kIdent || t.kind == Tok::kQuotedIdent) {
        path.parts.push_back(Next().text);
      } else if (t.kind >= Tok::kAnd && t.kind <= Tok::kFalse) {
        path.parts.emplace_back(s_.substr(t.pos, t.len));
        Next();
      } else {
        return Unexpected(t, "a field name");
      }
    }
    return NodePtr(std::make_unique<FieldNode>(std::move(path)));
  }

  std::string_view s_;
  std::vector<Token> toks_;
  size_t pos_ = 0;
  int recursion_ = 0;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Expr>> Expr::Compile(std::string_view text) {
  std::vector<Token> toks;
  RETURN_IF_ERROR(Lexer(text).Run(&toks));
  Parser parser(text, std::move(toks));
  ASSIGN_OR_RETURN(NodePtr root, parser.Run());
  return std::unique_ptr<Expr>(std::make_unique<CompiledExpr>(std::string(text), std::move(root)));
}

}  // namespace caravela
