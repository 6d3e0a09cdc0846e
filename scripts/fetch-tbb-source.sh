#!/usr/bin/env bash
# Fetches Debian's oneTBB source package (the version libtbb-dev has) into DIR and unpacks the
# upstream tree. Adds a deb-src entry for the configured Debian mirror if there is none.
set -euo pipefail
dest=${1:?usage: fetch-tbb-source.sh DIR}
mkdir -p "$dest"
SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
if ! apt-get source --print-uris onetbb >/dev/null 2>&1 || \
   [ -z "$(apt-get source --print-uris onetbb 2>/dev/null | grep orig)" ]; then
  list=/etc/apt/sources.list.d/npuflow-deb-src.sources
  if [ ! -f "$list" ]; then
    uri=$(grep -h '^URIs:' /etc/apt/sources.list.d/debian.sources 2>/dev/null | head -1 | awk '{print $2}')
    uri=${uri:-http://deb.debian.org/debian}
    codename=$(. /etc/os-release && echo "$VERSION_CODENAME")
    $SUDO tee "$list" >/dev/null <<SRC
Types: deb-src
URIs: $uri
Suites: $codename $codename-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
  fi
  $SUDO apt-get update -qq
fi
version=$(dpkg-query -W -f='${source:Version}' libtbb-dev)
cd "$dest"
apt-get source --download-only -qq "onetbb=$version" 2>&1 | grep -v 'unsandboxed' || true
tar xf onetbb_*.orig.tar.* 
