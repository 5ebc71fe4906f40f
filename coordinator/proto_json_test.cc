// ProtoJson: the one JSON form of the CLI's --json and the HTTP API
// (docs/api.md): snake_case, every field, 64-bit numbers as numbers, an
// unknown watermark as null.
#include <cstdint>
#include <limits>
#include <string>

#include "caravela/v1/job.pb.h"
#include "caravela/v1/worker.pb.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "proto/grpc_support.h"

namespace caravela {
namespace {

TEST(ProtoJsonTest, EveryFieldSnakeCaseWithNumbers) {
  v1::Job job;
  job.set_id("revenue-1");
  job.set_state(v1::RUNNING);
  job.set_last_checkpoint(1234567890123);
  v1::TaskStatus* t = job.add_tasks();
  t->set_state(v1::TASK_RUNNING);
  t->set_watermark_ms(std::numeric_limits<int64_t>::min());  // no watermark yet
  v1::SourcePartitionStatus* p = t->add_sources();
  p->set_source("purchases");
  p->set_partition(0);
  p->set_lag(0);
  p->set_watermark_ms(1700000000000);

  const std::string text = ProtoJson(job);
  const nlohmann::json j = nlohmann::json::parse(text);
  EXPECT_EQ(j["id"], "revenue-1");
  EXPECT_EQ(j["state"], "RUNNING");
  EXPECT_EQ(j["last_checkpoint"], 1234567890123);  // a number, not "1234567890123"
  EXPECT_EQ(j["epoch"], 0);                        // zero fields are printed
  EXPECT_EQ(j["message"], "");
  const nlohmann::json& task = j["tasks"][0];
  EXPECT_EQ(task["state"], "TASK_RUNNING");
  EXPECT_TRUE(task["watermark_ms"].is_null()) << text;
  EXPECT_EQ(task["records_in"], 0);
  EXPECT_TRUE(task["activity"].is_object());  // a message not set: its defaults
  EXPECT_TRUE(task["activity"]["waiting"].is_array());
  const nlohmann::json& part = task["sources"][0];
  EXPECT_EQ(part["partition"], 0);
  EXPECT_EQ(part["lag"], 0);
  EXPECT_EQ(part["idle"], false);
  EXPECT_EQ(part["watermark_ms"], 1700000000000);
  // The .proto's order of fields, as in the CLI's and API's output.
  EXPECT_LT(text.find("\"source\""), text.find("\"partition\""));
  EXPECT_EQ(text.find("Checkpoint\""), std::string::npos);  // no lowerCamelCase
}

TEST(ProtoJsonTest, InvalidUtf8IsReplacedNotThrown) {
  v1::WorkerInfo w;
  w.set_id("worker-1");
  w.set_host(std::string("h\xff\xfe", 3));
  const nlohmann::json j = nlohmann::json::parse(ProtoJson(w));
  EXPECT_EQ(j["id"], "worker-1");
  EXPECT_EQ(j["state"], "WORKER_STATE_UNSPECIFIED");
}

}  // namespace
}  // namespace caravela
