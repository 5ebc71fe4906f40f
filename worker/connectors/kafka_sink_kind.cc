// Sink kind `kafka: {topic, bootstrap?, mode?, exactly_once?, linger?,
// properties?}`: a changelog (or upsert) topic, idempotent or transactional
// with the checkpoints (KafkaSink, kafka_sink.h); `properties` go to its
// librdkafka clients (kafka_properties.h). Read back (reconcile) from the
// topic's start to its current end.
#include "absl/strings/str_cat.h"
#include "common/sink_kind.h"
#include "common/spec_reader.h"
#include "worker/connectors/kafka_properties.h"
#include "worker/connectors/kafka_sink.h"
#include "worker/connectors/kafka_source.h"
#include "worker/connectors/sink_factory.h"

namespace caravela {
namespace {

class KafkaSinkKind final : public SinkKind {
 public:
  std::string_view name() const override { return "kafka"; }
  int legacy_id() const override { return 1; }

  std::any Parse(SinkParseContext& ctx) const override {
    KafkaSinkSpec spec;
    SpecReader& r = ctx.r;
    const YAML::Node& k = ctx.node;
    const std::string& kpath = ctx.path;
    if (!r.CheckMap(k, kpath,
                    {"topic", "bootstrap", "mode", "exactly_once", "linger", "properties"})) {
      return spec;
    }
    if (auto t = r.String(k, "topic", kpath, true)) spec.topic = *t;
    if (auto b = r.String(k, "bootstrap", kpath, false)) spec.bootstrap = *b;
    if (auto m = r.OneOf(k, "mode", kpath, {"upsert", "changelog"})) {
      spec.mode = *m == "upsert" ? KafkaSinkSpec::Mode::kUpsert : KafkaSinkSpec::Mode::kChangelog;
    }
    if (auto e = r.OneOf(k, "exactly_once", kpath, {"true", "false"})) {
      spec.exactly_once = *e == "true";
      // The transaction commits with each checkpoint: without checkpoints
      // nothing would ever become visible to read_committed consumers.
      if (spec.exactly_once && ctx.job.checkpoint.interval <= 0) {
        r.Err(SpecReader::Join(kpath, "exactly_once"),
              "needs checkpoints (spec.checkpoint.interval > 0): the Kafka transaction "
              "commits with each checkpoint");
      }
    }
    if (auto l = r.Duration(k, "linger", kpath, false, SpecReader::Bound::kNonNegative)) {
      if (*l > 10'000) {
        r.Err(SpecReader::Join(kpath, "linger"), "must be at most 10s");
      } else {
        spec.linger_ms = *l;
      }
    }
    spec.properties = ReadKafkaProperties(r, k, kpath, KafkaPropertyScope::kSink);
    return spec;
  }
  std::string Label(const SinkSpec& sink) const override {
    return "kafka:" + sink.Get<KafkaSinkSpec>().topic;
  }
  // A topic written exactly-once is the job's alone (its transactions and
  // read_committed readers assume one writer); at-least-once topics may be
  // shared (docs/semantics.md "One writer per output").
  std::string Output(const SinkSpec& sink) const override {
    const KafkaSinkSpec& spec = sink.Get<KafkaSinkSpec>();
    if (!spec.exactly_once) return "";
    return absl::StrCat("kafka topic ", spec.topic, " (written exactly-once) on ",
                        spec.bootstrap.empty() ? "the workers' Kafka" : spec.bootstrap);
  }
  std::optional<std::string> KafkaBootstrap(const SinkSpec& sink) const override {
    return sink.Get<KafkaSinkSpec>().bootstrap;
  }
  std::string WhyNotParallel(const SinkSpec& sink, int parallelism) const override {
    if (!sink.Get<KafkaSinkSpec>().exactly_once) return "";
    return absl::StrCat("kafka.exactly_once with parallelism ", parallelism,
                        " is not supported yet (one transaction per task is not coordinated); use "
                        "parallelism 1 or the default at-least-once mode with revisions");
  }
  absl::StatusOr<std::unique_ptr<Sink>> Create(const SinkSpec& sink,
                                               const SinkContext& ctx) const override {
    const KafkaSinkSpec& spec = sink.Get<KafkaSinkSpec>();
    KafkaSinkOptions ko;
    ko.bootstrap = spec.bootstrap.empty() ? ctx.embedded_bootstrap : spec.bootstrap;
    ko.topic = spec.topic;
    ko.mode = spec.mode == KafkaSinkSpec::Mode::kChangelog ? KafkaSinkOptions::Mode::kChangelog
                                                           : KafkaSinkOptions::Mode::kUpsert;
    // A reconcile --apply writes one batch, not transactionally.
    ko.exactly_once = spec.exactly_once && !ctx.single_batch;
    ko.transactional_id = absl::StrCat("caravela-", ctx.job_name, "-sink", ctx.sink_index);
    if (ctx.task >= 0) absl::StrAppend(&ko.transactional_id, "-task", ctx.task);
    ko.epoch = ctx.epoch;
    ko.linger_ms = static_cast<int>(spec.linger_ms);
    ko.properties = spec.properties;
    return std::unique_ptr<Sink>(new KafkaSink(ko));
  }

  bool readable() const override { return true; }
  // The topic from its start to its current end; a tombstone (a deletion)
  // is offered as "".
  absl::Status ReadBack(const SinkSpec& sink, const std::string& bootstrap,
                        const std::function<void(std::string_view)>& add) const override {
    const KafkaSinkSpec& spec = sink.Get<KafkaSinkSpec>();
    absl::Status st = ForEachKafkaMessage(
        spec.bootstrap.empty() ? bootstrap : spec.bootstrap, spec.topic, 5000,
        [&](const RawMessage& m) { add(m.tombstone ? std::string_view() : m.payload); },
        spec.properties);
    if (!st.ok()) {
      return absl::Status(st.code(),
                          absl::StrCat("kafka sink: cannot read it back: ", st.message()));
    }
    return absl::OkStatus();
  }
};

}  // namespace

const SinkKind& KafkaSinkKind() {
  static const class KafkaSinkKind kind;
  return kind;
}

}  // namespace caravela
