#!/usr/bin/env bash
# Sets up, builds and runs every test: the Release build's full suite, then the concurrency
# tests under ThreadSanitizer. This is what CI runs (.ci/run).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
(cd build && ctest --output-on-failure -j 2)
bash scripts/check.sh tsan
