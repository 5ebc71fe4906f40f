// Sink kind `file: {path}`: JSONL, committed with each checkpoint (FileSink,
// file_connectors.h); each task of a stage of several writes a part file of
// its own. Read back (reconcile) from the file and its part files.
#include <algorithm>
#include <filesystem>
#include <fstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/sink_kind.h"
#include "common/spec_reader.h"
#include "worker/connectors/file_connectors.h"
#include "worker/connectors/sink_factory.h"

namespace caravela {
namespace {

namespace fs = std::filesystem;

class FileSinkKind final : public SinkKind {
 public:
  std::string_view name() const override { return "file"; }
  int legacy_id() const override { return 0; }

  std::any Parse(SinkParseContext& ctx) const override {
    FileSinkSpec spec;
    if (ctx.r.CheckMap(ctx.node, ctx.path, {"path"})) {
      if (auto p = ctx.r.String(ctx.node, "path", ctx.path, true)) spec.path = *p;
    }
    return spec;
  }
  std::string Label(const SinkSpec& sink) const override {
    return "file:" + sink.Get<FileSinkSpec>().path;
  }
  std::vector<std::pair<std::string, std::string*>> Files(SinkSpec& sink) const override {
    return {{"file.path", &sink.Mutable<FileSinkSpec>()->path}};
  }
  std::string Output(const SinkSpec& sink) const override {
    return "file " + fs::path(sink.Get<FileSinkSpec>().path).lexically_normal().string();
  }
  void ForTask(SinkSpec& sink, const std::string& part) const override {
    std::string& path = sink.Mutable<FileSinkSpec>()->path;
    path = PartFilePath(path, part);
  }
  absl::StatusOr<std::unique_ptr<Sink>> Create(const SinkSpec& sink,
                                               const SinkContext& ctx) const override {
    const std::string& path = sink.Get<FileSinkSpec>().path;
    return std::unique_ptr<Sink>(new FileSink(
        path, ctx.checkpointed, !ctx.local_dir.empty() && path.rfind(ctx.local_dir + "/", 0) == 0,
        ctx.fence ? ctx.epoch : -1, ctx.job_id));
  }

  bool readable() const override { return true; }
  // The file and its part files, in name order; NotFound if there are none.
  absl::Status ReadBack(const SinkSpec& sink, const std::string& bootstrap,
                        const std::function<void(std::string_view)>& add) const override {
    const std::string& path = sink.Get<FileSinkSpec>().path;
    const fs::path p(path);
    std::vector<std::string> files;
    std::error_code ec;
    if (fs::exists(p, ec)) files.push_back(path);
    const std::string prefix = p.stem().string() + ".part-";
    const std::string ext = p.extension().string();
    const fs::path dir = p.has_parent_path() ? p.parent_path() : fs::path(".");
    for (const auto& e : fs::directory_iterator(dir, ec)) {
      const std::string name = e.path().filename().string();
      if (absl::StartsWith(name, prefix) && absl::EndsWith(name, ext) &&
          name.find(".pending") == std::string::npos) {
        files.push_back(e.path().string());
      }
    }
    if (files.empty()) {
      return absl::NotFoundError(absl::StrCat("file sink ", path,
                                              ": no results to read back (the file and its "
                                              "part files are missing); has the job run?"));
    }
    std::sort(files.begin(), files.end());
    for (const std::string& f : files) {
      std::ifstream in(f);
      if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", f));
      std::string line;
      while (std::getline(in, line)) {
        if (!line.empty()) add(line);
      }
    }
    return absl::OkStatus();
  }
};

}  // namespace

const SinkKind& FileSinkKind() {
  static const class FileSinkKind kind;
  return kind;
}

}  // namespace caravela
