#!/usr/bin/env bash
# llama.cpp's `llama-server`, the engine of the home server, built from the llama.cpp that the
# locked llama-cpp-python vendors (its source package, fetched from the registry by pip and checked
# against uv.lock's sha256): the same llama.cpp as the `llamacpp` test stage, no other download.
# Built once per version into ${XDG_CACHE_HOME:-~/.cache}/enlace/ (about 10-15 min on 2 cores);
# prints the binary's path on stdout, everything else on stderr.
#
#   LLAMA_SERVER=$(scripts/build-llama-server.sh)
#   "$LLAMA_SERVER" -m enlace-chat.gguf --jinja --port 8080
set -euo pipefail
cd "$(dirname "$0")/.."
entry=$(grep -A12 '^name = "llama-cpp-python"$' uv.lock)
version=$(sed -n 's/^version = "\(.*\)"$/\1/p' <<<"$entry" | head -1)
sha256=$(sed -n 's/^sdist = .*hash = "sha256:\([0-9a-f]*\)".*/\1/p' <<<"$entry" | head -1)
[ -n "$version" ] && [ -n "$sha256" ] || { echo "llama-cpp-python's sdist is not in uv.lock" >&2; exit 1; }
cache="${XDG_CACHE_HOME:-$HOME/.cache}/enlace/llama-server-$version"
bin="$cache/build/bin/llama-server"
if [ ! -x "$bin" ]; then
  start=$SECONDS
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  python3 -m pip download --quiet --no-deps --no-binary :all: "llama-cpp-python==$version" -d "$work" >&2
  archive="$work/llama_cpp_python-$version.tar.gz"
  echo "$sha256  $archive" | sha256sum --check --quiet - >&2
  tar -xzf "$archive" -C "$work"
  rm -rf "$cache/build"
  cmake -S "$work/llama_cpp_python-$version/vendor/llama.cpp" -B "$cache/build" \
    -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF \
    -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=ON >&2
  cmake --build "$cache/build" --target llama-server -j "$(nproc)" >&2
  echo "built llama-server $version in $((SECONDS - start))s: $bin" >&2
fi
echo "$bin"
