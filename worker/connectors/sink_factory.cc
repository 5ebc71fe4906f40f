#include "worker/connectors/sink_factory.h"

#include "absl/strings/str_cat.h"
#include "worker/connectors/clickhouse_sink.h"
#include "worker/connectors/file_connectors.h"
#include "worker/connectors/kafka_sink.h"
#include "worker/connectors/postgres_sink.h"

namespace caravela {

ClickHouseSinkOptions ClickHouseOptionsOf(const SinkSpec& spec) {
  ClickHouseSinkOptions co;
  co.url = spec.url;
  co.database = spec.database;
  co.table = spec.table;
  co.user = spec.user;
  co.password_file = spec.password_file;
  return co;
}

absl::StatusOr<std::unique_ptr<Sink>> MakeSink(const SinkSpec& spec, const SinkContext& ctx) {
  switch (spec.kind) {
    case SinkSpec::Kind::kFile:
      return std::make_unique<FileSink>(
          spec.path, ctx.checkpointed,
          !ctx.local_dir.empty() && spec.path.rfind(ctx.local_dir + "/", 0) == 0,
          ctx.fence ? ctx.epoch : -1);
    case SinkSpec::Kind::kStdout:
      return std::make_unique<StdoutSink>();
    case SinkSpec::Kind::kDiscard:
      return std::make_unique<DiscardSink>();
    case SinkSpec::Kind::kKafka: {
      KafkaSinkOptions ko;
      ko.bootstrap = spec.bootstrap.empty() ? ctx.embedded_bootstrap : spec.bootstrap;
      ko.topic = spec.topic;
      ko.mode = spec.kafka_mode == SinkSpec::KafkaMode::kChangelog
                    ? KafkaSinkOptions::Mode::kChangelog
                    : KafkaSinkOptions::Mode::kUpsert;
      ko.exactly_once = spec.exactly_once;
      ko.transactional_id = absl::StrCat("caravela-", ctx.job_name, "-sink", ctx.sink_index);
      if (ctx.task >= 0) absl::StrAppend(&ko.transactional_id, "-task", ctx.task);
      ko.epoch = ctx.epoch;
      return std::make_unique<KafkaSink>(ko);
    }
    case SinkSpec::Kind::kPostgres: {
      PostgresSinkOptions po;
      po.dsn = spec.dsn;
      po.table = spec.table;
      po.epoch = ctx.epoch;
      if (ctx.fence) po.fence_job = ctx.job_name;
      po.yaml_path = absl::StrCat("spec.sinks[", ctx.sink_index, "].postgres");
      return std::make_unique<PostgresSink>(po);
    }
    case SinkSpec::Kind::kClickHouse: {
      ClickHouseSinkOptions co = ClickHouseOptionsOf(spec);
      co.yaml_path = absl::StrCat("spec.sinks[", ctx.sink_index, "].clickhouse");
      if (ctx.from != nullptr) co.hints = ClickHouseTypeHints(*ctx.from);
      return std::make_unique<ClickHouseSink>(co);
    }
  }
  return absl::InvalidArgumentError("unknown sink kind");
}

}  // namespace caravela
