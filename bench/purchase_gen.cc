// purchase_gen: writes the deterministic benchmark purchase stream as JSON Lines.
//
//   purchase_gen --out /tmp/purchases.jsonl [--purchases 2000000] [--seed 42]
//                [--span-hours 24] [--retry-fraction 0.05] [--late-fraction 0.001]
//                [--max-disorder-s 240] [--conflict-fraction 0]
#include <cstdio>

#include "bench/bench_util.h"
#include "bench/purchase_generator.h"

int main(int argc, char** argv) {
  caravela::bench::Flags flags(argc, argv);
  std::string out = flags.Str("out");
  if (out.empty()) {
    std::fprintf(stderr, "usage: purchase_gen --out FILE [--purchases N] [--seed S] ...\n");
    return 2;
  }
  caravela::bench::PurchaseStreamOptions o;
  o.purchases = flags.Int("purchases", o.purchases);
  o.seed = static_cast<uint64_t>(flags.Int("seed", static_cast<long long>(o.seed)));
  o.span_ms = flags.Int("span-hours", 24) * 3600'000;
  o.retry_fraction = flags.Double("retry-fraction", o.retry_fraction);
  o.late_upload_fraction = flags.Double("late-fraction", o.late_upload_fraction);
  o.conflict_fraction = flags.Double("conflict-fraction", o.conflict_fraction);
  o.max_disorder_ms = flags.Int("max-disorder-s", o.max_disorder_ms / 1000) * 1000;
  double t0 = caravela::bench::NowSeconds();
  auto stats = caravela::bench::WritePurchaseFile(o, out);
  if (!stats.ok()) {
    std::fprintf(stderr, "purchase_gen: %s\n", std::string(stats.status().message()).c_str());
    return 1;
  }
  std::printf(
      "purchase_gen: %s: %lld lines (%lld purchases, %lld retries, %lld conflicts, "
      "%lld late uploads), %.1f MiB, %.2f s\n",
      out.c_str(), static_cast<long long>(stats->lines), static_cast<long long>(o.purchases),
      static_cast<long long>(stats->retries), static_cast<long long>(stats->conflicts),
      static_cast<long long>(stats->late_uploads), stats->bytes / 1048576.0,
      caravela::bench::NowSeconds() - t0);
  return 0;
}
