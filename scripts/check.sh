#!/usr/bin/env bash
# Sanitizer builds, each in its own directory:
#   scripts/check.sh asan   AddressSanitizer + UBSan (clang), every test not labelled cli (build-asan/)
#   scripts/check.sh tsan   ThreadSanitizer, the concurrency tests       (build-tsan/)
# ThreadSanitizer only sees synchronization in instrumented code, so the tsan variant builds
# oneTBB itself with -fsanitize=thread from Debian's source package (once; cached).
# Both build at -O1 with line tables only (-g1; the ASan tree's test files at -O0, see
# cmake/npuflow.cmake): stack reports keep file:line, and the builds take about half the time of
# -O2 -g (ASan + UBSan at -O2 -g was 29 of CI's 60 minutes). The layer
# libraries are unity builds (NPUFLOW_UNITY), and the tests run two at a time.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
variant=${1:-}
repeat=${NPUFLOW_CHECK_REPEAT:-3}
# Tests at a time (NPUFLOW_CHECK_JOBS, default 2, as the Release run): each test's actor system
# starts a worker per core, so on a many-core machine "one per core" would multiply threads and
# sanitizer memory by the core count.
jobs=${NPUFLOW_CHECK_JOBS:-2}
flags="-O1 -g1 -DNDEBUG"

bash scripts/setup.sh

case "$variant" in
  asan)
    # With clang (see CMakeLists.txt): every UBSan check at GCC's compile cost without two of them,
    # and the same tree builds the libFuzzer targets (scripts/test.sh runs them from here). A tree
    # configured with another compiler (an older checkout), or as a fuzz-only tree, starts over.
    if [ -f build-asan/CMakeCache.txt ] && { ! grep -q '^CMAKE_CXX_COMPILER:[A-Z]*=.*clang++' build-asan/CMakeCache.txt ||
                                             grep -q '^NPUFLOW_FUZZ:BOOL=ON$' build-asan/CMakeCache.txt; }; then
      rm -rf build-asan
    fi
    CC=clang CXX=clang++ cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DNPUFLOW_SANITIZER=address \
      -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="$flags" -DNPUFLOW_NATIVE=OFF -DNPUFLOW_UNITY=ON >/dev/null
    # Every test but those labelled "cli" (they run the built programs as processes; the Release
    # run has them), so the apps and the benchmark library are not built here.
    targets=$(cd build-asan && ctest -N -LE '^cli$' | sed -n 's/^ *Test *#[0-9]*: *//p' | sed 's/_caller_path$//' | sort -u)
    cmake --build build-asan -j "$(nproc)" --target $targets
    export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1
    export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
    # Repetition hunts races, so the concurrency tests run $repeat times; the rest (single-threaded
    # code) run once. $jobs tests at a time.
    status=0
    (cd build-asan && ctest --output-on-failure -j "$jobs" -L '^concurrency$' -LE '^cli$' --repeat until-fail:"$repeat") || status=1
    (cd build-asan && ctest --output-on-failure -j "$jobs" -LE '^(concurrency|cli)$') || status=1
    exit $status
    ;;
  tsan)
    tbb_version=$(dpkg-query -W -f='${source:Version}' libtbb-dev)
    cache=${NPUFLOW_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/npuflow}
    tbb_prefix="$cache/onetbb-tsan-$tbb_version"
    if [ ! -f "$tbb_prefix/lib/cmake/TBB/TBBConfig.cmake" ]; then
      bash scripts/fetch-tbb-source.sh "$cache/src"
      src=$(find "$cache/src" -maxdepth 1 -type d -name 'oneTBB-*' | head -1)
      cmake -S "$src" -B "$cache/onetbb-tsan-build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
        -DTBB_TEST=OFF -DTBB_EXAMPLES=OFF -DTBB_STRICT=OFF -DTBBMALLOC_BUILD=OFF \
        -DTBB_SANITIZE=thread -DCMAKE_INSTALL_PREFIX="$tbb_prefix" >/dev/null
      cmake --build "$cache/onetbb-tsan-build" -j "$(nproc)" 2>&1 | grep -v -- '-Wtsan' | grep -E 'error|FAILED' || true
      cmake --install "$cache/onetbb-tsan-build" >/dev/null
    fi
    cmake -S . -B build-tsan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DNPUFLOW_SANITIZER=thread \
      -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="$flags" -DNPUFLOW_NATIVE=OFF -DNPUFLOW_UNITY=ON -DTBB_DIR="$tbb_prefix/lib/cmake/TBB" >/dev/null
    # Only the concurrency tests run here, so only their binaries are built.
    targets=$(cd build-tsan && ctest -N -L concurrency | sed -n 's/^ *Test *#[0-9]*: *//p')
    cmake --build build-tsan -j "$(nproc)" --target $targets
    export TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 suppressions=$ROOT/scripts/tsan.supp"
    (cd build-tsan && ctest --output-on-failure -j "$jobs" -L concurrency --repeat until-fail:"$repeat")
    ;;
  *)
    echo "usage: scripts/check.sh asan|tsan" >&2
    exit 2
    ;;
esac
