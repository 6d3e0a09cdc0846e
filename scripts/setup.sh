#!/usr/bin/env bash
# Installs the Debian packages npuflow needs, only those missing. Safe to run again.
# Runs apt-get as root, or through sudo.
set -euo pipefail

PACKAGES=(
  g++ cmake ninja-build pkg-config
  libtbb-dev                                      # oneTBB: flow graph, task arena
  libboost-dev libboost-fiber-dev libboost-context-dev   # Boost headers (lockfree), fiber, context
  libprotobuf-dev protobuf-compiler               # model file format
  libssl-dev                                      # SHA-256, AES-GCM
  libspdlog-dev libfmt-dev                        # logging
  libcli11-dev nlohmann-json3-dev                 # command line, JSON
  libgtest-dev libgmock-dev libbenchmark-dev      # tests and benchmarks
  libcaf-dev libopenblas-dev                      # peers the benchmarks measure in the same run (not the product)
  clang libclang-rt-14-dev                        # the ASan tree and libFuzzer (check.sh, fuzz.sh)
)

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#PACKAGES[@]} packages present"
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then SUDO="sudo"; else
    echo "setup: need root or sudo to install: ${missing[*]}" >&2
    exit 1
  fi
fi
echo "setup: installing ${missing[*]}"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
