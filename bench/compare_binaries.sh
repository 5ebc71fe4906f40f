#!/usr/bin/env bash
# Interleaved runs of two caravela binaries on the same inputs, for "no
# speed regression" checks of a change (docs/benchmarks.md): the file job
# (hourly revenue over purchase_gen's purchases) and the Nexmark queries of
# bench/nexmark/ over `caravela nexmark gen` events, sinks replaced by
# `discard`. Prints wall and CPU seconds (user + sys) per run, OLD and NEW
# alternating.
#
#   bench/compare_binaries.sh OLD_BINARY NEW_BINARY [ROUNDS=3] [EVENTS=1000000]
#
# ONLY=file-job runs that job alone. NAIVE=<build>/bench/naive_baseline also
# times the naive program on the file job's input in each of its rounds
# (docs/benchmarks.md, "caravela run against a naive program").
#
# Needs build/bench/purchase_gen (scripts/build purchase_gen) and GNU time.
set -euo pipefail
cd "$(dirname "$0")/.."
OLD=${1:?usage: bench/compare_binaries.sh OLD_BINARY NEW_BINARY [ROUNDS] [EVENTS]}
NEW=${2:?usage: bench/compare_binaries.sh OLD_BINARY NEW_BINARY [ROUNDS] [EVENTS]}
ROUNDS=${3:-3}
EVENTS=${4:-1000000}
GEN=${PURCHASE_GEN:-build/bench/purchase_gen}
[ -x "$GEN" ] || { echo "error: $GEN is missing: scripts/build purchase_gen" >&2; exit 1; }
command -v /usr/bin/time > /dev/null || { echo "error: GNU time is missing" >&2; exit 1; }
WORK=$(mktemp -d /tmp/caravela-compare.XXXXXX)
trap 'rm -rf "$WORK"' EXIT

"$GEN" --out "$WORK/purchases.jsonl" --purchases "$EVENTS" --span-hours 24 > /dev/null
# The file job of file_job_bench (docs/benchmarks.md (a)): dedup + hourly
# windows by country.
cat > "$WORK/file-job.yaml" << YAML
apiVersion: caravela/v1
kind: Job
metadata: {name: compare-file-job}
spec:
  sources:
    - name: purchases
      file: {path: $WORK/purchases.jsonl}
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
    - {from: revenue, file: {path: $WORK/out/revenue.jsonl}}
  dead_letter: {path: $WORK/out/dead-letter.jsonl}
YAML
JOBS="file-job"
if [ "${ONLY:-}" != file-job ]; then
  "$NEW" nexmark gen --events "$EVENTS" --seed 1 --out "$WORK/nexmark" > /dev/null 2>&1
fi
for q in bench/nexmark/q*.yaml; do
  [ "${ONLY:-}" = file-job ] && break
  name=$(basename "$q" .yaml)
  sed -E 's/(\{from: [^,]+, )(file|kafka|postgres|stdout): \{[^}]*\}/\1discard: {}/' "$q" |
    sed "s|path: \([a-z]*\)\.jsonl|path: $WORK/nexmark/\1.jsonl|" > "$WORK/$name.yaml"
  JOBS="$JOBS $name"
done

run() {  # binary job -> "wall_seconds cpu_seconds"
  rm -rf "$WORK/state"
  /usr/bin/time -f "%e %U %S" -o "$WORK/time" "$1" run -q "$WORK/$2.yaml" --data-dir "$WORK/state" \
    > /dev/null 2> "$WORK/log" || { echo "error: $1 $2 failed:" >&2; cat "$WORK/log" >&2; exit 1; }
  awk '{printf "%.2f %.2f", $1, $2 + $3}' "$WORK/time"
}

naive() {  # -> "wall_seconds cpu_seconds" of the naive program on the file job's input
  /usr/bin/time -f "%e %U %S" -o "$WORK/time" "$NAIVE" --input "$WORK/purchases.jsonl" \
    --out "$WORK/naive.jsonl" > /dev/null 2> "$WORK/log" ||
    { echo "error: $NAIVE failed:" >&2; cat "$WORK/log" >&2; exit 1; }
  awk '{printf "%.2f %.2f", $1, $2 + $3}' "$WORK/time"
}

printf '%-10s %-5s %s\n' job round \
  "old_wall_s old_cpu_s new_wall_s new_cpu_s${NAIVE:+ naive_wall_s naive_cpu_s}"
for job in $JOBS; do
  for r in $(seq "$ROUNDS"); do
    o=$(run "$OLD" "$job")
    n=$(run "$NEW" "$job")
    v=""
    if [ -n "${NAIVE:-}" ] && [ "$job" = file-job ]; then v=" $(naive)"; fi
    printf '%-10s %-5s %s %s%s\n' "$job" "$r" "$o" "$n" "$v"
  done
done
