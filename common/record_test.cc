#include "common/record.h"

#include <charconv>
#include <cstdlib>
#include <random>
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

// Decodes `json` and re-encodes it.
std::string RoundTrip(std::string_view json) {
  JsonDecoder dec;
  Record r;
  absl::Status st = dec.Decode(json, &r);
  if (!st.ok()) return "ERROR: " + std::string(st.message());
  return r.ToJson();
}

std::string DecodeError(std::string_view json) {
  JsonDecoder dec;
  Record r;
  absl::Status st = dec.Decode(json, &r);
  if (st.ok()) return "OK";
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  return std::string(st.message());
}

TEST(JsonTest, RoundTripsScalars) {
  EXPECT_EQ(RoundTrip(R"({"a":1,"b":-2,"c":true,"d":false,"e":null,"f":"x"})"),
            R"({"a":1,"b":-2,"c":true,"d":false,"e":null,"f":"x"})");
  EXPECT_EQ(RoundTrip("{}"), "{}");
  EXPECT_EQ(RoundTrip("  {\"a\" : 1 }  \r"), R"({"a":1})");
}

TEST(JsonTest, Decimals) {
  EXPECT_EQ(RoundTrip(R"({"p":19.99})"), R"({"p":19.99})");
  EXPECT_EQ(RoundTrip(R"({"p":100.0})"), R"({"p":100.0})");
  EXPECT_EQ(RoundTrip(R"({"p":-0.5,"q":0.001,"r":123456.789})"),
            R"({"p":-0.5,"q":0.001,"r":123456.789})");
  JsonDecoder dec;
  Record r;
  ASSERT_OK(dec.Decode(R"({"p":19.99,"i":3,"d":1e300,"big":18446744073709551615})", &r));
  Value p = r.GetPath(FieldPath::Parse("p"));
  EXPECT_EQ(p.type, ValueType::kDecimal);
  EXPECT_EQ(p.i, 1999);
  EXPECT_EQ(p.scale, 2);
  EXPECT_EQ(r.GetPath(FieldPath::Parse("i")).type, ValueType::kInt);
  EXPECT_EQ(r.GetPath(FieldPath::Parse("d")).type, ValueType::kDouble);
  EXPECT_EQ(r.GetPath(FieldPath::Parse("big")).type, ValueType::kDouble);  // beyond int64
  EXPECT_EQ(r.ToJson(), R"({"p":19.99,"i":3,"d":1e+300,"big":18446744073709551616.0})");
}

// A number with a fraction decodes to the exact decimal of its double's
// shortest round-trip text, whatever path the decoder takes: random prices
// of 1-4 fraction digits (trailing zeros included) from 0.001 to 1e13,
// against std::to_chars.
TEST(JsonTest, DecimalsAreTheShortestRoundTripText) {
  std::mt19937_64 rng(7);
  JsonDecoder dec;
  Record r;
  int checked = 0;
  for (int i = 0; i < 200000; ++i) {
    const int frac = 1 + static_cast<int>(rng() % 4);
    const int64_t limit = int64_t{10} << (rng() % 44);  // up to ~1.8e14 before the point moves
    const int64_t m = 1 + static_cast<int64_t>(rng() % static_cast<uint64_t>(limit));
    std::string digits = std::to_string(m);
    if (digits.size() <= static_cast<size_t>(frac)) {
      digits.insert(0, static_cast<size_t>(frac) + 1 - digits.size(), '0');
    }
    digits.insert(digits.size() - static_cast<size_t>(frac), ".");
    if (rng() % 2 == 0) digits.insert(0, "-");
    const double d = std::strtod(digits.c_str(), nullptr);
    char buf[64];
    const auto res = std::to_chars(buf, buf + sizeof buf, d);
    std::string want(buf, res.ptr);
    if (want.find('e') != std::string::npos) continue;  // kDouble, not this test's case
    if (want.find('.') == std::string::npos) want += ".0";
    SCOPED_TRACE(digits);
    ASSERT_OK(dec.Decode("{\"x\":" + digits + "}", &r));
    const Value x = r.GetPath(FieldPath::Parse("x"));
    ASSERT_EQ(x.type, ValueType::kDecimal);
    ASSERT_EQ(x.ToJson(), want);
    ++checked;
  }
  EXPECT_GT(checked, 190000);
}

TEST(JsonTest, ManyFractionDigitsStayInRange) {
  // Shortest text needs more than 18 fraction digits: stays a double (scale <= 18).
  JsonDecoder dec;
  Record r;
  ASSERT_OK(dec.Decode(R"({"x":0.00012345678901234567})", &r));
  Value x = r.GetPath(FieldPath::Parse("x"));
  EXPECT_TRUE(x.type == ValueType::kDouble || x.scale <= 18);
  EXPECT_NEAR(x.AsDouble(), 0.00012345678901234567, 1e-18);
}

TEST(JsonTest, NestedObjectsAndArrays) {
  const char* json = R"({"a":{"b":{"c":[1,{"d":"e"},[]]}},"f":[],"g":{}})";
  EXPECT_EQ(RoundTrip(json), json);
  JsonDecoder dec;
  Record r;
  ASSERT_OK(dec.Decode(json, &r));
  EXPECT_EQ(r.GetPath(FieldPath::Parse("a.b.c")).ToJson(), R"([1,{"d":"e"},[]])");
  EXPECT_EQ(r.GetPath(FieldPath::Parse("a.b")).type, ValueType::kObject);
  EXPECT_EQ(r.GetPath(FieldPath::Parse("a.x")).type, ValueType::kNull);
  EXPECT_EQ(r.GetPath(FieldPath::Parse("a.b.c.d")).type, ValueType::kNull);  // arrays are not paths
  EXPECT_EQ(r.Find(FieldPath::Parse("nope")), -1);
  EXPECT_EQ(r.Find(FieldPath()), -1);
}

// The decoder writes nodes in bulk; the result must be the record the
// field-by-field builder makes, and stay open for fields added after.
TEST(JsonTest, DecodedRecordEqualsOneBuiltFieldByField) {
  Record built;
  built.AddString("id", "e\"1");
  built.BeginObject("o");
  built.AddInt("n", -3);
  built.BeginArray("a");
  built.AddDecimal("", 1999, 2);
  built.AddBool("", true);
  built.AddNull("");
  built.EndContainer();
  built.EndContainer();
  built.AddDouble("big", 1e300);
  JsonDecoder dec;
  Record r;
  ASSERT_OK(dec.Decode(R"({"id":"e\"1","o":{"n":-3,"a":[19.99,true,null]},"big":1e300})", &r));
  ASSERT_EQ(r.nodes().size(), built.nodes().size());
  for (size_t i = 0; i < r.nodes().size(); ++i) {
    SCOPED_TRACE(i);
    EXPECT_EQ(r.nodes()[i].type, built.nodes()[i].type);
    EXPECT_EQ(r.nodes()[i].size, built.nodes()[i].size);
    EXPECT_EQ(r.Key(static_cast<uint32_t>(i)), built.Key(static_cast<uint32_t>(i)));
    EXPECT_EQ(r.Get(static_cast<int32_t>(i)).ToJson(), built.Get(static_cast<int32_t>(i)).ToJson());
  }
  r.AddInt("added", 7);
  EXPECT_EQ(r.ToJson(),
            R"({"id":"e\"1","o":{"n":-3,"a":[19.99,true,null]},"big":1e+300,"added":7})");
  EXPECT_EQ(r.GetPath(FieldPath::Parse("added")).i, 7);
}

// Text followed by readable padding (a source's read buffer) decodes where
// it lies, to the same record and the same errors.
TEST(JsonTest, DecodePaddedMatchesDecode) {
  JsonDecoder dec;
  for (std::string_view line :
       {R"({"a":1,"s":"x\ny"})", R"({"a":1} )", "{\"a\":1}\r", R"({"a":[1,2)", "   ", "[1]"}) {
    SCOPED_TRACE(line);
    std::string buf(line);
    buf.push_back('\n');
    buf.append(JsonDecoder::kPadding, ' ');
    Record a;
    Record b;
    const absl::Status sa = dec.Decode(line, &a);
    const absl::Status sb = dec.DecodePadded(std::string_view(buf.data(), line.size()), &b);
    EXPECT_EQ(sa, sb);
    EXPECT_EQ(a.ToJson(), b.ToJson());
  }
}

// Decodes `lines` as one block (joined by `sep`, padded, as a file source
// hands them over) with DecodeLine, and each line alone with Decode: the same
// records and the same errors, line by line.
void ExpectBlockDecodesLikeLines(JsonDecoder& block_dec, const std::vector<std::string>& lines,
                                 const std::string& sep = "\n") {
  std::string buf;
  std::vector<size_t> starts;
  for (const std::string& l : lines) {
    starts.push_back(buf.size());
    buf += l;
    buf += sep;
  }
  if (buf.empty()) return;
  const size_t block_len = buf.size() - sep.size();
  buf.append(JsonDecoder::kPadding, ' ');
  const std::string_view block(buf.data(), block_len);
  JsonDecoder line_dec;
  Record a;
  Record b;
  for (size_t i = 0; i < lines.size(); ++i) {
    SCOPED_TRACE(lines[i]);
    const absl::Status sa = line_dec.Decode(lines[i], &a);
    const absl::Status sb =
        block_dec.DecodeLine(std::string_view(buf.data() + starts[i], lines[i].size()), block, &b);
    EXPECT_EQ(sa, sb);
    if (sa.ok() && sb.ok()) {
      EXPECT_EQ(a.ToJson(), b.ToJson()) << "line " << i << " of the block:\n" << block;
    }
  }
}

TEST(JsonTest, DecodeLineInABlockMatchesDecodingEachLine) {
  JsonDecoder dec;
  // Valid lines, then every way a line can differ from "one object": each
  // must fall back to its own parse (same error) without harming the next.
  ExpectBlockDecodesLikeLines(dec, {R"({"a":1,"s":"x\ny"})", R"({"b":[1,2,{"c":null}]})"});
  ExpectBlockDecodesLikeLines(dec, {
                                       R"({"a":1})",
                                       R"({"a":1} {"b":2})",  // two documents on one line
                                       R"({"a":)",            // a document spanning two lines
                                       R"(2})",
                                       R"({"ok":true})",
                                       R"(   {"lead":1})",  // leading blanks
                                       R"({"t":1}   )",     // trailing blanks
                                       R"([1,2])",          // not an object
                                       R"("str")",
                                       R"(42)",
                                       R"(""":10 )",  // found by the fuzzer
                                       R"("" {"a":1})",
                                       R"({"u":"unclosed)",  // flips every quote after it
                                       R"({"v":"after"})",
                                       R"({"w":"x"})",
                                       R"({"x":1,})",
                                       R"({"y":1}})",
                                       R"(})",
                                       R"({"z":"\u00e9"})",
                                   });
  // Invalid UTF-8 anywhere fails the block's single pass: every line
  // still decodes as it would alone.
  ExpectBlockDecodesLikeLines(dec, {R"({"a":1})", "{\"b\":\"\xff\"}", R"({"c":3})"});
  // \r\n line ends (the source passes lines without the \r).
  ExpectBlockDecodesLikeLines(dec, {R"({"a":1})", R"({"b":2})"}, "\r\n");
  // Lines decoded after a block began, then a new block at the same decoder.
  ExpectBlockDecodesLikeLines(dec, {R"({"only":1})"});
}

TEST(JsonTest, DecodeLineReparsesABufferReusedForOtherLines) {
  // A source refills the same buffer: the next block may have the same
  // address and length as the last one, and other lines.
  std::string buf = std::string(R"({"a":"x","b":1})") + "\n" + R"({"a":"y","b":2})";
  const size_t len = buf.size();
  buf.append(JsonDecoder::kPadding, ' ');
  JsonDecoder dec;
  Record r;
  const std::string_view block(buf.data(), len);
  ASSERT_OK(dec.DecodeLine(block.substr(0, 15), block, &r));
  ASSERT_OK(dec.DecodeLine(block.substr(16), block, &r));
  EXPECT_EQ(r.ToJson(), R"({"a":"y","b":2})");
  // Lines where the last block had them, of the same lengths.
  buf.replace(0, len, std::string(R"({"c":[7,8,9,0]})") + "\n" + R"({"a":"z","b":3})");
  ASSERT_EQ(buf.size(), len + JsonDecoder::kPadding);
  ASSERT_OK(dec.DecodeLine(block.substr(0, 15), block, &r));
  EXPECT_EQ(r.ToJson(), R"({"c":[7,8,9,0]})");
  ASSERT_OK(dec.DecodeLine(block.substr(16), block, &r));
  EXPECT_EQ(r.ToJson(), R"({"a":"z","b":3})");
}

TEST(JsonTest, DecodeLineMatchesDecodingEachLineOnRandomDamage) {
  std::mt19937 rng(7);
  const std::string good =
      R"({"event_id":"evt-1","n":12,"amount":3.5,"tags":["a","b"],"o":{"k":"v\"q"}})";
  const std::string specials = "{}[]\",:\\ \nx1\xc3";
  JsonDecoder dec;
  for (int round = 0; round < 300; ++round) {
    std::vector<std::string> lines;
    const int n = 1 + static_cast<int>(rng() % 40);
    for (int i = 0; i < n; ++i) {
      std::string l = good;
      // A third of the lines get one to three bytes changed, inserted or cut.
      if (rng() % 3 == 0) {
        for (int k = 1 + static_cast<int>(rng() % 3); k > 0; --k) {
          const size_t at = rng() % l.size();
          const char c = specials[rng() % specials.size()];
          switch (rng() % 3) {
            case 0:
              l[at] = c;
              break;
            case 1:
              l.insert(l.begin() + static_cast<ptrdiff_t>(at), c);
              break;
            default:
              l.erase(at, 1);
              break;
          }
        }
      }
      // A newline put in by the damage splits the line, as a file would.
      for (size_t nl; (nl = l.find('\n')) != std::string::npos; l.erase(0, nl + 1)) {
        lines.push_back(l.substr(0, nl));
      }
      lines.push_back(l);
    }
    std::erase_if(lines, [](const std::string& l) { return l.empty(); });
    ExpectBlockDecodesLikeLines(dec, lines);
  }
}

TEST(JsonTest, DeeplyNestedRoundTrips) {
  // Deeper than the serializer's inline stack of open containers.
  std::string deep;
  for (int i = 0; i < 100; ++i) deep += i % 2 == 0 ? R"({"k":[1,)" : "[";
  deep += "null";
  for (int i = 99; i >= 0; --i) deep += i % 2 == 0 ? "]}" : "]";
  const std::string json = R"({"a":)" + deep + R"(,"after":"x"})";
  EXPECT_EQ(RoundTrip(json), json);
}

TEST(JsonTest, Escapes) {
  EXPECT_EQ(RoundTrip(R"({"s":"q\"b\\s\/n\nt\tr\rb\bf\fu\u0001"})"),
            R"({"s":"q\"b\\s/n\nt\tr\rb\bf\fu\u0001"})");
  EXPECT_EQ(RoundTrip(R"({"s":"\u00e9\ud83d\ude00"})"), "{\"s\":\"\xC3\xA9\xF0\x9F\x98\x80\"}");
  EXPECT_EQ(RoundTrip(R"({"k\"ey":1})"), R"({"k\"ey":1})");
  JsonDecoder dec;
  Record r;
  ASSERT_OK(dec.Decode(R"({"s":"a\u0000b"})", &r));
  EXPECT_EQ(r.GetPath(FieldPath::Parse("s")).s, std::string_view("a\0b", 3));
  EXPECT_EQ(r.ToJson(), R"({"s":"a\u0000b"})");
}

TEST(JsonTest, EscapesInLongStringsAtEveryPosition) {
  // AppendJsonString skips 8 bytes at a time: put each special byte at every
  // offset of a long string and compare with a byte-by-byte reference.
  const std::string specials = std::string("\"\\\n\x01\x1f", 5) + std::string(1, '\0');
  for (char sp : specials) {
    for (size_t pos = 0; pos < 40; ++pos) {
      std::string s(40, 'a');
      s[pos] = sp;
      s[39 - pos / 2] = '\xC3';  // non-ASCII bytes must pass through untouched
      std::string got;
      AppendJsonString(s, &got);
      std::string want = "\"";
      for (char c : s) {
        if (c == sp) {
          want += sp == '"'      ? "\\\""
                  : sp == '\\'   ? "\\\\"
                  : sp == '\n'   ? "\\n"
                  : sp == '\x01' ? "\\u0001"
                  : sp == '\x1f' ? "\\u001f"
                                 : "\\u0000";
        } else {
          want += c;
        }
      }
      want += "\"";
      EXPECT_EQ(got, want) << "special " << static_cast<int>(sp) << " at " << pos;
    }
  }
}

TEST(JsonTest, Errors) {
  EXPECT_EQ(DecodeError("\xff"), "invalid UTF-8");
  EXPECT_EQ(DecodeError("{\"a\":\"\xc3\x28\"}"), "invalid UTF-8");
  EXPECT_THAT(DecodeError(R"({"a":1)"), HasSubstr("truncated"));
  EXPECT_THAT(DecodeError(R"({"a":"xyz)"), HasSubstr("truncated"));
  EXPECT_THAT(DecodeError(R"({"a":[1,2)"), HasSubstr("truncated"));
  EXPECT_EQ(DecodeError("[1,2]"), "top-level value is not an object");
  EXPECT_EQ(DecodeError("42"), "top-level value is not an object");
  EXPECT_EQ(DecodeError("\"s\""), "top-level value is not an object");
  EXPECT_EQ(DecodeError(""), "empty line, not JSON");
  EXPECT_EQ(DecodeError("   "), "empty line, not JSON");
  EXPECT_THAT(DecodeError("hello"), HasSubstr("JSON"));
  EXPECT_THAT(DecodeError(R"({"a":1}{"b":2})"), HasSubstr("JSON"));
  EXPECT_THAT(DecodeError(R"({"a":01})"), HasSubstr("JSON"));
}

TEST(JsonTest, DecoderIsReusable) {
  JsonDecoder dec;
  Record r;
  std::string big = R"({"s":")" + std::string(10000, 'x') + R"("})";
  ASSERT_OK(dec.Decode(big, &r));
  EXPECT_EQ(r.GetPath(FieldPath::Parse("s")).s.size(), 10000u);
  ASSERT_OK(dec.Decode(R"({"a":1})", &r));
  EXPECT_EQ(r.ToJson(), R"({"a":1})");
  EXPECT_FALSE(dec.Decode("{", &r).ok());
  ASSERT_OK(dec.Decode(R"({"b":2})", &r));
  EXPECT_EQ(r.ToJson(), R"({"b":2})");
}

TEST(RecordTest, BuildAndRead) {
  Record r;
  EXPECT_TRUE(r.empty());
  EXPECT_EQ(r.ToJson(), "{}");
  r.AddInt("i", 1);
  r.AddString("s", "v");
  r.BeginObject("o");
  r.AddDecimal("p", 1999, 2);
  r.BeginArray("arr");
  r.AddBool("", true);
  r.AddNull("");
  r.EndContainer();
  r.EndContainer();
  r.AddDouble("d", 0.5);
  EXPECT_EQ(r.ToJson(), R"({"i":1,"s":"v","o":{"p":19.99,"arr":[true,null]},"d":0.5})");
  EXPECT_EQ(r.GetPath(FieldPath::Parse("o.p")).ToJson(), "19.99");
  std::vector<std::string> keys;
  r.ForEachChild(0, [&](uint32_t c) { keys.emplace_back(r.Key(c)); });
  EXPECT_THAT(keys, ElementsAre("i", "s", "o", "d"));
  r.Clear();
  EXPECT_TRUE(r.empty());
  EXPECT_EQ(r.offset, -1);
  r.EnsureRoot();
  EXPECT_EQ(r.ToJson(), "{}");
}

TEST(RecordTest, SwapExchangesContentsAndMetadata) {
  JsonDecoder dec;
  Record a;
  Record b;
  ASSERT_OK(dec.Decode(R"({"a":"a long string value, not a short one","n":[1,2]})", &a));
  b.AddInt("b", 2);
  a.event_time = 1;
  a.arrival = 2;
  a.partition = 3;
  a.offset = 4;
  a.tombstone = true;
  a.swap(b);
  EXPECT_EQ(a.ToJson(), R"({"b":2})");
  EXPECT_EQ(b.ToJson(), R"({"a":"a long string value, not a short one","n":[1,2]})");
  EXPECT_EQ(b.event_time, 1);
  EXPECT_EQ(b.arrival, 2);
  EXPECT_EQ(b.partition, 3);
  EXPECT_EQ(b.offset, 4);
  EXPECT_TRUE(b.tombstone);
  EXPECT_EQ(a.offset, -1);
  EXPECT_FALSE(a.tombstone);
  a.AddInt("c", 3);  // both stay usable: a is still open at its root
  EXPECT_EQ(a.ToJson(), R"({"b":2,"c":3})");
}

TEST(RecordTest, AddValueCopiesSubtreesIncludingFromItself) {
  JsonDecoder dec;
  Record src;
  ASSERT_OK(dec.Decode(R"({"a":{"b":[1,"x"],"c":"long string value"},"s":"str"})", &src));
  Record dst;
  dst.AddValue("copy", src.GetPath(FieldPath::Parse("a")));
  dst.AddValue("s", src.GetPath(FieldPath::Parse("s")));
  EXPECT_EQ(dst.ToJson(), R"({"copy":{"b":[1,"x"],"c":"long string value"},"s":"str"})");
  // From the same record (the arena may grow while copying).
  src.AddValue("again", src.GetPath(FieldPath::Parse("a")));
  src.AddValue("s2", src.GetPath(FieldPath::Parse("a.c")));
  EXPECT_EQ(src.ToJson(),
            R"({"a":{"b":[1,"x"],"c":"long string value"},"s":"str",)"
            R"("again":{"b":[1,"x"],"c":"long string value"},"s2":"long string value"})");
  Record empty_containers;
  Value obj;
  obj.type = ValueType::kObject;
  Value arr;
  arr.type = ValueType::kArray;
  empty_containers.AddValue("o", obj);
  empty_containers.AddValue("a", arr);
  EXPECT_EQ(empty_containers.ToJson(), R"({"o":{},"a":[]})");
}

TEST(RecordTest, WholeRecordsCopyInBulkInsideOpenContainers) {
  JsonDecoder dec;
  Record a, b;
  ASSERT_OK(dec.Decode(R"({"id":1,"name":"ana","tags":["x",{"k":"v"}],"n":null})", &a));
  ASSERT_OK(dec.Decode(R"({"id":2.50,"s":"\"q\""})", &b));
  Record o;
  o.AddString("before", "b4");
  o.BeginObject("pair");
  o.AddValue("left", a.Get(0));
  o.AddValue("right", b.Get(0));
  o.EndContainer();
  o.AddInt("after", 7);
  EXPECT_EQ(o.ToJson(),
            R"({"before":"b4","pair":{"left":{"id":1,"name":"ana","tags":["x",{"k":"v"}],)"
            R"("n":null},"right":{"id":2.5,"s":"\"q\""}},"after":7})");
  // Paths resolve through the copies (subtree sizes were updated).
  EXPECT_EQ(o.GetPath(FieldPath::Parse("pair.right.s")).s, "\"q\"");
  EXPECT_EQ(o.GetPath(FieldPath::Parse("pair.left.tags")).type, ValueType::kArray);
  EXPECT_EQ(o.GetPath(FieldPath::Parse("after")).i, 7);
}

TEST(RecordTest, PackedRecordsRoundTrip) {
  JsonDecoder dec;
  Record a;
  ASSERT_OK(dec.Decode(R"({"id":1,"name":"ana","tags":["x",{"k":"v"}],"d":-0.125})", &a));
  a.event_time = 42;
  std::vector<uint64_t> buf(a.PackedSize() / 8 + 1);
  a.PackTo(reinterpret_cast<char*>(buf.data()));
  Record back;
  back.AddString("stale", "gone");
  back.Unpack(reinterpret_cast<const char*>(buf.data()));
  EXPECT_EQ(back.ToJson(), a.ToJson());
  EXPECT_EQ(back.event_time, 0);  // metadata is not packed
  Record o;
  o.AddPacked("row", reinterpret_cast<const char*>(buf.data()));
  o.AddPacked("again", reinterpret_cast<const char*>(buf.data()));
  EXPECT_EQ(o.ToJson(), "{\"row\":" + a.ToJson() + ",\"again\":" + a.ToJson() + "}");
  EXPECT_EQ(o.GetPath(FieldPath::Parse("again.tags")).type, ValueType::kArray);
  Record empty;
  std::vector<uint64_t> ebuf(1);
  empty.PackTo(reinterpret_cast<char*>(ebuf.data()));
  Record e;
  e.AddPacked("x", reinterpret_cast<const char*>(ebuf.data()));
  EXPECT_EQ(e.ToJson(), R"({"x":null})");
}

TEST(FieldPathTest, ParseAndToString) {
  FieldPath p = FieldPath::Parse("navio_info.navio_id");
  EXPECT_THAT(p.parts, ElementsAre("navio_info", "navio_id"));
  EXPECT_EQ(p.ToString(), "navio_info.navio_id");
  EXPECT_TRUE(FieldPath::Parse("").empty());
  EXPECT_THAT(FieldPath::Parse("a").parts, ElementsAre("a"));
}

TEST(ValueTest, CompareAndEqual) {
  EXPECT_TRUE(ValuesEqual(Value::Int(1), Value::Double(1.0)));
  EXPECT_TRUE(ValuesEqual(Value::Int(1), Value::Decimal(100, 2)));
  EXPECT_TRUE(ValuesEqual(Value::Decimal(10, 1), Value::Decimal(100, 2)));
  EXPECT_LT(CompareValues(Value::Decimal(1999, 2), Value::Int(20)), 0);
  EXPECT_GT(CompareValues(Value::Decimal(1, 18), Value::Int(0)), 0);
  EXPECT_LT(CompareValues(Value::String("a"), Value::String("b")), 0);
  EXPECT_LT(CompareValues(Value::Null(), Value::Bool(false)), 0);
  EXPECT_LT(CompareValues(Value::Bool(true), Value::Int(0)), 0);  // by kind
  EXPECT_LT(CompareValues(Value::Int(5), Value::String("0")), 0);
  EXPECT_EQ(CompareValues(Value::Int(INT64_MAX), Value::Int(INT64_MAX)), 0);
  EXPECT_LT(CompareValues(Value::Int(INT64_MIN), Value::Decimal(INT64_MIN, 18)), 0);
  EXPECT_FALSE(ValuesEqual(Value::String("1"), Value::Int(1)));
}

TEST(ValueTest, Json) {
  EXPECT_EQ(Value::Null().ToJson(), "null");
  EXPECT_EQ(Value::Double(1.0).ToJson(), "1.0");
  EXPECT_EQ(Value::Double(1e21).ToJson(), "1e+21");
  EXPECT_EQ(Value::Double(0.1).ToJson(), "0.1");
  EXPECT_EQ(Value::Double(std::numeric_limits<double>::infinity()).ToJson(), "null");
  EXPECT_EQ(Value::Decimal(5, 3).ToJson(), "0.005");
  EXPECT_EQ(Value::Decimal(-5, 3).ToJson(), "-0.005");
  EXPECT_EQ(Value::Decimal(-1050, 2).ToJson(), "-10.50");
  EXPECT_EQ(Value::Decimal(INT64_MIN, 0).ToJson(), "-9223372036854775808");
  EXPECT_EQ(Value::Int(INT64_MIN).ToJson(), "-9223372036854775808");
  EXPECT_EQ(Value::String("a\"b").ToJson(), R"("a\"b")");
  EXPECT_DOUBLE_EQ(Value::Decimal(1999, 2).AsDouble(), 19.99);
  EXPECT_EQ(Value::String("x").AsDouble(), 0);
  EXPECT_STREQ(ValueTypeName(ValueType::kDecimal), "decimal");
}

}  // namespace
}  // namespace caravela

namespace caravela {
namespace {

TEST(RecordTest, AppendFieldsJsonWritesTheNamedPathsAsAnObject) {
  JsonDecoder decoder;
  Record r;
  ASSERT_OK(decoder.Decode(R"({"a":1,"b":{"c":"x\"y"}})", &r));
  std::string out = "key=";
  r.AppendFieldsJson({"a", "b.c", "missing"},
                     {FieldPath::Parse("a"), FieldPath::Parse("b.c"), FieldPath::Parse("z")}, &out);
  EXPECT_EQ(out, R"(key={"a":1,"b.c":"x\"y","missing":null})");
}

}  // namespace
}  // namespace caravela
