#include "worker/operators/row_pool.h"

#include <string>
#include <vector>

#include "common/json.h"
#include "gtest/gtest.h"
#include "worker/testing/status_testing.h"

namespace caravela {
namespace {

Record Decode(const std::string& json) {
  JsonDecoder dec;
  Record r;
  SCOPED_TRACE(json);
  EXPECT_OK(dec.Decode(json, &r));
  return r;
}

std::string Json(const char* packed) {
  Record r;
  r.Unpack(packed);
  return r.ToJson();
}

TEST(RowPoolTest, PacksRecordsAndReusesFreedBlocksOfTheirClass) {
  RowPool pool;
  const Record small = Decode(R"({"id":1,"name":"ana"})");
  const Record big = Decode(R"({"id":2,"text":")" + std::string(10000, 'x') + R"("})");
  char* a = pool.Pack(small);
  char* b = pool.Pack(small);
  char* c = pool.Pack(big);  // over the pooled size: its own allocation
  EXPECT_NE(a, b);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a) % 8, 0u);
  EXPECT_EQ(Json(a), small.ToJson());
  EXPECT_EQ(Json(c), big.ToJson());
  pool.Free(a, small.PackedSize());
  char* d = pool.Pack(small);
  EXPECT_EQ(d, a);  // the freed block of the same class comes back
  EXPECT_EQ(Json(b), small.ToJson());
  pool.Free(b, small.PackedSize());
  pool.Free(c, big.PackedSize());
  pool.Free(d, small.PackedSize());
  EXPECT_EQ(pool.ReservedBytes(), size_t{1} << 20);
  pool.Clear();
  EXPECT_EQ(pool.ReservedBytes(), 0u);
}

TEST(RowPoolTest, ManyRowsSpanChunksAndStayIntact) {
  RowPool pool;
  std::vector<std::pair<char*, size_t>> rows;
  for (int i = 0; i < 20000; ++i) {
    const Record r = Decode(R"({"i":)" + std::to_string(i) + "}");
    rows.emplace_back(pool.Pack(r), r.PackedSize());
  }
  EXPECT_GT(pool.ReservedBytes(), size_t{1} << 20);
  for (int i = 0; i < 20000; i += 997) {
    EXPECT_EQ(Json(rows[i].first), R"({"i":)" + std::to_string(i) + "}");
  }
  for (auto [r, bytes] : rows) pool.Free(r, bytes);
}

}  // namespace
}  // namespace caravela
