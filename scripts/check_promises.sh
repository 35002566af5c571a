#!/usr/bin/env bash
# The promises that unit tests cannot see, checked from the cheapest to the most real:
#   - the locked dependency trees of the slim packages hold no torch and no nvidia wheel;
#   - their built wheels declare no torch;
#   - enlace-agent's wheel installs with pip into a fresh virtual environment without torch and
#     imports there (and `import torch` fails there);
#   - enlace_model imports (and runs a forward pass) in an environment without enlace-train and
#     enlace-data.
# Our siblings always come from the locally built dist/, never from the package index: some enlace-*
# names there belong to a third party.
set -euo pipefail
cd "$(dirname "$0")/.."
fail() { echo "PROMISE BROKEN: $*" >&2; exit 1; }

echo "-- locked dependency trees"
for pkg in enlace-config enlace-agent enlace-data; do
  if uv export --locked --package "$pkg" --no-dev --no-hashes --no-emit-workspace \
      | grep -iE '^(torch|nvidia|triton)'; then
    fail "$pkg's locked dependencies pull torch/CUDA (above)"
  fi
  echo "$pkg: no torch in its lock"
done

echo "-- wheels"
dist=$(mktemp -d)
trap 'rm -rf "$dist"' EXIT
uv build --all-packages --out-dir "$dist" -q
for pkg in enlace_config enlace_agent enlace_data; do
  wheel=$(ls "$dist"/"$pkg"-*.whl)
  if unzip -p "$wheel" '*.dist-info/METADATA' | grep -iE '^Requires-Dist: *(torch|nvidia)'; then
    fail "$wheel declares torch"
  fi
  echo "$(basename "$wheel"): no torch in Requires-Dist"
done

echo "-- enlace-agent in a fresh venv with pip"
venv=$dist/agent-venv
python3 -m venv "$venv"
"$venv/bin/pip" install -q --disable-pip-version-check "$dist"/enlace_config-*.whl "$dist"/enlace_agent-*.whl
"$venv/bin/python" - <<'PY'
import importlib.util, sys
import enlace_agent
from enlace_agent.search import search  # the library API the assistant uses
from enlace_agent.assistant import Assistant, build_assistant  # the assistant's loop
assert importlib.util.find_spec("mcp") is None, "mcp is an optional extra, not a dependency"
assert importlib.util.find_spec("torch") is None, "torch is installed in the agent's venv"
assert "torch" not in sys.modules
try:
    import torch  # noqa: F401
except ImportError:
    print(f"enlace-agent {enlace_agent.__version__} imports; import torch fails as it must")
else:
    sys.exit("import torch succeeded in the agent's venv")
PY
"$venv/bin/enlace-search" --help >/dev/null || fail "enlace-search --help failed in the agent's venv"
"$venv/bin/enlace-assistant" --help >/dev/null || fail "enlace-assistant --help failed in the agent's venv"
# The web page is an extra: without it, `serve` says how to install it (exit 2), never a traceback.
rc=0; out=$("$venv/bin/enlace-assistant" serve 2>&1) || rc=$?
[ "$rc" -eq 2 ] && grep -q 'enlace-agent\[web\]' <<<"$out" ||
  fail "enlace-assistant serve without the web extra: exit $rc, $out"
"$venv/bin/python" -c 'import importlib.util as u; assert u.find_spec("starlette") is None' ||
  fail "starlette is installed without the web extra"

echo "-- enlace_model without the trainer (uv venv + uv pip reuse the cached torch)"
mvenv=$dist/model-venv
uv venv -q "$mvenv"
uv pip install -q --python "$mvenv/bin/python" "$dist"/enlace_config-*.whl "$dist"/enlace_model-*.whl
"$mvenv/bin/python" - <<'PY'
import importlib.util
import enlace_model
import torch
from enlace_config.schema import ModelConfig
for absent in ("enlace_train", "enlace_data", "transformers"):
    assert importlib.util.find_spec(absent) is None, f"{absent} is installed beside enlace_model"
cfg = ModelConfig(vocab_size=256, context_length=16, d_model=32, n_layers=2, n_heads=4,
                  n_kv_heads=2, ffn_hidden=64)
model = enlace_model.build_model(cfg)
logits = model(torch.zeros(1, 8, dtype=torch.long)).logits
assert logits.shape == (1, 8, 256), logits.shape
print(f"enlace_model {enlace_model.__version__} imports and runs without enlace-train/enlace-data")
PY
echo "all promises hold"
