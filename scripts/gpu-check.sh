#!/usr/bin/env bash
# The GPU check: every CUDA path of the trainer on a lent GPU in under 8 minutes (README, "GPU check").
#
#   scripts/gpu-check.sh --prepare           here, where uv and PyPI are reachable: build the project's
#                                            wheels and download the dependencies a GPU machine that
#                                            already has torch may lack into gpu-wheels/ (git-ignored)
#   scripts/gpu-check.sh [--out DIR] [--budget-s S]
#                                            on the GPU machine (no registry needed): install from
#                                            gpu-wheels/ into a venv over the machine's own torch, then
#                                            run scripts/gpu_check.py's checks, print one table and
#                                            write DIR/gpu-check.json (DIR: gpu-check-out)
#
# GPU_CHECK_PYTHON (default python3) must import torch; without gpu-wheels/ the install is skipped and
# it must import the project too (here: GPU_CHECK_PYTHON=.venv/bin/python, after uv sync); without
# CUDA every GPU check is skipped with its reason (the CPU test runs that path).
# Environment: GPU_CHECK_PYTHON (the Python to install over), GPU_CHECK_WHEELS (the wheel folder,
# default gpu-wheels), GPU_CHECK_PY_VERSION (the GPU machine's Python for --prepare, default 3.12).
set -euo pipefail
cd "$(dirname "$0")/.."

WHEELS=${GPU_CHECK_WHEELS:-gpu-wheels}
VENV=.gpu-venv
PYTHON=${GPU_CHECK_PYTHON:-python3}
PY_VERSION=${GPU_CHECK_PY_VERSION:-3.12}
PACKAGES=(enlace-config enlace-data enlace-model enlace-train)

prepare() {
  rm -rf "$WHEELS"
  mkdir -p "$WHEELS"
  for pkg in "${PACKAGES[@]}"; do
    uv build --quiet --package "$pkg" --wheel --no-sources --out-dir "$WHEELS"
  done
  # The trainer's third-party dependencies from the lock, without torch and what only torch needs
  # (the GPU machine's own torch is used) and without numpy (there too; 16 MB, and its lock lines
  # are split by Python version, which pip would judge by this machine's Python), as wheels for
  # that machine's Python.
  uv export --frozen --package enlace-train --no-dev --no-emit-workspace --no-hashes \
    --prune torch --prune numpy \
    >"$WHEELS/requirements.txt"
  uvx --from pip pip download --quiet --no-deps --only-binary=:all: --dest "$WHEELS" \
    --python-version "$PY_VERSION" --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 --platform any \
    -r "$WHEELS/requirements.txt"
  rm "$WHEELS/requirements.txt"
  echo "gpu-wheels/: $(find "$WHEELS" -name '*.whl' | wc -l) wheels, $(du -sh "$WHEELS" | cut -f1)"
  echo "on the GPU machine: bash scripts/gpu-check.sh --out DIR   (with gpu-wheels/ carried along)"
}

install_row() {  # install_row STATUS DETAIL SECONDS -> the install step's row as JSON
  "$PYTHON" -c 'import json, sys
print(json.dumps({"check": "install from gpu-wheels/", "status": sys.argv[1],
                  "detail": sys.argv[2], "seconds": float(sys.argv[3])}))' "$@"
}

need() {  # need MODULE...: $PYTHON imports them all, or one line naming the Python to use; exit 2
  "$PYTHON" -c 'import importlib.util as u, sys
sys.exit(any(u.find_spec(m) is None for m in sys.argv[1:]))' "$@" 2>/dev/null && return
  local IFS=,
  echo "gpu-check: $PYTHON cannot import $*: the check needs a Python with torch (and, without $WHEELS/, the project); here use the project's environment: GPU_CHECK_PYTHON=.venv/bin/python bash scripts/gpu-check.sh (after uv sync)" >&2
  exit 2
}

install() {  # sets PY (the Python the checks run with) and ROW
  local start=$SECONDS
  if [ ! -d "$WHEELS" ]; then
    need torch enlace_train
    PY=$PYTHON
    ROW=$(install_row skip "skipped: no $WHEELS/ (run scripts/gpu-check.sh --prepare where PyPI is reachable); checks run with $PYTHON as it is" 0)
    return
  fi
  need torch
  rm -rf "$VENV"
  "$PYTHON" -m venv --system-site-packages "$VENV"
  # The machine's torch, numpy, ... stay in use. When $PYTHON is itself a venv (the H200's is), the
  # new venv sees only the base interpreter's packages, so $PYTHON's own site-packages are added
  # after the new venv's (what is installed here wins) with site.addsitedir, .pth files included.
  "$PYTHON" -c 'import site, sys
dirs = [d for d in site.getsitepackages() if d.endswith("-packages")]
print("import site; " + "; ".join(f"site.addsitedir({d!r})" for d in dirs))' \
    >"$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')/_gpu_check_parent.pth"
  # --no-deps: the folder holds exactly what is missing (prepare pruned torch's side of the lock), and
  # pip would otherwise re-judge the machine's torch against its own requirements. The import after
  # it is the proof that nothing is missing.
  if PIP_CONFIG_FILE=/dev/null "$VENV/bin/python" -m pip install --quiet --no-index --no-deps \
    "$WHEELS"/*.whl &&
    "$VENV/bin/python" -c 'import enlace_config, enlace_data, enlace_model, enlace_train, torch'; then
    PY=$VENV/bin/python
    ROW=$(install_row pass "${PACKAGES[*]} and missing dependencies into $VENV (system torch $("$PY" -c 'import torch; print(torch.__version__)'))" $((SECONDS - start)))
  else
    echo "gpu-check: the install from $WHEELS/ failed (rerun --prepare for this machine's Python?)" >&2
    exit 1
  fi
}

case "${1:-}" in
  --prepare) prepare ;;
  -h | --help) awk 'NR > 1 && !/^#/ { exit } NR > 1' "$0" ;;
  *)
    install
    exec "$PY" scripts/gpu_check.py --install-row "$ROW" --out gpu-check-out "$@"
    ;;
esac
