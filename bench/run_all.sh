#!/usr/bin/env bash
# Builds the benchmarks in Release, generates the purchase stream into a temp
# dir and runs benches (a)-(d), then prints one summary table.
#
#   bench/run_all.sh                 # 2M purchases, best of 3 for the file benches
#   PURCHASES=500000 REPEAT=1 bench/run_all.sh   # quick run
#
# Environment: BUILD_DIR (default build-bench), PURCHASES (2000000), REPEAT (3),
# DEDUP_IDS (10000000), JOBS (2: parallel compile jobs), KEEP=1 keeps the temp dir.
# Everything generated goes to a fresh `mktemp -d` dir under /tmp.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR="${BUILD_DIR:-build-bench}"
PURCHASES="${PURCHASES:-2000000}"
REPEAT="${REPEAT:-3}"
DEDUP_IDS="${DEDUP_IDS:-10000000}"
JOBS="${JOBS:-2}"

cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release > /dev/null
ninja -C "$BUILD_DIR" -j "$JOBS" purchase_gen naive_baseline file_job_bench kafka_bench \
  dedup_state_bench > /dev/null
B="$BUILD_DIR/bench"

TMP="$(mktemp -d /tmp/caravela-bench.XXXXXX)"
[ "${KEEP:-0}" = 1 ] || trap 'rm -rf "$TMP"' EXIT
RESULTS="$TMP/results.txt"
: > "$RESULTS"

echo "== machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)," \
  "load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "== generating $PURCHASES purchases (24h and 48h of event time) into $TMP"
"$B/purchase_gen" --out "$TMP/p24.jsonl" --purchases "$PURCHASES" --span-hours 24
"$B/purchase_gen" --out "$TMP/p48.jsonl" --purchases "$PURCHASES" --span-hours 48

# best_of NAME CMD...: runs CMD $REPEAT times, keeps the RESULT line with the
# highest events_per_s (the least disturbed run on a shared machine).
best_of() {
  local name="$1"; shift
  local best="" best_rate=0
  for _ in $(seq "$REPEAT"); do
    local line rate
    line="$("$@" 2> /dev/null | grep '^RESULT' | tail -1)"
    rate="$(sed -n 's/.* events_per_s=\([0-9]*\).*/\1/p' <<< "$line")"
    echo "   run: $line"
    if [ -n "$rate" ] && [ "$rate" -gt "$best_rate" ]; then best="$line"; best_rate="$rate"; fi
  done
  echo "${best/RESULT $(cut -d' ' -f2 <<< "$best")/RESULT $name}" >> "$RESULTS"
}

echo "== (a) baseline: naive in-memory program"
best_of naive_baseline "$B/naive_baseline" --input "$TMP/p24.jsonl" --out "$TMP/naive.jsonl"
echo "== (a) file -> dedup -> hourly window per country -> file, RocksDB state (24h of data)"
best_of a_file_job_24h "$B/file_job_bench" --input "$TMP/p24.jsonl" --work-dir "$TMP/a24"
echo "== (a') same job, 48h of data: ids expire during the run (steady-state cost)"
best_of a_file_job_48h "$B/file_job_bench" --input "$TMP/p48.jsonl" --work-dir "$TMP/a48"
echo "== (b) + (c) embedded Kafka broker, 4 partitions"
out="$("$B/kafka_bench" --purchases "$PURCHASES" --work-dir "$TMP/kafka" 2> /dev/null)"
echo "$out" | sed 's/^/   /'
grep '^RESULT' <<< "$out" \
  | sed -e 's/^RESULT kafka_bare_consumer/RESULT c_kafka_bare_consumer/' \
        -e 's/^RESULT kafka_job_rocksdb/RESULT b_kafka_job/' >> "$RESULTS"
echo "== (d) dedup state bytes per id at $DEDUP_IDS ids"
out="$("$B/dedup_state_bench" --ids "$DEDUP_IDS" --work-dir "$TMP/d" 2> /dev/null)"
echo "$out" | sed 's/^/   /'
grep '^RESULT' <<< "$out" | sed 's/^RESULT dedup_state/RESULT d_dedup_state/' >> "$RESULTS"

field() { sed -n "s/.* $1=\([^ ]*\).*/\1/p" <<< "$2"; }
echo
echo "== summary (events/s = wall clock; per-CPU-s = events per CPU second of the thread"
echo "   that runs the pipeline / consumer loop; RSS = peak resident set of that process)"
printf '%-24s %10s %12s %14s %10s  %s\n' bench events events/s per-thread-CPU-s peak-RSS notes
while read -r line; do
  name="$(cut -d' ' -f2 <<< "$line")"
  notes=""
  case "$name" in
    d_*) notes="bytes/id=$(field bytes_per_id "$line") (target <= 24)" ;;
    a_*) notes="target >= 1000000 ev/s" ;;
  esac
  printf '%-24s %10s %12s %14s %8s MiB  %s\n' "$name" "$(field events "$line")" \
    "$(field events_per_s "$line")" "$(field events_per_thread_cpu_s "$line")" \
    "$(field peak_rss_mib "$line")" "$notes"
done < "$RESULTS"
b="$(grep '^RESULT b_' "$RESULTS" | sed -n 's/.* events_per_s=\([0-9]*\).*/\1/p')"
c="$(grep '^RESULT c_' "$RESULTS" | sed -n 's/.* events_per_s=\([0-9]*\).*/\1/p')"
if [ -n "$b" ] && [ -n "$c" ] && [ "$c" -gt 0 ]; then
  echo "(b)/(c) = $(awk "BEGIN{printf \"%.0f\", 100*$b/$c}")% (target >= 50%)"
fi
