"""The enlace-model README's first code block, run as written (issue 12: it raised "prompt +
max_new_tokens exceeds the model's context_length" on the smoke model, and load_tokenizer took
neither the run directory nor an import from enlace_data's top level), against a saved run of the
smoke shape laid out as the trainer lays it out. And one rule for every path (issue 21): the
run's export is read back by load_model, load_tokenizer and `enlace-train sample`."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

torch = pytest.importorskip("torch")

from enlace_config.schema.model import ModelConfig  # noqa: E402
from enlace_data import ByteTokenizer, load_tokenizer  # noqa: E402
from enlace_model import atomic_checkpoint, build_model, load_model, save_model  # noqa: E402
from enlace_model.export import export_hf  # noqa: E402

REPO = Path(__file__).resolve().parent.parent


def readme_block() -> str:
    text = (REPO / "packages" / "enlace-model" / "README.md").read_text(encoding="utf-8")
    match = re.search(r"```python\n(.*?)```", text, re.DOTALL)
    assert match, "the enlace-model README has no python block"
    return match.group(1)


@pytest.fixture
def smoke_run(tmp_path: Path) -> Path:
    """runs/smoke-cpu under tmp_path: the smoke model's shape (context 128), one checkpoint with
    the byte tokenizer's files, as the trainer writes them."""
    cfg = ModelConfig(**yaml.safe_load((REPO / "configs" / "model" / "smoke.yaml").read_text()))
    torch.manual_seed(0)
    with atomic_checkpoint(tmp_path / "runs" / "smoke-cpu", 3) as d:
        save_model(d, build_model(cfg), cfg)
        ByteTokenizer().save(d)
    return tmp_path / "runs" / "smoke-cpu"


def test_readme_first_lines_run_as_written(smoke_run: Path) -> None:
    code = readme_block()
    assert '"runs/smoke-cpu"' in code and "128" in code
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=smoke_run.parent.parent,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("En un lugar de la Mancha")


def test_one_rule_for_run_checkpoint_and_export(smoke_run: Path, tmp_path: Path) -> None:
    export = export_hf(smoke_run, tmp_path / "hf")
    checkpoint = smoke_run / "checkpoints" / "step_3"
    for path in (smoke_run, checkpoint, export, export / "config.json"):
        assert isinstance(load_tokenizer(path), ByteTokenizer), path
        assert load_model(path).cfg.context_length == 128, path
    done = subprocess.run(
        [sys.executable, "-m", "enlace_train", "sample", str(export), "--prompt", "Hola"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("Hola")
