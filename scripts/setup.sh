#!/usr/bin/env bash
# Installs everything hyperstream's build and tests need on Debian 12 (idempotent; quiet
# when everything is already there). Run as root or with sudo available.
#   scripts/setup.sh          the build and the test suite
#   scripts/setup.sh --fuzz   also clang and libFuzzer (compiler-rt) for tests/fuzz (docs/fuzzing.md)
set -euo pipefail
cd "$(dirname "$0")/.."

APT_PACKAGES=(
  build-essential cmake ninja-build pkg-config
  libgtest-dev libgmock-dev libbenchmark-dev
  nlohmann-json3-dev libpcre2-dev
  libboost-dev zlib1g-dev  # the HTTP server (Boost.Asio/Beast, header-only) and its gzip/deflate request bodies
  iproute2 util-linux  # ip and unshare: the agent-CLI tests run in a loopback-only network namespace
)

if [ "${1:-}" = "--fuzz" ]; then
  APT_PACKAGES+=(clang libclang-rt-14-dev)  # Debian 12: clang 14; libFuzzer is in compiler-rt
fi

missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
command -v node >/dev/null 2>&1 || missing+=(nodejs)
command -v npm >/dev/null 2>&1 || missing+=(npm)

if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# npm packages for the JavaScript tests (outside oracles and API clients), pinned by the
# lock file. Reinstalled only when package-lock.json changed.
if [ -f tests/node/package.json ]; then
  stamp=tests/node/node_modules/.hs-installed
  if [ ! -f "$stamp" ] || [ tests/node/package-lock.json -nt "$stamp" ] || [ tests/node/package.json -nt "$stamp" ]; then
    echo "setup: installing npm packages for tests/node"
    if [ -f tests/node/package-lock.json ]; then
      (cd tests/node && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
    else
      (cd tests/node && npm install --no-audit --no-fund --loglevel=error >/dev/null)
    fi
    touch "$stamp"
  fi
fi
