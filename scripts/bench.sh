#!/usr/bin/env bash
# End-to-end throughput of offline-router against its floors (the fixed
# typed floor, scripts/typedfloor, and the framing floor), on one
# generated stream, in one run. Usage: scripts/bench.sh [COMMANDS] [ROUNDS]
set -euo pipefail
cd "$(dirname "$0")/.."
commands=${1:-1000000}
rounds=${2:-3}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
go build -o "$tmp/offline-router" ./cmd/offline-router
go build -o "$tmp/framingfloor" ./scripts/framingfloor
go build -o "$tmp/typedfloor" ./scripts/typedfloor
go run ./scripts/benchstream -commands "$commands" > "$tmp/stream.jsonl"
lines=$(wc -l < "$tmp/stream.jsonl")
bytes=$(wc -c < "$tmp/stream.jsonl")
# Best of ROUNDS wall times (seconds), each reading the stream from a file.
best() {
  local b=999999
  for _ in $(seq "$rounds"); do
    local s e
    s=$(date +%s.%N)
    "$@" < "$tmp/stream.jsonl" > /dev/null
    e=$(date +%s.%N)
    b=$(echo "$b $s $e" | awk '{d=$3-$2; print (d<$1)?d:$1}')
  done
  echo "$b"
}
router=$(best "$tmp/offline-router" --evidence summary)
floor=$(best "$tmp/framingfloor")
typed=$(best "$tmp/typedfloor")
awk -v n="$lines" -v b="$bytes" -v r="$router" -v f="$floor" -v t="$typed" 'BEGIN {
  printf "stream: %d commands, %.1f MB (64 workers, prompts of 25-100 blocks)\n\n", n, b/1e6
  printf "%-16s %10s %14s %10s\n", "", "seconds", "commands/s", "MB/s"
  printf "%-16s %10.3f %14.0f %10.1f\n", "typed floor", t, n/t, b/1e6/t
  printf "%-16s %10.3f %14.0f %10.1f\n", "framing floor", f, n/f, b/1e6/f
  printf "%-16s %10.3f %14.0f %10.1f\n", "offline-router", r, n/r, b/1e6/r
  printf "\nratio (offline-router / typed floor throughput): %.2f\n", t/r
  printf "ratio (offline-router / framing floor throughput): %.2f\n", f/r
}'
