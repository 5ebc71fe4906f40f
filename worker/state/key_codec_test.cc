#include "worker/state/key_codec.h"

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace caravela {
namespace {

constexpr int64_t kMin = std::numeric_limits<int64_t>::min();
constexpr int64_t kMax = std::numeric_limits<int64_t>::max();

TEST(KeyCodecTest, EncodingIsEightBytesWithSignBitFlipped) {
  EXPECT_EQ(EncodeBigEndian64(0), std::string("\x80\0\0\0\0\0\0\0", 8));
  EXPECT_EQ(EncodeBigEndian64(1), std::string("\x80\0\0\0\0\0\0\x01", 8));
  EXPECT_EQ(EncodeBigEndian64(-1), std::string("\x7f\xff\xff\xff\xff\xff\xff\xff", 8));
  EXPECT_EQ(EncodeBigEndian64(kMin), std::string(8, '\0'));
  EXPECT_EQ(EncodeBigEndian64(kMax), std::string(8, '\xff'));
  EXPECT_EQ(EncodeBigEndian64(0x0102030405060708),
            std::string("\x81\x02\x03\x04\x05\x06\x07\x08", 8));
}

TEST(KeyCodecTest, ByteOrderEqualsNumericOrder) {
  const std::vector<int64_t> values = {kMin, kMin + 1, -1'000'000'000'000, -256,     -255, -1, 0, 1,
                                       255,  256,      1'700'000'000'000,  kMax - 1, kMax};
  for (size_t i = 0; i + 1 < values.size(); ++i) {
    EXPECT_LT(EncodeBigEndian64(values[i]), EncodeBigEndian64(values[i + 1]))
        << values[i] << " vs " << values[i + 1];
  }
}

TEST(KeyCodecTest, RoundTripsAndConsumes) {
  std::string buf;
  AppendBigEndian64(&buf, -42);
  AppendBigEndian64(&buf, kMax);
  buf += "suffix";
  std::string_view in = buf;
  int64_t v;
  ASSERT_TRUE(ReadBigEndian64(&in, &v));
  EXPECT_EQ(v, -42);
  ASSERT_TRUE(ReadBigEndian64(&in, &v));
  EXPECT_EQ(v, kMax);
  EXPECT_EQ(in, "suffix");
  v = 7;
  EXPECT_FALSE(ReadBigEndian64(&in, &v));  // only 6 bytes left
  EXPECT_EQ(in, "suffix");
  EXPECT_EQ(v, 7);
  for (int64_t x : {kMin, kMin + 1, int64_t{-1}, int64_t{0}, kMax}) {
    std::string e = EncodeBigEndian64(x);
    std::string_view s = e;
    ASSERT_TRUE(ReadBigEndian64(&s, &v));
    EXPECT_EQ(v, x);
    EXPECT_TRUE(s.empty());
  }
}

TEST(KeyCodecTest, PrefixEnd) {
  EXPECT_EQ(PrefixEnd("abc"), "abd");
  EXPECT_EQ(PrefixEnd(std::string("a\xff\xff", 3)), "b");
  EXPECT_EQ(PrefixEnd(std::string("\xff\xff", 2)), "");
  EXPECT_EQ(PrefixEnd(""), "");
  EXPECT_EQ(PrefixEnd(std::string("a\0", 2)), std::string("a\x01", 2));
  // Every key with the prefix is < PrefixEnd, and the next prefix is not.
  std::string p = "k\x7f";
  EXPECT_LT(p + std::string(10, '\xff'), PrefixEnd(p));
  EXPECT_EQ(PrefixEnd(p), "k\x80");
}

}  // namespace
}  // namespace caravela
