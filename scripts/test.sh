#!/usr/bin/env bash
# Sets up, builds and runs every test: the Release build's full suite (3 times, stopping at a
# failure), the concurrency tests under ThreadSanitizer (3 times), every test under
# AddressSanitizer + UBSan (the concurrency tests 3 times, the rest once), and every libFuzzer
# target for NPUFLOW_FUZZ_SECONDS (default 15) from its seeds and the corpus of earlier runs
# (scripts/fuzz.sh; each target counts as one test). This is what CI runs (.ci/run). Ends with
# one line "tests: N passed, M failed" over all four runs.
set -uo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh || exit 1

logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT
status=0
run() {  # run NAME COMMAND...: runs a step, keeps its output for the summary
  local name=$1; shift
  echo "=== $name"
  "$@" 2>&1 | tee "$logs/$name.log"
  local rc=${PIPESTATUS[0]}
  [ "$rc" -eq 0 ] || { echo "=== $name failed (exit $rc)"; status=1; }
}

run build bash scripts/build.sh
run release bash -c 'cd build && ctest --output-on-failure -j 2 --repeat until-fail:3'
run tsan bash scripts/check.sh tsan
run asan bash scripts/check.sh asan
run fuzz bash scripts/fuzz.sh all "${NPUFLOW_FUZZ_SECONDS:-15}"

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
