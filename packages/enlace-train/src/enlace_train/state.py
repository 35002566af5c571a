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


def package_versions() -> dict[str, str | None]:
    versions: dict[str, str | None] = {}
    for name in PACKAGES:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def git_commit(cwd: Path | None = None) -> str | None:
    """HEAD's commit, with '+dirty' when tracked files differ from it; None outside a git checkout."""
    try:
        head = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True, text=True, timeout=10
        )
        if head.returncode != 0:
            return None
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=10,
        )
        return head.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")
    except (OSError, subprocess.SubprocessError):
        return None


def find_uv_lock(start: Path | None = None) -> Path | None:
    here = (start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        if (folder / "uv.lock").is_file():
            return folder / "uv.lock"
    return None


def uv_lock_sha256(start: Path | None = None) -> str | None:
    lock = find_uv_lock(start)
    return hashlib.sha256(lock.read_bytes()).hexdigest() if lock else None


def provenance() -> dict[str, Any]:
    return {
        "versions": package_versions(),
        "git_commit": git_commit(),
        "uv_lock_sha256": uv_lock_sha256(),
    }
