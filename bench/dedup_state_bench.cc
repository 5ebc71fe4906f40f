// Bench (d): dedup state bytes per remembered id on disk.
//
//   dedup_state_bench [--ids 10000000] [--span-hours 24] [--work-dir DIR]
//
// Feeds `--ids` distinct purchases (no retries, no late uploads) through the
// dedup operator on a RocksDB backend in batches of 1024, committing after
// each batch as the runtime does, then flushes and fully compacts the state
// (StateBackend::Compact) and divides the total size of the SST files by the
// number of ids. Also prints the insert rate of the operator alone (records
// are decoded before the clock starts) and the table's key count, and what a
// rescale to 2 tasks costs this state: split_s, the time new task 0 takes to
// adopt its ids (Operator::AdoptState, every entry's stored hash checked)
// into a fresh backend and commit, and open_s, its Open (index rebuilt).
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "bench/bench_util.h"
#include "bench/purchase_generator.h"
#include "common/json.h"
#include "common/time_util.h"
#include "worker/operators/dedup_operator.h"
#include "worker/state/state_backend.h"

namespace fs = std::filesystem;

namespace {

uint64_t SstBytes(const std::string& dir) {
  uint64_t total = 0;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (e.is_regular_file() && e.path().extension() == ".sst") total += e.file_size();
  }
  return total;
}

}  // namespace

int main(int argc, char** argv) {
  caravela::bench::Flags flags(argc, argv);
  const long long ids = flags.Int("ids", 10'000'000);
  const std::string work = flags.Str("work-dir", "/tmp/caravela-dedup-state-bench");
  fs::remove_all(work);
  fs::create_directories(work);

  auto backend = caravela::OpenRocksDbBackend(work + "/state");
  if (!backend.ok()) {
    std::fprintf(stderr, "open: %s\n", std::string(backend.status().message()).c_str());
    return 1;
  }
  caravela::MetricsRegistry metrics;
  caravela::ManualClock clock(0);
  caravela::OperatorContext ctx("unique", backend->get(), &metrics, &clock);
  caravela::DedupOperator op(caravela::FieldPath::Parse("event_id"), 30LL * 24 * 3600'000, {}, "");
  if (auto st = op.Open(ctx); !st.ok()) {
    std::fprintf(stderr, "open dedup: %s\n", std::string(st.message()).c_str());
    return 1;
  }

  caravela::bench::PurchaseStreamOptions o;
  o.purchases = ids;
  o.span_ms = flags.Int("span-hours", 24) * 3600'000;
  o.retry_fraction = 0;
  o.late_upload_fraction = 0;
  caravela::bench::PurchaseGenerator gen(o);
  caravela::JsonDecoder decoder;
  caravela::RecordBatch batch;
  caravela::Output out(op.SideOutputs().size());
  const caravela::FieldPath time_path = caravela::FieldPath::Parse("event_time");
  std::string line;
  double busy = 0, thread_cpu = 0;
  long long done = 0;
  for (bool more = true; more;) {
    batch.clear();
    while (batch.size() < 1024 && (more = gen.Next(&line))) {
      caravela::Record& r = batch.Append();
      if (!decoder.Decode(line, &r).ok()) return 1;
      r.event_time = *caravela::ParseIso8601(r.GetPath(time_path).s);
    }
    if (batch.empty()) break;
    double t0 = caravela::bench::NowSeconds();
    double c0 = caravela::bench::ThreadCpuSeconds();
    absl::Status st = op.ProcessBatch(ctx, 0, batch, out);
    if (st.ok()) st = op.Flush(ctx);
    if (st.ok()) st = (*backend)->Commit();
    if (!st.ok()) {
      std::fprintf(stderr, "process: %s\n", std::string(st.message()).c_str());
      return 1;
    }
    busy += caravela::bench::NowSeconds() - t0;
    thread_cpu += caravela::bench::ThreadCpuSeconds() - c0;
    done += static_cast<long long>(batch.size());
    out.clear();
  }
  double t0 = caravela::bench::NowSeconds();
  if (auto st = (*backend)->Compact(); !st.ok()) {
    std::fprintf(stderr, "compact: %s\n", std::string(st.message()).c_str());
    return 1;
  }
  double compact_secs = caravela::bench::NowSeconds() - t0;
  uint64_t sst = SstBytes(work + "/state");
  auto table = (*backend)->OpenTable("unique/ids");
  long long keys = table.ok() ? static_cast<long long>(*(*table)->CountKeys()) : -1;
  // The rescale: task 0 of 2 adopts its ids.
  double split_secs = 0, open_secs = 0;
  {
    auto fresh = caravela::OpenRocksDbBackend(work + "/split");
    if (!fresh.ok()) return 1;
    caravela::OperatorContext to("unique", fresh->get(), &metrics, &clock);
    caravela::KeyOwner owner;
    owner.keys = {{caravela::FieldPath::Parse("event_id")}};
    owner.tasks = 2;
    caravela::DedupOperator task0(caravela::FieldPath::Parse("event_id"), 30LL * 24 * 3600'000, {},
                                  "");
    t0 = caravela::bench::NowSeconds();
    absl::Status st = task0.AdoptState(ctx, to, owner);
    if (st.ok()) st = (*fresh)->Commit();
    split_secs = caravela::bench::NowSeconds() - t0;
    t0 = caravela::bench::NowSeconds();
    if (st.ok()) st = task0.Open(to);
    open_secs = caravela::bench::NowSeconds() - t0;
    if (!st.ok()) {
      std::fprintf(stderr, "split: %s\n", std::string(st.message()).c_str());
      return 1;
    }
  }
  char extra[256];
  std::snprintf(extra, sizeof extra,
                "ids=%lld table_keys=%lld sst_bytes=%llu bytes_per_id=%.2f compact_s=%.1f "
                "split_s=%.2f open_s=%.2f",
                done, keys, static_cast<unsigned long long>(sst), static_cast<double>(sst) / done,
                compact_secs, split_secs, open_secs);
  caravela::bench::PrintResult("dedup_state", done, busy, extra, thread_cpu);
  return 0;
}
