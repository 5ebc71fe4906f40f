// Sink kinds: everything the engine knows about one kind of sink, in one
// descriptor in the kind's own file under worker/connectors/ (*_sink_kind.cc),
// listed in worker/registry/builtin_kinds.cc:
//
//   name()        its YAML key ("file", "kafka", ...), also its identity in
//                 checkpoints (JobGraphHash);
//   Parse()       its typed spec (SinkSpec::config) from its YAML value;
//   Label()       "file:PATH", "kafka:TOPIC", ...: the metrics' `sink` label
//                 and `caravela reconcile --sink`;
//   Files() / KafkaBootstrap()   what it touches outside the engine (paths
//                 resolved against the job file and checked for jobs from
//                 the network; brokers);
//   Output()      what it writes that one job at a time may write (a file,
//                 a table, a topic written exactly-once): the coordinator
//                 refuses a second job that names it (common/job_outputs.h);
//   ForTask()     what makes one task's output its own in a parallel job
//                 (file sinks: a `.part-<part>` file);
//   Create()      its Sink (worker/connectors/sink.h);
//   ReadBack()    its results as written, for `caravela reconcile`.
#pragma once

#include <any>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/status.h"

namespace caravela {

class Sink;               // worker/connectors/sink.h
struct SinkContext;       // worker/connectors/sink_factory.h
struct SinkParseContext;  // common/spec_reader.h
struct SinkSpec;          // common/job_spec.h

class SinkKind {
 public:
  virtual ~SinkKind() = default;

  // The YAML key, e.g. "file".
  virtual std::string_view name() const = 0;
  // The number this kind had in the job graph hash of checkpoints written
  // before kinds had names (file 0, kafka 1, stdout 2, postgres 3, discard 4,
  // clickhouse 5); -1 for kinds added since (LegacyJobGraphHash).
  virtual int legacy_id() const { return -1; }

  // Reads the kind's YAML value into its typed spec (on errors, what could
  // be read).
  virtual std::any Parse(SinkParseContext& ctx) const = 0;
  virtual std::string Label(const SinkSpec& sink) const = 0;
  // The local files it reads or writes: (YAML path below the sink, e.g.
  // "file.path", the path in the spec). Empty paths are not files.
  virtual std::vector<std::pair<std::string, std::string*>> Files(SinkSpec& sink) const {
    return {};
  }
  // The Kafka bootstrap it writes to ("" for the embedded broker); nullopt
  // when it writes to no Kafka.
  virtual std::optional<std::string> KafkaBootstrap(const SinkSpec& sink) const {
    return std::nullopt;
  }
  // What the sink writes that only one job at a time may write, as text
  // equal for two sinks that write the same output and readable in a message
  // ("file out/revenue.jsonl", "postgres table revenue at dbname=app");
  // empty when jobs may share what it writes (stdout, discard, a Kafka topic
  // written at-least-once). docs/semantics.md "One writer per output".
  virtual std::string Output(const SinkSpec& sink) const { return ""; }
  // Adapts `sink` to the task whose output carries part name `part`
  // (never empty; task_graph.h SinkNode::part).
  virtual void ForTask(SinkSpec& sink, const std::string& part) const {}
  // Why a job of `parallelism` (> 1) cannot write the sink, starting with
  // the YAML path below the sink (e.g. "kafka.exactly_once with parallelism
  // 2 is not supported yet ..."); empty when it can.
  virtual std::string WhyNotParallel(const SinkSpec& sink, int parallelism) const { return ""; }

  virtual absl::StatusOr<std::unique_ptr<Sink>> Create(const SinkSpec& sink,
                                                       const SinkContext& ctx) const = 0;

  // Whether ReadBack can read the results back.
  virtual bool readable() const { return false; }
  // Calls `add` with every result the sink holds (JSON; "" for a deletion),
  // reading Kafka through `bootstrap` when the sink names none.
  virtual absl::Status ReadBack(const SinkSpec& sink, const std::string& bootstrap,
                                const std::function<void(std::string_view)>& add) const;
};

}  // namespace caravela
