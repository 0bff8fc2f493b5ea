#!/usr/bin/env bash
# Soak: stream COMMANDS (default 10 million) generated commands through
# offline-router twice; check that resident memory stays flat once warm and
# that both runs give byte-identical output. Linux (reads /proc). Takes
# minutes at 10 million. Usage: scripts/soak.sh [COMMANDS]
set -euo pipefail
cd "$(dirname "$0")/.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
go build -o "$tmp/offline-router" ./cmd/offline-router
go run ./scripts/soak -binary "$tmp/offline-router" -commands "${1:-10000000}"
