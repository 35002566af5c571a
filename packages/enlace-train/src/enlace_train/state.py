"""What a checkpoint records besides the weights: RNG states and the run's provenance.

Everything here is plain data (dicts, lists, str, int, float, bool, None, tensors) so that
`torch.load(..., weights_only=True)` reads it back: nothing in a checkpoint can execute code.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import random
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import torch

PACKAGES = ("enlace-config", "enlace-model", "enlace-data", "enlace-train", "torch", "numpy")


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def rng_state(cuda_states: list[torch.Tensor]) -> dict[str, Any]:
    """Python, numpy (the global generator, as plain lists), torch CPU and CUDA RNG states."""
    py_version, py_internal, py_gauss = random.getstate()
    np_name, np_keys, np_pos, np_has_gauss, np_gauss = np.random.get_state(legacy=True)
    return {
        "python": {"version": py_version, "state": list(py_internal), "gauss": py_gauss},
        "numpy": {
            "bit_generator": str(np_name),
            "keys": [int(k) for k in np_keys],
            "pos": int(np_pos),
            "has_gauss": int(np_has_gauss),
            "cached_gaussian": float(np_gauss),
        },
        "torch_cpu": torch.get_rng_state(),
        "torch_cuda": cuda_states,
    }


def set_rng_state(state: dict[str, Any]) -> list[torch.Tensor]:
    """Restore what `rng_state` captured; returns the CUDA states for the backend to restore."""
    py = state["python"]
    random.setstate((py["version"], tuple(py["state"]), py["gauss"]))
    npst = state["numpy"]
    np.random.set_state(
        (
            npst["bit_generator"],
            np.asarray(npst["keys"], dtype=np.uint32),
            npst["pos"],
            npst["has_gauss"],
            npst["cached_gaussian"],
        )
    )
    torch.set_rng_state(state["torch_cpu"])
    return list(state.get("torch_cuda", []))


def _version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def _git(*args: str) -> str | None:
    out = subprocess.run(["git", *args], capture_output=True, text=True, timeout=10)
    return out.stdout.strip() if out.returncode == 0 else None


def git_commit() -> str | None:
    """HEAD's commit, with '+dirty' when tracked files differ from it; None outside a git checkout."""
    try:
        head = _git("rev-parse", "HEAD")
        dirty = head and _git("status", "--porcelain", "--untracked-files=no")
    except (OSError, subprocess.SubprocessError):
        return None
    return head and head + ("+dirty" if dirty else "")


def provenance() -> dict[str, Any]:
    here = Path.cwd().resolve()
    lock = next((d / "uv.lock" for d in (here, *here.parents) if (d / "uv.lock").is_file()), None)
    return {
        "versions": {name: _version(name) for name in PACKAGES},
        "git_commit": git_commit(),
        "uv_lock_sha256": hashlib.sha256(lock.read_bytes()).hexdigest() if lock else None,
    }
