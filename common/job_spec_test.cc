#include "common/job_spec.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/connectors/clickhouse_sink.h"
#include "worker/connectors/file_connectors.h"
#include "worker/connectors/kafka_sink.h"
#include "worker/connectors/kafka_source.h"
#include "worker/connectors/postgres_sink.h"
#include "worker/operators/basic_operators.h"
#include "worker/operators/dedup_operator.h"
#include "worker/operators/interval_join_operator.h"
#include "worker/operators/table_join_operators.h"
#include "worker/operators/window_join_operator.h"
#include "worker/operators/window_operator.h"
#include "worker/registry/builtin_kinds.h"

namespace caravela {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::StartsWith;

// The SPEC §3 example, with a file source.
constexpr char kExample[] = R"(apiVersion: caravela/v1
kind: Job
metadata: {name: hourly-revenue}
spec:
  checkpoint: {interval: 30s, storage: "file:///var/lib/caravela/checkpoints", retain: 3}
  sources:
    - name: purchases
      file: {path: in.jsonl, partition_field: shard, arrival_field: arrived_at}
      format: json
      key: [user_id]                 # partitioning key of the topic (optional)
      event_time: {field: event_time, format: iso8601}   # iso8601 | epoch_ms | epoch_s
      watermark: {max_out_of_orderness: 5m, idle_timeout: 1m, max_future_skew: 10m}
  operators:
    - name: unique
      dedup: {from: purchases, id: event_id, retention: 24h}
    - name: revenue
      window:
        from: unique
        tumbling: 1h                 # or hopping: {size: 10s, slide: 2s} | session: {gap: 10m}
        group_by: []                 # dimensions; [] = one global window per interval
        aggregates: [{as: revenue, sum: amount}, {as: orders, count: "*"}]
        early_fire_every: 1m         # processing time; omit for no EARLY results
        allowed_lateness: 24h
  sinks:
    - {from: revenue, kafka: {topic: hourly-revenue}}
    - {from: unique.conflicts, file: {path: out/conflicts.jsonl}}
)";

std::vector<std::string> Errors(const ParseResult& r) {
  std::vector<std::string> out;
  for (const SpecError& e : r.errors) out.push_back(e.ToString());
  return out;
}

// A minimal valid job; `extra_ops` / `sinks` are spliced in as YAML text.
std::string Job(const std::string& operators, const std::string& sinks = "",
                const std::string& sources = "") {
  std::string s = R"(apiVersion: caravela/v1
kind: Job
metadata: {name: t}
spec:
  sources:
    - name: src
      file: {path: in.jsonl}
      event_time: {field: ts}
)" + sources;
  if (!operators.empty()) s += "  operators:\n" + operators;
  if (!sinks.empty()) s += "  sinks:\n" + sinks;
  return s;
}

std::vector<std::string> JobErrors(const std::string& operators, const std::string& sinks = "",
                                   const std::string& sources = "") {
  return Errors(ParseJobSpec(Job(operators, sinks, sources)));
}

TEST(JobSpecTest, ParsesTheSpecExample) {
  ParseResult r = ParseJobSpec(kExample);
  ASSERT_TRUE(r.ok()) << ::testing::PrintToString(Errors(r));
  const JobSpec& j = r.spec;
  EXPECT_EQ(j.name, "hourly-revenue");
  EXPECT_EQ(j.checkpoint.interval, 30'000);
  EXPECT_EQ(j.checkpoint.storage, "file:///var/lib/caravela/checkpoints");
  EXPECT_EQ(j.checkpoint.retain, 3);
  EXPECT_TRUE(j.dead_letter_path.empty());

  ASSERT_EQ(j.sources.size(), 1u);
  const SourceSpec& s = j.sources[0];
  EXPECT_EQ(s.name, "purchases");
  EXPECT_EQ(s.kind_name(), "file");
  EXPECT_EQ(s.Get<FileSourceSpec>().path, "in.jsonl");
  EXPECT_EQ(s.Get<FileSourceSpec>().partition_field, "shard");
  EXPECT_EQ(s.Get<FileSourceSpec>().arrival_field, "arrived_at");
  EXPECT_EQ(s.format, "json");
  ASSERT_EQ(s.key.size(), 1u);
  EXPECT_EQ(s.key[0].ToString(), "user_id");
  ASSERT_TRUE(s.event_time.has_value());
  EXPECT_EQ(s.event_time->field.ToString(), "event_time");
  EXPECT_EQ(s.event_time->format, TimeFormat::kIso8601);
  EXPECT_EQ(s.watermark.max_out_of_orderness, 300'000);
  EXPECT_EQ(s.watermark.idle_timeout, 60'000);
  EXPECT_EQ(s.watermark.max_future_skew, 600'000);

  ASSERT_EQ(j.operators.size(), 2u);
  const OperatorSpec& dedup = j.operators[0];
  EXPECT_EQ(dedup.name, "unique");
  EXPECT_EQ(dedup.kind_name(), "dedup");
  EXPECT_EQ(dedup.Get<DedupSpec>().from, "purchases");
  EXPECT_EQ(dedup.Get<DedupSpec>().id.ToString(), "event_id");
  EXPECT_EQ(dedup.Get<DedupSpec>().retention, 86'400'000);
  EXPECT_TRUE(dedup.Get<DedupSpec>().fingerprint.empty());
  EXPECT_THAT(dedup.Inputs(), ElementsAre("purchases"));
  EXPECT_THAT(dedup.SideOutputs(), ElementsAre("conflicts", "too_late"));

  const OperatorSpec& win = j.operators[1];
  EXPECT_EQ(win.name, "revenue");
  EXPECT_EQ(win.kind_name(), "window");
  const WindowSpec& w = win.Get<WindowSpec>();
  EXPECT_EQ(w.from, "unique");
  EXPECT_EQ(w.kind, WindowSpec::Kind::kTumbling);
  EXPECT_EQ(w.size, 3'600'000);
  EXPECT_EQ(w.slide, 3'600'000);
  EXPECT_TRUE(w.group_by.empty());
  EXPECT_TRUE(w.group_paths.empty());
  ASSERT_EQ(w.aggregates.size(), 2u);
  EXPECT_EQ(w.aggregates[0].as, "revenue");
  EXPECT_EQ(w.aggregates[0].fn, AggFn::kSum);
  EXPECT_EQ(w.aggregates[0].field, "amount");
  EXPECT_EQ(w.aggregates[0].path.ToString(), "amount");
  EXPECT_EQ(w.aggregates[1].as, "orders");
  EXPECT_EQ(w.aggregates[1].fn, AggFn::kCount);
  EXPECT_EQ(w.aggregates[1].field, "*");
  EXPECT_TRUE(w.aggregates[1].path.empty());
  EXPECT_EQ(w.early_fire_every, 60'000);
  EXPECT_EQ(w.allowed_lateness, 86'400'000);
  EXPECT_THAT(win.Inputs(), ElementsAre("unique"));
  EXPECT_THAT(win.SideOutputs(), ElementsAre("too_late"));

  ASSERT_EQ(j.sinks.size(), 2u);
  EXPECT_EQ(j.sinks[0].from, "revenue");
  EXPECT_EQ(j.sinks[0].kind_name(), "kafka");
  EXPECT_EQ(j.sinks[0].Get<KafkaSinkSpec>().topic, "hourly-revenue");
  EXPECT_EQ(j.sinks[0].Get<KafkaSinkSpec>().bootstrap, "");
  EXPECT_EQ(j.sinks[1].from, "unique.conflicts");
  EXPECT_EQ(j.sinks[1].kind_name(), "file");
  EXPECT_EQ(j.sinks[1].Get<FileSinkSpec>().path, "out/conflicts.jsonl");

  EXPECT_EQ(j.FindSource("purchases"), &j.sources[0]);
  EXPECT_EQ(j.FindSource("unique"), nullptr);
  EXPECT_EQ(j.FindOperator("revenue"), &j.operators[1]);
  EXPECT_EQ(j.FindOperator("purchases"), nullptr);
  EXPECT_TRUE(j.NeedsEmbeddedBroker());  // the kafka sink names no bootstrap
}

TEST(JobSpecTest, KafkaSourceAndAllOperatorKinds) {
  ParseResult r = ParseJobSpec(R"Y(apiVersion: caravela/v1
kind: Job
metadata: {name: all.kinds_1}
spec:
  dead_letter: {path: dl/dead.jsonl}
  sources:
    - name: clicks
      kafka: {topic: clicks, bootstrap: "broker:9092", start: latest, bounded: true}
      event_time: {field: meta.ts, format: epoch_ms}
    - name: dims
      file: {path: /abs/dims.jsonl}
  operators:
    - name: big
      filter: {from: clicks, where: "amount > 10 and country in ('PT', 'ES')"}
    - name: shaped
      project:
        from: big
        fields: {user: user.id, total: "amount * 1.23", flag: "true", one: 1}
    - name: d
      dedup: {from: shaped, id: user, retention: 7d, fingerprint: [user, total]}
    - name: h
      window:
        from: d
        hopping: {size: 10s, slide: 2s}
        group_by: [user, geo.country]
        aggregates:
          - {as: n, count: user}
          - {as: lo, min: total}
          - {as: hi, max: total}
          - {as: mean, avg: total}
          - {as: users, count_distinct: user}
    - name: s
      window: {from: clicks, session: {gap: 10m}, aggregates: [{as: n, count: "*"}]}
    - name: lookup_view
      filter: {from: dims, where: "id is not null"}
  sinks:
    - {from: h, stdout: {}}
    - {from: s, stdout: true}
    - {from: clicks.invalid, kafka: {topic: bad, bootstrap: "b:1"}}
    - {from: h.too_late, file: {path: late.jsonl}}
    - {from: lookup_view, stdout: }
)Y");
  ASSERT_TRUE(r.ok()) << ::testing::PrintToString(Errors(r));
  const JobSpec& j = r.spec;
  EXPECT_EQ(j.name, "all.kinds_1");
  EXPECT_EQ(j.checkpoint.interval, 0);
  EXPECT_EQ(j.checkpoint.retain, 3);
  EXPECT_EQ(j.dead_letter_path, "dl/dead.jsonl");
  ASSERT_EQ(j.sources.size(), 2u);
  EXPECT_EQ(j.sources[0].kind_name(), "kafka");
  EXPECT_EQ(j.sources[0].Get<KafkaSourceSpec>().topic, "clicks");
  EXPECT_EQ(j.sources[0].Get<KafkaSourceSpec>().bootstrap, "broker:9092");
  EXPECT_EQ(j.sources[0].Get<KafkaSourceSpec>().start, "latest");
  EXPECT_TRUE(j.sources[0].Get<KafkaSourceSpec>().bounded);
  EXPECT_EQ(j.sources[0].event_time->format, TimeFormat::kEpochMs);
  EXPECT_THAT(j.sources[0].event_time->field.parts, ElementsAre("meta", "ts"));
  EXPECT_EQ(j.sources[0].watermark.max_out_of_orderness, 0);  // defaults
  EXPECT_EQ(j.sources[0].watermark.idle_timeout, 0);
  EXPECT_EQ(j.sources[0].watermark.max_future_skew, 0);
  EXPECT_FALSE(j.sources[1].event_time.has_value());

  ASSERT_EQ(j.operators.size(), 6u);
  EXPECT_EQ(j.operators[0].kind_name(), "filter");
  EXPECT_EQ(j.operators[0].Get<FilterSpec>().where, "amount > 10 and country in ('PT', 'ES')");
  EXPECT_THAT(j.operators[0].SideOutputs(), IsEmpty());
  const ProjectSpec& p = j.operators[1].Get<ProjectSpec>();
  EXPECT_EQ(j.operators[1].kind_name(), "project");
  EXPECT_EQ(p.from, "big");
  using Field = std::pair<std::string, std::string>;
  EXPECT_THAT(p.fields, ElementsAre(Field("user", "user.id"), Field("total", "amount * 1.23"),
                                    Field("flag", "true"), Field("one", "1")));
  EXPECT_THAT(j.operators[1].Inputs(), ElementsAre("big"));
  EXPECT_EQ(j.operators[2].Get<DedupSpec>().retention, 7 * 86'400'000LL);
  ASSERT_EQ(j.operators[2].Get<DedupSpec>().fingerprint.size(), 2u);
  EXPECT_EQ(j.operators[2].Get<DedupSpec>().fingerprint[1].ToString(), "total");
  const WindowSpec& h = j.operators[3].Get<WindowSpec>();
  EXPECT_EQ(h.kind, WindowSpec::Kind::kHopping);
  EXPECT_EQ(h.size, 10'000);
  EXPECT_EQ(h.slide, 2'000);
  EXPECT_THAT(h.group_by, ElementsAre("user", "geo.country"));
  ASSERT_EQ(h.group_paths.size(), 2u);
  EXPECT_THAT(h.group_paths[1].parts, ElementsAre("geo", "country"));
  ASSERT_EQ(h.aggregates.size(), 5u);
  EXPECT_EQ(h.aggregates[0].fn, AggFn::kCount);
  EXPECT_EQ(h.aggregates[0].field, "user");
  EXPECT_EQ(h.aggregates[1].fn, AggFn::kMin);
  EXPECT_EQ(h.aggregates[2].fn, AggFn::kMax);
  EXPECT_EQ(h.aggregates[3].fn, AggFn::kAvg);
  EXPECT_EQ(h.aggregates[4].fn, AggFn::kCountDistinct);
  EXPECT_EQ(h.early_fire_every, 0);
  EXPECT_EQ(h.allowed_lateness, 0);
  EXPECT_EQ(j.operators[4].Get<WindowSpec>().kind, WindowSpec::Kind::kSession);
  EXPECT_EQ(j.operators[4].Get<WindowSpec>().gap, 600'000);

  ASSERT_EQ(j.sinks.size(), 5u);
  EXPECT_EQ(j.sinks[0].kind_name(), "stdout");
  EXPECT_EQ(j.sinks[1].kind_name(), "stdout");
  EXPECT_EQ(j.sinks[2].kind_name(), "kafka");
  EXPECT_EQ(j.sinks[2].Get<KafkaSinkSpec>().bootstrap, "b:1");
  EXPECT_EQ(j.sinks[4].kind_name(), "stdout");
  EXPECT_FALSE(j.NeedsEmbeddedBroker());
}

TEST(JobSpecTest, BrokenSpecListsEveryError) {
  ParseResult r = ParseJobSpec(R"(apiVersion: caravela/v1
kind: Job
metadata: {name: hourly-revenue}
spec:
  sources:
    - name: purchases
      kafka: {topic: purchases}
      event_time: {field: event_time, format: unix}
  operators:
    - name: unique
      dedup: {from: purchases, id: event_id}
    - name: revenue
      window:
        from: unique
        tumbling: 1 hour
        aggregates: [{as: revenue, sum: amount}, {as: revenue, count: "*"}]
  sinks:
    - {from: revenue, kafka: {topic: hourly-revenue}}
    - {from: unique.conflicts, file: {path: out/conflicts.jsonl}}
    - {from: revenu, stdout: {}}
    - {from: revenue, file: {pth: x.jsonl}}
)");
  EXPECT_THAT(
      Errors(r),
      ElementsAre(
          "spec.sources[0].event_time.format: expected one of iso8601, epoch_ms, epoch_s, got "
          "\"unix\"",
          "spec.operators[0].dedup.retention: required field is missing",
          "spec.operators[1].window.tumbling: expected a duration, got \"1 hour\"",
          "spec.operators[1].window.aggregates[1].as: duplicate output name \"revenue\" (also "
          "aggregates[0])",
          "spec.sinks[2].from: unknown node \"revenu\" (known: purchases, unique, revenue, "
          "unique.conflicts, unique.too_late, revenue.too_late, purchases.invalid)",
          "spec.sinks[3].file.pth: unknown field \"pth\" (did you mean \"path\"?)",
          "spec.sinks[3].file.path: required field is missing"));
  EXPECT_FALSE(r.ok());
}

TEST(JobSpecTest, YamlSyntaxErrorHasLineAndColumn) {
  ParseResult r = ParseJobSpec("apiVersion: caravela/v1\nspec: {sources: [\n");
  ASSERT_EQ(r.errors.size(), 1u);
  EXPECT_EQ(r.errors[0].path, "<yaml>");
  EXPECT_THAT(r.errors[0].message, StartsWith("line "));
  EXPECT_THAT(r.errors[0].message, HasSubstr(", column "));

  r = ParseJobSpec("a: b: c");
  ASSERT_EQ(r.errors.size(), 1u);
  EXPECT_EQ(r.errors[0].path, "<yaml>");
}

// The limits: refused before any other check, naming the limit; at the
// limit a job is still accepted.
TEST(JobSpecTest, JobLimits) {
  const std::string sink = "    - {from: src, stdout: {}}\n";
  std::string ops;
  for (int i = 0; i < kMaxJobSteps - 2; ++i) {  // besides its source and sink
    ops += "    - {name: u" + std::to_string(i) + ", dedup: {from: src, id: id, retention: 1h}}\n";
  }
  const std::string at_limit = Job(ops, sink);
  EXPECT_THAT(JobErrors(ops, sink), IsEmpty());
  EXPECT_THAT(CheckJobLimits(at_limit), IsEmpty());
  ops += "    - {name: over, dedup: {from: src, id: id, retention: soon}}\n";
  for (const std::vector<SpecError>& errors :
       {ParseJobSpec(Job(ops, sink)).errors, CheckJobLimits(Job(ops, sink))}) {
    ASSERT_EQ(errors.size(), 1u);  // not the retention: the limit comes first
    EXPECT_EQ(errors[0].path, "spec");
    EXPECT_EQ(errors[0].message,
              "the job has 1001 sources, operators and sinks; a job may have at most 1000: split "
              "it into several jobs");
  }
  std::string padded = at_limit + "# " + std::string(kMaxJobYamlBytes, 'x') + "\n";
  for (const std::vector<SpecError>& errors :
       {ParseJobSpec(padded).errors, CheckJobLimits(padded)}) {
    ASSERT_EQ(errors.size(), 1u);
    EXPECT_EQ(errors[0].path, "<yaml>");
    EXPECT_THAT(errors[0].message, HasSubstr("may have at most 1048576 (1 MiB)"));
  }
  EXPECT_THAT(CheckJobLimits("{{{"), IsEmpty());  // not YAML: ParseJobSpec says where
}

TEST(JobSpecTest, DocumentShape) {
  EXPECT_THAT(Errors(ParseJobSpec("")), ElementsAre("<yaml>: the document is empty"));
  EXPECT_THAT(Errors(ParseJobSpec("- a\n- b\n")),
              ElementsAre("<yaml>: expected a mapping at the top level, got a list"));
  EXPECT_THAT(
      Errors(ParseJobSpec("{}")),
      ElementsAre("apiVersion: required field is missing", "kind: required field is missing",
                  "metadata: required field is missing", "spec: required field is missing"));
  EXPECT_THAT(
      Errors(ParseJobSpec("apiVersion: caravela/v2\nkind: Deployment\nmetadata: {name: Bad Name}\n"
                          "spec: {sources: []}\nstatus: {}\n")),
      ElementsAre("status: unknown field \"status\"",
                  "apiVersion: expected \"caravela/v1\", got \"caravela/v2\"",
                  "kind: expected \"Job\", got \"Deployment\"",
                  "metadata.name: expected lowercase letters, digits, '-', '_' or '.', got "
                  "\"Bad Name\"",
                  "spec.sources: at least one source is required"));
  EXPECT_THAT(Errors(ParseJobSpec("apiVersion: caravela/v1\nkind: Job\nmetadata: {}\nspec: []\n")),
              ElementsAre("metadata.name: required field is missing",
                          "spec: expected a mapping, got a list"));
  EXPECT_THAT(Errors(ParseJobSpec("apiVersion: caravela/v1\nkind: Job\nmetadata: {name: x}\n"
                                  "spec: {sources: {a: 1}, operators: 3, sinks: x}\n")),
              ElementsAre("spec.sources: expected a list, got a mapping",
                          "spec.operators: expected a list, got \"3\"",
                          "spec.sinks: expected a list, got \"x\""));
}

TEST(JobSpecTest, OddTopLevelKeys) {
  EXPECT_THAT(Errors(ParseJobSpec("apiVersion: caravela/v1\nkind: Job\nmetadata: {name: x}\n"
                                  "spec: {sources: [{name: a, file: {path: x}}]}\n"
                                  "? [k]\n: v\n")),
              ElementsAre("<yaml>: expected field names, got a list as a key"));
  EXPECT_THAT(Errors(ParseJobSpec("apiVersion: caravela/v1\nkind: Job\nmetadata: {name: x}\n"
                                  "spec: {sources: [{name: a, file: {path: x}}]}\n"
                                  ": v\n")),
              ElementsAre("<yaml>: expected field names, got null as a key"));
}

TEST(JobSpecTest, DuplicateYamlKeys) {
  EXPECT_THAT(JobErrors("    - name: f\n      filter: {from: src, where: a, where: b}\n"),
              ElementsAre("spec.operators[0].filter.where: duplicate field \"where\""));
}

TEST(JobSpecTest, UnknownFieldsWithHints) {
  EXPECT_THAT(
      JobErrors("    - name: w\n      window: {from: src, tumblng: 1h, aggregates: [{as: n, count: "
                "\"*\"}]}\n"),
      ElementsAre("spec.operators[0].window.tumblng: unknown field \"tumblng\" (did you mean "
                  "\"tumbling\"?)",
                  "spec.operators[0].window: expected one of tumbling, hopping, session"));
  EXPECT_THAT(JobErrors("", "", "      colour: red\n"),
              ElementsAre("spec.sources[0].colour: unknown field \"colour\""));
}

TEST(JobSpecTest, SourceErrors) {
  auto errs = [](const std::string& source) {
    return Errors(
        ParseJobSpec("apiVersion: caravela/v1\nkind: Job\nmetadata: {name: t}\n"
                     "spec:\n  sources:\n" +
                     source));
  };
  EXPECT_THAT(errs("    - {name: a}\n"),
              ElementsAre("spec.sources[0]: expected one of file, kafka"));
  EXPECT_THAT(
      errs("    - {name: a, file: {path: x}, kafka: {topic: y}}\n"),
      ElementsAre("spec.sources[0]: expected exactly one of file, kafka, got file and kafka"));
  EXPECT_THAT(errs("    - {file: {path: x}}\n"),
              ElementsAre("spec.sources[0].name: required field is missing"));
  EXPECT_THAT(
      errs("    - {name: a.b, file: {path: x}}\n"),
      ElementsAre("spec.sources[0].name: expected letters, digits, '-' or '_', got \"a.b\""));
  EXPECT_THAT(errs("    - {name: a, file: {path: x}, format: avro}\n"),
              ElementsAre("spec.sources[0].format: expected one of json, got \"avro\""));
  EXPECT_THAT(errs("    - {name: a, file: {}}\n"),
              ElementsAre("spec.sources[0].file.path: required field is missing"));
  EXPECT_THAT(errs("    - {name: a, file: {path: ''}}\n"),
              ElementsAre("spec.sources[0].file.path: expected a non-empty string"));
  EXPECT_THAT(errs("    - {name: a, file: x.jsonl}\n"),
              ElementsAre("spec.sources[0].file: expected a mapping, got \"x.jsonl\""));
  EXPECT_THAT(errs("    - {name: a, kafka: {bootstrap: b, start: middle}}\n"),
              ElementsAre("spec.sources[0].kafka.topic: required field is missing",
                          "spec.sources[0].kafka.start: expected one of earliest, latest, got "
                          "\"middle\""));
  EXPECT_THAT(errs("    - {name: a, file: {path: x}, key: user}\n"),
              ElementsAre("spec.sources[0].key: expected a list of field names, got \"user\""));
  EXPECT_THAT(errs("    - {name: a, file: {path: x}, key: [a..b, [c], d, d]}\n"),
              ElementsAre("spec.sources[0].key[0]: expected a field name or dot path, got \"a..b\"",
                          "spec.sources[0].key[1]: expected a field name or dot path, got a list",
                          "spec.sources[0].key[3]: duplicate field \"d\""));
  EXPECT_THAT(errs("    - {name: a, file: {path: x}, event_time: {format: epoch_s}}\n"),
              ElementsAre("spec.sources[0].event_time.field: required field is missing"));
  EXPECT_THAT(errs("    - {name: a, file: {path: x}, watermark: {idle_timeout: 1m}}\n"),
              ElementsAre("spec.sources[0].watermark: a watermark needs event_time (a source "
                          "without event_time is a lookup table)"));
  EXPECT_THAT(errs("    - name: a\n      file: {path: x}\n      event_time: {field: t}\n"
                   "      watermark: {max_out_of_orderness: -5m, idle_timeout: 1 minute, "
                   "max_future_skew: 10}\n"),
              ElementsAre("spec.sources[0].watermark.max_out_of_orderness: expected a duration, "
                          "got \"-5m\"",
                          "spec.sources[0].watermark.idle_timeout: expected a duration, got \"1 "
                          "minute\"",
                          "spec.sources[0].watermark.max_future_skew: expected a duration, got "
                          "\"10\""));
  EXPECT_THAT(errs("    - {name: a, file: {path: x}}\n    - {name: a, file: {path: y}}\n"),
              ElementsAre("spec.sources[1].name: duplicate name \"a\" (also at "
                          "spec.sources[0].name)"));
  EXPECT_THAT(errs("    - x\n"), ElementsAre("spec.sources[0]: expected a mapping, got \"x\""));
}

TEST(JobSpecTest, MaxParallelismBoundsTheParallelism) {
  std::string base =
      "apiVersion: caravela/v1\nkind: Job\nmetadata: {name: t}\nspec:\n"
      "  sources: [{name: a, file: {path: x}}]\n";
  ParseResult def = ParseJobSpec(base);
  ASSERT_TRUE(def.ok()) << ::testing::PrintToString(Errors(def));
  EXPECT_EQ(def.spec.max_parallelism, 128);
  ParseResult big = ParseJobSpec(base + "  parallelism: 300\n  max_parallelism: 1024\n");
  ASSERT_TRUE(big.ok()) << ::testing::PrintToString(Errors(big));
  EXPECT_EQ(big.spec.parallelism, 300);
  EXPECT_EQ(big.spec.max_parallelism, 1024);
  ParseResult one = ParseJobSpec(base + "  max_parallelism: 1\n");
  ASSERT_TRUE(one.ok()) << ::testing::PrintToString(Errors(one));
  EXPECT_EQ(one.spec.max_parallelism, 1);
  EXPECT_THAT(Errors(ParseJobSpec(base + "  max_parallelism: 32769\n")),
              ElementsAre("spec.max_parallelism: expected 1..32768, got 32769"));
  EXPECT_THAT(Errors(ParseJobSpec(base + "  max_parallelism: 0\n")),
              ElementsAre("spec.max_parallelism: expected an integer >= 1, got \"0\""));
  EXPECT_THAT(Errors(ParseJobSpec(base + "  parallelism: 8\n  max_parallelism: 4\n")),
              ElementsAre("spec.parallelism: expected at most max_parallelism (4), got 8"));
  EXPECT_THAT(Errors(ParseJobSpec(base + "  parallelism: 200\n")),
              ElementsAre("spec.parallelism: expected at most max_parallelism (128 by default; "
                          "set spec.max_parallelism for more), got 200"));
}

TEST(JobSpecTest, Parallelism) {
  std::string base =
      "apiVersion: caravela/v1\nkind: Job\nmetadata: {name: t}\nspec:\n"
      "  sources: [{name: a, file: {path: x}}]\n";
  ParseResult def = ParseJobSpec(base);
  ASSERT_TRUE(def.ok()) << ::testing::PrintToString(Errors(def));
  EXPECT_EQ(def.spec.parallelism, 1);
  ParseResult four = ParseJobSpec(base + "  parallelism: 4\n");
  ASSERT_TRUE(four.ok()) << Errors(four)[0];
  EXPECT_EQ(four.spec.parallelism, 4);
  EXPECT_THAT(Errors(ParseJobSpec(base + "  parallelism: 0\n")),
              ElementsAre("spec.parallelism: expected an integer >= 1, got \"0\""));
  EXPECT_THAT(Errors(ParseJobSpec(base + "  parallelism: -2\n")),
              ElementsAre("spec.parallelism: expected an integer >= 1, got \"-2\""));
  EXPECT_THAT(Errors(ParseJobSpec(base + "  parallelism: 2.5\n")),
              ElementsAre("spec.parallelism: expected an integer >= 1, got \"2.5\""));
  EXPECT_THAT(Errors(ParseJobSpec(base + "  parallelism: many\n")),
              ElementsAre("spec.parallelism: expected an integer >= 1, got \"many\""));
  EXPECT_THAT(Errors(ParseJobSpec(base + "  parallelism: [2]\n")),
              ElementsAre(StartsWith("spec.parallelism: expected an integer >= 1, got ")));
  // Reported together with the other errors of the spec.
  EXPECT_THAT(Errors(ParseJobSpec(base + "  parallelism: 0\n  checkpoint: {interval: soon}\n")),
              ElementsAre("spec.parallelism: expected an integer >= 1, got \"0\"",
                          "spec.checkpoint.interval: expected a duration, got \"soon\""));
  // A misspelling gets the usual hint.
  EXPECT_THAT(Errors(ParseJobSpec(base + "  paralelism: 2\n")),
              ElementsAre(HasSubstr("spec.paralelism: unknown field")));
}

TEST(JobSpecTest, ExchangeAndItsCompression) {
  std::string base =
      "apiVersion: caravela/v1\nkind: Job\nmetadata: {name: t}\nspec:\n"
      "  sources: [{name: a, file: {path: x}}]\n";
  ParseResult def = ParseJobSpec(base);
  ASSERT_TRUE(def.ok());
  EXPECT_EQ(def.spec.exchange, "");
  EXPECT_EQ(def.spec.exchange_compression, "");
  ParseResult lz4 = ParseJobSpec(base + "  exchange: kafka\n  exchange_compression: lz4\n");
  ASSERT_TRUE(lz4.ok()) << Errors(lz4)[0];
  EXPECT_EQ(lz4.spec.exchange, "kafka");
  EXPECT_EQ(lz4.spec.exchange_compression, "lz4");
  ParseResult none = ParseJobSpec(base + "  exchange_compression: none\n");
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none.spec.exchange_compression, "");
  EXPECT_THAT(Errors(ParseJobSpec(base + "  exchange: tcp\n")),
              ElementsAre(HasSubstr("spec.exchange: expected one of network, kafka")));
  EXPECT_THAT(Errors(ParseJobSpec(base + "  exchange_compression: gzip\n")),
              ElementsAre(HasSubstr("spec.exchange_compression: expected one of none, lz4")));
  EXPECT_THAT(Errors(ParseJobSpec(base + "  exchange: network\n  exchange_compression: lz4\n")),
              ElementsAre("spec.exchange_compression: compresses Kafka exchanges only; remove it "
                          "or set spec.exchange: kafka"));
}

TEST(JobSpecTest, CheckpointAndDeadLetterErrors) {
  std::string base =
      "apiVersion: caravela/v1\nkind: Job\nmetadata: {name: t}\nspec:\n"
      "  sources: [{name: a, file: {path: x}}]\n";
  EXPECT_THAT(Errors(ParseJobSpec(base + "  checkpoint: {interval: soon, storage: "
                                         "\"s3://b/c\", retain: 0}\n")),
              ElementsAre("spec.checkpoint.interval: expected a duration, got \"soon\"",
                          "spec.checkpoint.storage: \"b\" is not a bucket name (3-63 characters: "
                          "lower-case letters, digits, '.' and '-')",
                          "spec.checkpoint.retain: expected an integer >= 1, got \"0\""));
  EXPECT_THAT(Errors(ParseJobSpec(base + "  checkpoint: {storage: \"file:///x\", retain: 2x}\n")),
              ElementsAre("spec.checkpoint.interval: required field is missing",
                          "spec.checkpoint.retain: expected an integer >= 1, got \"2x\""));
  for (const auto& [url, error] : std::vector<std::pair<std::string, std::string>>{
           {"gs://b/p", "expected a file:// or s3:// URL, got \"gs://b/p\""},
           {"s3:///p", "names no bucket: expected s3://bucket/prefix, got \"s3:///p\""},
           {"s3://My_Bucket/p", "\"My_Bucket\" is not a bucket name"},
           {"s3://bucket/p?region=x", "takes no query: expected s3://bucket/prefix"},
           // Refused here, not only when the S3 storage starts (one parser).
           {"s3://bucket/a//b", "has an empty part in its prefix: expected s3://bucket/prefix"}}) {
    EXPECT_THAT(
        Errors(ParseJobSpec(base + "  checkpoint: {interval: 1m, storage: \"" + url + "\"}\n")),
        ElementsAre(StartsWith("spec.checkpoint.storage: " + error)))
        << url;
  }
  ParseResult s3 =
      ParseJobSpec(base + "  checkpoint: {interval: 1m, storage: \"s3://caravela-ckpt/prod\"}\n");
  ASSERT_TRUE(s3.ok()) << ::testing::PrintToString(Errors(s3));
  EXPECT_EQ(s3.spec.checkpoint.storage, "s3://caravela-ckpt/prod");
  ParseResult ok = ParseJobSpec(base + "  checkpoint: {interval: 10s, retain: 5}\n");
  ASSERT_TRUE(ok.ok()) << ::testing::PrintToString(Errors(ok));
  EXPECT_EQ(ok.spec.checkpoint.interval, 10'000);
  EXPECT_EQ(ok.spec.checkpoint.retain, 5);
  EXPECT_THAT(Errors(ParseJobSpec(base + "  dead_letter: {file: x}\n")),
              ElementsAre("spec.dead_letter.file: unknown field \"file\"",
                          "spec.dead_letter.path: required field is missing"));
}

TEST(JobSpecTest, OperatorKindErrors) {
  // Every registered kind, in registration order: the eight of the first
  // release first, then kinds added since.
  std::vector<std::string> kinds;
  for (std::string_view k : BuiltinKinds().operators.Names()) kinds.emplace_back(k);
  ASSERT_GE(kinds.size(), 8u);
  EXPECT_EQ(absl::StrJoin(std::vector<std::string>(kinds.begin(), kinds.begin() + 8), ", "),
            "filter, project, dedup, window, interval_join, window_join, temporal_join, "
            "lookup_join");
  const std::string kAllKinds = absl::StrJoin(kinds, ", ");
  EXPECT_THAT(JobErrors("    - {name: j}\n"),
              ElementsAre("spec.operators[0]: expected one of " + kAllKinds));
  EXPECT_THAT(JobErrors("    - {name: j, filter: {from: src, where: 'true'}, project: {from: src, "
                        "fields: {a: b}}}\n"),
              ElementsAre("spec.operators[0]: expected exactly one of " + kAllKinds +
                          ", got filter and project"));
  EXPECT_THAT(JobErrors("    - {name: j, flter: {}}\n"),
              ElementsAre("spec.operators[0].flter: unknown field \"flter\" (did you mean "
                          "\"filter\"?)",
                          "spec.operators[0]: expected one of " + kAllKinds));
  EXPECT_THAT(JobErrors("    - {name: src, filter: {from: src, where: 'true'}}\n"),
              ElementsAre("spec.operators[0].name: duplicate name \"src\" (also at "
                          "spec.sources[0].name)",
                          "spec.operators[0].filter.from: an operator cannot read its own output"));
}

TEST(JobSpecTest, FromReferences) {
  EXPECT_THAT(JobErrors("    - {name: a, filter: {from: b, where: 'true'}}\n"
                        "    - {name: b, filter: {from: src, where: 'true'}}\n"),
              ElementsAre("spec.operators[0].filter.from: node \"b\" is defined after this "
                          "operator (operators read sources and operators listed before them)"));
  EXPECT_THAT(JobErrors("    - {name: a, filter: {from: nope, where: 'true'}}\n"),
              ElementsAre("spec.operators[0].filter.from: unknown node \"nope\" (known: src)"));
  EXPECT_THAT(JobErrors("    - {name: a, filter: {from: src.invalid, where: 'true'}}\n"),
              ElementsAre("spec.operators[0].filter.from: side output \"src.invalid\" can only "
                          "be read by a sink"));
  EXPECT_THAT(JobErrors("    - {name: a, filter: {where: 'true'}}\n"),
              ElementsAre("spec.operators[0].filter.from: required field is missing"));
  // Sinks.
  EXPECT_THAT(JobErrors("", "    - {from: src.too_late, stdout: {}}\n"),
              ElementsAre("spec.sinks[0].from: \"src\" has no side output \"too_late\" (it has: "
                          "invalid)"));
  EXPECT_THAT(JobErrors("", "    - {stdout: {}}\n"),
              ElementsAre("spec.sinks[0].from: required field is missing"));
  EXPECT_THAT(JobErrors("", "    - {from: src.invalid, stdout: {}}\n"), IsEmpty());
  EXPECT_THAT(JobErrors("", "    - {from: src}\n"),
              ElementsAre("spec.sinks[0]: expected one of file, kafka, postgres, clickhouse, "
                          "stdout, discard"));
  EXPECT_THAT(JobErrors("", "    - {from: src, stdout: false}\n"),
              ElementsAre("spec.sinks[0].stdout: expected {} or true, got \"false\""));
  EXPECT_THAT(JobErrors("", "    - {from: src, stdout: {}, file: {path: x}}\n"),
              ElementsAre("spec.sinks[0]: expected exactly one of file, kafka, postgres, "
                          "clickhouse, stdout, discard, got file and stdout"));
  EXPECT_THAT(JobErrors("", "    - {from: src, discard: {}}\n"), IsEmpty());
  EXPECT_THAT(JobErrors("", "    - {from: src, kafka: {bootstrap: x}}\n"),
              ElementsAre("spec.sinks[0].kafka.topic: required field is missing"));
  // The known list is capped.
  std::string many;
  for (int i = 0; i < 12; ++i) {
    many += "    - {name: f" + std::to_string(i) + ", filter: {from: src, where: 'true'}}\n";
  }
  EXPECT_THAT(JobErrors(many, "    - {from: nope, stdout: {}}\n"),
              ElementsAre("spec.sinks[0].from: unknown node \"nope\" (known: src, f0, f1, f2, f3, "
                          "f4, f5, f6, f7, f8, ...)"));
}

TEST(JobSpecTest, ClickHouseSink) {
  ParseResult r = ParseJobSpec(
      Job("",
          "    - {from: src, clickhouse: {url: \"http://127.0.0.1:8123\", table: hourly}}\n"
          "    - {from: src, clickhouse: {url: \"https://ch:8443/\", database: analytics, "
          "table: t, user: writer, password_file: ch-password}}\n"));
  ASSERT_TRUE(r.ok()) << ::testing::PrintToString(Errors(r));
  ASSERT_EQ(r.spec.sinks.size(), 2u);
  EXPECT_EQ(r.spec.sinks[0].kind_name(), "clickhouse");
  EXPECT_EQ(r.spec.sinks[0].Get<ClickHouseSinkSpec>().url, "http://127.0.0.1:8123");
  EXPECT_EQ(r.spec.sinks[0].Get<ClickHouseSinkSpec>().database, "default");
  EXPECT_EQ(r.spec.sinks[0].Get<ClickHouseSinkSpec>().user, "default");
  EXPECT_EQ(r.spec.sinks[0].Label(), "clickhouse:default.hourly");
  EXPECT_EQ(r.spec.sinks[1].Get<ClickHouseSinkSpec>().database, "analytics");
  EXPECT_EQ(r.spec.sinks[1].Get<ClickHouseSinkSpec>().user, "writer");
  r.spec.ResolvePaths("/etc/jobs");
  EXPECT_EQ(r.spec.sinks[1].Get<ClickHouseSinkSpec>().password_file, "/etc/jobs/ch-password");

  EXPECT_THAT(JobErrors("", "    - {from: src, clickhouse: {table: t}}\n"),
              ElementsAre("spec.sinks[0].clickhouse.url: required field is missing"));
  EXPECT_THAT(JobErrors("", "    - {from: src, clickhouse: {url: \"http://h:8123\"}}\n"),
              ElementsAre("spec.sinks[0].clickhouse.table: required field is missing"));
  EXPECT_THAT(JobErrors("", "    - {from: src, clickhouse: {url: \"tcp://h:9000\", table: t}}\n"),
              ElementsAre(StartsWith("spec.sinks[0].clickhouse.url: expected the server's HTTP "
                                     "interface such as http://127.0.0.1:8123")));
  EXPECT_THAT(
      JobErrors("", "    - {from: src, clickhouse: {url: \"http://h\", table: \"a-b\"}}\n"),
      ElementsAre(StartsWith("spec.sinks[0].clickhouse.table: expected a ClickHouse name")));
  EXPECT_THAT(JobErrors("",
                        "    - {from: src, clickhouse: {url: \"http://h\", table: t, "
                        "password: x}}\n"),
              ElementsAre(StartsWith("spec.sinks[0].clickhouse.password: unknown field")));
}

TEST(JobSpecTest, PostgresSink) {
  ParseResult r = ParseJobSpec(
      Job("",
          "    - {from: src, postgres: {dsn: \"host=127.0.0.1 port=5432 dbname=x user=y\", "
          "table: hourly_revenue}}\n"
          "    - {from: src, postgres: {dsn: \"postgresql://u@h/db\", table: An_1.T_2}}\n"));
  ASSERT_TRUE(r.ok()) << ::testing::PrintToString(Errors(r));
  ASSERT_EQ(r.spec.sinks.size(), 2u);
  EXPECT_EQ(r.spec.sinks[0].kind_name(), "postgres");
  EXPECT_EQ(r.spec.sinks[0].Get<PostgresSinkSpec>().dsn,
            "host=127.0.0.1 port=5432 dbname=x user=y");
  EXPECT_EQ(r.spec.sinks[0].Get<PostgresSinkSpec>().table, "hourly_revenue");
  EXPECT_EQ(r.spec.sinks[1].Get<PostgresSinkSpec>().table, "An_1.T_2");
  EXPECT_FALSE(r.spec.NeedsEmbeddedBroker());

  EXPECT_THAT(JobErrors("", "    - {from: src, postgres: {dsn: \"dbname=x\"}}\n"),
              ElementsAre("spec.sinks[0].postgres.table: required field is missing"));
  EXPECT_THAT(JobErrors("", "    - {from: src, postgres: {table: t}}\n"),
              ElementsAre("spec.sinks[0].postgres.dsn: required field is missing"));
  EXPECT_THAT(JobErrors("", "    - {from: src, postgres: {dsn: \"\", table: t}}\n"),
              ElementsAre("spec.sinks[0].postgres.dsn: expected a non-empty string"));
  EXPECT_THAT(JobErrors("", "    - {from: src, postgres: {dsn: x, table: t, tabel: u}}\n"),
              ElementsAre("spec.sinks[0].postgres.tabel: unknown field \"tabel\" (did you mean "
                          "\"table\"?)"));
  EXPECT_THAT(JobErrors("", "    - {from: src, postgres: true}\n"),
              ElementsAre("spec.sinks[0].postgres: expected a mapping, got \"true\""));
  for (const char* bad : {"\"1abc\"", "\"hourly-revenue\"", "\"a.b.c\"", "\"a.\"",
                          "\"drop table x;\"", "\"\\\"quoted\\\"\""}) {
    std::vector<std::string> errs =
        JobErrors("", std::string("    - {from: src, postgres: {dsn: x, table: ") + bad + "}}\n");
    ASSERT_EQ(errs.size(), 1u) << bad;
    EXPECT_THAT(errs[0], StartsWith("spec.sinks[0].postgres.table: expected a table name")) << bad;
  }
  EXPECT_THAT(
      JobErrors("", "    - {from: src, postgres: {dsn: x, table: " + std::string(64, 'a') + "}}\n"),
      ElementsAre(HasSubstr("at most 63 characters")));
  EXPECT_THAT(
      JobErrors("", "    - {from: src, postgres: {dsn: x, table: " + std::string(63, 'a') + "}}\n"),
      IsEmpty());
}

TEST(JobSpecTest, KafkaSinkModes) {
  ParseResult r = ParseJobSpec(Job("",
                                   "    - {from: src, kafka: {topic: a}}\n"
                                   "    - {from: src, kafka: {topic: b, mode: changelog}}\n"
                                   "    - {from: src, kafka: {topic: c, mode: upsert, "
                                   "exactly_once: false}}\n"));
  ASSERT_TRUE(r.ok()) << ::testing::PrintToString(Errors(r));
  ASSERT_EQ(r.spec.sinks.size(), 3u);
  EXPECT_EQ(r.spec.sinks[0].Get<KafkaSinkSpec>().mode, KafkaSinkSpec::Mode::kChangelog);  // default
  EXPECT_FALSE(r.spec.sinks[0].Get<KafkaSinkSpec>().exactly_once);                        // default
  EXPECT_EQ(r.spec.sinks[1].Get<KafkaSinkSpec>().mode, KafkaSinkSpec::Mode::kChangelog);
  EXPECT_EQ(r.spec.sinks[2].Get<KafkaSinkSpec>().mode, KafkaSinkSpec::Mode::kUpsert);
  EXPECT_FALSE(r.spec.sinks[2].Get<KafkaSinkSpec>().exactly_once);
  EXPECT_EQ(r.spec.sinks[0].Get<KafkaSinkSpec>().linger_ms, 5);  // default

  // The producer's linger, a duration from 0 to 10 s.
  r = ParseJobSpec(Job("",
                       "    - {from: src, kafka: {topic: a, linger: 0ms}}\n"
                       "    - {from: src, kafka: {topic: b, linger: 2s}}\n"));
  ASSERT_TRUE(r.ok()) << ::testing::PrintToString(Errors(r));
  EXPECT_EQ(r.spec.sinks[0].Get<KafkaSinkSpec>().linger_ms, 0);
  EXPECT_EQ(r.spec.sinks[1].Get<KafkaSinkSpec>().linger_ms, 2000);
  EXPECT_THAT(JobErrors("", "    - {from: src, kafka: {topic: a, linger: 11s}}\n"),
              ElementsAre("spec.sinks[0].kafka.linger: must be at most 10s"));
  EXPECT_THAT(JobErrors("", "    - {from: src, kafka: {topic: a, linger: -1ms}}\n"),
              ElementsAre(HasSubstr("spec.sinks[0].kafka.linger")));

  // exactly_once needs checkpoints: the transaction commits with each one.
  std::string with_checkpoints =
      Job("", "    - {from: src, kafka: {topic: a, exactly_once: true}}\n");
  with_checkpoints.replace(with_checkpoints.find("spec:\n"), 6,
                           "spec:\n  checkpoint: {interval: 10s, storage: \"file:///tmp/c\"}\n");
  r = ParseJobSpec(with_checkpoints);
  ASSERT_TRUE(r.ok()) << ::testing::PrintToString(Errors(r));
  EXPECT_TRUE(r.spec.sinks[0].Get<KafkaSinkSpec>().exactly_once);
  EXPECT_EQ(r.spec.sinks[0].Get<KafkaSinkSpec>().mode, KafkaSinkSpec::Mode::kChangelog);
  EXPECT_THAT(JobErrors("", "    - {from: src, kafka: {topic: a, exactly_once: true}}\n"),
              ElementsAre("spec.sinks[0].kafka.exactly_once: needs checkpoints "
                          "(spec.checkpoint.interval > 0): the Kafka transaction commits with "
                          "each checkpoint"));

  EXPECT_THAT(JobErrors("", "    - {from: src, kafka: {topic: a, mode: append}}\n"),
              ElementsAre("spec.sinks[0].kafka.mode: expected one of upsert, changelog, got "
                          "\"append\""));
  EXPECT_THAT(JobErrors("", "    - {from: src, kafka: {topic: a, exactly_once: yes}}\n"),
              ElementsAre("spec.sinks[0].kafka.exactly_once: expected one of true, false, got "
                          "\"yes\""));
  EXPECT_THAT(JobErrors("", "    - {from: src, kafka: {topic: a, mode: [upsert]}}\n"),
              ElementsAre(StartsWith("spec.sinks[0].kafka.mode: expected one of upsert, "
                                     "changelog, got ")));
  EXPECT_THAT(JobErrors("", "    - {from: src, kafka: {topic: a, exactly-once: true}}\n"),
              ElementsAre(StartsWith("spec.sinks[0].kafka.exactly-once: unknown field")));
}

// `kafka: {properties: {...}}` on sources and sinks: librdkafka properties
// passed to the clients verbatim (worker/connectors/kafka_properties.h),
// checked by librdkafka when the job is parsed.
TEST(JobSpecTest, KafkaSourceIsolation) {
  auto source = [](const std::string& kafka) {
    return "    - name: k\n      kafka: " + kafka + "\n      event_time: {field: ts}\n";
  };
  auto isolation = [&](const std::string& kafka) {
    ParseResult r = ParseJobSpec(Job("", "", source(kafka)));
    EXPECT_TRUE(r.ok()) << ::testing::PrintToString(Errors(r));
    return r.ok() ? r.spec.sources[1].Get<KafkaSourceSpec>().isolation : std::string("?");
  };
  EXPECT_EQ(isolation("{topic: t}"), "read_committed");  // the default
  EXPECT_EQ(isolation("{topic: t, isolation: read_uncommitted}"), "read_uncommitted");
  EXPECT_EQ(isolation("{topic: t, isolation: read_committed}"), "read_committed");
  // The librdkafka property says the same, when `isolation` does not.
  EXPECT_EQ(isolation("{topic: t, properties: {isolation.level: read_uncommitted}}"),
            "read_uncommitted");
  EXPECT_EQ(isolation("{topic: t, isolation: read_uncommitted, properties: "
                      "{isolation.level: read_uncommitted}}"),
            "read_uncommitted");

  EXPECT_THAT(JobErrors("", "", source("{topic: t, isolation: committed}")),
              ElementsAre(HasSubstr("spec.sources[1].kafka.isolation: ")));
  EXPECT_THAT(JobErrors("", "", source("{topic: t, isolation: [read_committed]}")),
              ElementsAre(HasSubstr("spec.sources[1].kafka.isolation: ")));
  EXPECT_THAT(
      JobErrors("", "",
                source("{topic: t, isolation: read_committed, properties: "
                       "{isolation.level: read_uncommitted}}")),
      ElementsAre("spec.sources[1].kafka.properties.isolation.level: says read_uncommitted but "
                  "isolation says read_committed; give only isolation"));
}

TEST(JobSpecTest, KafkaProperties) {
  const std::string source_props =
      "    - name: k\n"
      "      kafka:\n"
      "        topic: clicks\n"
      "        properties:\n"
      "          security.protocol: SASL_SSL\n"
      "          sasl.mechanisms: SCRAM-SHA-512\n"
      "          sasl.username: caravela\n"
      "          sasl.password: s3cret\n"
      "          ssl.ca.location: /etc/kafka/ca.pem\n"
      "          fetch.max.bytes: 1048576\n"
      "      event_time: {field: ts}\n";
  ParseResult r = ParseJobSpec(Job("",
                                   "    - {from: k, kafka: {topic: out, properties: "
                                   "{security.protocol: SSL, compression.type: lz4}}}\n"
                                   "    - {from: src, kafka: {topic: plain}}\n",
                                   source_props));
  ASSERT_TRUE(r.ok()) << ::testing::PrintToString(Errors(r));
  const std::map<std::string, std::string> want_source = {{"security.protocol", "SASL_SSL"},
                                                          {"sasl.mechanisms", "SCRAM-SHA-512"},
                                                          {"sasl.username", "caravela"},
                                                          {"sasl.password", "s3cret"},
                                                          {"ssl.ca.location", "/etc/kafka/ca.pem"},
                                                          {"fetch.max.bytes", "1048576"}};
  EXPECT_EQ(r.spec.sources[1].Get<KafkaSourceSpec>().properties, want_source);
  const std::map<std::string, std::string> want_sink = {{"security.protocol", "SSL"},
                                                        {"compression.type", "lz4"}};
  EXPECT_EQ(r.spec.sinks[0].Get<KafkaSinkSpec>().properties, want_sink);
  EXPECT_TRUE(r.spec.sinks[1].Get<KafkaSinkSpec>().properties.empty());  // default: none

  auto sink_errors = [](const std::string& properties) {
    return JobErrors("", "    - {from: src, kafka: {topic: a, properties: " + properties + "}}\n");
  };
  // Not a mapping; values that are not strings; keys that are not names.
  EXPECT_THAT(sink_errors("[security.protocol=SSL]"),
              ElementsAre("spec.sinks[0].kafka.properties: expected a mapping of librdkafka "
                          "property names to values (e.g. {security.protocol: SASL_SSL}), got a "
                          "list"));
  EXPECT_THAT(sink_errors("{sasl.username: {name: x}, sasl.password: [a], client.id: ~}"),
              ElementsAre("spec.sinks[0].kafka.properties.sasl.username: expected a string, got "
                          "a mapping",
                          "spec.sinks[0].kafka.properties.sasl.password: expected a string, got "
                          "a list",
                          "spec.sinks[0].kafka.properties.client.id: expected a string, got null"));
  EXPECT_THAT(sink_errors("{[a]: b}"),
              ElementsAre("spec.sinks[0].kafka.properties: expected property names, got a list "
                          "as a key"));
  EXPECT_THAT(sink_errors("{client.id: a, client.id: b}"),
              ElementsAre(HasSubstr("spec.sinks[0].kafka.properties.client.id: duplicate")));
  // librdkafka's own checks: an unknown name, a value it refuses.
  EXPECT_THAT(sink_errors("{no.such.property: 1}"),
              ElementsAre("spec.sinks[0].kafka.properties.no.such.property: kafka property "
                          "no.such.property: No such configuration property: "
                          "\"no.such.property\""));
  EXPECT_THAT(sink_errors("{security.protocol: carrier-pigeon}"),
              ElementsAre(AllOf(StartsWith("spec.sinks[0].kafka.properties.security.protocol: "),
                                HasSubstr("carrier-pigeon"))));
  // Keys Caravela sets for its guarantees, with the reason.
  EXPECT_THAT(sink_errors("{transactional.id: x, acks: '1', linger.ms: 20, bootstrap.servers: b}"),
              ElementsAre(HasSubstr("kafka.properties.transactional.id: kafka property "
                                    "transactional.id is set by Caravela: exactly-once sinks "
                                    "derive it"),
                          HasSubstr("kafka.properties.acks: kafka property acks is set by "
                                    "Caravela"),
                          HasSubstr("a Kafka sink's linger is its kafka.linger"),
                          HasSubstr("kafka.properties.bootstrap.servers: kafka property "
                                    "bootstrap.servers is set by Caravela: the cluster is the "
                                    "source's or sink's kafka.bootstrap")));
  EXPECT_THAT(sink_errors("{isolation.level: read_uncommitted}"),
              ElementsAre(HasSubstr("exactly-once sinks read their commit markers")));
  // A source may read read_committed; its offsets are Caravela's.
  auto source_errors = [](const std::string& properties) {
    return Errors(
        ParseJobSpec("apiVersion: caravela/v1\nkind: Job\nmetadata: {name: t}\nspec:\n  sources:\n"
                     "    - {name: a, kafka: {topic: t, properties: " +
                     properties + "}, event_time: {field: ts}}\n"));
  };
  EXPECT_THAT(source_errors("{isolation.level: read_committed}"), IsEmpty());
  EXPECT_THAT(source_errors("{group.id: mine, auto.offset.reset: latest}"),
              ElementsAre(HasSubstr("spec.sources[0].kafka.properties.group.id: kafka property "
                                    "group.id is set by Caravela"),
                          HasSubstr("where a source starts is its kafka.start")));
}

TEST(JobSpecTest, SqlIdentifier) {
  EXPECT_TRUE(IsSqlIdentifier("a"));
  EXPECT_TRUE(IsSqlIdentifier("_x9"));
  EXPECT_TRUE(IsSqlIdentifier("Hourly_Revenue"));
  EXPECT_FALSE(IsSqlIdentifier(""));
  EXPECT_FALSE(IsSqlIdentifier("9a"));
  EXPECT_FALSE(IsSqlIdentifier("a b"));
  EXPECT_FALSE(IsSqlIdentifier("a\"b"));
  EXPECT_FALSE(IsSqlIdentifier("\xc3\xa1"));
  EXPECT_TRUE(IsSqlIdentifier(std::string(63, 'z')));
  EXPECT_FALSE(IsSqlIdentifier(std::string(64, 'z')));
}

TEST(JobSpecTest, EventTimeIsRequiredForDedupAndWindow) {
  std::string dims = "    - {name: dims, file: {path: d.jsonl}}\n";
  EXPECT_THAT(JobErrors("    - {name: d, dedup: {from: dims, id: k, retention: 1h}}\n", "", dims),
              ElementsAre("spec.operators[0].dedup.from: \"dims\" has no event time (its source "
                          "declares no event_time), but dedup needs event time"));
  // Through a filter, too.
  EXPECT_THAT(JobErrors("    - {name: f, filter: {from: dims, where: 'true'}}\n"
                        "    - {name: w, window: {from: f, tumbling: 1m, aggregates: [{as: n, "
                        "count: '*'}]}}\n",
                        "", dims),
              ElementsAre("spec.operators[1].window.from: \"f\" has no event time (its source "
                          "declares no event_time), but window needs event time"));
  // Lookup sources themselves are fine, also read by filters and sinks.
  EXPECT_THAT(JobErrors("    - {name: f, filter: {from: dims, where: 'true'}}\n",
                        "    - {from: f, stdout: {}}\n    - {from: dims, stdout: {}}\n", dims),
              IsEmpty());
}

TEST(JobSpecTest, FilterAndProjectExpressions) {
  EXPECT_THAT(JobErrors("    - {name: f, filter: {from: src, where: 'a == )'}}\n"),
              ElementsAre("spec.operators[0].filter.where: unexpected token ')' at column 6 in "
                          "'a == )'"));
  EXPECT_THAT(JobErrors("    - {name: f, filter: {from: src}}\n"),
              ElementsAre("spec.operators[0].filter.where: required field is missing"));
  EXPECT_THAT(JobErrors("    - {name: f, filter: {from: src, where: [a]}}\n"),
              ElementsAre("spec.operators[0].filter.where: expected an expression, got a list"));
  EXPECT_THAT(
      JobErrors("    - {name: p, project: {from: src, fields: {a: 'x +', b: ok, c: {}}}}\n"),
      ElementsAre("spec.operators[0].project.fields.a: unexpected end of expression at "
                  "column 4 in 'x +'",
                  "spec.operators[0].project.fields.c: expected an expression, got a "
                  "mapping"));
  EXPECT_THAT(JobErrors("    - {name: p, project: {from: src, fields: {}}}\n"),
              ElementsAre("spec.operators[0].project.fields: at least one field is required"));
  EXPECT_THAT(JobErrors("    - {name: p, project: {from: src, fields: [a]}}\n"),
              ElementsAre("spec.operators[0].project.fields: expected a mapping of output name to "
                          "expression, got a list"));
}

TEST(JobSpecTest, DedupErrors) {
  EXPECT_THAT(JobErrors("    - {name: d, dedup: {from: src}}\n"),
              ElementsAre("spec.operators[0].dedup.id: required field is missing",
                          "spec.operators[0].dedup.retention: required field is missing"));
  EXPECT_THAT(
      JobErrors("    - {name: d, dedup: {from: src, id: x, retention: 0s, fingerprint: a}}\n"),
      ElementsAre("spec.operators[0].dedup.retention: expected a duration greater than 0, "
                  "got \"0s\"",
                  "spec.operators[0].dedup.fingerprint: expected a list of field names, "
                  "got \"a\""));
}

TEST(JobSpecTest, WindowErrors) {
  auto win = [](const std::string& body) {
    return JobErrors("    - name: w\n      window: {from: src, " + body + "}\n");
  };
  const std::string aggs = "aggregates: [{as: n, count: '*'}]";
  EXPECT_THAT(win("tumbling: 1h, session: {gap: 1m}, " + aggs),
              ElementsAre("spec.operators[0].window: expected exactly one of tumbling, hopping, "
                          "session, got tumbling and session"));
  EXPECT_THAT(win("tumbling: 0s, " + aggs),
              ElementsAre("spec.operators[0].window.tumbling: expected a duration greater than 0, "
                          "got \"0s\""));
  EXPECT_THAT(win("hopping: {size: 10s, slide: 20s}, " + aggs),
              ElementsAre("spec.operators[0].window.hopping.slide: expected a slide no larger than "
                          "size (10s), got \"20s\""));
  EXPECT_THAT(win("hopping: {size: 0s, slide: 0s}, " + aggs),
              ElementsAre("spec.operators[0].window.hopping.size: expected a duration greater "
                          "than 0, got \"0s\"",
                          "spec.operators[0].window.hopping.slide: expected a duration greater "
                          "than 0, got \"0s\""));
  EXPECT_THAT(win("hopping: {size: 10s}, " + aggs),
              ElementsAre("spec.operators[0].window.hopping.slide: required field is missing"));
  EXPECT_THAT(win("session: {}, " + aggs),
              ElementsAre("spec.operators[0].window.session.gap: required field is missing"));
  EXPECT_THAT(win("tumbling: 1h"),
              ElementsAre("spec.operators[0].window.aggregates: required field is missing"));
  EXPECT_THAT(win("tumbling: 1h, aggregates: []"),
              ElementsAre("spec.operators[0].window.aggregates: at least one aggregate is "
                          "required"));
  EXPECT_THAT(win("tumbling: 1h, early_fire_every: 0s, allowed_lateness: -1h, " + aggs),
              ElementsAre("spec.operators[0].window.early_fire_every: expected a duration greater "
                          "than 0, got \"0s\"",
                          "spec.operators[0].window.allowed_lateness: expected a duration, got "
                          "\"-1h\""));
  EXPECT_THAT(win("tumbling: 1h, allowed_lateness: 0s, " + aggs), IsEmpty());
  EXPECT_THAT(win("tumbling: 1h, group_by: user, " + aggs),
              ElementsAre("spec.operators[0].window.group_by: expected a list of field names, "
                          "got \"user\""));
  EXPECT_THAT(
      win("tumbling: 1h, group_by: [user], aggregates: [{sum: x}, {as: a, sum: '*'}, {as: b}, "
          "{as: c, sum: x, avg: x}, {as: user, count: '*'}, {as: state, count: x}, {as: e, "
          "mean: x, max: y}, {as: f, min: [x]}]"),
      ElementsAre(
          "spec.operators[0].window.aggregates[0].as: required field is missing",
          "spec.operators[0].window.aggregates[1].sum: \"*\" is only valid for count; sum "
          "needs a field",
          "spec.operators[0].window.aggregates[2]: expected one of count, sum, min, max, "
          "avg, count_distinct, arg_max, arg_min",
          "spec.operators[0].window.aggregates[3]: expected exactly one of count, sum, "
          "min, max, avg, count_distinct, arg_max, arg_min, got sum and avg",
          "spec.operators[0].window.aggregates[4].as: duplicate output name \"user\" "
          "(also a group_by field)",
          "spec.operators[0].window.aggregates[5].as: duplicate output name \"state\" "
          "(also a reserved result field)",
          "spec.operators[0].window.aggregates[6].mean: unknown field \"mean\" (did you mean "
          "\"min\"?)",
          "spec.operators[0].window.aggregates[7].min: expected a field name or dot path, "
          "got a list"));
  // window_join keep: per side, a non-empty list of fields.
  {
    const std::string jobs = R"(apiVersion: caravela/v1
kind: Job
metadata: {name: j}
spec:
  sources:
    - {name: a, file: {path: a.jsonl}, event_time: {field: t, format: epoch_ms}}
    - {name: b, file: {path: b.jsonl}, event_time: {field: t, format: epoch_ms}}
  operators:
    - name: w
      window_join: {left: a, right: b, on: [[k, k]], tumbling: 1h, KEEP}
  sinks:
    - {from: w, stdout: {}}
)";
    auto errors = [&](const std::string& keep) {
      std::vector<std::string> out;
      for (const SpecError& e : ParseJobSpec(absl::StrReplaceAll(jobs, {{"KEEP", keep}})).errors) {
        out.push_back(e.ToString());
      }
      return out;
    };
    EXPECT_THAT(errors("keep: {left: [id, x.y]}"), IsEmpty());
    EXPECT_THAT(errors("keep: {left: [], middle: [a]}"),
                ElementsAre(HasSubstr("spec.operators[0].window_join.keep.middle: unknown field"),
                            "spec.operators[0].window_join.keep.left: expected a non-empty list "
                            "of fields, got an empty list"));
    // The lists are field lists like group_by's: a field named twice is an error.
    EXPECT_THAT(errors("keep: {right: [id, id]}"),
                ElementsAre("spec.operators[0].window_join.keep.right[1]: duplicate field \"id\""));
  }
  // arg_max / arg_min keep rows: `keep` names their fields, only there.
  EXPECT_THAT(win("tumbling: 1h, aggregates: [{as: top, arg_max: price, keep: [auction, "
                  "bid.price]}, {as: low, arg_min: price}]"),
              IsEmpty());
  EXPECT_THAT(win("tumbling: 1h, aggregates: [{as: a, sum: x, keep: [y]}, {as: b, arg_max: x, "
                  "keep: []}, {as: c, arg_min: x, keep: [[y]]}]"),
              ElementsAre("spec.operators[0].window.aggregates[0].keep: keep is only valid with "
                          "arg_max or arg_min (the fields of each kept row)",
                          "spec.operators[0].window.aggregates[1].keep: expected a non-empty "
                          "list of fields, got an empty list",
                          "spec.operators[0].window.aggregates[2].keep[0]: expected a field name "
                          "or dot path, got a list"));
}

// Sources for join tests: two streams, a versioned table and a lookup table.
constexpr char kJoinSources[] = R"(    - name: clicks
      file: {path: c.jsonl}
      event_time: {field: ts}
    - name: rates
      file: {path: r.jsonl}
      event_time: {field: ts}
    - name: dims
      file: {path: d.jsonl}
)";

TEST(JobSpecTest, ParsesAllJoinKinds) {
  ParseResult r = ParseJobSpec(Job(R"(    - name: ij
      interval_join:
        left: src
        right: clicks
        on: [ad_id, [user_id, uid]]
        between: {lower: -5m, upper: 4h}
        type: left
        allowed_lateness: 1m
        where: "right.cost > left.bid and left.x is not null"
    - name: wj
      window_join: {left: src, right: clicks, on: [ad_id], hopping: {size: 10s, slide: 5s}, type: full}
    - name: wj2
      window_join: {left: ij, right: wj, on: [[left.ad_id, right.ad_id]], tumbling: 1m}
    - name: tj
      temporal_join: {stream: ij, table: rates, on: [[left.currency, currency]], type: left}
    - name: lj
      lookup_join: {stream: tj, table: dims, on: [[left.ad_id, id]]}
    - name: lj2
      lookup_join: {stream: dims, table: dims, on: [id]}
    - name: after
      window: {from: lj, tumbling: 1h, aggregates: [{as: n, count: "*"}]}
    - name: d
      dedup: {from: ij, id: left.id, retention: 1h}
)",
                                   R"(    - {from: ij.too_late, stdout: {}}
    - {from: wj.too_late, stdout: {}}
    - {from: tj.too_late, stdout: {}}
    - {from: lj, stdout: {}}
)",
                                   kJoinSources));
  ASSERT_TRUE(r.ok()) << ::testing::PrintToString(Errors(r));
  const JobSpec& j = r.spec;
  ASSERT_EQ(j.operators.size(), 8u);

  const OperatorSpec& ij = j.operators[0];
  EXPECT_EQ(ij.kind_name(), "interval_join");
  EXPECT_FALSE(ij.kind->InheritsInputKey());  // a join's output has no input key
  EXPECT_THAT(ij.Inputs(), ElementsAre("src", "clicks"));
  EXPECT_THAT(ij.SideOutputs(), ElementsAre("too_late"));
  const IntervalJoinSpec& is = ij.Get<IntervalJoinSpec>();
  ASSERT_EQ(is.on.size(), 2u);
  EXPECT_EQ(is.on[0].left, "ad_id");
  EXPECT_EQ(is.on[0].right, "ad_id");
  EXPECT_EQ(is.on[1].left, "user_id");
  EXPECT_EQ(is.on[1].right, "uid");
  EXPECT_THAT(is.on[1].right_path.parts, ElementsAre("uid"));
  EXPECT_EQ(is.lower, -5 * 60'000);
  EXPECT_EQ(is.upper, 4 * 3'600'000);
  EXPECT_EQ(is.type, JoinType::kLeft);
  EXPECT_EQ(is.allowed_lateness, 60'000);
  EXPECT_EQ(is.where, "right.cost > left.bid and left.x is not null");

  const WindowJoinSpec& wj = j.operators[1].Get<WindowJoinSpec>();
  EXPECT_EQ(j.operators[1].kind_name(), "window_join");
  EXPECT_THAT(j.operators[1].Inputs(), ElementsAre("src", "clicks"));
  EXPECT_THAT(j.operators[1].SideOutputs(), ElementsAre("too_late"));
  EXPECT_EQ(wj.kind, WindowJoinSpec::Kind::kHopping);
  EXPECT_EQ(wj.size, 10'000);
  EXPECT_EQ(wj.slide, 5'000);
  EXPECT_EQ(wj.type, JoinType::kFull);
  EXPECT_EQ(wj.allowed_lateness, 0);
  const WindowJoinSpec& wj2 = j.operators[2].Get<WindowJoinSpec>();
  EXPECT_EQ(wj2.kind, WindowJoinSpec::Kind::kTumbling);
  EXPECT_EQ(wj2.size, 60'000);
  EXPECT_EQ(wj2.slide, 60'000);
  EXPECT_EQ(wj2.type, JoinType::kInner);  // the default
  EXPECT_THAT(wj2.on[0].left_path.parts, ElementsAre("left", "ad_id"));

  const OperatorSpec& tj = j.operators[3];
  EXPECT_EQ(tj.kind_name(), "temporal_join");
  EXPECT_THAT(tj.Inputs(), ElementsAre("ij", "rates"));
  EXPECT_THAT(tj.SideOutputs(), ElementsAre("too_late"));
  EXPECT_EQ(tj.Get<TableJoinSpec>().type, JoinType::kLeft);
  EXPECT_EQ(tj.Get<TableJoinSpec>().on[0].left, "left.currency");
  EXPECT_EQ(tj.Get<TableJoinSpec>().on[0].right, "currency");

  const OperatorSpec& lj = j.operators[4];
  EXPECT_EQ(lj.kind_name(), "lookup_join");
  EXPECT_THAT(lj.Inputs(), ElementsAre("tj", "dims"));
  EXPECT_THAT(lj.SideOutputs(), IsEmpty());
  EXPECT_EQ(lj.Get<TableJoinSpec>().type, JoinType::kInner);
  EXPECT_STREQ(JoinTypeName(JoinType::kFull), "full");
  EXPECT_TRUE(j.operators[6].kind->InheritsInputKey());
}

TEST(JobSpecTest, IntervalJoinErrors) {
  auto errors = [](const std::string& body) {
    return JobErrors("    - name: j\n      interval_join: " + body + "\n", "", kJoinSources);
  };
  const std::string ok_rest = "on: [k], between: {lower: 0s, upper: 1h}";
  EXPECT_THAT(errors("{left: src, right: clicks, " + ok_rest + "}"), IsEmpty());
  EXPECT_THAT(errors("{left: src, right: src, " + ok_rest + "}"), IsEmpty()) << "self-join";
  EXPECT_THAT(errors("{}"),
              ElementsAre("spec.operators[0].interval_join.left: required field is missing",
                          "spec.operators[0].interval_join.right: required field is missing",
                          "spec.operators[0].interval_join.on: required field is missing",
                          "spec.operators[0].interval_join.between: required field is missing"));
  EXPECT_THAT(errors("{left: src, right: clicks, on: [k], between: {lower: 30m, upper: -5m}}"),
              ElementsAre("spec.operators[0].interval_join.between: expected lower <= upper, got "
                          "lower \"30m\" and upper \"-5m\""));
  EXPECT_THAT(errors("{left: src, right: clicks, on: [k], between: {lower: -5 min, upr: 1h}}"),
              ElementsAre("spec.operators[0].interval_join.between.upr: unknown field \"upr\" "
                          "(did you mean \"upper\"?)",
                          "spec.operators[0].interval_join.between.lower: expected a duration, "
                          "got \"-5 min\"",
                          "spec.operators[0].interval_join.between.upper: required field is "
                          "missing"));
  EXPECT_THAT(errors("{left: src, right: clicks, on: [], between: {lower: 0s, upper: 1h}}"),
              ElementsAre("spec.operators[0].interval_join.on: at least one key is required"));
  EXPECT_THAT(errors("{left: src, right: clicks, on: k, between: {lower: 0s, upper: 1h}}"),
              ElementsAre("spec.operators[0].interval_join.on: expected a list of keys (each a "
                          "field name or a [left_field, right_field] pair), got \"k\""));
  EXPECT_THAT(
      errors("{left: src, right: clicks, on: [{a: b}, [a, b, c], [a, ''], k, k, [x, y], [x, y]], "
             "between: {lower: 0s, upper: 1h}}"),
      ElementsAre("spec.operators[0].interval_join.on[0]: expected a field name or a "
                  "[left_field, right_field] pair, got a mapping",
                  "spec.operators[0].interval_join.on[1]: expected a field name or a "
                  "[left_field, right_field] pair, got a list of 3 items",
                  "spec.operators[0].interval_join.on[2][1]: expected a field name or dot path, "
                  "got \"\"",
                  "spec.operators[0].interval_join.on[4]: duplicate key \"k\"",
                  "spec.operators[0].interval_join.on[6]: duplicate key \"x\" = \"y\""));
  EXPECT_THAT(errors("{left: src, right: clicks, " + ok_rest + ", type: outer}"),
              ElementsAre("spec.operators[0].interval_join.type: expected one of inner, left, "
                          "right, full, got \"outer\""));
  EXPECT_THAT(errors("{left: src, right: clicks, " + ok_rest + ", allowed_lateness: -1m}"),
              ElementsAre("spec.operators[0].interval_join.allowed_lateness: expected a "
                          "duration, got \"-1m\""));
  EXPECT_THAT(errors("{left: src, right: clicks, " + ok_rest + ", where: 'amount > right.x'}"),
              ElementsAre("spec.operators[0].interval_join.where: field \"amount\" must be read "
                          "as left.<field> or right.<field>"));
  EXPECT_THAT(errors("{left: src, right: clicks, " + ok_rest + ", where: 'left.a == )'}"),
              ElementsAre(StartsWith("spec.operators[0].interval_join.where: unexpected token")));
  // Inputs: unknown, side outputs, no event time.
  EXPECT_THAT(errors("{left: nope, right: clicks.invalid, " + ok_rest + "}"),
              ElementsAre("spec.operators[0].interval_join.left: unknown node \"nope\" (known: "
                          "src, clicks, rates, dims)",
                          "spec.operators[0].interval_join.right: side output \"clicks.invalid\" "
                          "can only be read by a sink"));
  EXPECT_THAT(errors("{left: src, right: dims, " + ok_rest + "}"),
              ElementsAre("spec.operators[0].interval_join.right: \"dims\" has no event time (its "
                          "source declares no event_time), but interval_join needs event time"));
  EXPECT_THAT(errors("{left: j, right: src, " + ok_rest + "}"),
              ElementsAre("spec.operators[0].interval_join.left: an operator cannot read its own "
                          "output"));
  // A sink may read the join's too_late side output, not an unknown one.
  EXPECT_THAT(
      JobErrors("    - {name: j, interval_join: {left: src, right: clicks, " + ok_rest + "}}\n",
                "    - {from: j.too_late, stdout: {}}\n    - {from: j.conflicts, stdout: "
                "{}}\n",
                kJoinSources),
      ElementsAre("spec.sinks[1].from: \"j\" has no side output \"conflicts\" (it has: "
                  "too_late)"));
}

TEST(JobSpecTest, WindowAndTableJoinErrors) {
  auto errors = [](const std::string& op) {
    return JobErrors(
        "    - name: f\n      filter: {from: src, where: 'true'}\n    - name: j\n" + op + "\n", "",
        kJoinSources);
  };
  EXPECT_THAT(errors("      window_join: {left: src, right: clicks, on: [k]}"),
              ElementsAre("spec.operators[1].window_join: expected one of tumbling, hopping"));
  EXPECT_THAT(errors("      window_join: {left: src, right: clicks, on: [k], session: {gap: 1m}}"),
              ElementsAre("spec.operators[1].window_join.session: unknown field \"session\"",
                          "spec.operators[1].window_join: expected one of tumbling, hopping"));
  EXPECT_THAT(
      errors("      window_join: {left: src, right: clicks, on: [k], hopping: {size: 1s, slide: "
             "2s}, tumbling: 0s}"),
      ElementsAre("spec.operators[1].window_join: expected exactly one of tumbling, hopping, got "
                  "tumbling and hopping"));
  EXPECT_THAT(
      errors("      window_join: {left: src, right: clicks, on: [k], hopping: {size: 1s, slide: "
             "2s}}"),
      ElementsAre("spec.operators[1].window_join.hopping.slide: expected a slide no larger than "
                  "size (1s), got \"2s\""));
  EXPECT_THAT(errors("      window_join: {left: src, right: clicks, on: [k], tumbling: 0s, "
                     "allowed_lateness: 1x}"),
              ElementsAre("spec.operators[1].window_join.tumbling: expected a duration greater "
                          "than 0, got \"0s\"",
                          "spec.operators[1].window_join.allowed_lateness: expected a duration, "
                          "got \"1x\""));
  // Temporal join: the table must be a source with event time.
  EXPECT_THAT(errors("      temporal_join: {stream: src, table: rates, on: [k], type: left}"),
              IsEmpty());
  EXPECT_THAT(errors("      temporal_join: {stream: src, table: f, on: [k]}"),
              ElementsAre("spec.operators[1].temporal_join.table: expected a source "
                          "(temporal_join reads its table from a source), got operator \"f\" "
                          "(sources: src, clicks, rates, dims)"));
  EXPECT_THAT(errors("      temporal_join: {stream: src, table: nope, on: [k]}"),
              ElementsAre("spec.operators[1].temporal_join.table: expected a source "
                          "(temporal_join reads its table from a source), got unknown node "
                          "\"nope\" (sources: src, clicks, rates, dims)"));
  EXPECT_THAT(errors("      temporal_join: {stream: src, table: dims, on: [k]}"),
              ElementsAre("spec.operators[1].temporal_join.table: source \"dims\" declares no "
                          "event_time, but temporal_join versions are valid from their event "
                          "time"));
  EXPECT_THAT(errors("      temporal_join: {stream: dims, table: rates, on: [k], type: full}"),
              ElementsAre("spec.operators[1].temporal_join.stream: \"dims\" has no event time "
                          "(its source declares no event_time), but temporal_join needs event "
                          "time",
                          "spec.operators[1].temporal_join.type: expected one of inner, left, got "
                          "\"full\""));
  EXPECT_THAT(errors("      temporal_join: {stream: src, table: rates, on: [[a]]}"),
              ElementsAre("spec.operators[1].temporal_join.on[0]: expected a field name or a "
                          "[stream_field, table_field] pair, got a list of 1 items"));
  // Lookup join: any source is a table, with or without event time.
  EXPECT_THAT(errors("      lookup_join: {stream: f, table: dims, on: [[a, b]]}"), IsEmpty());
  EXPECT_THAT(errors("      lookup_join: {stream: f, table: f, on: [k], type: right}"),
              ElementsAre("spec.operators[1].lookup_join.table: expected a source (lookup_join "
                          "reads its table from a source), got operator \"f\" (sources: src, "
                          "clicks, rates, dims)",
                          "spec.operators[1].lookup_join.type: expected one of inner, left, got "
                          "\"right\""));
  EXPECT_THAT(errors("      lookup_join: {stream: f, table: dims, on: [k], where: 'x'}"),
              ElementsAre("spec.operators[1].lookup_join.where: unknown field \"where\""));
  // A lookup join of a table-only stream has no event time downstream.
  EXPECT_THAT(
      JobErrors("    - {name: lj, lookup_join: {stream: dims, table: dims, on: [id]}}\n"
                "    - {name: w, window: {from: lj, tumbling: 1m, aggregates: [{as: n, count: "
                "'*'}]}}\n",
                "", kJoinSources),
      ElementsAre("spec.operators[1].window.from: \"lj\" has no event time (its source declares "
                  "no event_time), but window needs event time"));
}

TEST(JobSpecTest, ResolvePaths) {
  ParseResult r = ParseJobSpec(kExample);
  ASSERT_TRUE(r.ok()) << ::testing::PrintToString(Errors(r));
  r.spec.dead_letter_path = "dl.jsonl";
  r.spec.sinks[0].Mutable<KafkaSinkSpec>()->topic = "ignored-not-a-file-sink";
  r.spec.ResolvePaths("/jobs/x");
  EXPECT_EQ(r.spec.sources[0].Get<FileSourceSpec>().path, "/jobs/x/in.jsonl");
  EXPECT_EQ(r.spec.sinks[1].Get<FileSinkSpec>().path, "/jobs/x/out/conflicts.jsonl");
  EXPECT_EQ(r.spec.sinks[0].Get<KafkaSinkSpec>().topic, "ignored-not-a-file-sink");
  EXPECT_EQ(r.spec.dead_letter_path, "/jobs/x/dl.jsonl");
  r.spec.sources[0].Mutable<FileSourceSpec>()->path = "/abs/in.jsonl";
  r.spec.ResolvePaths("/elsewhere");
  EXPECT_EQ(r.spec.sources[0].Get<FileSourceSpec>().path, "/abs/in.jsonl");
}

TEST(JobSpecTest, LoadJobSpecResolvesAgainstTheFilesDirectory) {
  std::filesystem::path dir = std::filesystem::temp_directory_path() /
                              ("caravela_job_spec_test_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir / "jobs");
  std::string file = (dir / "jobs" / "job.yaml").string();
  {
    std::ofstream out(file);
    out << kExample;
  }
  ParseResult r = LoadJobSpec(file);
  ASSERT_TRUE(r.ok()) << ::testing::PrintToString(Errors(r));
  EXPECT_EQ(r.spec.sources[0].Get<FileSourceSpec>().path, (dir / "jobs" / "in.jsonl").string());
  EXPECT_EQ(r.spec.sinks[1].Get<FileSinkSpec>().path,
            (dir / "jobs" / "out" / "conflicts.jsonl").string());

  ParseResult missing = LoadJobSpec((dir / "nope.yaml").string());
  ASSERT_EQ(missing.errors.size(), 1u);
  EXPECT_EQ(missing.errors[0].path, "<file>");
  EXPECT_THAT(missing.errors[0].message, HasSubstr("nope.yaml"));
  EXPECT_THAT(missing.errors[0].message, HasSubstr("No such file"));

  ParseResult is_dir = LoadJobSpec(dir.string());
  ASSERT_EQ(is_dir.errors.size(), 1u);
  EXPECT_EQ(is_dir.errors[0].path, "<file>");
  EXPECT_THAT(is_dir.errors[0].message, HasSubstr("is a directory"));
  std::filesystem::remove_all(dir);
}

TEST(JobSpecTest, SpecErrorToString) {
  SpecError e{"spec.sinks[0].from", "bad"};
  EXPECT_EQ(e.ToString(), "spec.sinks[0].from: bad");
}

TEST(JobSpecTest, NeverThrowsOnOddYaml) {
  const char* docs[] = {
      "!!binary x",
      "? [a]\n: b\n",
      "apiVersion: caravela/v1\nkind: Job\nmetadata: {name: x}\nspec: {sources: [[1]]}\n",
      "a: &x [*x]\n",
      ("apiVersion: caravela/v1\nkind: Job\nmetadata: {name: x}\nspec:\n  sources: "
       "[{name: a, file: {path: x}}]\n  operators: [{name: w, window: {from: a, tumbling: 1h, "
       "aggregates: [[]]}}]\n"),
      "\t",
      "%YAML 9.9\n---\na: 1\n",
      "--- a\n--- b\n",
  };
  for (const char* d : docs) {
    ParseResult r = ParseJobSpec(d);
    EXPECT_FALSE(r.ok()) << d;
  }
}

}  // namespace
}  // namespace caravela

namespace caravela {
namespace {

TEST(JobSpecTest, WindowReconcile) {
  const std::string job = R"(apiVersion: caravela/v1
kind: Job
metadata: {name: r}
spec:
  sources:
    - name: p
      file: {path: p.jsonl}
      event_time: {field: ts, format: iso8601}
      watermark: {max_out_of_orderness: 1m}
  operators:
    - name: w
      window: {from: p, tumbling: 1h, aggregates: [{as: n, count: "*"}], reconcile: RECONCILE}
  sinks:
    - {from: w, stdout: {}}
)";
  auto with = [&](const std::string& r) {
    std::string text = job;
    text.replace(text.find("RECONCILE"), 9, r);
    return ParseJobSpec(text);
  };
  ParseResult ok = with("{id: event_id}");
  ASSERT_TRUE(ok.ok()) << ok.errors[0].ToString();
  EXPECT_EQ(ok.spec.operators[0].Get<WindowSpec>().reconcile_id, "event_id");
  ParseResult bad = with("{field: event_id}");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.errors[0].path.rfind("spec.operators[0].window.reconcile", 0), 0u)
      << bad.errors[0].ToString();
}

}  // namespace
}  // namespace caravela

namespace caravela {
namespace {

TEST(JobSpecTest, KafkaArrivalFieldNeedsABoundedTopic) {
  auto job = [](const std::string& kafka) {
    return ParseJobSpec(absl::StrCat(R"(apiVersion: caravela/v1
kind: Job
metadata: {name: replay}
spec:
  sources:
    - name: clicks
      kafka: )",
                                     kafka, R"(
      event_time: {field: ts, format: epoch_ms}
  sinks:
    - {from: clicks, stdout: {}}
)"));
  };
  ParseResult ok = job("{topic: clicks, bounded: true, arrival_field: meta.at}");
  ASSERT_TRUE(ok.ok()) << ok.errors[0].ToString();
  EXPECT_EQ(ok.spec.sources[0].Get<KafkaSourceSpec>().arrival_field, "meta.at");
  EXPECT_TRUE(ArrivalDriven(ok.spec));
  ParseResult unbounded = job("{topic: clicks, arrival_field: at}");
  ASSERT_FALSE(unbounded.ok());
  EXPECT_EQ(unbounded.errors[0].path, "spec.sources[0].kafka.arrival_field");
  EXPECT_THAT(unbounded.errors[0].message, ::testing::HasSubstr("needs bounded: true"));
  EXPECT_FALSE(ArrivalDriven(job("{topic: clicks}").spec));
}

}  // namespace
}  // namespace caravela

namespace caravela {
namespace {

TEST(JobSpecTest, PathsOfANetworkJobStayInsideTheAllowedDirectories) {
  ParseResult r = ParseJobSpec(R"(apiVersion: caravela/v1
kind: Job
metadata: {name: paths}
spec:
  sources:
    - name: a
      file: {path: in/a.jsonl}
    - name: b
      file: {path: /etc/passwd}
    - name: c
      file: {path: /srv/data/../../etc/shadow}
  sinks:
    - {from: a, file: {path: out/a.jsonl}}
    - {from: b, file: {path: ../../b.jsonl}}
    - {from: c, file: {path: /srv/data/out/c.jsonl}}
    - {from: c, clickhouse: {url: "http://ch:8123", table: t, password_file: /root/.ssh/id_rsa}}
  dead_letter: {path: /srv/data-other/dead.jsonl}
  checkpoint: {interval: 1s, storage: "file:///tmp/x"}
)");
  ASSERT_TRUE(r.ok()) << r.errors[0].ToString();
  std::vector<SpecError> errors = CheckAllowedPaths(r.spec, {"/srv/data/"});
  std::vector<std::string> paths;
  for (const SpecError& e : errors) paths.push_back(e.path);
  EXPECT_THAT(paths, ::testing::ElementsAre("spec.sources[1].file.path",
                                            "spec.sources[2].file.path", "spec.sinks[1].file.path",
                                            "spec.sinks[3].clickhouse.password_file",
                                            "spec.dead_letter.path", "spec.checkpoint.storage"));
  EXPECT_THAT(errors[0].message, ::testing::HasSubstr("--allow-path"));
  EXPECT_THAT(errors[2].message, ::testing::HasSubstr("leaves the workers' shared directory"));
  EXPECT_TRUE(CheckAllowedPaths(r.spec, {"/"}).size() == 1);  // only the ".." one
  // On a cluster relative paths need the workers' shared directory.
  std::vector<std::string> relative;
  for (const SpecError& e : RelativeFilePaths(r.spec)) relative.push_back(e.path);
  EXPECT_THAT(relative,
              ::testing::ElementsAre("spec.sources[0].file.path", "spec.sinks[0].file.path",
                                     "spec.sinks[1].file.path"));
}

}  // namespace
}  // namespace caravela
