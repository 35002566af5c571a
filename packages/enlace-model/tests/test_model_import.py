"""`import enlace_model` is cheap: torch, enlace-config and nothing heavier (checked in a fresh
interpreter, since this test process has imported everything already). The same process then runs
the CLI module as `python -m enlace_model.cli` would."""

from __future__ import annotations

import subprocess
import sys

from enlace_model import atomic_checkpoint, build_model, save_model

CODE = """
import sys
import enlace_model
heavy = ['transformers', 'tokenizers', 'sentencepiece', 'safetensors', 'enlace_train',
         'enlace_data', 'torch._dynamo']
print(','.join(m for m in heavy if m in sys.modules))
print(enlace_model.__version__)
from enlace_model.cli import main
sys.exit(main(sys.argv[1:]))
"""


def test_import_is_light_and_the_cli_runs_in_a_fresh_process(tmp_path, tiny_config):
    cfg = tiny_config(vocab_size=256)
    with atomic_checkpoint(tmp_path / "run", 1) as d:
        save_model(d, build_model(cfg), cfg)
    done = subprocess.run(
        [sys.executable, "-c", CODE, "export", str(tmp_path / "run"), str(tmp_path / "hf")],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    loaded, version, message = done.stdout.split("\n")[:3]
    assert loaded == "", f"import enlace_model imported {loaded}"
    assert version.count(".") >= 2
    assert message.startswith("exported")
    assert (tmp_path / "hf" / "model.safetensors").is_file()
