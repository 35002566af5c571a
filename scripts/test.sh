#!/usr/bin/env bash
# The single test entry of Enlace: what README.md names and what CI (.ci/run) runs.
#
# First it installs the system tools the stages need when any is missing (scripts/install-system-deps.sh:
# apt-get, through sudo when not root; where neither works it says what to install and stops), so on a
# fresh machine the README's two commands are the whole set-up. Then:
#
#   1. each package's own tests, in an environment that holds only that package, its declared
#      dependencies and its dev group (`uv run --exact --package`), so an undeclared dependency fails;
#   2. the cross-package tests in tests/, in the full workspace environment;
#   3. the promises: the slim packages' locks and wheels carry no torch, enlace-agent's wheel installs
#      with pip into a fresh environment without torch, enlace_model imports without the trainer;
#   4. the family web page in a real browser (the system's Chromium, headless: the tests marked
#      `browser`, deselected elsewhere), in enlace-agent's own environment;
#   5. lint (ruff) and types (pyright);
#   6. llamacpp: the GGUF export run by the real llama.cpp: llama-cpp-python (its Python code only,
#      installed in seconds into its own environment .venvs/llamacpp with the `llamacpp` group) over
#      the libllama of scripts/build-llama-server.sh (LLAMA_CPP_LIB_PATH), on two novels of the
#      shared data or, without them, on the smoke corpus built into enlace-data;
#   7. chat: scripts/chat-cpu.sh from nothing to a chat model (base smoke -> warm-up -> SFT, its time printed:
#      the README's target of 10 minutes), exported to GGUF, served by llama.cpp's llama-server and
#      asked a question through the assistant, which calls the search tool against a local fixture
#      page;
#   8. lm-eval: `enlace-train lm-eval` on a task defined from local files, in its own environment
#      .venvs/lm-eval with the optional `lm-eval` extra (datasets, transformers: too heavy for the
#      package's dev group). A missing lm_eval fails the stage instead of skipping the test.
# llama.cpp is compiled once per version for stages 6 and 7 (scripts/build-llama-server.sh: the
# server and the shared libraries into ~/.cache/enlace, ~10 min of CPU, then nothing).
#
# Usage: scripts/test.sh [stage ...]
#   stages: packages cross promises browser lint llamacpp chat lm-eval (default: all)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

if ! command -v uv >/dev/null 2>&1; then
  echo "scripts/test.sh: uv is not on PATH. Install it (curl -LsSf https://astral.sh/uv/install.sh | sh," \
    "or pipx install uv), open a new shell and run scripts/test.sh again." >&2
  exit 2
fi
bash scripts/install-system-deps.sh || {
  echo "scripts/test.sh: stopped before the stages: the system tools are not installed. Fix what the" \
    "lines above say, then run scripts/test.sh again (or scripts/install-system-deps.sh alone)." >&2
  exit 1
}

export UV_COMPILE_BYTECODE=1          # importing torch without bytecode costs seconds per process
if [ -z "${ENLACE_SHARED_DATA:-}" ] && [ -d ../shared/data ]; then
  ENLACE_SHARED_DATA=$(cd ../shared/data && pwd)
  export ENLACE_SHARED_DATA
fi
echo "ENLACE_SHARED_DATA=${ENLACE_SHARED_DATA:-<unset: tests that need shared data will skip>}"

packages=(enlace-config enlace-data enlace-agent enlace-model enlace-train)
timings=()
failed=()

run_stage() {  # run_stage NAME COMMAND...
  local name=$1; shift
  local start=$SECONDS
  echo
  echo "=== $name"
  if "$@"; then
    timings+=("$(printf '%-34s %4ds  ok' "$name" $((SECONDS - start)))")
  else
    timings+=("$(printf '%-34s %4ds  FAILED' "$name" $((SECONDS - start)))")
    failed+=("$name")
  fi
}

package_tests() {  # each package alone, exactly its own dependencies
  local pkg=$1 rc=0
  UV_PROJECT_ENVIRONMENT="$root/.venvs/$pkg" \
    uv run --locked --exact --package "$pkg" pytest "packages/$pkg" -q -p no:cacheprovider || rc=$?
  if [ "$rc" -eq 5 ]; then
    echo "$pkg collected no tests: every package must have tests" >&2
    return 1
  fi
  return "$rc"
}

cross_tests() {
  local rc=0
  uv run --locked pytest tests -q -p no:cacheprovider || rc=$?
  [ "$rc" -eq 5 ] && { echo "the cross-package tests collected nothing" >&2; return 1; }
  return "$rc"
}

promises() { bash scripts/check_promises.sh; }

browser_tests() {  # Chromium from scripts/install-system-deps.sh; a missing one fails, never skips
  UV_PROJECT_ENVIRONMENT="$root/.venvs/enlace-agent" \
    uv run --locked --exact --package enlace-agent \
    pytest packages/enlace-agent -m browser -q -p no:cacheprovider
}

llama_cpp() {  # the llama-server binary's path; its folder holds the shared libraries
  local start=$SECONDS server
  server=$(bash scripts/build-llama-server.sh) || return 1
  echo "llama.cpp ready in $((SECONDS - start))s (built once per version into ~/.cache/enlace)" >&2
  echo "$server"
}

llamacpp_tests() {
  local env="$root/.venvs/llamacpp" start rc=0 server
  server=$(llama_cpp) || return 1
  start=$SECONDS
  UV_PROJECT_ENVIRONMENT="$env" uv sync --locked --group llamacpp --quiet || return 1
  echo "llama-cpp-python (without a libllama of its own) installed in $((SECONDS - start))s"
  LLAMA_CPP_LIB_PATH=$(dirname "$server") UV_PROJECT_ENVIRONMENT="$env" \
    uv run --locked --group llamacpp \
    pytest tests/test_llamacpp.py -m llamacpp -q -rP -p no:cacheprovider || rc=$?
  [ "$rc" -eq 5 ] && { echo "the llama.cpp tests collected nothing" >&2; return 1; }
  return "$rc"
}

chat_tests() {  # the runs go to runs/test-chat, fresh each time
  local runs="$root/runs/test-chat" server
  rm -rf "$runs"
  server=$(llama_cpp) &&
    bash scripts/chat-cpu.sh --runs "$runs" --no-chat &&
    uv run --locked enlace-model export "$runs/sft-cpu" "$runs/chat-q8_0.gguf" --format gguf --type q8_0 &&
    ENLACE_GGUF_CHAT_MODEL="$runs/chat-q8_0.gguf" ENLACE_LLAMA_SERVER="$server" \
      UV_PROJECT_ENVIRONMENT="$root/.venvs/enlace-agent" \
      uv run --locked --exact --package enlace-agent pytest \
      packages/enlace-agent/tests/test_agent_assistant_cli.py -k real_gguf_model -q -p no:cacheprovider
}

lm_eval_tests() {
  local env="$root/.venvs/lm-eval"
  UV_PROJECT_ENVIRONMENT="$env" uv sync --locked --package enlace-train --extra lm-eval --quiet &&
    "$env/bin/python" -c "import lm_eval" &&
    UV_PROJECT_ENVIRONMENT="$env" uv run --locked --package enlace-train --extra lm-eval \
      pytest packages/enlace-train/tests/test_harness.py -q -p no:cacheprovider
}

lint() {
  uv run --locked ruff check . &&
    uv run --locked ruff format --check . &&
    uv run --locked pyright
}

stages=("$@")
[ ${#stages[@]} -eq 0 ] && stages=(packages cross promises browser lint llamacpp chat lm-eval)
for stage in "${stages[@]}"; do
  case "$stage" in
    packages) for pkg in "${packages[@]}"; do run_stage "tests: $pkg" package_tests "$pkg"; done ;;
    cross) run_stage "tests: cross-package (tests/)" cross_tests ;;
    promises) run_stage "promises (torch-free, importable)" promises ;;
    browser) run_stage "tests: web page in Chromium" browser_tests ;;
    lint) run_stage "lint + types" lint ;;
    llamacpp) run_stage "llama.cpp runs the GGUF export" llamacpp_tests ;;
    chat) run_stage "chat: CPU run -> GGUF -> assistant" chat_tests ;;
    lm-eval) run_stage "lm-eval on a local task" lm_eval_tests ;;
    *) echo "unknown stage: $stage (packages, cross, promises, browser, lint, llamacpp, chat, lm-eval)" >&2; exit 2 ;;
  esac
done

echo
echo "=== stage timings"
printf '%s\n' "${timings[@]}"
echo "total: ${SECONDS}s"
if [ ${#failed[@]} -gt 0 ]; then
  echo "FAILED: ${failed[*]}"
  exit 1
fi
echo "all stages passed"
