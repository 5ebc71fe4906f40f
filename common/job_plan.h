// The job planner (SPEC §8 "Tasks and keys"): cuts a job graph into stages
// where the key changes, and names the exchange topics between them.
//
// A stage is a set of sources and operators that run together in one task
// (per task: the partitions p with p mod tasks == task index of every input
// of the stage). Records cross from one stage to another only through an
// exchange: a Kafka topic `caravela.<job>.<operator>` partitioned by a stable
// hash of the consuming operator's key (ExchangeKeyHash).
//
// Rules (docs/semantics.md "Parallel jobs"):
//  * Key requirements: dedup -> its `id`; window -> `group_by` (an empty
//    group_by is a global window: its stage runs as one task); interval and
//    window joins -> `on` (left fields for the left input, right fields for the
//    right input); temporal join -> `on` for both stream and table. filter and
//    project have none (they stay in the stage of their input). A lookup
//    join's stream has none; its table source is read whole by every task of
//    the stream's stage (broadcast), never exchanged.
//  * Partitioning of a node's output: a partitioned-log source (Kafka,
//    SourceKind::partitioned_log) with `key:` is partitioned by those
//    fields; filter, dedup, lookup and temporal joins keep their input's
//    partitioning; project keeps it when every key field is projected
//    unchanged (`f: f`); a window is partitioned by its group_by; interval
//    and window joins and other sources (files) are unpartitioned.
//  * An input whose partitioning P satisfies the requirement R (P non-empty and
//    every field of P is in R: equal R-keys imply equal P-keys) is forwarded
//    (same stage), otherwise it is exchanged. A multi-input operator forwards
//    only if every input satisfies its key and the inputs are co-partitioned
//    (sources: same partition count) and merging their stages creates no
//    cycle between stages; otherwise every input is exchanged. All inputs of
//    one operator that are exchanged go through one topic (records carry
//    their input index).
//  * Tasks of a stage: `parallelism`, except 1 for a stage holding a global
//    window or reading a source that is not a partitioned log (a file is
//    one partition: "file source <name>"). A stage reading a Kafka source
//    with fewer partitions than `parallelism` is an error naming the
//    source, its partition count and the parallelism.
//  * An exchange has as many partitions as its consuming stage has tasks
//    (partition p is read by task p); a Kafka topic for it is created with
//    the job's max_parallelism partitions when that stage runs
//    `parallelism` tasks, so a rescale never needs more (CreatePartitions).
//
// Refinements of these rules (the planner is conservative: when in doubt it
// exchanges, which is always correct):
//  * Field names compare as written (FieldPath::ToString). A window or project
//    output field whose name has a '.' is a flat field, not a path, so a
//    partitioning through such a name is dropped (unpartitioned).
//  * filter, dedup and window keep the partitioning their input has in their
//    stage: the input's when forwarded, the exchange key when exchanged (for a
//    window, its group_by). A forwarded window keeps the (smaller) key of its
//    stage, which is a subset of its group_by. project keeps a key field `a`
//    or `a.b` when it has an entry `a: a` (the expression being the bare name).
//  * Two partitionings are co-partitioned only if they come from the same
//    partitioner: two keyed Kafka sources (the producers' partitioner over the
//    topics' keys; same partition count, an unknown count is assumed equal),
//    or two exchanges (ExchangeKeyHash; same task count), and their key fields
//    correspond pairwise, in order, through the join's `on` pairs. A Kafka
//    source and an exchange are never co-partitioned.
//  * A global window is always exchanged (a 1-partition topic), also at
//    parallelism 1 or after a 1-task stage: the plan's shape (stages,
//    exchanges, topics) never depends on the parallelism, only task and
//    exchange partition counts do, so rescaling keeps the topology. Source
//    partition counts change the shape in one case only: a join of two keyed
//    Kafka sources whose known counts differ is exchanged.
//  * A source that only lookup joins read (as their table; sinks may read its
//    side outputs, not its main output) is broadcast-only: it is in no
//    stage's `sources`, and stage_of maps it to the lowest stage that
//    broadcasts it (whose tasks own its side outputs). A source also read
//    otherwise is, in addition, a partitioned source of its own stage.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "common/job_spec.h"
#include "common/record.h"
#include "common/status.h"

namespace caravela {

struct JobPlan;

struct ExchangePlan {
  // The partitions a Kafka topic for this exchange is created with: the
  // job's max_parallelism when the consuming stage runs `parallelism` tasks
  // (any rescale fits), 1 for a stage that always has one task.
  int CreatePartitions(const JobPlan& plan) const;
  int id = 0;
  std::string topic;          // caravela.<job>.<operator>
  std::string operator_name;  // the consuming operator
  int consumer_stage = 0;
  int partitions = 1;  // = the consuming stage's task count
  // One entry per operator input that goes through this exchange.
  struct Input {
    int input = 0;                       // input index of the consuming operator
    std::string from;                    // upstream node name (source or operator)
    int producer_stage = 0;              // stage of `from`
    std::vector<FieldPath> key;          // key paths read on the upstream records
    std::vector<std::string> key_names;  // as written
  };
  std::vector<Input> inputs;
  // Producing stages (distinct, ascending).
  std::vector<int> producer_stages;
};

struct StagePlan {
  int id = 0;
  int tasks = 1;
  // Members in spec order.
  std::vector<std::string> sources;    // partitioned sources read by this stage
  std::vector<std::string> broadcast;  // lookup-table sources every task reads whole
  std::vector<std::string> operators;
  std::vector<int> input_exchanges;   // exchange ids consumed
  std::vector<int> output_exchanges;  // exchange ids produced
  // Why the task count is what it is ("parallelism", "global window revenue",
  // "file source purchases").
  std::string tasks_reason;
  // Partitioning key of the stage's inputs (field names; empty: none).
  std::vector<std::string> key;
};

struct JobPlan {
  std::string job_name;
  int parallelism = 1;
  // spec.max_parallelism: the key groups exchanges route by (common/key_groups.h).
  int max_parallelism = kDefaultMaxParallelism;
  std::vector<StagePlan> stages;  // in topological order
  std::vector<ExchangePlan> exchanges;
  // Per node (source or operator name): its stage.
  std::map<std::string, int> stage_of;
  // Per node: "source" or the operator kind as in YAML ("dedup",
  // "interval_join", ...), for ToText.
  std::map<std::string, std::string> kind_of;

  int total_tasks() const;
  // The global id of stage `stage`'s first task: tasks are numbered stage by
  // stage, in stage order.
  int FirstTask(int stage) const;
  // Human-readable plan (what `caravela plan` prints).
  std::string ToText() const;
  // The same as JSON: {"job":..,"parallelism":..,"stages":[...],"exchanges":[...]}.
  std::string ToJson() const;
  // The exchange consuming input `input` of operator `op`, or null.
  const ExchangePlan* ExchangeFor(std::string_view op, int input) const;
};

// Partition counts of Kafka source topics by source name; a source missing
// from the map has an unknown count (the check is skipped).
using SourcePartitions = std::map<std::string, int>;

// What an operator kind's planning rule (OperatorKind::Plan) decides with:
// where the operator runs relative to its inputs and how its output is
// partitioned (the rules above). Each kind calls one placement (Forward,
// Keyed, Global, Joined) and then, if its output is not what the placement
// leaves, one of the Output* calls.
class OperatorPlanContext {
 public:
  virtual ~OperatorPlanContext() = default;

  // With input 0, in its tasks. The output keeps input 0's partitioning
  // when `keeps` (null: always) is true for every key field of it.
  virtual void Forward(const std::function<bool(const std::string& field)>& keeps = nullptr) = 0;
  // A single-input operator over the keys `paths`: with input 0 when its
  // partitioning satisfies them (output: that partitioning; returns true),
  // else behind an exchange keyed by them (output: partitioned by them).
  virtual bool Keyed(const std::vector<FieldPath>& paths) = 0;
  // Over every record at once: one task behind a one-partition exchange.
  virtual void Global() = 0;
  // A two-input operator over keys paths[i] of input i: with both inputs
  // when they are co-partitioned by those keys (returns true), else behind
  // one exchange of both. Output: unpartitioned.
  virtual bool Joined(const std::vector<FieldPath> paths[2]) = 0;
  // Input `input` (a source) is read whole by every task of the stage.
  virtual void Broadcast(int input) = 0;

  // The output's partitioning: input `input`'s, by `fields`, or none.
  virtual void OutputLikeInput(int input) = 0;
  virtual void OutputPartitionedBy(std::vector<std::string> fields) = 0;
  virtual void OutputUnpartitioned() = 0;
  // The output's partition key fields now (empty: unpartitioned).
  virtual std::vector<std::string> OutputKey() const = 0;

  // Field names as written (FieldPath::ToString).
  static std::vector<std::string> Names(const std::vector<FieldPath>& paths);
};

// Plans `spec` with `parallelism` tasks per stage (>= 1). InvalidArgument
// naming the YAML path or the source (with the numbers) when it cannot be
// honoured.
absl::StatusOr<JobPlan> PlanJob(const JobSpec& spec, int parallelism,
                                const SourcePartitions& partitions = {});
// The plan a cluster runs `spec` with: PlanJob's, except for a replay in
// arrival order (ArrivalDriven; WhyNotClusterParallelism refuses it more
// than one task): the whole job in one task, one stage without exchanges,
// as `caravela run` runs it, so that its processing time follows the
// arrival fields in one order and its answer is `caravela run`'s.
absl::StatusOr<JobPlan> PlanClusterJob(const JobSpec& spec, int parallelism,
                                       const SourcePartitions& partitions = {});

// The stable key hash used to partition exchange topics: XXH3-64 (seed 0) of
// the key encoding (per key field: a type tag, 4-byte big-endian length, the
// bytes; numbers by value, so 1, 1.0 and 1.00 hash alike), identical on every
// platform. A record whose key has a null or missing field hashes the
// encoding of null. Its key group is hash mod max_parallelism, and the
// partition the consuming task that owns that group (common/key_groups.h).
uint64_t ExchangeKeyHash(const Record& r, const std::vector<FieldPath>& key, std::string* scratch);

}  // namespace caravela
