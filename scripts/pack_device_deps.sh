#!/usr/bin/env bash
# Packs the build dependencies the GPU lease machine lacks (it has cmake, ninja, nvcc and gcc,
# but no Debian dev packages) from this machine's packages into one prefix, .devdeps/:
# GoogleTest, Google Benchmark, nlohmann-json, PCRE2 (static), zlib (static) and the Boost
# headers the HTTP server includes (Asio, Beast: only their closure, ~4 MB of the 160 MB).
# Layout mirrors /usr so the copied CMake package files (which locate their prefix from their
# own path) stay valid:  include/, lib/x86_64-linux-gnu/{*.a,*.so*,cmake/}, share/cmake/.
#
#   scripts/pack_device_deps.sh [DEST]        (default: <repo>/.devdeps)
#
# Then pass `carry: [".devdeps"]` to the device run and use scripts/device_test.sh there,
# which configures with -DHS_DEPS_PREFIX=$PWD/.devdeps.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
dst=${1:-$root/.devdeps}
arch=x86_64-linux-gnu
lib=/usr/lib/$arch

need() { [ -e "$1" ] || { echo "pack_device_deps: missing $1 (install the Debian dev package)" >&2; exit 1; }; }
for f in /usr/include/gtest $lib/libgtest.a $lib/cmake/GTest /usr/include/benchmark $lib/cmake/benchmark \
         /usr/include/nlohmann /usr/share/cmake/nlohmann_json /usr/include/pcre2.h $lib/libpcre2-8.a \
         /usr/include/boost/beast.hpp $lib/cmake/Boost-1.74.0 /usr/include/zlib.h $lib/libz.a; do
  need "$f"
done

rm -rf "$dst"
mkdir -p "$dst/include" "$dst/lib/$arch/cmake" "$dst/share/cmake"

# GoogleTest + GoogleMock: headers, static libraries, CMake package.
cp -r /usr/include/gtest "$dst/include/"
[ -d /usr/include/gmock ] && cp -r /usr/include/gmock "$dst/include/"
cp "$lib"/libgtest*.a "$dst/lib/$arch/"
ls "$lib"/libgmock*.a >/dev/null 2>&1 && cp "$lib"/libgmock*.a "$dst/lib/$arch/"
cp -r "$lib/cmake/GTest" "$dst/lib/$arch/cmake/"

# Google Benchmark (Debian ships it shared): headers, libraries, CMake package.
cp -r /usr/include/benchmark "$dst/include/"
cp -P "$lib"/libbenchmark* "$dst/lib/$arch/"
cp -r "$lib/cmake/benchmark" "$dst/lib/$arch/cmake/"

# nlohmann-json: header-only, plus its CMake package.
cp -r /usr/include/nlohmann "$dst/include/"
cp -r /usr/share/cmake/nlohmann_json "$dst/share/cmake/"

# PCRE2 (8-bit code units): header and the static library only, so the link is static.
cp /usr/include/pcre2.h "$dst/include/"
cp "$lib/libpcre2-8.a" "$dst/lib/$arch/"
cp "$lib/libpcre2-8.a" "$dst/lib/"  # also where find_library looks without a library architecture

# Boost: the headers the server's sources include, found by the compiler (g++ -M), and the
# CMake package (its include directory is found relative to it: ../../../include).
for f in request_reader http_connection http_server; do
  g++ -std=c++20 -M -I"$root/src" -DBOOST_ASIO_NO_DEPRECATED "$root/src/server/$f.cpp"
done | tr ' \\' '\n\n' | grep '^/usr/include/boost/' | sort -u | while read -r h; do
  mkdir -p "$dst/include/$(dirname "${h#/usr/include/}")"
  cp "$h" "$dst/include/${h#/usr/include/}"
done
cp -r "$lib/cmake/Boost-1.74.0" "$lib/cmake/boost_headers-1.74.0" "$lib/cmake/BoostDetectToolset-1.74.0.cmake" "$dst/lib/$arch/cmake/"

# zlib (request bodies with Content-Encoding gzip/deflate): headers and the static library.
cp /usr/include/zlib.h "$dst/include/"
cp "$(dirname "$(readlink -f /usr/include/zlib.h)")/zconf.h" "$dst/include/" 2>/dev/null || cp /usr/include/$arch/zconf.h "$dst/include/"
cp "$lib/libz.a" "$dst/lib/$arch/"
cp "$lib/libz.a" "$dst/lib/"

# Keep the packed tree out of git (it is also in .gitignore).
exclude="$root/.git/info/exclude"
if [ -d "$root/.git" ]; then
  mkdir -p "$root/.git/info"
  grep -qxF '/.devdeps/' "$exclude" 2>/dev/null || echo '/.devdeps/' >>"$exclude"
fi

du -sh "$dst" | awk '{print "pack_device_deps: " $1 " in " $2}'
