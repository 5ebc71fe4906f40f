// Source kind `kafka: {topic, bootstrap?, start?, bounded?, arrival_field?,
// isolation?, properties?}`: a topic, its partitions shared by the tasks of a stage
// (KafkaSource, kafka_source.h); `bounded: true` reads what exists at the
// start and ends, and only then may processing time follow `arrival_field`;
// `isolation` (read_committed by default) is its consumer's isolation.level;
// `properties` go to its librdkafka clients (kafka_properties.h).
#include "absl/strings/str_cat.h"
#include "common/source_kind.h"
#include "common/spec_reader.h"
#include "worker/connectors/awaiting_topic_source.h"
#include "worker/connectors/kafka_properties.h"
#include "worker/connectors/kafka_source.h"

namespace caravela {
namespace {

class KafkaSourceKind final : public SourceKind {
 public:
  std::string_view name() const override { return "kafka"; }
  int legacy_id() const override { return 1; }

  std::any Parse(SourceParseContext& ctx) const override {
    KafkaSourceSpec spec;
    SpecReader& r = ctx.r;
    const YAML::Node& k = ctx.node;
    const std::string& kpath = ctx.path;
    if (!r.CheckMap(k, kpath,
                    {"topic", "bootstrap", "start", "bounded", "arrival_field", "isolation",
                     "properties"})) {
      return spec;
    }
    if (auto t = r.String(k, "topic", kpath, true)) spec.topic = *t;
    if (auto b = r.String(k, "bootstrap", kpath, false)) spec.bootstrap = *b;
    if (auto s = r.OneOf(k, "start", kpath, {"earliest", "latest"})) spec.start = *s;
    if (auto b = r.OneOf(k, "bounded", kpath, {"true", "false"})) spec.bounded = *b == "true";
    if (auto p = r.PathField(k, "arrival_field", kpath, false)) {
      spec.arrival_field = p->ToString();
      if (!spec.bounded) {
        r.Err(SpecReader::Join(kpath, "arrival_field"),
              "needs bounded: true (a replay merges the partitions in arrival order up to "
              "their end at the start)");
      }
    }
    const auto isolation = r.OneOf(k, "isolation", kpath, {"read_committed", "read_uncommitted"});
    if (isolation) spec.isolation = *isolation;
    spec.properties = ReadKafkaProperties(r, k, kpath, KafkaPropertyScope::kSource);
    // isolation.level among the properties (allowed before `isolation`
    // existed) says the same: it must not contradict `isolation`.
    if (auto it = spec.properties.find("isolation.level"); it != spec.properties.end()) {
      if (isolation && *isolation != it->second) {
        r.Err(SpecReader::Join(kpath, "properties.isolation.level"),
              absl::StrCat("says ", it->second, " but isolation says ", *isolation,
                           "; give only isolation"));
      } else if (it->second == "read_committed" || it->second == "read_uncommitted") {
        spec.isolation = it->second;
      }
    }
    return spec;
  }
  std::string Label(const SourceSpec& source) const override {
    return "topic " + source.Get<KafkaSourceSpec>().topic;
  }
  std::optional<std::string> KafkaBootstrap(const SourceSpec& source) const override {
    return source.Get<KafkaSourceSpec>().bootstrap;
  }
  std::string ArrivalField(const SourceSpec& source) const override {
    return source.Get<KafkaSourceSpec>().arrival_field;
  }
  bool Bounded(const SourceSpec& source) const override {
    return source.Get<KafkaSourceSpec>().bounded;
  }
  void MakeBounded(SourceSpec& source) const override {
    KafkaSourceSpec& spec = *source.Mutable<KafkaSourceSpec>();
    spec.bounded = true;
    spec.start = "earliest";
  }

  bool partitioned_log() const override { return true; }
  absl::StatusOr<int> PartitionCount(const SourceSpec& source,
                                     const std::string& embedded_bootstrap) const override {
    const KafkaSourceSpec& spec = source.Get<KafkaSourceSpec>();
    KafkaSourceOptions ko;
    ko.bootstrap = spec.bootstrap.empty() ? embedded_bootstrap : spec.bootstrap;
    ko.topic = spec.topic;
    ko.config = spec.properties;
    ko.open_timeout_ms = 1000;  // NotFound: a topic not created yet (its source waits)
    KafkaSource probe(ko);
    RETURN_IF_ERROR(probe.Open());
    return probe.PartitionCount();
  }

  // Progress after each completed checkpoint goes to the consumer group
  // caravela-<job>, where kcat, Burrow and kafka-consumer-groups read
  // consumer lag.
  absl::StatusOr<std::unique_ptr<RawSource>> Create(const SourceSpec& source,
                                                    const SourceContext& ctx) const override {
    const KafkaSourceSpec& spec = source.Get<KafkaSourceSpec>();
    KafkaSourceOptions ko;
    ko.bootstrap = spec.bootstrap.empty() ? ctx.embedded_bootstrap : spec.bootstrap;
    ko.topic = spec.topic;
    ko.start = spec.start;
    ko.start_offsets = ctx.start_offsets;
    ko.partitions = ctx.partitions;
    ko.config = spec.properties;  // group.id is not among them (reserved)
    ko.config["isolation.level"] = spec.isolation;
    ko.config["group.id"] = "caravela-" + ctx.job_name;
    // A topic that does not exist yet is waited for (the task runs and
    // reports it); `bounded` then reads up to the end it has once created.
    auto raw = std::make_unique<AwaitingTopicSource>(std::move(ko), spec.bounded, ctx.share_tasks,
                                                     ctx.share_index);
    RETURN_IF_ERROR(raw->Open());
    return std::unique_ptr<RawSource>(std::move(raw));
  }
};

}  // namespace

const SourceKind& KafkaSourceKind() {
  static const class KafkaSourceKind kind;
  return kind;
}

}  // namespace caravela
