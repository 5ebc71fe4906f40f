// Operator kinds (the registry of STYLE.md "one file plus one registration
// line"): everything the engine knows about one kind of operator, in one
// descriptor that lives in the kind's own file under worker/operators/:
//
//   name()        its YAML key ("window", "dedup", ...) and, in checkpoints,
//                 its identity (JobGraphHash hashes kind names);
//   Parse()       its typed spec (a struct of its own, held in
//                 OperatorSpec's config, common/job_spec.h) from its YAML mapping, every error
//                 with its YAML path (common/spec_reader.h);
//   Inputs() / SideOutputs()   what it reads and which side outputs it has,
//                 declared once for the parser, the planner and the task;
//   Plan()        its partitioning rule (common/job_plan.h);
//   Create()      its operator (worker/operators/operator.h).
//
// The builtin kinds are listed in worker/registry/builtin_kinds.cc
// (common/kind_registry.h); the job parser, the planner and the task's graph
// building look kinds up by name and never switch on one.
#pragma once

#include <any>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace caravela {

class Operator;               // worker/operators/operator.h
struct OperatorBuildContext;  // worker/operators/operator.h
class OperatorPlanContext;    // common/job_plan.h
struct OperatorParseContext;  // common/spec_reader.h
struct OperatorSpec;          // common/job_spec.h

class OperatorKind {
 public:
  virtual ~OperatorKind() = default;

  // The YAML key, e.g. "window".
  virtual std::string_view name() const = 0;
  // The number this kind had in the job graph hash of checkpoints written
  // before kinds had names (0 filter ... 7 lookup_join); -1 for kinds added
  // since. Only for restoring those checkpoints (LegacyJobGraphHash).
  virtual int legacy_id() const { return -1; }

  // Reads the kind's mapping into its typed spec (returned as the value of
  // the OperatorSpec's config; on errors, what could be read) and sets
  // ctx.has_event_time for its output.
  virtual std::any Parse(OperatorParseContext& ctx) const = 0;
  // Names of the upstream nodes the operator reads, in input-index order.
  virtual std::vector<std::string> Inputs(const OperatorSpec& op) const = 0;
  // Its side outputs, without the "<name>." prefix (the operator's Output
  // has this many sides, in this order).
  virtual std::vector<std::string> SideOutputs() const { return {}; }
  // Inputs read whole, before any other input, by every task of the
  // operator's stage (a lookup table: broadcast, never exchanged; Plan
  // calls Broadcast for them): indexes.
  virtual std::vector<int> PreloadedInputs() const { return {}; }
  // Whether output records keep the key fields of input 0 when the operator
  // names none of its own (Operator::OutputKeyFields empty). False for
  // operators whose output is not its input's records (joins, project).
  virtual bool InheritsInputKey() const { return true; }

  // The planner's rule: where the operator runs relative to its inputs
  // (same tasks, or behind an exchange keyed by some fields) and how its
  // output is partitioned.
  virtual void Plan(const OperatorSpec& op, OperatorPlanContext& plan) const = 0;

  // A new operator for one task.
  virtual absl::StatusOr<std::unique_ptr<Operator>> Create(
      const OperatorSpec& op, const OperatorBuildContext& ctx) const = 0;
};

}  // namespace caravela
