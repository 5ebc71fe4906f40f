#include "common/expr.h"

#include <string>
#include <vector>

#include "common/json.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/testing/status_testing.h"

namespace caravela {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr char kRecord[] = R"({
  "s": "abc", "s2": "abd", "empty": "",
  "i": 7, "j": -3, "zero": 0, "big": 9223372036854775807, "small": -9223372036854775808,
  "d": 19.99, "d2": 0.01, "h": 100.0, "x": 2.5e10, "dz": 0.0,
  "t": true, "f": false, "n": null,
  "o": {"a": {"b": 42}, "name": "inner"}, "arr": [1, 2],
  "weird name": 5, "and": 1
})";

class ExprTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_OK(decoder_.Decode(kRecord, &rec_)); }

  // Evaluates `text` against kRecord; returns the result as JSON text.
  std::string Eval(std::string_view text) {
    absl::StatusOr<std::unique_ptr<Expr>> e = Expr::Compile(text);
    if (!e.ok()) return "ERROR: " + std::string(e.status().message());
    return (*e)->Eval(rec_).ToJson();
  }
  ValueType Type(std::string_view text) {
    absl::StatusOr<std::unique_ptr<Expr>> e = Expr::Compile(text);
    EXPECT_OK(e.status());
    return e.ok() ? (*e)->Eval(rec_).type : ValueType::kNull;
  }
  std::string CompileError(std::string_view text) {
    absl::StatusOr<std::unique_ptr<Expr>> e = Expr::Compile(text);
    if (e.ok()) return "OK";
    EXPECT_EQ(e.status().code(), absl::StatusCode::kInvalidArgument);
    return std::string(e.status().message());
  }

  JsonDecoder decoder_;
  Record rec_;
};

TEST_F(ExprTest, Literals) {
  EXPECT_EQ(Eval("1"), "1");
  EXPECT_EQ(Type("1"), ValueType::kInt);
  EXPECT_EQ(Eval("1.50"), "1.50");
  EXPECT_EQ(Type("1.5"), ValueType::kDecimal);
  EXPECT_EQ(Eval("2.5e3"), "2500.0");
  EXPECT_EQ(Type("2.5e3"), ValueType::kDouble);
  EXPECT_EQ(Eval("99999999999999999999"), "1e+20");              // beyond int64: double
  EXPECT_EQ(Type("0.1234567890123456789"), ValueType::kDouble);  // > 18 fraction digits
  EXPECT_EQ(Eval("'it''s'"), "ERROR: unexpected token ''s'' at column 5 in ''it''s''");
  EXPECT_EQ(Eval(R"('a\'b')"), R"("a'b")");
  EXPECT_EQ(Eval(R"("x\"y\\z\n\u00e9")"), "\"x\\\"y\\\\z\\n\xC3\xA9\"");
  EXPECT_EQ(Eval("true"), "true");
  EXPECT_EQ(Eval("FALSE"), "false");
  EXPECT_EQ(Eval("Null"), "null");
}

TEST_F(ExprTest, FieldRefs) {
  EXPECT_EQ(Eval("s"), R"("abc")");
  EXPECT_EQ(Eval("o.a.b"), "42");
  EXPECT_EQ(Eval("o.a"), R"({"b":42})");
  EXPECT_EQ(Eval("o.missing"), "null");
  EXPECT_EQ(Eval("missing.deeper"), "null");
  EXPECT_EQ(Eval("s.deeper"), "null");  // a string has no children
  EXPECT_EQ(Eval("`weird name`"), "5");
  EXPECT_EQ(Eval("`and` + 1"), "2");
  EXPECT_EQ(Eval("o.`name`"), R"("inner")");
  EXPECT_EQ(Eval("arr"), "[1,2]");
}

TEST_F(ExprTest, Comparisons) {
  EXPECT_EQ(Eval("i == 7"), "true");
  EXPECT_EQ(Eval("i != 7"), "false");
  EXPECT_EQ(Eval("i < 8"), "true");
  EXPECT_EQ(Eval("i <= 7"), "true");
  EXPECT_EQ(Eval("i > 7"), "false");
  EXPECT_EQ(Eval("i >= 7.0"), "true");
  EXPECT_EQ(Eval("7 == i"), "true");
  EXPECT_EQ(Eval("8 > i"), "true");  // literal on the left is mirrored
  EXPECT_EQ(Eval("6 >= i"), "false");
  EXPECT_EQ(Eval("i = 7"), "true");    // SQL spelling
  EXPECT_EQ(Eval("i <> 7"), "false");  // SQL spelling
  EXPECT_EQ(Eval("s == 'abc'"), "true");
  EXPECT_EQ(Eval("s < s2"), "true");
  EXPECT_EQ(Eval("s >= \"abd\""), "false");
  EXPECT_EQ(Eval("empty == ''"), "true");
  EXPECT_EQ(Eval("t == true"), "true");
  EXPECT_EQ(Eval("f < t"), "true");
  EXPECT_EQ(Eval("o.a == o.a"), "true");
  // Exact decimal comparisons.
  EXPECT_EQ(Eval("d == 19.99"), "true");
  EXPECT_EQ(Eval("d > 19.989999999"), "true");
  EXPECT_EQ(Eval("h == 100"), "true");
  EXPECT_EQ(Eval("d2 * 3 == 0.03"), "true");
  EXPECT_EQ(Eval("big > 9223372036854775806"), "true");
  EXPECT_EQ(Eval("x > 1"), "true");
}

TEST_F(ExprTest, MixedKindsAndNullsCompareToNull) {
  EXPECT_EQ(Eval("s == 1"), "null");
  EXPECT_EQ(Eval("i == '7'"), "null");
  EXPECT_EQ(Eval("t == 1"), "null");
  EXPECT_EQ(Eval("o == arr"), "null");
  EXPECT_EQ(Eval("n == null"), "null");
  EXPECT_EQ(Eval("missing == 1"), "null");
  EXPECT_EQ(Eval("missing != 1"), "null");
  EXPECT_EQ(Eval("null < 1"), "null");
}

TEST_F(ExprTest, ThreeValuedLogic) {
  // and
  EXPECT_EQ(Eval("true and true"), "true");
  EXPECT_EQ(Eval("true and false"), "false");
  EXPECT_EQ(Eval("n and false"), "false");
  EXPECT_EQ(Eval("false and n"), "false");
  EXPECT_EQ(Eval("n and true"), "null");
  EXPECT_EQ(Eval("true and n"), "null");
  EXPECT_EQ(Eval("n and n"), "null");
  // or
  EXPECT_EQ(Eval("false or false"), "false");
  EXPECT_EQ(Eval("n or true"), "true");
  EXPECT_EQ(Eval("true or n"), "true");
  EXPECT_EQ(Eval("n or false"), "null");
  EXPECT_EQ(Eval("n or n"), "null");
  // not
  EXPECT_EQ(Eval("not true"), "false");
  EXPECT_EQ(Eval("not n"), "null");
  EXPECT_EQ(Eval("not not t"), "true");
  // Non-booleans count as unknown.
  EXPECT_EQ(Eval("i and true"), "null");
  EXPECT_EQ(Eval("s or false"), "null");
  EXPECT_EQ(Eval("not i"), "null");
  // Keywords are case-insensitive.
  EXPECT_EQ(Eval("i == 7 AND s == 'abc' Or false"), "true");
  EXPECT_EQ(Eval("NOT i == 7"), "false");
  // Long chains (flattened).
  EXPECT_EQ(Eval("i == 1 or i == 2 or i == 3 or i == 4 or i == 5 or i == 6 or i == 7"), "true");
  EXPECT_EQ(Eval("t and t and t and t and f"), "false");
  EXPECT_EQ(Eval("t and t and n and t"), "null");
}

TEST_F(ExprTest, IsNull) {
  EXPECT_EQ(Eval("n is null"), "true");
  EXPECT_EQ(Eval("missing is null"), "true");
  EXPECT_EQ(Eval("i is null"), "false");
  EXPECT_EQ(Eval("i is not null"), "true");
  EXPECT_EQ(Eval("n IS NOT NULL"), "false");
  EXPECT_EQ(Eval("i / zero is null"), "true");
  EXPECT_EQ(Eval("o.a.b is not null and o.a.c is null"), "true");
  EXPECT_EQ(Eval("null is null"), "true");
}

TEST_F(ExprTest, In) {
  EXPECT_EQ(Eval("i in (1, 7, 9)"), "true");
  EXPECT_EQ(Eval("i in (1, 2)"), "false");
  EXPECT_EQ(Eval("i not in (1, 2)"), "true");
  EXPECT_EQ(Eval("i not in (7)"), "false");
  EXPECT_EQ(Eval("s in ('x', 'abc')"), "true");
  EXPECT_EQ(Eval("i in (7.0)"), "true");
  EXPECT_EQ(Eval("d in (19.99, 1)"), "true");
  EXPECT_EQ(Eval("i in (j + 10, 0)"), "true");
  EXPECT_EQ(Eval("i in (s, 7)"), "true");  // an incomparable element does not matter on a match
  // SQL semantics: no match and a null/incomparable element -> null.
  EXPECT_EQ(Eval("i in (1, null)"), "null");
  EXPECT_EQ(Eval("i not in (1, null)"), "null");
  EXPECT_EQ(Eval("i in ('7', 1)"), "null");
  EXPECT_EQ(Eval("n in (1, 2)"), "null");
  EXPECT_EQ(Eval("missing not in (1, 2)"), "null");
  // Large literal lists take the set path; same answers.
  EXPECT_EQ(Eval("s in ('a','b','c','d','e','f','g','h','abc')"), "true");
  EXPECT_EQ(Eval("s not in ('a','b','c','d','e','f','g','h','abcd')"), "true");
  EXPECT_EQ(Eval("i in ('a','b','c','d','e','f','g','h','abc')"), "null");
  EXPECT_EQ(Eval("i in (1,2,3,4,5,6,7,8,9)"), "true");
  EXPECT_EQ(Eval("i not in (1,2,3,4,5,6,8,9,10)"), "true");
  EXPECT_EQ(Eval("h in (1,2,3,4,5,6,7,8,100)"), "true");  // decimal vs int set
  EXPECT_EQ(Eval("d in (1,2,3,4,5,6,7,8,100)"), "false");
  EXPECT_EQ(Eval("7 in (1, 7)"), "true");  // folded
}

TEST_F(ExprTest, IntArithmetic) {
  EXPECT_EQ(Eval("i + 1"), "8");
  EXPECT_EQ(Eval("i - 10"), "-3");
  EXPECT_EQ(Eval("i * j"), "-21");
  EXPECT_EQ(Eval("i % 4"), "3");
  EXPECT_EQ(Eval("j % 2"), "-1");  // sign of the dividend, like SQL/C
  EXPECT_EQ(Eval("i / 2"), "3.5");
  EXPECT_EQ(Type("i / 7"), ValueType::kDouble);
  EXPECT_EQ(Eval("-i"), "-7");
  EXPECT_EQ(Eval("- -i"), "7");
  EXPECT_EQ(Eval("-(i + 1)"), "-8");
  EXPECT_EQ(Eval("small % -1"), "0");
}

TEST_F(ExprTest, IntOverflowFallsBackToDouble) {
  EXPECT_EQ(Type("big + 1"), ValueType::kDouble);
  EXPECT_EQ(Eval("big + 1"), "9223372036854775808.0");
  EXPECT_EQ(Type("small - 1"), ValueType::kDouble);
  EXPECT_EQ(Type("big * 2"), ValueType::kDouble);
  EXPECT_EQ(Type("-small"), ValueType::kDouble);
  EXPECT_EQ(Type("big - 1"), ValueType::kInt);
}

TEST_F(ExprTest, DecimalArithmeticIsExact) {
  EXPECT_EQ(Eval("d + 0.01"), "20.00");
  EXPECT_EQ(Type("d + 0.01"), ValueType::kDecimal);
  EXPECT_EQ(Eval("0.1 + 0.2"), "0.3");
  EXPECT_EQ(Eval("0.1 + 0.2 == 0.3"), "true");
  EXPECT_EQ(Eval("d - 20"), "-0.01");
  EXPECT_EQ(Eval("d * 3"), "59.97");
  EXPECT_EQ(Eval("1.5 * 2.0"), "3.0");
  EXPECT_EQ(Eval("d * 1.10"), "21.989");
  EXPECT_EQ(Eval("d2 * d2"), "0.0001");
  EXPECT_EQ(Eval("h + i"), "107.0");
  EXPECT_EQ(Eval("d % 1"), "0.99");
  EXPECT_EQ(Eval("-d"), "-19.99");
  EXPECT_EQ(Eval("0.3 / 0.1"), "3.0");
  EXPECT_EQ(Type("0.3 / 0.1"), ValueType::kDouble);
  // Mixing with a double yields a double.
  EXPECT_EQ(Type("d + x"), ValueType::kDouble);
  EXPECT_EQ(Eval("x + 0.5"), "25000000000.5");
  // Scale overflow or mantissa overflow falls back to double.
  EXPECT_EQ(Type("0.123456789 * 0.123456789 * 0.12"), ValueType::kDouble);
  EXPECT_EQ(Type("big + 0.5"), ValueType::kDouble);
}

TEST_F(ExprTest, DivisionAndModuloByZeroAreNull) {
  EXPECT_EQ(Eval("i / 0"), "null");
  EXPECT_EQ(Eval("i % 0"), "null");
  EXPECT_EQ(Eval("i / zero"), "null");
  EXPECT_EQ(Eval("d / 0.0"), "null");
  EXPECT_EQ(Eval("x / dz"), "null");
  EXPECT_EQ(Eval("x % 0"), "null");
  EXPECT_EQ(Eval("d % 0.00"), "null");
}

TEST_F(ExprTest, ArithmeticOnNonNumbersIsNull) {
  EXPECT_EQ(Eval("s + 1"), "null");
  EXPECT_EQ(Eval("s + s"), "null");
  EXPECT_EQ(Eval("t * 2"), "null");
  EXPECT_EQ(Eval("n + 1"), "null");
  EXPECT_EQ(Eval("missing - 1"), "null");
  EXPECT_EQ(Eval("-s"), "null");
  EXPECT_EQ(Eval("o + 1"), "null");
  EXPECT_EQ(Eval("1e308 * 10"), "null");  // overflow to infinity
}

TEST_F(ExprTest, Precedence) {
  EXPECT_EQ(Eval("1 + 2 * 3"), "7");
  EXPECT_EQ(Eval("(1 + 2) * 3"), "9");
  EXPECT_EQ(Eval("10 - 4 - 3"), "3");  // left associative
  EXPECT_EQ(Eval("2 * 3 % 4"), "2");
  EXPECT_EQ(Eval("-2 * 3"), "-6");
  EXPECT_EQ(Eval("- i % 4"), "-3");
  EXPECT_EQ(Eval("1 + 1 == 2"), "true");
  EXPECT_EQ(Eval("i + 1 in (8)"), "true");
  EXPECT_EQ(Eval("i + 1 is null"), "false");
  EXPECT_EQ(Eval("not i == 8"), "true");
  EXPECT_EQ(Eval("true or true and false"), "true");  // and binds tighter
  EXPECT_EQ(Eval("(true or true) and false"), "false");
  EXPECT_EQ(Eval("not false and false"), "false");  // (not false) and false
  EXPECT_EQ(Eval("not (false and false)"), "true");
  EXPECT_EQ(Eval("i == 7 and not s == 'x' or f"), "true");
}

TEST_F(ExprTest, CompileErrorsQuoteTokenAndColumn) {
  EXPECT_EQ(CompileError("a == )"), "unexpected token ')' at column 6 in 'a == )'");
  EXPECT_EQ(CompileError("a =="), "unexpected end of expression at column 5 in 'a =='");
  EXPECT_EQ(CompileError(""), "empty expression");
  EXPECT_EQ(CompileError("   "), "empty expression");
  EXPECT_EQ(CompileError("a b"), "unexpected token 'b' at column 3 in 'a b'");
  EXPECT_EQ(CompileError("a < b < c"), "unexpected token '<' at column 7 in 'a < b < c'");
  EXPECT_EQ(CompileError("(a == 1"),
            "unexpected end of expression at column 8 in '(a == 1' (expected ')')");
  EXPECT_EQ(CompileError("a in 1"), "unexpected token '1' at column 6 in 'a in 1' (expected '(')");
  EXPECT_EQ(CompileError("a in (1 2)"),
            "unexpected token '2' at column 9 in 'a in (1 2)' (expected ',' or ')')");
  EXPECT_EQ(CompileError("a in ()"), "unexpected token ')' at column 7 in 'a in ()'");
  EXPECT_EQ(CompileError("a is 1"),
            "unexpected token '1' at column 6 in 'a is 1' (expected null or not null)");
  EXPECT_EQ(CompileError("a.1"),
            "unexpected token '1' at column 3 in 'a.1' (expected a field name)");
  EXPECT_EQ(CompileError("a. "),
            "unexpected end of expression at column 4 in 'a. ' (expected a field name)");
  EXPECT_EQ(CompileError("a # 1"), "invalid character '#' at column 3 in 'a # 1'");
  EXPECT_EQ(CompileError("a == 'abc"), "unterminated string at column 6 in 'a == 'abc'");
  EXPECT_EQ(CompileError("`abc"), "unterminated quoted name at column 1 in '`abc'");
  EXPECT_EQ(CompileError("'\\q'"), "invalid escape '\\q' at column 2 in ''\\q''");
  EXPECT_EQ(CompileError("1abc"), "invalid number '1abc' at column 1 in '1abc'");
  EXPECT_EQ(CompileError("x == 1.2.3"), "invalid number '1.2.3' at column 6 in 'x == 1.2.3'");
  EXPECT_EQ(CompileError("1e"), "invalid number '1e' at column 1 in '1e'");
  EXPECT_EQ(CompileError("a !b"), "invalid character '!' at column 3 in 'a !b'");
  EXPECT_EQ(CompileError("a == not b"), "unexpected token 'not' at column 6 in 'a == not b'");
  EXPECT_EQ(CompileError("a and"), "unexpected end of expression at column 6 in 'a and'");
  EXPECT_EQ(CompileError("1e999"), "number '1e999' is out of range at column 1 in '1e999'");
  EXPECT_THAT(CompileError("a\x01"), HasSubstr("invalid character 0x01 at column 2"));
}

TEST_F(ExprTest, DeepNestingIsAnErrorNotACrash) {
  std::string deep(10000, '(');
  EXPECT_THAT(CompileError(deep + "1" + std::string(10000, ')')), HasSubstr("nested too deeply"));
  std::string nots;
  for (int i = 0; i < 10000; ++i) nots += "not ";
  EXPECT_THAT(CompileError(nots + "t"), HasSubstr("nested too deeply"));
  EXPECT_THAT(CompileError(std::string(10000, '-') + "1"), HasSubstr("nested too deeply"));
  std::string sum = "i";
  for (int i = 0; i < 10000; ++i) sum += " + i";
  EXPECT_THAT(CompileError(sum), HasSubstr("nested too deeply"));
  // Flat or/and chains are fine however long.
  std::string ors = "i == 0";
  for (int i = 1; i < 5000; ++i) ors += " or i == " + std::to_string(i);
  EXPECT_EQ(Eval(ors), "true");
  // Moderate nesting is fine.
  EXPECT_EQ(Eval(std::string(100, '(') + "1" + std::string(100, ')')), "1");
}

TEST_F(ExprTest, CollectFields) {
  auto e = Expr::Compile("a.b + c > 1 and `x y` in (a.b, d) or e is null");
  ASSERT_OK(e.status());
  std::vector<FieldPath> fields;
  (*e)->CollectFields(&fields);
  std::vector<std::string> names;
  names.reserve(fields.size());
  for (const FieldPath& f : fields) names.push_back(f.ToString());
  EXPECT_THAT(names, ElementsAre("a.b", "c", "x y", "d", "e"));
  EXPECT_EQ((*e)->text(), "a.b + c > 1 and `x y` in (a.b, d) or e is null");

  auto lit = Expr::Compile("1 + 2");
  ASSERT_OK(lit.status());
  fields.clear();
  (*lit)->CollectFields(&fields);
  EXPECT_TRUE(fields.empty());
}

TEST_F(ExprTest, KeywordsAfterDotAreFieldNames) {
  Record r;
  r.BeginObject("a");
  r.AddInt("in", 3);
  r.AddInt("null", 4);
  r.EndContainer();
  auto e = Expr::Compile("a.in + a.null");
  ASSERT_OK(e.status());
  EXPECT_EQ((*e)->Eval(r).ToJson(), "7");
}

TEST_F(ExprTest, EvalOnEmptyRecord) {
  Record empty;
  auto e = Expr::Compile("a == 1 or a is null");
  ASSERT_OK(e.status());
  EXPECT_TRUE(IsTrue((*e)->Eval(empty)));
}

TEST_F(ExprTest, StringResultsViewLiteralStorage) {
  auto e = Expr::Compile("'hello'");
  ASSERT_OK(e.status());
  Value v = (*e)->Eval(rec_);
  EXPECT_EQ(v.type, ValueType::kString);
  EXPECT_EQ(v.s, "hello");
  auto e2 = Expr::Compile("s");
  ASSERT_OK(e2.status());
  EXPECT_EQ((*e2)->Eval(rec_).s, "abc");
}

TEST_F(ExprTest, IsTrueOnlyForBoolTrue) {
  EXPECT_TRUE(IsTrue(Value::Bool(true)));
  EXPECT_FALSE(IsTrue(Value::Bool(false)));
  EXPECT_FALSE(IsTrue(Value::Null()));
  EXPECT_FALSE(IsTrue(Value::Int(1)));
}

}  // namespace
}  // namespace caravela
