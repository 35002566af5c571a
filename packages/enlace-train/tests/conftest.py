"""Fixtures of the trainer's tests: seeds and default dtype reset for every test, tiny configs."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch


@pytest.fixture(autouse=True)
def _reset_torch_state():
    torch.manual_seed(0)
    random.seed(0)
    np.random.seed(0)
    torch.set_default_dtype(torch.float32)
    threads = torch.get_num_threads()
    yield
    torch.set_default_dtype(torch.float32)
    torch.set_num_threads(threads)


# ----------------------------------------------------------------------------- tiny runs
TINY_RUN: dict[str, Any] = {
    "run": {"name": "tiny"},
    "hardware": {
        "name": "cpu-test",
        "device": "cpu",
        "dtype": "float32",
        "micro_batch_size": 2,
        "num_threads": 1,
    },
    "model": {
        "vocab_size": 256,
        "context_length": 32,
        "d_model": 32,
        "n_layers": 2,
        "n_heads": 2,
        "n_kv_heads": 1,
        "ffn_hidden": 64,
    },
    "train": {
        "seed": 7,
        "max_steps": 12,
        "global_batch_size": 4,
        "lr": 3e-3,
        "min_lr": 3e-4,
        "warmup_steps": 2,
        "decay_steps": 4,
        "log_every": 1,
        "eval_every": 4,
        "checkpoint_every": 4,
        "keep_checkpoints": 3,
    },
    # the public-domain books built into enlace-data: no shared data needed
    "data": {
        "kind": "bytes",
        "path": "no-such-dir",
        "fallback": "builtin",
        "context_length": 32,
        "eval_batches": 2,
    },
}


def deep_update(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    out = json.loads(json.dumps(base))
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = deep_update(out[key], value)
        else:
            out[key] = value
    return out


def make_run_file(directory: Path, name: str = "tiny", **sections: dict[str, Any]) -> Path:
    """A run file for a tiny model in `directory`, its out_dir under directory/runs/."""
    cfg = deep_update(TINY_RUN, sections)
    cfg["run"] = {"name": name, "out_dir": str(directory / "runs" / name)}
    path = directory / f"{name}.yaml"
    path.write_text(json.dumps(cfg, indent=1), encoding="utf-8")  # JSON is YAML
    return path


@pytest.fixture
def write_run(tmp_path: Path):
    """write_run(name, **sections) -> path of a run file for a tiny model, out_dir under tmp_path."""

    def write(name: str = "tiny", **sections: dict[str, Any]) -> Path:
        return make_run_file(tmp_path, name, **sections)

    return write


def load(path: Path, *overrides: str):
    from enlace_config import load_run_config

    return load_run_config(path, list(overrides))


def run_dir_of(path: Path, *overrides: str) -> Path:
    return Path(load(path, *overrides).config.run.out_dir)


def metrics_rows(run_dir: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def cli(*args: str, cwd: Path | None = None, **popen: Any) -> subprocess.Popen[str]:
    """`python -m enlace_train ARGS` in a subprocess (the real entry point)."""
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    return subprocess.Popen(
        [sys.executable, "-m", "enlace_train", *args],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        **popen,
    )


@pytest.fixture(scope="session")
def h():
    """The helpers above, for tests (conftest modules are not importable under importlib mode)."""
    import types

    return types.SimpleNamespace(
        load=load,
        make_run_file=make_run_file,
        run_dir_of=run_dir_of,
        metrics_rows=metrics_rows,
        cli=cli,
        deep_update=deep_update,
    )
