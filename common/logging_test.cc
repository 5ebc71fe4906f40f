// ConfigureLogging: JSON lines that parse, with the message escaped, and
// levels per subsystem for loggers created before and after.
#include "common/logging.h"

#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "spdlog/sinks/ostream_sink.h"
#include "worker/testing/status_testing.h"

namespace caravela {
namespace {

TEST(LoggingTest, JsonLinesAndLevelsPerSubsystem) {
  const std::shared_ptr<spdlog::logger> saved = spdlog::default_logger();
  std::ostringstream out;
  auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(out);
  spdlog::set_default_logger(std::make_shared<spdlog::logger>("", sink));
  auto before = SubsystemLogger("logtest-before");
  ASSERT_OK(ConfigureLogging("json", "warn,logtest-after=debug"));
  auto after = SubsystemLogger("logtest-after");
  before->info("dropped: below warn");
  before->warn("quote \" backslash \\ newline \n tab \t end");
  after->debug("kept: {} at debug", "logtest-after");
  std::vector<std::string> lines = absl::StrSplit(out.str(), '\n', absl::SkipEmpty());
  ASSERT_EQ(lines.size(), 2u) << out.str();
  const nlohmann::json first = nlohmann::json::parse(lines[0]);
  EXPECT_EQ(first["level"], "warning");
  EXPECT_EQ(first["subsystem"], "logtest-before");
  EXPECT_EQ(first["msg"], "quote \" backslash \\ newline \n tab \t end");
  // RFC 3339, UTC, microseconds: 2026-12-02T02:25:57.347237Z
  EXPECT_THAT(first["ts"].get<std::string>(),
              ::testing::MatchesRegex(
                  R"([0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{6}Z)"));
  const nlohmann::json second = nlohmann::json::parse(lines[1]);
  EXPECT_EQ(second["level"], "debug");
  EXPECT_EQ(second["msg"], "kept: logtest-after at debug");

  // A context adds job and task (and partition) fields while it lives.
  {
    LogContext job("revenue");
    LogContext task("revenue", "revenue/stage-1/task-0", 3);
    before->warn("in a task");
  }
  before->warn("outside");
  lines = absl::StrSplit(out.str(), '\n', absl::SkipEmpty());
  ASSERT_EQ(lines.size(), 4u) << out.str();
  const nlohmann::json in_task = nlohmann::json::parse(lines[2]);
  EXPECT_EQ(in_task["job"], "revenue");
  EXPECT_EQ(in_task["task"], "revenue/stage-1/task-0");
  EXPECT_EQ(in_task["partition"], 3);
  EXPECT_EQ(in_task["msg"], "in a task");
  const nlohmann::json outside = nlohmann::json::parse(lines[3]);
  EXPECT_FALSE(outside.contains("job")) << lines[3];
  // Text lines: a prefix.
  ASSERT_OK(ConfigureLogging("text", ""));
  {
    LogContext job("revenue", "task-1");
    before->warn("text in a task");
  }
  EXPECT_THAT(out.str(), ::testing::HasSubstr("[job=revenue task=task-1] text in a task"));

  const absl::Status bad = ConfigureLogging("json", "kafka=loud");
  EXPECT_TRUE(absl::IsInvalidArgument(bad));
  EXPECT_THAT(std::string(bad.message()), ::testing::HasSubstr("kafka=loud"));
  EXPECT_FALSE(ConfigureLogging("xml", "").ok());
  ASSERT_OK(ConfigureLogging("text", "info"));
  // The stream dies with the test: log elsewhere again.
  spdlog::drop("logtest-before");
  spdlog::drop("logtest-after");
  spdlog::set_default_logger(saved);
}

}  // namespace
}  // namespace caravela
