#include "common/job_outputs.h"

#include <filesystem>
#include <map>

#include "absl/strings/str_cat.h"
#include "common/sink_kind.h"

namespace caravela {

std::vector<JobOutput> JobOutputs(const JobSpec& spec) {
  std::vector<JobOutput> outputs;
  for (size_t i = 0; i < spec.sinks.size(); ++i) {
    const SinkSpec& sink = spec.sinks[i];
    if (sink.kind == nullptr) continue;
    std::string output = sink.kind->Output(sink);
    if (output.empty()) continue;
    outputs.push_back(
        {absl::StrCat("spec.sinks[", i, "].", std::string(sink.kind->name())), std::move(output)});
  }
  // The dead letter is a file sink of its own (its default path is in the
  // job's own directory).
  if (!spec.dead_letter_path.empty()) {
    outputs.push_back(
        {"spec.dead_letter.path",
         "file " + std::filesystem::path(spec.dead_letter_path).lexically_normal().string()});
  }
  return outputs;
}

std::vector<SpecError> CheckOwnOutputs(const JobSpec& spec) {
  std::vector<SpecError> errors;
  std::map<std::string, std::string> first;  // output -> YAML path of its first writer
  for (const JobOutput& o : JobOutputs(spec)) {
    auto [it, fresh] = first.emplace(o.output, o.yaml_path);
    if (fresh) continue;
    errors.push_back({o.yaml_path, absl::StrCat(o.output, " is written by ", it->second,
                                                " already: one sink per output (give each "
                                                "sink its own path or table)")});
  }
  return errors;
}

std::vector<SpecError> CheckOutputsFree(const JobSpec& spec,
                                        const std::vector<OutputWriter>& running) {
  std::vector<SpecError> errors;
  for (const JobOutput& o : JobOutputs(spec)) {
    for (const OutputWriter& w : running) {
      for (const JobOutput& theirs : w.outputs) {
        if (theirs.output != o.output) continue;
        errors.push_back(
            {o.yaml_path,
             absl::StrCat(o.output, " is written by job ", w.job_id, " (", w.state, ", its ",
                          theirs.yaml_path,
                          "): one job at a time writes an output; cancel that job first or "
                          "write elsewhere")});
      }
    }
  }
  return errors;
}

}  // namespace caravela
