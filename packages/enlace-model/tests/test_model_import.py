"""`import enlace_model` is cheap: torch, enlace-config and nothing heavier (checked in a fresh
interpreter, since this test process has imported everything already)."""

from __future__ import annotations

import subprocess
import sys


def test_import_pulls_nothing_heavy():
    code = (
        "import sys, enlace_model\n"
        "heavy = ['transformers', 'tokenizers', 'sentencepiece', 'safetensors', 'enlace_train',"
        " 'enlace_data', 'torch._dynamo']\n"
        "print(','.join(m for m in heavy if m in sys.modules))\n"
        "print(enlace_model.__version__)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    loaded, version = done.stdout.split("\n")[:2]
    assert loaded == "", f"import enlace_model imported {loaded}"
    assert version.count(".") >= 2
