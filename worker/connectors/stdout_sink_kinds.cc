// Sink kinds `stdout: {}` (results as JSON lines on standard output) and
// `discard: {}` (serialized and dropped: benchmarks, dry runs); both take
// `{}`, `true` or nothing (file_connectors.h). Neither can be read back.
#include "absl/strings/str_cat.h"
#include "common/sink_kind.h"
#include "common/spec_reader.h"
#include "worker/connectors/file_connectors.h"
#include "worker/connectors/sink_factory.h"

namespace caravela {
namespace {

struct NoSinkOptions {};

class OptionlessSinkKind : public SinkKind {
 public:
  std::any Parse(SinkParseContext& ctx) const override {
    const YAML::Node& k = ctx.node;
    const bool ok =
        k.IsNull() || (k.IsScalar() && k.Scalar() == "true") || (k.IsMap() && k.size() == 0);
    if (!ok) {
      ctx.r.Err(ctx.path, absl::StrCat("expected {} or true, got ", SpecReader::Describe(k)));
    }
    return NoSinkOptions{};
  }
  std::string Label(const SinkSpec& sink) const override { return std::string(name()); }
};

class StdoutSinkKind final : public OptionlessSinkKind {
 public:
  std::string_view name() const override { return "stdout"; }
  int legacy_id() const override { return 2; }
  absl::StatusOr<std::unique_ptr<Sink>> Create(const SinkSpec& sink,
                                               const SinkContext& ctx) const override {
    return std::unique_ptr<Sink>(new StdoutSink());
  }
};

class DiscardSinkKind final : public OptionlessSinkKind {
 public:
  std::string_view name() const override { return "discard"; }
  int legacy_id() const override { return 4; }
  absl::StatusOr<std::unique_ptr<Sink>> Create(const SinkSpec& sink,
                                               const SinkContext& ctx) const override {
    return std::unique_ptr<Sink>(new DiscardSink());
  }
};

}  // namespace

const SinkKind& StdoutSinkKind() {
  static const class StdoutSinkKind kind;
  return kind;
}

const SinkKind& DiscardSinkKind() {
  static const class DiscardSinkKind kind;
  return kind;
}

}  // namespace caravela
