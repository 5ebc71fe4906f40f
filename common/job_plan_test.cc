#include "common/job_plan.h"

#include <string>
#include <vector>

#include "common/json.h"
#include "common/key_encoding.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/registry/builtin_kinds.h"
#include "worker/testing/status_testing.h"
#include "xxhash.h"

namespace caravela {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::StartsWith;

// A job named "j" with the given sources and operators (YAML list items).
JobSpec Spec(const std::string& sources, const std::string& operators,
             const std::string& sinks = "") {
  std::string yaml =
      "apiVersion: caravela/v1\nkind: Job\nmetadata: {name: j}\nspec:\n  sources:\n" + sources;
  if (!operators.empty()) yaml += "  operators:\n" + operators;
  if (!sinks.empty()) yaml += "  sinks:\n" + sinks;
  ParseResult r = ParseJobSpec(yaml);
  EXPECT_TRUE(r.ok()) << (r.ok() ? "" : r.errors[0].ToString()) << "\n" << yaml;
  return r.spec;
}

// A Kafka source `name` (topic = name) keyed by `key` (YAML list, "" = none).
std::string Kafka(const std::string& name, const std::string& key) {
  std::string s = "    - name: " + name + "\n      kafka: {topic: " + name +
                  "}\n      event_time: {field: ts}\n";
  if (!key.empty()) s += "      key: " + key + "\n";
  return s;
}

JobPlan Plan(const JobSpec& spec, int parallelism, const SourcePartitions& partitions = {}) {
  absl::StatusOr<JobPlan> plan = PlanJob(spec, parallelism, partitions);
  EXPECT_TRUE(plan.ok()) << plan.status();
  return plan.ok() ? *plan : JobPlan{};
}

// Every exchange goes from earlier stages to a later one (the stage graph is
// acyclic and the stages are in topological order).
void ExpectTopological(const JobPlan& plan) {
  for (const ExchangePlan& e : plan.exchanges) {
    for (int p : e.producer_stages) EXPECT_LT(p, e.consumer_stage) << e.topic;
  }
}

constexpr char kRevenueOps[] = R"(    - name: unique
      dedup: {from: purchases, id: event_id, retention: 24h}
    - name: revenue
      window:
        from: unique
        tumbling: 1h
        group_by: [country]
        aggregates: [{as: revenue, sum: amount}]
)";

TEST(JobPlanTest, HourlyRevenue) {
  JobSpec spec = Spec(Kafka("purchases", "[user_id]"), kRevenueOps);
  JobPlan plan = Plan(spec, 3, {{"purchases", 3}});
  EXPECT_EQ(plan.job_name, "j");
  EXPECT_EQ(plan.parallelism, 3);
  ASSERT_EQ(plan.stages.size(), 3u);
  ASSERT_EQ(plan.exchanges.size(), 2u);
  EXPECT_EQ(plan.total_tasks(), 9);
  // Global task ids go stage by stage: 0-2, 3-5, 6-8.
  EXPECT_EQ(plan.FirstTask(0), 0);
  EXPECT_EQ(plan.FirstTask(2), 6);

  const StagePlan& s0 = plan.stages[0];
  EXPECT_EQ(s0.id, 0);
  EXPECT_EQ(s0.tasks, 3);
  EXPECT_EQ(s0.tasks_reason, "parallelism");
  EXPECT_THAT(s0.sources, ElementsAre("purchases"));
  EXPECT_THAT(s0.operators, IsEmpty());
  EXPECT_THAT(s0.key, ElementsAre("user_id"));
  EXPECT_THAT(s0.input_exchanges, IsEmpty());
  EXPECT_THAT(s0.output_exchanges, ElementsAre(0));
  EXPECT_THAT(plan.stages[1].operators, ElementsAre("unique"));
  EXPECT_THAT(plan.stages[1].key, ElementsAre("event_id"));
  EXPECT_THAT(plan.stages[1].input_exchanges, ElementsAre(0));
  EXPECT_THAT(plan.stages[1].output_exchanges, ElementsAre(1));
  EXPECT_THAT(plan.stages[2].operators, ElementsAre("revenue"));
  EXPECT_THAT(plan.stages[2].key, ElementsAre("country"));
  EXPECT_THAT(plan.stages[2].output_exchanges, IsEmpty());

  const ExchangePlan& x0 = plan.exchanges[0];
  EXPECT_EQ(x0.id, 0);
  EXPECT_EQ(x0.topic, "caravela.j.unique");
  EXPECT_EQ(x0.operator_name, "unique");
  EXPECT_EQ(x0.consumer_stage, 1);
  EXPECT_EQ(x0.partitions, 3);
  EXPECT_THAT(x0.producer_stages, ElementsAre(0));
  ASSERT_EQ(x0.inputs.size(), 1u);
  EXPECT_EQ(x0.inputs[0].input, 0);
  EXPECT_EQ(x0.inputs[0].from, "purchases");
  EXPECT_EQ(x0.inputs[0].producer_stage, 0);
  EXPECT_THAT(x0.inputs[0].key_names, ElementsAre("event_id"));
  ASSERT_EQ(x0.inputs[0].key.size(), 1u);
  EXPECT_EQ(x0.inputs[0].key[0].ToString(), "event_id");
  EXPECT_EQ(plan.exchanges[1].topic, "caravela.j.revenue");
  EXPECT_THAT(plan.exchanges[1].inputs[0].key_names, ElementsAre("country"));
  EXPECT_THAT(plan.exchanges[1].producer_stages, ElementsAre(1));

  EXPECT_EQ(plan.stage_of.at("purchases"), 0);
  EXPECT_EQ(plan.stage_of.at("unique"), 1);
  EXPECT_EQ(plan.stage_of.at("revenue"), 2);
  EXPECT_EQ(plan.ExchangeFor("unique", 0), &plan.exchanges[0]);
  EXPECT_EQ(plan.ExchangeFor("revenue", 0), &plan.exchanges[1]);
  EXPECT_EQ(plan.ExchangeFor("revenue", 1), nullptr);
  EXPECT_EQ(plan.ExchangeFor("purchases", 0), nullptr);
  ExpectTopological(plan);

  EXPECT_EQ(plan.ToText(),
            "job j: parallelism 3, 3 stages, 9 tasks, 2 exchanges\n"
            "stage 0 (3 tasks): source purchases   [partitioned by user_id]\n"
            "  exchange caravela.j.unique (3 partitions) by event_id -> stage 1\n"
            "stage 1 (3 tasks): exchange caravela.j.unique -> dedup unique   "
            "[partitioned by event_id]\n"
            "  exchange caravela.j.revenue (3 partitions) by country -> stage 2\n"
            "stage 2 (3 tasks): exchange caravela.j.revenue -> window revenue   "
            "[partitioned by country]\n");
}

TEST(JobPlanTest, ParallelismOneHasTheSameShape) {
  JobSpec spec = Spec(Kafka("purchases", "[user_id]"), kRevenueOps);
  JobPlan one = Plan(spec, 1);
  JobPlan three = Plan(spec, 3);
  ASSERT_EQ(one.stages.size(), three.stages.size());
  ASSERT_EQ(one.exchanges.size(), three.exchanges.size());
  for (const StagePlan& s : one.stages) EXPECT_EQ(s.tasks, 1);
  for (const ExchangePlan& e : one.exchanges) EXPECT_EQ(e.partitions, 1);
  EXPECT_EQ(one.stage_of, three.stage_of);
  EXPECT_EQ(one.total_tasks(), 3);
}

TEST(JobPlanTest, ParallelismComesFromTheArgument) {
  JobSpec spec = Spec(Kafka("purchases", "[user_id]"), kRevenueOps);
  EXPECT_EQ(spec.parallelism, 1);
  EXPECT_EQ(Plan(spec, 5).stages[0].tasks, 5);
  absl::StatusOr<JobPlan> bad = PlanJob(spec, 0);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(bad.status().message(), "spec.parallelism: expected an integer >= 1, got 0");
}

TEST(JobPlanTest, ParallelismAboveMaxParallelismIsRefusedAndExchangesTopicsGetItsPartitions) {
  JobSpec spec = Spec(Kafka("purchases", "[user_id]"), kRevenueOps);
  spec.max_parallelism = 8;
  const JobPlan eight = Plan(spec, 8);
  EXPECT_EQ(eight.max_parallelism, 8);
  absl::StatusOr<JobPlan> bad = PlanJob(spec, 9);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(bad.status().message()),
              HasSubstr("parallelism 9 is above the job's max_parallelism (8)"));
  // A Kafka exchange topic is created for any later task count up to 8.
  const JobPlan two = Plan(spec, 2);
  ASSERT_FALSE(two.exchanges.empty());
  for (const ExchangePlan& e : two.exchanges) {
    EXPECT_EQ(e.partitions, 2);
    EXPECT_EQ(e.CreatePartitions(two), 8) << e.topic;
  }
}

TEST(JobPlanTest, SourceKeyedByTheDedupIdNeedsNoExchange) {
  JobSpec spec = Spec(Kafka("events", "[event_id]"), R"(    - name: paid
      filter: {from: events, where: "status == 'paid'"}
    - name: unique
      dedup: {from: paid, id: event_id, retention: 1h}
)");
  JobPlan plan = Plan(spec, 4);
  ASSERT_EQ(plan.stages.size(), 1u);
  EXPECT_THAT(plan.exchanges, IsEmpty());
  EXPECT_THAT(plan.stages[0].sources, ElementsAre("events"));
  EXPECT_THAT(plan.stages[0].operators, ElementsAre("paid", "unique"));
  EXPECT_EQ(plan.stages[0].tasks, 4);
  EXPECT_EQ(plan.total_tasks(), 4);
  EXPECT_EQ(plan.ToText(),
            "job j: parallelism 4, 1 stage, 4 tasks, 0 exchanges\n"
            "stage 0 (4 tasks): source events -> filter paid, dedup unique   "
            "[partitioned by event_id]\n");
}

TEST(JobPlanTest, GroupByASupersetOfTheSourceKeyNeedsNoExchange) {
  JobSpec spec = Spec(Kafka("purchases", "[user_id]"), R"(    - name: w
      window: {from: purchases, tumbling: 1h, group_by: [country, user_id], aggregates: [{as: n, count: "*"}]}
    - name: again
      dedup: {from: w, id: user_id, retention: 1h}
)");
  JobPlan plan = Plan(spec, 2);
  ASSERT_EQ(plan.stages.size(), 1u);
  EXPECT_THAT(plan.exchanges, IsEmpty());
  EXPECT_THAT(plan.stages[0].operators, ElementsAre("w", "again"));

  // ... but a group_by that misses a key field does.
  JobSpec other = Spec(Kafka("purchases", "[user_id, shop]"), R"(    - name: w
      window: {from: purchases, tumbling: 1h, group_by: [user_id], aggregates: [{as: n, count: "*"}]}
)");
  JobPlan p2 = Plan(other, 2);
  ASSERT_EQ(p2.stages.size(), 2u);
  ASSERT_EQ(p2.exchanges.size(), 1u);
  EXPECT_THAT(p2.exchanges[0].inputs[0].key_names, ElementsAre("user_id"));
}

TEST(JobPlanTest, GlobalWindowRunsAsOneTask) {
  JobSpec spec = Spec(Kafka("purchases", "[user_id]"), R"(    - name: total
      window: {from: purchases, tumbling: 1h, aggregates: [{as: n, count: "*"}]}
    - name: big
      filter: {from: total, where: "n > 10"}
)");
  JobPlan plan = Plan(spec, 4);
  ASSERT_EQ(plan.stages.size(), 2u);
  EXPECT_EQ(plan.stages[0].tasks, 4);
  EXPECT_EQ(plan.stages[1].tasks, 1);
  EXPECT_EQ(plan.stages[1].tasks_reason, "global window total");
  EXPECT_THAT(plan.stages[1].operators, ElementsAre("total", "big"));
  EXPECT_THAT(plan.stages[1].key, IsEmpty());
  ASSERT_EQ(plan.exchanges.size(), 1u);
  EXPECT_EQ(plan.exchanges[0].partitions, 1);
  EXPECT_THAT(plan.exchanges[0].inputs[0].key, IsEmpty());
  EXPECT_EQ(plan.total_tasks(), 5);
  EXPECT_THAT(plan.ToText(),
              HasSubstr("stage 1 (1 task: global window total): exchange caravela.j.total -> "
                        "window total, filter big   [unpartitioned]\n"));
  EXPECT_THAT(plan.ToText(),
              HasSubstr("  exchange caravela.j.total (1 partition) unkeyed -> stage 1\n"));

  // Also at parallelism 1: the shape does not depend on the parallelism.
  JobPlan one = Plan(spec, 1);
  EXPECT_EQ(one.stages.size(), 2u);
  EXPECT_EQ(one.exchanges.size(), 1u);
}

constexpr char kIntervalJoin[] = R"(    - name: joined
      interval_join: {left: views, right: clicks, on: [[user_id, uid]], between: {lower: 0s, upper: 1h}}
)";

TEST(JobPlanTest, CoPartitionedIntervalJoinNeedsNoExchange) {
  JobSpec spec = Spec(Kafka("views", "[user_id]") + Kafka("clicks", "[uid]"), kIntervalJoin);
  JobPlan plan = Plan(spec, 4, {{"views", 8}, {"clicks", 8}});
  ASSERT_EQ(plan.stages.size(), 1u);
  EXPECT_THAT(plan.exchanges, IsEmpty());
  EXPECT_THAT(plan.stages[0].sources, ElementsAre("views", "clicks"));
  EXPECT_THAT(plan.stages[0].operators, ElementsAre("joined"));
  EXPECT_THAT(plan.stages[0].key, ElementsAre("user_id"));
  // Unknown counts are assumed equal.
  EXPECT_EQ(Plan(spec, 4).stages.size(), 1u);
  // Different partition counts: not co-partitioned.
  JobPlan differ = Plan(spec, 4, {{"views", 8}, {"clicks", 4}});
  EXPECT_EQ(differ.stages.size(), 3u);
  EXPECT_EQ(differ.exchanges.size(), 1u);
}

TEST(JobPlanTest, JoinInputsKeyedDifferentlyShareOneExchange) {
  JobSpec spec = Spec(Kafka("views", "[user_id]") + Kafka("clicks", "[ad_id]"), kIntervalJoin);
  JobPlan plan = Plan(spec, 2);
  ASSERT_EQ(plan.stages.size(), 3u);
  ASSERT_EQ(plan.exchanges.size(), 1u);
  const ExchangePlan& x = plan.exchanges[0];
  EXPECT_EQ(x.topic, "caravela.j.joined");
  EXPECT_EQ(x.consumer_stage, 2);
  EXPECT_EQ(x.partitions, 2);
  EXPECT_THAT(x.producer_stages, ElementsAre(0, 1));
  ASSERT_EQ(x.inputs.size(), 2u);
  EXPECT_EQ(x.inputs[0].input, 0);
  EXPECT_EQ(x.inputs[0].from, "views");
  EXPECT_EQ(x.inputs[0].producer_stage, 0);
  EXPECT_THAT(x.inputs[0].key_names, ElementsAre("user_id"));
  EXPECT_EQ(x.inputs[1].input, 1);
  EXPECT_EQ(x.inputs[1].from, "clicks");
  EXPECT_EQ(x.inputs[1].producer_stage, 1);
  EXPECT_THAT(x.inputs[1].key_names, ElementsAre("uid"));
  EXPECT_EQ(plan.ExchangeFor("joined", 0), &x);
  EXPECT_EQ(plan.ExchangeFor("joined", 1), &x);
  EXPECT_THAT(plan.stages[0].output_exchanges, ElementsAre(0));
  EXPECT_THAT(plan.stages[1].output_exchanges, ElementsAre(0));
  EXPECT_THAT(plan.stages[2].input_exchanges, ElementsAre(0));
  EXPECT_THAT(plan.ToText(), HasSubstr("  exchange caravela.j.joined (2 partitions) input 1 "
                                       "from clicks by uid -> stage 2\n"));
}

TEST(JobPlanTest, JoinKeysMustCorrespondPairwise) {
  // Both inputs are keyed by join fields, but not by the same `on` pair.
  JobSpec spec = Spec(Kafka("views", "[user_id]") + Kafka("clicks", "[ad]"), R"(    - name: joined
      window_join: {left: views, right: clicks, on: [[user_id, uid], [ad_id, ad]], tumbling: 1m}
)");
  EXPECT_EQ(Plan(spec, 2).exchanges.size(), 1u);
  JobSpec ok = Spec(Kafka("views", "[ad_id]") + Kafka("clicks", "[ad]"), R"(    - name: joined
      window_join: {left: views, right: clicks, on: [[user_id, uid], [ad_id, ad]], tumbling: 1m}
)");
  EXPECT_THAT(Plan(ok, 2).exchanges, IsEmpty());
}

TEST(JobPlanTest, LookupJoinBroadcastsItsTable) {
  JobSpec spec =
      Spec(Kafka("orders", "[user_id]") + "    - name: shops\n      file: {path: shops.jsonl}\n",
           R"(    - name: enriched
      lookup_join: {stream: orders, table: shops, on: [[shop, id]]}
    - name: per_user
      dedup: {from: enriched, id: user_id, retention: 1h}
)",
           "    - {from: shops.invalid, stdout: {}}\n");
  JobPlan plan = Plan(spec, 3);
  ASSERT_EQ(plan.stages.size(), 1u);
  EXPECT_THAT(plan.exchanges, IsEmpty());
  EXPECT_THAT(plan.stages[0].sources, ElementsAre("orders"));
  EXPECT_THAT(plan.stages[0].broadcast, ElementsAre("shops"));
  EXPECT_THAT(plan.stages[0].operators, ElementsAre("enriched", "per_user"));
  EXPECT_EQ(plan.stages[0].tasks, 3);  // a broadcast file does not make it one task
  EXPECT_EQ(plan.stage_of.at("shops"), 0);
  EXPECT_EQ(plan.ExchangeFor("enriched", 1), nullptr);
  EXPECT_THAT(plan.ToText(), HasSubstr("stage 0 (3 tasks): source orders, table shops "
                                       "(broadcast) -> lookup_join enriched, dedup per_user"));
}

TEST(JobPlanTest, TemporalJoin) {
  const std::string op = R"(    - name: priced
      temporal_join: {stream: orders, table: rates, on: [[currency, code]]}
    - name: unique
      dedup: {from: priced, id: currency, retention: 1h}
)";
  // Both keyed by the join key: one stage; the output keeps the stream's key.
  JobPlan same = Plan(Spec(Kafka("orders", "[currency]") + Kafka("rates", "[code]"), op), 2);
  ASSERT_EQ(same.stages.size(), 1u);
  EXPECT_THAT(same.exchanges, IsEmpty());
  EXPECT_THAT(same.stages[0].sources, ElementsAre("orders", "rates"));
  EXPECT_THAT(same.stages[0].operators, ElementsAre("priced", "unique"));

  // Stream keyed otherwise: both inputs go through one exchange; the output is
  // then partitioned by the stream's key fields.
  JobPlan plan = Plan(Spec(Kafka("orders", "[user_id]") + Kafka("rates", "[code]"), op), 2);
  ASSERT_EQ(plan.stages.size(), 3u);
  ASSERT_EQ(plan.exchanges.size(), 1u);
  const ExchangePlan& x = plan.exchanges[0];
  ASSERT_EQ(x.inputs.size(), 2u);
  EXPECT_THAT(x.inputs[0].key_names, ElementsAre("currency"));
  EXPECT_THAT(x.inputs[1].key_names, ElementsAre("code"));
  EXPECT_THAT(plan.stages[2].operators, ElementsAre("priced", "unique"));
  EXPECT_THAT(plan.stages[2].key, ElementsAre("currency"));
}

TEST(JobPlanTest, ProjectThatRenamesTheKeyBreaksPartitioning) {
  JobSpec renamed = Spec(Kafka("purchases", "[user_id]"), R"(    - name: p
      project: {from: purchases, fields: {uid: user_id, amount: amount}}
    - name: d
      dedup: {from: p, id: uid, retention: 1h}
)");
  JobPlan plan = Plan(renamed, 2);
  EXPECT_EQ(plan.stages.size(), 2u);
  ASSERT_EQ(plan.exchanges.size(), 1u);
  EXPECT_EQ(plan.exchanges[0].inputs[0].from, "p");
  EXPECT_THAT(plan.stages[0].operators, ElementsAre("p"));

  JobSpec kept = Spec(Kafka("purchases", "[user.id]"), R"(    - name: p
      project: {from: purchases, fields: {user: user, amount: amount * 2}}
    - name: d
      dedup: {from: p, id: user.id, retention: 1h}
)");
  EXPECT_THAT(Plan(kept, 2).exchanges, IsEmpty());
  // `user_id: user_id + 0` computes a new value: not kept.
  JobSpec computed = Spec(Kafka("purchases", "[user_id]"), R"(    - name: p
      project: {from: purchases, fields: {user_id: user_id + 0}}
    - name: d
      dedup: {from: p, id: user_id, retention: 1h}
)");
  EXPECT_EQ(Plan(computed, 2).exchanges.size(), 1u);
}

TEST(JobPlanTest, FileSourceStageHasOneTask) {
  JobSpec spec = Spec(
      "    - name: purchases\n      file: {path: p.jsonl}\n      event_time: {field: ts}\n      "
      "key: [user_id]\n",
      R"(    - name: paid
      filter: {from: purchases, where: "paid"}
    - name: unique
      dedup: {from: paid, id: user_id, retention: 1h}
)");
  JobPlan plan = Plan(spec, 4);
  ASSERT_EQ(plan.stages.size(), 2u);
  EXPECT_EQ(plan.stages[0].tasks, 1);
  EXPECT_EQ(plan.stages[0].tasks_reason, "file source purchases");
  EXPECT_THAT(plan.stages[0].key, IsEmpty());  // a file is unpartitioned, whatever its key
  EXPECT_EQ(plan.stages[1].tasks, 4);
  EXPECT_EQ(plan.exchanges[0].partitions, 4);
  EXPECT_EQ(plan.total_tasks(), 5);
  EXPECT_THAT(plan.ToText(), HasSubstr("stage 0 (1 task: file source purchases): source "
                                       "purchases -> filter paid   [unpartitioned]\n"));
}

TEST(JobPlanTest, MoreTasksThanSourcePartitionsIsAnError) {
  JobSpec spec = Spec(Kafka("purchases", "[user_id]") + Kafka("refunds", ""), R"(    - name: unique
      dedup: {from: refunds, id: event_id, retention: 1h}
)");
  absl::StatusOr<JobPlan> plan = PlanJob(spec, 4, {{"purchases", 3}, {"refunds", 1}});
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(plan.status().message(),
            "spec.parallelism: 4 tasks but source \"purchases\" (topic purchases) has 3 "
            "partitions; use at most 3 or add partitions to the topic\n"
            "spec.parallelism: 4 tasks but source \"refunds\" (topic refunds) has 1 "
            "partition; use at most 1 or add partitions to the topic");
  EXPECT_OK(PlanJob(spec, 1, {{"purchases", 3}, {"refunds", 1}}));
  EXPECT_OK(PlanJob(spec, 4, {{"purchases", 4}, {"refunds", 12}}));
  EXPECT_OK(PlanJob(spec, 4));  // unknown counts: not checked
}

TEST(JobPlanTest, ExchangedInputAndItsOwnSourceDoNotFormACycle) {
  // S keyed by k -> dedup by id (exchange) -> join(dedup, S) on k.
  JobSpec spec = Spec(Kafka("s", "[k]"), R"(    - name: d
      dedup: {from: s, id: id, retention: 1h}
    - name: joined
      interval_join: {left: d, right: s, on: [k], between: {lower: 0s, upper: 1m}}
)");
  JobPlan plan = Plan(spec, 2);
  ASSERT_EQ(plan.stages.size(), 3u);
  ASSERT_EQ(plan.exchanges.size(), 2u);
  const ExchangePlan* x = plan.ExchangeFor("joined", 0);
  ASSERT_NE(x, nullptr);
  EXPECT_EQ(x, plan.ExchangeFor("joined", 1));
  EXPECT_THAT(x->producer_stages, ElementsAre(0, 1));
  EXPECT_EQ(plan.stage_of.at("joined"), 2);
  ExpectTopological(plan);
}

TEST(JobPlanTest, MergingExchangedStagesNeverCreatesACycle) {
  // d1 and w are both partitioned by k through exchanges, with equal task
  // counts, but w is downstream of d1's stage: merging them would make a
  // cycle (stage of d1 -> d2 -> w -> stage of d1), so both are exchanged.
  JobSpec spec = Spec(Kafka("s", "[a]"), R"(    - name: d1
      dedup: {from: s, id: k, retention: 1h}
    - name: d2
      dedup: {from: d1, id: id, retention: 1h}
    - name: w
      window: {from: d2, tumbling: 1m, group_by: [k], aggregates: [{as: n, count: "*"}]}
    - name: joined
      interval_join: {left: d1, right: w, on: [k], between: {lower: 0s, upper: 1m}}
)");
  JobPlan plan = Plan(spec, 2);
  ASSERT_EQ(plan.exchanges.size(), 4u);
  EXPECT_EQ(plan.stages.size(), 5u);
  const ExchangePlan* x = plan.ExchangeFor("joined", 0);
  ASSERT_NE(x, nullptr);
  EXPECT_EQ(x->inputs.size(), 2u);
  ExpectTopological(plan);

  // Two independent exchanged stages keyed alike are co-partitioned: merged.
  JobSpec merge = Spec(Kafka("s", "[a]") + Kafka("t", "[b]"), R"(    - name: d1
      dedup: {from: s, id: k, retention: 1h}
    - name: d2
      dedup: {from: t, id: k, retention: 1h}
    - name: joined
      interval_join: {left: d1, right: d2, on: [k], between: {lower: 0s, upper: 1m}}
)");
  JobPlan merged = Plan(merge, 2);
  ASSERT_EQ(merged.stages.size(), 3u);
  EXPECT_EQ(merged.exchanges.size(), 2u);
  EXPECT_EQ(merged.ExchangeFor("joined", 0), nullptr);
  EXPECT_THAT(merged.stages[2].operators, ElementsAre("d1", "d2", "joined"));
  EXPECT_THAT(merged.stages[2].input_exchanges, ElementsAre(0, 1));
  ExpectTopological(merged);
}

TEST(JobPlanTest, ToJsonParses) {
  JobSpec spec = Spec(Kafka("purchases", "[user_id]"), kRevenueOps);
  JobPlan plan = Plan(spec, 3);
  std::string json = plan.ToJson();
  EXPECT_THAT(json, StartsWith(R"({"job":"j","parallelism":3,"total_tasks":9,"stages":[{"id":0,)"));
  JsonDecoder decoder;
  Record r;
  ASSERT_TRUE(decoder.Decode(json, &r).ok()) << json;
  EXPECT_EQ(r.GetPath(FieldPath::Parse("job")).s, "j");
  EXPECT_EQ(r.GetPath(FieldPath::Parse("parallelism")).i, 3);
  Value stages = r.GetPath(FieldPath::Parse("stages"));
  ASSERT_EQ(stages.type, ValueType::kArray);
  int n = 0;
  r.ForEachChild(stages.node, [&](uint32_t) { ++n; });
  EXPECT_EQ(n, 3);
  Value exchanges = r.GetPath(FieldPath::Parse("exchanges"));
  ASSERT_EQ(exchanges.type, ValueType::kArray);
  EXPECT_THAT(exchanges.ToJson(), HasSubstr(R"("topic":"caravela.j.unique")"));
  EXPECT_THAT(exchanges.ToJson(), HasSubstr(R"("key":["event_id"])"));
  EXPECT_EQ(plan.ToJson(), json);  // deterministic
}

Record Decode(const std::string& json) {
  JsonDecoder decoder;
  Record r;
  EXPECT_TRUE(decoder.Decode(json, &r).ok()) << json;
  return r;
}

uint64_t Hash(const std::string& json, const std::vector<std::string>& key) {
  std::vector<FieldPath> paths;
  paths.reserve(key.size());
  for (const std::string& k : key) paths.push_back(FieldPath::Parse(k));
  std::string scratch;
  return ExchangeKeyHash(Decode(json), paths, &scratch);
}

TEST(ExchangeKeyHashTest, IsTheDocumentedEncoding) {
  // Per field: tag, 4-byte big-endian length, bytes.
  const std::string bytes(
      "s\0\0\0\x02u1n\0\0\0\x01"
      "1",
      13);
  const uint64_t expected = XXH3_64bits(bytes.data(), bytes.size());
  EXPECT_EQ(Hash(R"({"user_id":"u1","n":1,"other":true})", {"user_id", "n"}), expected);
  // A golden value: the partitioning of exchange topics is a persisted format.
  EXPECT_EQ(expected, 0x92a30876d1026903ULL) << std::hex << expected;
  std::string scratch = "garbage";
  Record r = Decode(R"({"user_id":"u1","n":1})");
  ExchangeKeyHash(r, {FieldPath::Parse("user_id"), FieldPath::Parse("n")}, &scratch);
  EXPECT_EQ(scratch, bytes);
}

TEST(ExchangeKeyHashTest, NumbersByValueNullsAlike) {
  uint64_t one = Hash(R"({"k":1})", {"k"});
  EXPECT_EQ(Hash(R"({"k":1.0})", {"k"}), one);
  EXPECT_EQ(Hash(R"({"k":1.00})", {"k"}), one);
  EXPECT_EQ(Hash(R"({"k":1e0})", {"k"}), one);
  EXPECT_NE(Hash(R"({"k":"1"})", {"k"}), one);
  EXPECT_NE(Hash(R"({"k":true})", {"k"}), one);
  EXPECT_EQ(Hash(R"({"k":1.50})", {"k"}), Hash(R"({"k":1.5})", {"k"}));
  // Null and missing fields hash as null; the field position matters.
  uint64_t null_key = Hash(R"({"k":null})", {"k"});
  EXPECT_EQ(Hash(R"({})", {"k"}), null_key);
  EXPECT_NE(Hash(R"({"k":"null"})", {"k"}), null_key);
  EXPECT_NE(Hash(R"({"a":"x","b":""})", {"a", "b"}), Hash(R"({"a":"","b":"x"})", {"a", "b"}));
  // Nested paths and objects (by JSON text).
  EXPECT_EQ(Hash(R"({"u":{"id":7}})", {"u.id"}), Hash(R"({"id":7.0})", {"id"}));
  EXPECT_EQ(Hash(R"({"o":{"a":1}})", {"o"}), Hash(R"({"p":{"a":1}})", {"p"}));
}

TEST(KeyEncodingTest, NullHasItsOwnTag) {
  std::string out;
  AppendKeyField(Value::Null(), &out);
  EXPECT_EQ(out, std::string("z\0\0\0\0", 5));
  out.clear();
  AppendKeyField(Value::Decimal(1500, 3), &out);
  EXPECT_EQ(out, std::string("n\0\0\0\x03"
                             "1.5",
                             8));
}

}  // namespace
}  // namespace caravela
