"""The main job's path as a user types it, shortened to seconds: `enlace-data smoke --from BOOKS`
prepares data/smoke/, `enlace-train configs/runs/smoke-cpu.yaml` (a few steps, a smaller model)
trains on it and leaves a checkpoint, `enlace-train sample RUN_DIR --prompt ...` prints text, and
re-running the same command with a longer train.max_steps resumes instead of starting over."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SHORT = [
    "train.max_steps=6",
    "train.warmup_steps=1",
    "train.decay_steps=2",
    "train.log_every=2",
    "train.eval_every=3",
    "train.checkpoint_every=3",
    "model.d_model=32",
    "model.n_layers=2",
    "model.n_heads=2",
    "model.n_kv_heads=1",
    "model.ffn_hidden=64",
    "model.context_length=32",
    "data.context_length=32",
    "data.eval_batches=2",
    "hardware.micro_batch_size=4",
    "train.global_batch_size=8",
    "hardware.num_threads=1",
]


def run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    return subprocess.run(
        [sys.executable, "-m", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300
    )


@pytest.fixture
def clone(tmp_path: Path) -> Path:
    """A working directory laid out like a fresh clone: configs/ only (runs/ and data/ are made)."""
    shutil.copytree(REPO / "configs", tmp_path / "configs")
    return tmp_path


def test_prepared_books_to_checkpoint_to_sample_and_resume(clone: Path) -> None:
    shared = os.environ.get("ENLACE_SHARED_DATA")
    if not shared or not (Path(shared) / "es-pd").is_dir():
        pytest.skip("ENLACE_SHARED_DATA/es-pd (the public-domain books) is not available")
    prep = run(
        "enlace_data.cli", "smoke", "--from", str(Path(shared) / "es-pd"), "--quiet", cwd=clone
    )
    assert prep.returncode == 0, prep.stderr
    assert (clone / "data" / "smoke" / "val.txt").stat().st_size > 100_000

    train = run("enlace_train", "configs/runs/smoke-cpu.yaml", *SHORT, cwd=clone)
    assert train.returncode == 0, train.stdout + train.stderr
    assert "prepared corpus data/smoke" in train.stdout  # not the built-in books
    run_dir = clone / "runs" / "smoke-cpu"
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    losses = [r["loss"] for r in rows if "loss" in r]
    assert len(losses) == 3 and losses[-1] < losses[0]
    assert [r["step"] for r in rows if "val_bpb" in r] == [3, 6]
    assert (run_dir / "checkpoints" / "step_6" / "COMPLETE").is_file()

    sample = run("enlace_train", "sample", "runs/smoke-cpu", "--prompt", "En un lugar", cwd=clone)
    assert sample.returncode == 0, sample.stderr
    assert sample.stdout.startswith("En un lugar") and len(sample.stdout) > len("En un lugar") + 20

    more = [a for a in SHORT if not a.startswith("train.max_steps")] + ["train.max_steps=8"]
    again = run("enlace_train", "configs/runs/smoke-cpu.yaml", *more, cwd=clone)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "resuming smoke-cpu from" in again.stdout and "step 6" in again.stdout
    steps = [
        json.loads(line)["step"] for line in (run_dir / "metrics.jsonl").read_text().splitlines()
    ]
    assert steps == sorted(steps) and steps[-1] == 8


def test_fresh_clone_without_data_trains_on_the_builtin_books(clone: Path) -> None:
    train = run("enlace_train", "configs/runs/smoke-cpu.yaml", *SHORT, cwd=clone)
    assert train.returncode == 0, train.stdout + train.stderr
    assert "built-in books" in train.stdout
