#!/usr/bin/env bash
# Runs the libFuzzer targets (tests/fuzz/, docs/fuzzing.md):
#   scripts/fuzz.sh list                      the targets
#   scripts/fuzz.sh TARGET SECONDS [--json]   one target for SECONDS
#   scripts/fuzz.sh all SECONDS [--json]      every target, SECONDS each
# Sets up (scripts/setup.sh), configures and builds build-fuzz/ with clang when needed, writes the
# seed corpora and dictionaries (build-fuzz/fuzz/seeds, dicts), then runs each target with
# -max_total_time. Inputs that find new coverage accumulate in build-fuzz/fuzz/corpus/TARGET/
# across runs; a crash, timeout, leak or out-of-memory input is kept in
# build-fuzz/fuzz/crashes/TARGET/ and the run fails (exit 1). Prints runs and exec/s per target,
# and at the end "fuzz: N targets passed, M failed". With --json, stdout has only one line per
# target: {"target", "seconds", "runs", "exec_per_s", "crashes", "crash_dir"}; the rest goes to
# stderr.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
BUILD=${NPUFLOW_FUZZ_BUILD_DIR:-build-fuzz}
TARGETS=(ggml om om_encrypted graph_text meta_json value_bin)

usage() {
  echo "usage: scripts/fuzz.sh list | TARGET SECONDS [--json] | all SECONDS [--json]" >&2
  echo "targets: ${TARGETS[*]}" >&2
  exit 2
}

[ $# -ge 1 ] || usage
if [ "$1" = list ]; then
  printf '%s\n' "${TARGETS[@]}"
  exit 0
fi
[ $# -ge 2 ] || usage
which=$1 seconds=$2 json=0
[ $# -le 3 ] || usage
if [ $# -eq 3 ]; then [ "$3" = --json ] && json=1 || usage; fi
[[ "$seconds" =~ ^[1-9][0-9]*$ ]] || { echo "fuzz.sh: SECONDS must be a positive integer, got '$seconds'" >&2; exit 2; }
if [ "$which" = all ]; then
  run_targets=("${TARGETS[@]}")
else
  known=0
  for t in "${TARGETS[@]}"; do [ "$t" = "$which" ] && known=1; done
  [ $known -eq 1 ] || { echo "fuzz.sh: unknown target '$which'" >&2; usage; }
  run_targets=("$which")
fi

# Human-readable output: stdout, or stderr when stdout is for JSON.
say() { if [ $json -eq 1 ]; then echo "$@" >&2; else echo "$@"; fi; }

bash scripts/setup.sh >&2 || exit 1

# The ASan tree (NPUFLOW_FUZZ_BUILD_DIR=build-asan, as CI runs it) holds the targets when
# scripts/check.sh asan configured it with clang; this script never configures that tree itself.
asan_tree=0
if [ "$(basename "$BUILD")" = build-asan ] ||
   { [ -f "$BUILD/CMakeCache.txt" ] && grep -q '^NPUFLOW_SANITIZER:STRING=address$' "$BUILD/CMakeCache.txt"; }; then
  asan_tree=1
fi
if [ $asan_tree -eq 1 ]; then
  if [ ! -f "$BUILD/build.ninja" ] || ! grep -q '^CMAKE_CXX_COMPILER:[A-Z]*=.*clang++' "$BUILD/CMakeCache.txt" ||
     ! grep -q '^NPUFLOW_SANITIZER:STRING=address$' "$BUILD/CMakeCache.txt"; then
    echo "fuzz.sh: $BUILD is not a clang ASan tree with the fuzz targets: run 'bash scripts/check.sh asan' first (it configures one)" >&2
    exit 1
  fi
elif [ ! -f "$BUILD/build.ninja" ]; then
  CC=clang CXX=clang++ cmake -S . -B "$BUILD" -G Ninja -DNPUFLOW_FUZZ=ON -DNPUFLOW_NATIVE=OFF \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1" >&2 || exit 1
fi
build_targets=(npuflow_fuzz_seeds)
for t in "${run_targets[@]}"; do build_targets+=("fuzz_$t"); done
cmake --build "$BUILD" -j "$(nproc)" --target "${build_targets[@]}" >&2 || exit 1

case "$BUILD" in /*) out="$BUILD/fuzz" ;; *) out="$ROOT/$BUILD/fuzz" ;; esac
mkdir -p "$out/logs"
"$BUILD/tests/fuzz/npuflow_fuzz_seeds" "$out" >&2 || exit 1

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1}
passed=0 failed=0
for t in "${run_targets[@]}"; do
  corpus="$out/corpus/$t" crashes="$out/crashes/$t" log="$out/logs/$t.log"
  mkdir -p "$corpus" "$crashes"
  marker=$(mktemp)
  say "=== fuzz $t: $seconds s (corpus $BUILD/fuzz/corpus/$t, log $BUILD/fuzz/logs/$t.log)"
  # -timeout: an input that takes 10 s is a hang. -rss_limit_mb: libFuzzer's default, written
  # out; an input that needs more is an out-of-memory crash (a reader must check sizes first).
  "$BUILD/tests/fuzz/fuzz_$t" -max_total_time="$seconds" -print_final_stats=1 -timeout=10 -rss_limit_mb=2048 \
    -dict="$out/dicts/$t.dict" -artifact_prefix="$crashes/" "$corpus" "$out/seeds/$t" >"$log" 2>&1
  rc=$?
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
  found=$(find "$crashes" -maxdepth 1 -type f -newer "$marker" \
          \( -name 'crash-*' -o -name 'leak-*' -o -name 'timeout-*' -o -name 'oom-*' \) | sort)
  rm -f "$marker"
  crash_count=$(printf '%s' "$found" | grep -c . || true)
  if [ "$rc" -ne 0 ] && [ "$crash_count" -eq 0 ]; then crash_count=1; fi  # died without an artifact
  say "fuzz $t: ${runs:-0} runs in $seconds s, ${rate:-0} exec/s, $crash_count crashes"
  if [ "$crash_count" -eq 0 ]; then
    passed=$((passed + 1))
    # libFuzzer adds every input that found something and never removes one. Past 1000 files, and
    # twice as many as the last merge left, the corpus is merged down to the inputs that still add
    # coverage (the next run loads them all).
    kept="$out/corpus/$t.merged-size"
    limit=$(( $(cat "$kept" 2>/dev/null || echo 0) * 2 ))
    [ "$limit" -ge 1000 ] || limit=1000
    if [ "$(find "$corpus" -maxdepth 1 -type f | wc -l)" -gt "$limit" ]; then
      rm -rf "$corpus.merged" && mkdir -p "$corpus.merged"
      if "$BUILD/tests/fuzz/fuzz_$t" -merge=1 -timeout=10 -rss_limit_mb=2048 "$corpus.merged" "$corpus" \
           >>"$log" 2>&1; then
        rm -rf "$corpus" && mv "$corpus.merged" "$corpus"
        find "$corpus" -maxdepth 1 -type f | wc -l >"$kept"
        say "fuzz $t: corpus merged to $(cat "$kept") inputs"
      else
        rm -rf "$corpus.merged"
      fi
    fi
  else
    failed=$((failed + 1))
    say "fuzz $t FAILED (exit $rc); the end of $BUILD/fuzz/logs/$t.log:"
    tail -n 40 "$log" | if [ $json -eq 1 ]; then cat >&2; else cat; fi
    for f in $found; do say "  kept: ${f#"$ROOT"/}   reproduce: $BUILD/tests/fuzz/fuzz_$t ${f#"$ROOT"/}"; done
  fi
  if [ $json -eq 1 ]; then
    printf '{"target": "%s", "seconds": %s, "runs": %s, "exec_per_s": %s, "crashes": %s, "crash_dir": "%s"}\n' \
      "$t" "$seconds" "${runs:-0}" "${rate:-0}" "$crash_count" "$BUILD/fuzz/crashes/$t"
  fi
done
say "fuzz: $passed targets passed, $failed failed"
[ "$failed" -eq 0 ]
