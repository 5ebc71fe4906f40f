#include "common/job_outputs.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/registry/builtin_kinds.h"

namespace caravela {
namespace {

using ::testing::ElementsAre;
using ::testing::Field;
using ::testing::HasSubstr;

std::string Job(const std::string& sinks, const std::string& extra = "") {
  return absl::StrCat(R"(apiVersion: caravela/v1
kind: Job
metadata: {name: j}
spec:
  checkpoint: {interval: 10s}
  sources:
    - name: purchases
      file: {path: in.jsonl}
      event_time: {field: t, format: epoch_ms}
      watermark: {max_out_of_orderness: 1s}
  sinks:
)",
                      sinks, extra);
}

TEST(JobOutputsTest, FilesTablesAndExactlyOnceTopicsAreOutputs) {
  ParseResult r = ParseJobSpec(Job(R"(    - {from: purchases, file: {path: out/./a.jsonl}}
    - {from: purchases, stdout: {}}
    - {from: purchases, kafka: {topic: t1}}
    - {from: purchases, kafka: {topic: t2, exactly_once: true}}
    - {from: purchases, postgres: {dsn: "host=db dbname=app password=secret", table: Rev}}
    - {from: purchases, clickhouse: {url: "http://ch:8123", table: rev}}
)",
                                   "  dead_letter: {path: dl.jsonl}\n"));
  ASSERT_TRUE(r.ok()) << JoinSpecErrors(r.errors);
  std::vector<JobOutput> outputs = JobOutputs(r.spec);
  ASSERT_EQ(outputs.size(), 5u);
  EXPECT_EQ(outputs[0].yaml_path, "spec.sinks[0].file");
  EXPECT_EQ(outputs[0].output, "file out/a.jsonl");
  EXPECT_EQ(outputs[1].yaml_path, "spec.sinks[3].kafka");
  EXPECT_THAT(outputs[1].output, HasSubstr("kafka topic t2 (written exactly-once)"));
  EXPECT_THAT(outputs[2].output, HasSubstr("postgres table rev at"));
  EXPECT_THAT(outputs[2].output, ::testing::Not(HasSubstr("secret")));
  EXPECT_EQ(outputs[3].output, "clickhouse table default.rev at http://ch:8123");
  EXPECT_EQ(outputs[4].yaml_path, "spec.dead_letter.path");
}

TEST(JobOutputsTest, AJobNamingAnOutputTwiceIsInvalid) {
  ParseResult r = ParseJobSpec(Job(R"(    - {from: purchases, file: {path: out/a.jsonl}}
    - {from: purchases.invalid, file: {path: out/../out/a.jsonl}}
)"));
  EXPECT_THAT(r.errors, ElementsAre(Field(&SpecError::path, "spec.sinks[1].file")));
  ASSERT_FALSE(r.errors.empty());
  EXPECT_THAT(r.errors[0].message,
              HasSubstr("file out/a.jsonl is written by spec.sinks[0].file already"));
}

TEST(JobOutputsTest, OutputsOfARunningJobAreNotFree) {
  ParseResult mine = ParseJobSpec(Job(R"(    - {from: purchases, file: {path: out/a.jsonl}}
    - {from: purchases, file: {path: out/b.jsonl}}
)"));
  ASSERT_TRUE(mine.ok());
  ParseResult theirs = ParseJobSpec(Job("    - {from: purchases, file: {path: out/b.jsonl}}\n"));
  ASSERT_TRUE(theirs.ok());
  std::vector<SpecError> errors =
      CheckOutputsFree(mine.spec, {{"other-3", "RUNNING", JobOutputs(theirs.spec)}});
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_EQ(errors[0].path, "spec.sinks[1].file");
  EXPECT_THAT(errors[0].message,
              HasSubstr("file out/b.jsonl is written by job other-3 (RUNNING, its "
                        "spec.sinks[0].file)"));
  EXPECT_TRUE(CheckOutputsFree(mine.spec, {}).empty());
}

}  // namespace
}  // namespace caravela
