// FileSource on real temp files: line positions, blank lines, restore by
// skipping lines, long lines and the padding the decoder parses in place.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/json.h"
#include "worker/connectors/file_connectors.h"
#include "worker/testing/status_testing.h"

namespace caravela {
namespace {

struct Line {
  std::string payload;
  int64_t offset;
};

class FileSourceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = (std::filesystem::path(::testing::TempDir()) /
             absl::StrCat("file_source_test_", ::getpid(), "_",
                          ::testing::UnitTest::GetInstance()->current_test_info()->name()))
                .string();
  }
  void TearDown() override { std::filesystem::remove(path_); }

  void WriteFile(const std::string& content) {
    std::ofstream out(path_, std::ios::binary);
    out << content;
  }

  // Every line delivered after skipping `skip` lines; checks that each
  // payload is followed by its line end and JsonDecoder::kPadding bytes.
  std::vector<Line> ReadAll(int64_t skip = 0) {
    FileSource src(path_);
    EXPECT_OK(src.Open());
    if (skip > 0) {
      EXPECT_OK(src.SkipLines(skip));
    }
    std::vector<Line> lines;
    while (!src.Exhausted()) {
      // A poll's payloads lie in its block, in order, the first at its start
      // and the last at its end (the decoder parses the block in one pass).
      const char* next = nullptr;
      std::string_view block;
      auto n = src.Poll(3, 0, [&](const RawMessage& m) {
        EXPECT_TRUE(m.padded);
        if (next == nullptr) {
          block = m.block;
          EXPECT_EQ(m.payload.data(), block.data());
          next = block.data();
        }
        EXPECT_EQ(m.block, block);
        EXPECT_GE(m.payload.data(), next);
        EXPECT_LE(m.payload.data() + m.payload.size(), block.data() + block.size());
        next = m.payload.data() + m.payload.size() + 1;
        const char after = m.payload.data()[m.payload.size()];
        EXPECT_TRUE(after == '\n' || after == '\r') << int{after};
        // Reading the padding must be safe (ASan builds check it).
        volatile char last = m.payload.data()[m.payload.size() + JsonDecoder::kPadding - 1];
        (void)last;
        lines.push_back({std::string(m.payload), m.offset});
      });
      EXPECT_OK(n);
      if (!n.ok() || *n == 0) break;
      EXPECT_EQ(next, block.data() + block.size() + 1);  // the last payload ends the block
    }
    EXPECT_TRUE(src.Exhausted());
    return lines;
  }

  std::string path_;
};

TEST_F(FileSourceTest, BlankLinesCountInPositionsButAreNotDelivered) {
  WriteFile("{\"a\":1}\n\n{\"b\":2}\r\n\r\n{\"c\":3}");
  const std::vector<Line> lines = ReadAll();
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[0].payload, "{\"a\":1}");
  EXPECT_EQ(lines[0].offset, 0);
  EXPECT_EQ(lines[1].payload, "{\"b\":2}");
  EXPECT_EQ(lines[1].offset, 2);
  EXPECT_EQ(lines[2].payload, "{\"c\":3}");  // the last line has no newline
  EXPECT_EQ(lines[2].offset, 4);
}

// A restore skips the lines a checkpoint consumed, blank ones included: it
// resumes exactly at the next line, not one record further.
TEST_F(FileSourceTest, SkipLinesResumesAtTheLineAfterBlankLines) {
  WriteFile("a\n\nb\nc\nd\n");
  const std::vector<Line> lines = ReadAll(/*skip=*/3);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0].payload, "c");
  EXPECT_EQ(lines[0].offset, 3);
  EXPECT_EQ(lines[1].payload, "d");
  EXPECT_EQ(lines[1].offset, 4);
  EXPECT_TRUE(ReadAll(/*skip=*/9).empty());  // past the end: nothing left
}

// Lines longer than the 1 MiB read chunk, and many short lines across chunk
// boundaries, arrive whole and in order.
TEST_F(FileSourceTest, LongLinesAndChunkBoundaries) {
  const std::string big(3 << 20, 'x');
  std::string content = "first\n" + big + "\n";
  for (int i = 0; i < 200000; ++i) content += absl::StrCat("{\"i\":", i, "}\n");
  content += big;  // last line, no newline
  WriteFile(content);
  const std::vector<Line> lines = ReadAll();
  ASSERT_EQ(lines.size(), 200003u);
  EXPECT_EQ(lines[0].payload, "first");
  EXPECT_EQ(lines[1].payload, big);
  for (int i = 0; i < 200000; ++i) {
    ASSERT_EQ(lines[2 + i].payload, absl::StrCat("{\"i\":", i, "}"));
    ASSERT_EQ(lines[2 + i].offset, 2 + i);
  }
  EXPECT_EQ(lines.back().payload, big);
}

}  // namespace
}  // namespace caravela
