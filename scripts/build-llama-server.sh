#!/usr/bin/env bash
# llama.cpp, built once per version for both of its uses: the `llama-server` binary (the engine of
# the home server and of the `chat` test stage) and the shared libraries (libllama, libggml*) that the
# Python binding llama-cpp-python loads in the `llamacpp` test stage (it is installed without a
# native build of its own: LLAMA_BUILD=OFF in pyproject's [tool.uv], LLAMA_CPP_LIB_PATH at run time).
# The source is the llama.cpp that the locked llama-cpp-python vendors (its source package, fetched
# from the registry by pip and checked against uv.lock's sha256), so the binding's ctypes
# declarations and the libraries always come from the same commit; no other download.
# Built into ${XDG_CACHE_HOME:-~/.cache}/enlace/llama.cpp-VERSION/ (9-10 min of CPU, 15-19 min on 2
# busy cores; then nothing); prints the binary's path on stdout (the libraries lie next to it), the rest
# on stderr.
#
#   LLAMA_SERVER=$(scripts/build-llama-server.sh)
#   "$LLAMA_SERVER" -m enlace-chat.gguf --jinja --port 8080
#   LLAMA_CPP_LIB_PATH=$(dirname "$LLAMA_SERVER") uv run --group llamacpp python -m llama_cpp.server ...
set -euo pipefail
cd "$(dirname "$0")/.."
entry=$(grep -A12 '^name = "llama-cpp-python"$' uv.lock)
version=$(sed -n 's/^version = "\(.*\)"$/\1/p' <<<"$entry" | head -1)
sha256=$(sed -n 's/^sdist = .*hash = "sha256:\([0-9a-f]*\)".*/\1/p' <<<"$entry" | head -1)
[ -n "$version" ] && [ -n "$sha256" ] || { echo "llama-cpp-python's sdist is not in uv.lock" >&2; exit 1; }
cache="${XDG_CACHE_HOME:-$HOME/.cache}/enlace/llama.cpp-$version"
bin="$cache/build/bin/llama-server"
# Shared libraries, so the binding loads the very libllama the server links. RUNPATH $ORIGIN (as
# llama-cpp-python's own build does): the server finds them beside it and nowhere else (CMake's
# default build RPATH ends in an empty entry, which searches the current directory).
options=(-DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=ON -DGGML_NATIVE=ON -DGGML_CUDA=OFF
  -DGGML_BLAS=OFF -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF
  -DLLAMA_BUILD_SERVER=ON -DCMAKE_BUILD_WITH_INSTALL_RPATH=ON '-DCMAKE_INSTALL_RPATH=$ORIGIN')
if [ "$(uname -m)" = x86_64 ]; then
  # No AMX: on a Xeon that has it (-march=native turns it on), ggml's AMX kernel for q8_0 died with
  # SIGILL at its first tileloadd in a virtual machine like CI's, and a home server's CPU gains
  # nothing from it. GCC and Clang keep an explicit -mno-* over -march=native's set.
  no_amx="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
  options+=("-DCMAKE_C_FLAGS=$no_amx" "-DCMAKE_CXX_FLAGS=$no_amx")
fi
# The build remembers the options it was made with: a cached build made otherwise is made again.
recipe=$(printf '%s\n' "${options[@]}" | sha256sum | cut -c1-16)
built() {
  [ -x "$bin" ] && [ -f "$cache/build/bin/libllama.so" ] &&
    [ "$(cat "$cache/build/enlace-recipe" 2>/dev/null)" = "$recipe" ]
}
if ! built; then
  # One build at a time per version (two test stages, a developer beside CI, two installs): a second
  # run waits here, then finds the binary; without the lock its `rm -rf build` pulled the folder from
  # under the first one's compiler (tests/test_build_llama_server.py).
  mkdir -p "$cache"
  exec 9>"$cache.lock"
  flock 9
fi
if ! built; then
  start=$SECONDS
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  # pip through uv (a fresh Debian's python3 has no pip); pip, not uv, because uv downloads no sdist.
  uvx --quiet --from pip pip download --quiet --no-deps --no-binary :all: \
    "llama-cpp-python==$version" -d "$work" >&2
  archive="$work/llama_cpp_python-$version.tar.gz"
  echo "$sha256  $archive" | sha256sum --check --quiet - >&2
  tar -xzf "$archive" -C "$work"
  rm -rf "$cache/build"
  cmake -S "$work/llama_cpp_python-$version/vendor/llama.cpp" -B "$cache/build" "${options[@]}" >&2
  cmake --build "$cache/build" --target llama-server llama -j "$(nproc)" >&2
  echo "$recipe" > "$cache/build/enlace-recipe"
  echo "built llama.cpp $version (llama-server, libllama) in $((SECONDS - start))s: $bin" >&2
fi
echo "$bin"
