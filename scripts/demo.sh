#!/usr/bin/env bash
# Sets up, builds and runs `npuflow demo`. Extra arguments go to the demo.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
exec ./build/apps/npuflow demo "$@"
