#include "worker/checkpoint/manifest_fields.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace caravela {
namespace {

const std::string* Extra(const ManifestProto& m, const std::string& key) {
  auto it = m.extra().find(key);
  return it == m.extra().end() ? nullptr : &it->second;
}

std::optional<int64_t> Decimal(const std::string* text) {
  int64_t v = 0;
  if (text == nullptr || !absl::SimpleAtoi(*text, &v)) return std::nullopt;
  return v;
}

}  // namespace

std::optional<std::string> SourceWatermarkState(const ManifestProto& m,
                                                const SourceCheckpointProto& sc) {
  if (sc.has_watermark_state()) return sc.watermark_state();
  if (const std::string* wm = Extra(m, "wm/" + sc.name())) return *wm;
  return std::nullopt;
}

void SetSourceWatermarkState(ManifestProto* m, SourceCheckpointProto* sc,
                             const std::string& state) {
  sc->set_watermark_state(state);
  (*m->mutable_extra())["wm/" + sc->name()] = state;
}

std::vector<std::string> SourcePartitionIds(const ManifestProto& m,
                                            const SourceCheckpointProto& sc) {
  if (sc.partition_ids_size() > 0) return {sc.partition_ids().begin(), sc.partition_ids().end()};
  std::vector<std::string> ids;
  if (const std::string* pids = Extra(m, "pids/" + sc.name())) {
    for (absl::string_view v : absl::StrSplit(*pids, '\n', absl::SkipEmpty())) {
      ids.emplace_back(v);
    }
  }
  return ids;
}

void SetSourcePartitionIds(ManifestProto* m, SourceCheckpointProto* sc,
                           const std::vector<std::string>& ids) {
  for (const std::string& id : ids) sc->add_partition_ids(id);
  (*m->mutable_extra())["pids/" + sc->name()] = absl::StrJoin(ids, "\n");
}

std::optional<int64_t> SourceLastArrival(const ManifestProto& m, const SourceCheckpointProto& sc) {
  if (sc.has_last_arrival()) return sc.last_arrival();
  return Decimal(Extra(m, "last_arrival/" + sc.name()));
}

void SetSourceLastArrival(ManifestProto* m, SourceCheckpointProto* sc, int64_t arrival) {
  sc->set_last_arrival(arrival);
  (*m->mutable_extra())["last_arrival/" + sc->name()] = std::to_string(arrival);
}

std::optional<int64_t> ManifestClock(const ManifestProto& m) {
  if (m.has_clock_ms()) return m.clock_ms();
  return Decimal(Extra(m, "clock"));
}

void SetManifestClock(ManifestProto* m, int64_t now_ms) {
  m->set_clock_ms(now_ms);
  (*m->mutable_extra())["clock"] = std::to_string(now_ms);
}

std::optional<int64_t> OperatorWatermark(const OperatorCheckpointProto& oc) {
  if (oc.has_watermark()) return oc.watermark();
  return Decimal(&oc.state());
}

void SetOperatorWatermark(OperatorCheckpointProto* oc, int64_t watermark) {
  oc->set_watermark(watermark);
  oc->set_state(std::to_string(watermark));
}

}  // namespace caravela
