#include "common/job_spec.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace caravela {
namespace {

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
  EXPECT_EQ(s.kind, SourceSpec::Kind::kFile);
  EXPECT_EQ(s.file.path, "in.jsonl");
  EXPECT_EQ(s.file.partition_field, "shard");
  EXPECT_EQ(s.file.arrival_field, "arrived_at");
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
  EXPECT_EQ(dedup.kind, OperatorSpec::Kind::kDedup);
  EXPECT_EQ(dedup.dedup.from, "purchases");
  EXPECT_EQ(dedup.dedup.id.ToString(), "event_id");
  EXPECT_EQ(dedup.dedup.retention, 86'400'000);
  EXPECT_TRUE(dedup.dedup.fingerprint.empty());
  EXPECT_THAT(dedup.Inputs(), ElementsAre("purchases"));
  EXPECT_THAT(dedup.SideOutputs(), ElementsAre("conflicts", "too_late"));

  const OperatorSpec& win = j.operators[1];
  EXPECT_EQ(win.name, "revenue");
  EXPECT_EQ(win.kind, OperatorSpec::Kind::kWindow);
  const WindowSpec& w = win.window;
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
  EXPECT_EQ(j.sinks[0].kind, SinkSpec::Kind::kKafka);
  EXPECT_EQ(j.sinks[0].topic, "hourly-revenue");
  EXPECT_EQ(j.sinks[0].bootstrap, "");
  EXPECT_EQ(j.sinks[1].from, "unique.conflicts");
  EXPECT_EQ(j.sinks[1].kind, SinkSpec::Kind::kFile);
  EXPECT_EQ(j.sinks[1].path, "out/conflicts.jsonl");

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
  EXPECT_EQ(j.sources[0].kind, SourceSpec::Kind::kKafka);
  EXPECT_EQ(j.sources[0].kafka.topic, "clicks");
  EXPECT_EQ(j.sources[0].kafka.bootstrap, "broker:9092");
  EXPECT_EQ(j.sources[0].kafka.start, "latest");
  EXPECT_TRUE(j.sources[0].kafka.bounded);
  EXPECT_EQ(j.sources[0].event_time->format, TimeFormat::kEpochMs);
  EXPECT_THAT(j.sources[0].event_time->field.parts, ElementsAre("meta", "ts"));
  EXPECT_EQ(j.sources[0].watermark.max_out_of_orderness, 0);  // defaults
  EXPECT_EQ(j.sources[0].watermark.idle_timeout, 0);
  EXPECT_EQ(j.sources[0].watermark.max_future_skew, 0);
  EXPECT_FALSE(j.sources[1].event_time.has_value());

  ASSERT_EQ(j.operators.size(), 6u);
  EXPECT_EQ(j.operators[0].kind, OperatorSpec::Kind::kFilter);
  EXPECT_EQ(j.operators[0].filter.where, "amount > 10 and country in ('PT', 'ES')");
  EXPECT_THAT(j.operators[0].SideOutputs(), IsEmpty());
  const ProjectSpec& p = j.operators[1].project;
  EXPECT_EQ(j.operators[1].kind, OperatorSpec::Kind::kProject);
  EXPECT_EQ(p.from, "big");
  using Field = std::pair<std::string, std::string>;
  EXPECT_THAT(p.fields, ElementsAre(Field("user", "user.id"), Field("total", "amount * 1.23"),
                                    Field("flag", "true"), Field("one", "1")));
  EXPECT_THAT(j.operators[1].Inputs(), ElementsAre("big"));
  EXPECT_EQ(j.operators[2].dedup.retention, 7 * 86'400'000LL);
  ASSERT_EQ(j.operators[2].dedup.fingerprint.size(), 2u);
  EXPECT_EQ(j.operators[2].dedup.fingerprint[1].ToString(), "total");
  const WindowSpec& h = j.operators[3].window;
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
  EXPECT_EQ(j.operators[4].window.kind, WindowSpec::Kind::kSession);
  EXPECT_EQ(j.operators[4].window.gap, 600'000);

  ASSERT_EQ(j.sinks.size(), 5u);
  EXPECT_EQ(j.sinks[0].kind, SinkSpec::Kind::kStdout);
  EXPECT_EQ(j.sinks[1].kind, SinkSpec::Kind::kStdout);
  EXPECT_EQ(j.sinks[2].kind, SinkSpec::Kind::kKafka);
  EXPECT_EQ(j.sinks[2].bootstrap, "b:1");
  EXPECT_EQ(j.sinks[4].kind, SinkSpec::Kind::kStdout);
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

TEST(JobSpecTest, CheckpointAndDeadLetterErrors) {
  std::string base =
      "apiVersion: caravela/v1\nkind: Job\nmetadata: {name: t}\nspec:\n"
      "  sources: [{name: a, file: {path: x}}]\n";
  EXPECT_THAT(Errors(ParseJobSpec(base + "  checkpoint: {interval: soon, storage: "
                                         "\"s3://b/c\", retain: 0}\n")),
              ElementsAre("spec.checkpoint.interval: expected a duration, got \"soon\"",
                          "spec.checkpoint.storage: expected a file:// URL, got \"s3://b/c\"",
                          "spec.checkpoint.retain: expected an integer >= 1, got \"0\""));
  EXPECT_THAT(Errors(ParseJobSpec(base + "  checkpoint: {storage: \"file:///x\", retain: 2x}\n")),
              ElementsAre("spec.checkpoint.interval: required field is missing",
                          "spec.checkpoint.retain: expected an integer >= 1, got \"2x\""));
  ParseResult ok = ParseJobSpec(base + "  checkpoint: {interval: 10s, retain: 5}\n");
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(ok.spec.checkpoint.interval, 10'000);
  EXPECT_EQ(ok.spec.checkpoint.retain, 5);
  EXPECT_THAT(Errors(ParseJobSpec(base + "  dead_letter: {file: x}\n")),
              ElementsAre("spec.dead_letter.file: unknown field \"file\"",
                          "spec.dead_letter.path: required field is missing"));
}

TEST(JobSpecTest, OperatorKindErrors) {
  EXPECT_THAT(JobErrors("    - {name: j, interval_join: {left: src, right: src}}\n"),
              ElementsAre("spec.operators[0].interval_join: operator kind \"interval_join\" is not "
                          "supported yet"));
  EXPECT_THAT(JobErrors("    - {name: j}\n"),
              ElementsAre("spec.operators[0]: expected one of filter, project, dedup, window"));
  EXPECT_THAT(
      JobErrors("    - {name: j, filter: {from: src, where: 'true'}, project: {from: src, "
                "fields: {a: b}}}\n"),
      ElementsAre("spec.operators[0]: expected exactly one of filter, project, dedup, window, got "
                  "filter and project"));
  EXPECT_THAT(JobErrors("    - {name: j, flter: {}}\n"),
              ElementsAre("spec.operators[0].flter: unknown field \"flter\" (did you mean "
                          "\"filter\"?)",
                          "spec.operators[0]: expected one of filter, project, dedup, window"));
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
              ElementsAre("spec.sinks[0]: expected one of file, kafka, stdout"));
  EXPECT_THAT(JobErrors("", "    - {from: src, stdout: false}\n"),
              ElementsAre("spec.sinks[0].stdout: expected {} or true, got \"false\""));
  EXPECT_THAT(JobErrors("", "    - {from: src, stdout: {}, file: {path: x}}\n"),
              ElementsAre("spec.sinks[0]: expected exactly one of file, kafka, stdout, got file "
                          "and stdout"));
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
          "avg, count_distinct",
          "spec.operators[0].window.aggregates[3]: expected exactly one of count, sum, "
          "min, max, avg, count_distinct, got sum and avg",
          "spec.operators[0].window.aggregates[4].as: duplicate output name \"user\" "
          "(also a group_by field)",
          "spec.operators[0].window.aggregates[5].as: duplicate output name \"state\" "
          "(also a reserved result field)",
          "spec.operators[0].window.aggregates[6].mean: unknown field \"mean\" (did you mean "
          "\"min\"?)",
          "spec.operators[0].window.aggregates[7].min: expected a field name or dot path, "
          "got a list"));
}

TEST(JobSpecTest, ResolvePaths) {
  ParseResult r = ParseJobSpec(kExample);
  ASSERT_TRUE(r.ok());
  r.spec.dead_letter_path = "dl.jsonl";
  r.spec.sinks[0].path = "ignored-not-a-file-sink";
  r.spec.ResolvePaths("/jobs/x");
  EXPECT_EQ(r.spec.sources[0].file.path, "/jobs/x/in.jsonl");
  EXPECT_EQ(r.spec.sinks[1].path, "/jobs/x/out/conflicts.jsonl");
  EXPECT_EQ(r.spec.sinks[0].path, "ignored-not-a-file-sink");
  EXPECT_EQ(r.spec.dead_letter_path, "/jobs/x/dl.jsonl");
  r.spec.sources[0].file.path = "/abs/in.jsonl";
  r.spec.ResolvePaths("/elsewhere");
  EXPECT_EQ(r.spec.sources[0].file.path, "/abs/in.jsonl");
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
  EXPECT_EQ(r.spec.sources[0].file.path, (dir / "jobs" / "in.jsonl").string());
  EXPECT_EQ(r.spec.sinks[1].path, (dir / "jobs" / "out" / "conflicts.jsonl").string());

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
      "apiVersion: caravela/v1\nkind: Job\nmetadata: {name: x}\nspec:\n  sources: "
      "[{name: a, file: {path: x}}]\n  operators: [{name: w, window: {from: a, tumbling: 1h, "
      "aggregates: [[]]}}]\n",
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
