// Source kind `file: {path, partition_field?, arrival_field?}`: a JSON Lines
// file read once, by one task (FileSource, file_connectors.h); a record's
// partition comes from `partition_field`, processing time may follow
// `arrival_field`.
#include "common/source_kind.h"
#include "common/spec_reader.h"
#include "worker/connectors/file_connectors.h"

namespace caravela {
namespace {

class FileSourceKind final : public SourceKind {
 public:
  std::string_view name() const override { return "file"; }
  int legacy_id() const override { return 0; }

  std::any Parse(SourceParseContext& ctx) const override {
    FileSourceSpec spec;
    SpecReader& r = ctx.r;
    if (r.CheckMap(ctx.node, ctx.path, {"path", "partition_field", "arrival_field"})) {
      if (auto p = r.String(ctx.node, "path", ctx.path, true)) spec.path = *p;
      if (auto p = r.PathField(ctx.node, "partition_field", ctx.path, false)) {
        spec.partition_field = p->ToString();
      }
      if (auto p = r.PathField(ctx.node, "arrival_field", ctx.path, false)) {
        spec.arrival_field = p->ToString();
      }
    }
    return spec;
  }
  std::string Label(const SourceSpec& source) const override {
    return "file " + source.Get<FileSourceSpec>().path;
  }
  std::vector<std::pair<std::string, std::string*>> Files(SourceSpec& source) const override {
    return {{"file.path", &source.Mutable<FileSourceSpec>()->path}};
  }
  std::string ArrivalField(const SourceSpec& source) const override {
    return source.Get<FileSourceSpec>().arrival_field;
  }
  std::string PartitionField(const SourceSpec& source) const override {
    return source.Get<FileSourceSpec>().partition_field;
  }
  bool Bounded(const SourceSpec& source) const override { return true; }

  // Restored positions are line numbers of partition 0.
  absl::StatusOr<std::unique_ptr<RawSource>> Create(const SourceSpec& source,
                                                    const SourceContext& ctx) const override {
    auto file = std::make_unique<FileSource>(source.Get<FileSourceSpec>().path);
    RETURN_IF_ERROR(file->Open());
    auto it = ctx.start_offsets.find(0);
    if (it != ctx.start_offsets.end() && it->second > 0)
      RETURN_IF_ERROR(file->SkipLines(it->second));
    return std::unique_ptr<RawSource>(std::move(file));
  }
};

}  // namespace

const SourceKind& FileSourceKind() {
  static const class FileSourceKind kind;
  return kind;
}

}  // namespace caravela
