"""A small, valid config tree written to tmp_path, which each test bends into the case it needs."""

from collections.abc import Callable
from pathlib import Path

import pytest

# Line numbers matter: tests assert that errors name e.g. "train/short.yaml:4".
BASE_FILES: dict[str, str] = {
    "hardware/cpu.yaml": "device: cpu\ndtype: float32\nmicro_batch_size: 4\n",
    "model/tiny.yaml": (
        "vocab_size: 256\n"
        "context_length: 64\n"
        "d_model: 32\n"
        "n_layers: 2\n"
        "n_heads: 4\n"
        "n_kv_heads: 2\n"
        "ffn_hidden: 64\n"
    ),
    "train/short.yaml": (
        "max_steps: 10\nglobal_batch_size: 8\nwarmup_steps: 2\nlr: 3e-4\ndecay_steps: 2\n"
    ),
    "data/bytes.yaml": "kind: bytes\npath: data/smoke\ncontext_length: 64\n",
    "runs/base.yaml": (
        "include:\n"
        "  hardware: hardware/cpu.yaml\n"
        "  model: model/tiny.yaml\n"
        "  train: train/short.yaml\n"
        "  data: data/bytes.yaml\n"
    ),
}

WriteTree = Callable[..., Path]


@pytest.fixture
def write_tree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> WriteTree:
    """write_tree(**{"runs/x.yaml": "..."}) -> the configs root, holding BASE_FILES plus these.

    A value of None removes a base file. The working directory is tmp_path, so messages show
    paths like configs/train/short.yaml.
    """
    monkeypatch.chdir(tmp_path)

    def write(files: dict[str, str | None] | None = None) -> Path:
        root = tmp_path / "configs"
        merged: dict[str, str | None] = {**BASE_FILES, **(files or {})}
        for name, text in merged.items():
            target = root / name
            if text is None:
                target.unlink(missing_ok=True)
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text, encoding="utf-8")
        return root

    return write
