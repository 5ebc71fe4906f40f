#!/usr/bin/env bash
# What serving and scraping /metrics costs (issue 11: at most 2 % of the
# job's throughput). `caravela run` of the hourly-revenue file job (dedup +
# windows, RocksDB state) over N purchases, alternately without --http and
# with --http scraped every second (curl), RUNS times each; prints each
# run's events/s (from the run's own summary: records in / wall time) and
# the medians.
#   bench/metrics_overhead.sh [PURCHASES=2000000] [RUNS=5]
set -euo pipefail
cd "$(dirname "$0")/.."
PURCHASES="${1:-2000000}"
RUNS="${2:-5}"
B="${BUILD_DIR:-build}"
TMP="$(mktemp -d /tmp/caravela-metrics-bench.XXXXXX)"
trap 'rm -rf "$TMP"' EXIT
"$B/bench/purchase_gen" --out "$TMP/purchases.jsonl" --purchases "$PURCHASES" --span-hours 24 > /dev/null
cat > "$TMP/job.yaml" <<YAML
apiVersion: caravela/v1
kind: Job
metadata: {name: metrics-bench}
spec:
  sources:
    - name: purchases
      file: {path: $TMP/purchases.jsonl}
      event_time: {field: event_time, format: iso8601}
      watermark: {max_out_of_orderness: 5m}
  operators:
    - name: unique
      dedup: {from: purchases, id: event_id, retention: 24h}
    - name: revenue
      window:
        from: unique
        tumbling: 1h
        group_by: [country]
        aggregates: [{as: revenue, sum: amount}, {as: orders, count: "*"}]
        allowed_lateness: 2h
  sinks:
    - {from: revenue, file: {path: $TMP/out/revenue.jsonl}}
YAML
events=$(wc -l < "$TMP/purchases.jsonl")
run() {  # $1: with_http (0/1); prints events/s
  rm -rf "$TMP/data" "$TMP/out"
  local port=$((20000 + RANDOM % 20000)) scraper="" t0 t1
  t0=$(date +%s.%N)
  if [ "$1" = 1 ]; then
    "$B/cli/caravela" run -q --data-dir "$TMP/data" --http "127.0.0.1:$port" "$TMP/job.yaml" 2> /dev/null &
    local pid=$!
    (while kill -0 "$pid" 2> /dev/null; do
       curl -s -o /dev/null "http://127.0.0.1:$port/metrics" || true; sleep 1; done) &
    scraper=$!
    wait "$pid"
    kill "$scraper" 2> /dev/null || true
  else
    "$B/cli/caravela" run -q --data-dir "$TMP/data" "$TMP/job.yaml" 2> /dev/null
  fi
  t1=$(date +%s.%N)
  python3 -c "print(f'{$events / ($t1 - $t0):.0f}')"
}
off=(); on=()
for i in $(seq "$RUNS"); do
  off+=("$(run 0)"); on+=("$(run 1)")
  echo "run $i: without --http ${off[-1]} events/s, with --http scraped every 1 s ${on[-1]} events/s"
done
python3 - "${off[*]}" "${on[*]}" <<'PY'
import statistics, sys
off = [float(x) for x in sys.argv[1].split()]
on = [float(x) for x in sys.argv[2].split()]
m_off, m_on = statistics.median(off), statistics.median(on)
print(f"median without --http {m_off:.0f} events/s, with --http + 1 s scrapes {m_on:.0f} events/s: "
      f"{100 * (m_off - m_on) / m_off:+.1f} % cost")
PY
