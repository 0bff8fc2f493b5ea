#!/usr/bin/env bash
# Whole-process replay throughput and peak memory by block size (issue
# 35's table), for two builds taken in turn:
#
#   scripts/bench_blocksize.sh OLD_BINARY NEW_BINARY [ROUNDS]
#
# Cases, 16 workers each, under --engine simple and --engine iteration
# (ENGINES="simple" to run one): the shared trace (../shared/traces/
# synthetic_trace.jsonl, or TRACE=...) at 512-token blocks and split to 64
# and 16 (scripts/tracegen -split 8, 32), at the default capacity in
# tokens; and the conversation trace of scripts/convgen at 16-token blocks
# with 131,072-block caches. Every round runs each case with both builds,
# old first in odd rounds and new first in even ones, so that the
# machine's drift falls on both. It prints, per case and build, the median
# wall seconds, CPU seconds (user + system), requests/s (the trace's
# requests over the wall time: start-up, trace reading and the simulation
# all count) and peak RSS, and the medians of the new/old ratios taken
# round by round. Give the same binary twice for a baseline of the noise.
set -euo pipefail
if [[ $# -lt 2 ]]; then
  echo "usage: $0 OLD_BINARY NEW_BINARY [ROUNDS]" >&2
  exit 2
fi
old=$(realpath "$1")
new=$(realpath "$2")
rounds=${3:-3}
cd "$(dirname "$0")/.."
trace=${TRACE:-../shared/traces/synthetic_trace.jsonl}
engines=${ENGINES:-simple iteration}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

cp "$trace" "$tmp/shared512.jsonl"
go run ./scripts/tracegen -split 8 "$trace" > "$tmp/shared64.jsonl"
go run ./scripts/tracegen -split 32 "$trace" > "$tmp/shared16.jsonl"
go run ./scripts/convgen -block-size 16 > "$tmp/conv16.jsonl"

# The cases: name, trace, replay flags.
cases=()
for engine in $engines; do
  cases+=("shared512_$engine|shared512|--block-size 512 --engine $engine")
  cases+=("shared64_$engine|shared64|--block-size 64 --engine $engine")
  cases+=("shared16_$engine|shared16|--block-size 16 --engine $engine")
  cases+=("conv16_$engine|conv16|--block-size 16 --worker-kv-blocks 131072 --engine $engine")
done

# measure BINARY TRACE FLAGS...: prints "wall cpu peak_kb" of one replay.
measure() {
  local bin=$1 trace=$2
  shift 2
  if [[ -x /usr/bin/time ]]; then
    /usr/bin/time -f "%e %U %S %M" -o "$tmp/time" "$bin" replay --workers 16 "$@" "$trace" > /dev/null
    awk '{printf "%s %.3f %s\n", $1, $2+$3, $4}' "$tmp/time"
    return
  fi
  # No time(1): wall time from the clock, peak from /proc's high-water mark
  # read until the process ends, CPU from its stat (ticks).
  local start end peak=0 cpu=0 hz pid
  hz=$(getconf CLK_TCK)
  start=$(date +%s.%N)
  "$bin" replay --workers 16 "$@" "$trace" > /dev/null &
  pid=$!
  while [[ -r /proc/$pid/status ]]; do
    local hwm ticks
    hwm=$(awk '/^VmHWM/ {print $2}' "/proc/$pid/status" 2> /dev/null || true)
    ticks=$(awk '{print $14+$15}' "/proc/$pid/stat" 2> /dev/null || true)
    [[ -n $hwm && $hwm -gt $peak ]] && peak=$hwm
    [[ -n $ticks ]] && cpu=$ticks
    sleep 0.02
  done
  wait "$pid"
  end=$(date +%s.%N)
  awk -v s="$start" -v e="$end" -v c="$cpu" -v hz="$hz" -v p="$peak" 'BEGIN {printf "%.3f %.3f %d\n", e-s, c/hz, p}'
}

: > "$tmp/runs"
for round in $(seq "$rounds"); do
  order="old new"
  (( round % 2 == 0 )) && order="new old"
  for c in "${cases[@]}"; do
    IFS='|' read -r name file flags <<< "$c"
    requests=$(grep -c . "$tmp/$file.jsonl")
    for which in $order; do
      bin=$old
      [[ $which == new ]] && bin=$new
      # shellcheck disable=SC2086 # flags are words
      read -r wall cpu peak < <(measure "$bin" "$tmp/$file.jsonl" $flags)
      echo "$round $name $which $requests $wall $cpu $peak" >> "$tmp/runs"
      echo "round $round $name $which: ${wall}s wall, ${cpu}s cpu, $((peak / 1024)) MB" >&2
    done
  done
done

python3 - "$tmp/runs" << 'EOF'
import collections, statistics, sys

runs = collections.defaultdict(dict)  # (case, round) -> build -> (requests, wall, cpu, peak_kb)
cases = []
for line in open(sys.argv[1]):
    rnd, case, which, requests, wall, cpu, peak = line.split()
    if case not in cases:
        cases.append(case)
    runs[(case, rnd)][which] = (int(requests), float(wall), float(cpu), int(peak))

med = statistics.median
print(f"{'case':<20} {'build':<5} {'wall s':>8} {'cpu s':>8} {'req/s':>9} {'peak MB':>8}")
ratios = {}
for case in cases:
    rounds = [r for (c, _), r in runs.items() if c == case and len(r) == 2]
    for which in ("old", "new"):
        xs = [r[which] for r in rounds]
        print(f"{case:<20} {which:<5} {med(x[1] for x in xs):8.2f} {med(x[2] for x in xs):8.2f} "
              f"{med(x[0] / x[1] for x in xs):9.0f} {med(x[3] for x in xs) / 1024:8.0f}")
    ratios[case] = (med(r['old'][1] / r['new'][1] for r in rounds),  # throughput new/old
                    med(r['new'][2] / r['old'][2] for r in rounds),
                    med(r['new'][3] / r['old'][3] for r in rounds), len(rounds))
print()
print(f"{'case':<20} {'req/s new/old':>14} {'cpu new/old':>12} {'peak new/old':>13} {'rounds':>7}")
for case, (t, c, p, n) in ratios.items():
    print(f"{case:<20} {t:14.3f} {c:12.3f} {p:13.3f} {n:7d}")
EOF
