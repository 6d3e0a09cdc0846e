#!/usr/bin/env bash
# Sets up, builds and runs every test: the Release build's full suite (3 times, stopping at a
# failure), the concurrency tests under ThreadSanitizer (3 times), and every test under
# AddressSanitizer + UBSan (the concurrency tests 3 times, the rest once). This is what CI runs
# (.ci/run). Ends with one line "tests: N passed, M failed" over all three runs.
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
[ "$failed" -eq 0 ] || status=1
echo "tests: $passed passed, $failed failed"
exit $status
