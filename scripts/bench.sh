#!/usr/bin/env bash
# Builds npuflow and runs every benchmark area once (`npuflow bench all --json`), keeping the result
# as benchmarks/results/<date>-<commit>.json so that a run can be compared with the next.
# Usage: scripts/bench.sh [extra npuflow bench options, e.g. --repetitions 3]
# Run it on a quiet machine: every figure is a ratio to a baseline of the same run, but the
# absolute values move with whatever else runs.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
mkdir -p benchmarks/results
out="benchmarks/results/$(date -u +%Y-%m-%d)-$(git rev-parse --short HEAD).json"
./build/apps/npuflow bench all --json "$@" > "$out.tmp"
mv "$out.tmp" "$out"
echo "bench: wrote $out"
