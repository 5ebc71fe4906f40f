// Stateless operators: filter (keep records whose predicate is true) and
// project (build new records from expressions).
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/expr.h"
#include "common/job_spec.h"
#include "worker/operators/operator.h"

namespace caravela {

struct FilterSpec {
  std::string from;
  std::string where;
};

struct ProjectSpec {
  std::string from;
  std::vector<std::pair<std::string, std::string>> fields;  // out name -> expr, in YAML order
};

class FilterOperator : public Operator {
 public:
  explicit FilterOperator(std::unique_ptr<Expr> where) : where_(std::move(where)) {}
  absl::Status ProcessBatch(OperatorContext& ctx, int input, const RecordBatch& batch,
                            Output& out) override;

 private:
  std::unique_ptr<Expr> where_;
};

class ProjectOperator : public Operator {
 public:
  // `fields`: output name -> expression, in output order.
  explicit ProjectOperator(std::vector<std::pair<std::string, std::unique_ptr<Expr>>> fields)
      : fields_(std::move(fields)) {}
  absl::Status ProcessBatch(OperatorContext& ctx, int input, const RecordBatch& batch,
                            Output& out) override;

 private:
  std::vector<std::pair<std::string, std::unique_ptr<Expr>>> fields_;
};

}  // namespace caravela
