#!/usr/bin/env bash
# Sets up, builds and runs every test: the Release build's full suite (3 times, stopping at a
# failure), the concurrency tests under ThreadSanitizer (3 times), every test but the "cli" ones
# under AddressSanitizer + UBSan (the concurrency tests 3 times, the rest once), and every libFuzzer
# target for NPUFLOW_FUZZ_SECONDS (default 15) from its seeds and the corpus of earlier runs
# (scripts/fuzz.sh, built in the ASan tree; each target counts as one test). This is what CI runs
# (.ci/run). Ends with one line "tests: N passed, M failed" over all four runs.
set -uo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh || exit 1

logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT
status=0
run() {  # run NAME COMMAND...: runs a step, keeps its output for the summary
  local name=$1; shift
  echo "=== $name"
  local start=$SECONDS
  "$@" 2>&1 | tee "$logs/$name.log"
  local rc=${PIPESTATUS[0]}
  echo "=== $name took $((SECONDS - start)) s"
  [ "$rc" -eq 0 ] || { echo "=== $name failed (exit $rc)"; status=1; }
}

# Each build directory takes 0.3-1.5 GB. When the disk runs short (below NPUFLOW_MIN_FREE_MB,
# default 4096, free), a step's build directory is removed once its tests have run, so the next
# build has room; with room to spare every build stays for the next run.
min_free_mb=${NPUFLOW_MIN_FREE_MB:-4096}
free_mb() { df -Pm . | awk 'NR == 2 { print $4 }'; }
done_with() {  # done_with DIR: a finished step's build directory, removed only when space is short
  local free; free=$(free_mb)
  echo "=== disk: ${free} MB free"
  if [ "$free" -lt "$min_free_mb" ] && [ -d "$1" ]; then
    echo "=== disk: below ${min_free_mb} MB, removing $1 (rebuilt by the next run)"
    rm -rf "$1"
  fi
}

run build bash scripts/build.sh
run release bash -c 'cd build && ctest --output-on-failure -j 2 --repeat until-fail:3'
done_with build
run tsan bash scripts/check.sh tsan
done_with build-tsan
run asan bash scripts/check.sh asan
# The fuzz targets build in the ASan tree (clang, the same instrumented libraries), not a tree of
# their own.
run fuzz env NPUFLOW_FUZZ_BUILD_DIR=build-asan bash scripts/fuzz.sh all "${NPUFLOW_FUZZ_SECONDS:-15}"
done_with build-asan

passed=0; failed=0
for f in "$logs"/release.log "$logs"/tsan.log "$logs"/asan.log; do
  lines=$(grep -E '^[0-9]+% tests passed, [0-9]+ tests? failed out of [0-9]+' "$f")
  if [ -z "$lines" ]; then failed=$((failed + 1)); continue; fi  # a run that never reached ctest
  while read -r line; do  # a step may run ctest more than once (asan: repeated, then once)
    total=$(echo "$line" | sed -E 's/.*out of ([0-9]+).*/\1/')
    bad=$(echo "$line" | sed -E 's/.* ([0-9]+) tests? failed.*/\1/')
    passed=$((passed + total - bad)); failed=$((failed + bad))
  done <<< "$lines"
done
# The fuzz step's own count: one test per target.
line=$(grep -E '^fuzz: [0-9]+ targets passed, [0-9]+ failed' "$logs/fuzz.log" | tail -1)
if [ -z "$line" ]; then
  failed=$((failed + 1))  # it never ran a target (setup or build failed)
else
  passed=$((passed + $(echo "$line" | sed -E 's/^fuzz: ([0-9]+) targets.*/\1/')))
  failed=$((failed + $(echo "$line" | sed -E 's/.* ([0-9]+) failed$/\1/')))
fi
[ "$failed" -eq 0 ] || status=1
echo "tests: $passed passed, $failed failed"
exit $status
