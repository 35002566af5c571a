"""Saving and reading the trainer's checkpoints, and deciding whether a run may be continued.

The layout and the atomic write belong to enlace_model.checkpoint (RUN_DIR/checkpoints/step_<N>/ with
model.safetensors, model.json, trainer_state.pt and a COMPLETE marker holding every file's sha256,
written last, then fsync and rename). This module adds what only the trainer knows: the contents of
trainer_state.pt, keeping the last K, and the list of what may change when a run is resumed.
"""

from __future__ import annotations

import shutil
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from enlace_config.schema import ModelConfig
from enlace_model import Transformer
from enlace_model.checkpoint import (
    TRAINER_STATE_FILE,
    atomic_checkpoint,
    find_latest_checkpoint,
    list_checkpoints,
    save_model,
)

from enlace_train.errors import ResumeError
from enlace_train.metrics import log

TRAINER_STATE_FORMAT = 1

# What may differ between the config a checkpoint was written with and the config that resumes it.
# Everything else changes the arithmetic of the run, so the resume would not be the same run.
RESUME_MAY_CHANGE = frozenset(
    {
        "train.max_steps",  # only longer: extends the WSD plateau, the decay moves to the new end
        "train.log_every",
        "train.eval_every",
        "train.checkpoint_every",
        "train.keep_checkpoints",
        "train.allow_thread_change",
        "hardware.num_threads",  # the thread count actually used is checked apart (check_threads)
        "run.out_dir",  # a run directory that was moved or copied is still the same run
        # evaluation and start-up checks only: they decide no number of the training itself
        "data.eval_text_files",
        "data.eval_text_stride",
        "hardware.compute_capability",
        "hardware.allow_other_board",
    }
)


def flatten(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in tree.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, dict):
            flat.update(flatten(value, dotted + "."))
        else:
            flat[dotted] = value
    return flat


def config_changes(saved: dict[str, Any], current: dict[str, Any]) -> list[tuple[str, Any, Any]]:
    """(key, value in the checkpoint, value now) for every key whose value differs."""
    old, new = flatten(saved), flatten(current)
    missing = object()
    changes = []
    for key in sorted(old.keys() | new.keys()):
        before, after = old.get(key, missing), new.get(key, missing)
        if before != after:
            changes.append(
                (key, None if before is missing else before, None if after is missing else after)
            )
    return changes


def check_resume_allowed(
    saved: dict[str, Any],
    current: dict[str, Any],
    origins: dict[str, str],
    *,
    checkpoint: Path,
    step: int,
) -> list[str]:
    """Raise ResumeError listing every change outside RESUME_MAY_CHANGE; return the allowed ones."""
    refused: list[str] = []
    allowed: list[str] = []
    for key, before, after in config_changes(saved, current):
        where = f" (set by {origins[key]})" if key in origins else ""
        line = f"{key}: {before!r} -> {after!r}{where}"
        if key == "train.max_steps" and isinstance(after, int) and after < max(before or 0, step):
            refused.append(line + " [train.max_steps may only grow]")
        elif key in RESUME_MAY_CHANGE:
            allowed.append(line)
        else:
            refused.append(line)
    if refused:
        raise ResumeError(
            f"Cannot resume {checkpoint} (step {step}) with a different configuration: "
            + "; ".join(refused)
            + ". On resume only these may change: "
            + ", ".join(sorted(RESUME_MAY_CHANGE))
            + " (max_steps only upwards). Restore the original values, or start a new run from "
            "this checkpoint's weights with a new run.name and train.init_from="
            f"{checkpoint}."
        )
    return allowed


def check_threads(saved: int, now: int, *, allow_change: bool, checkpoint: Path) -> None:
    if saved == now:
        return
    if not allow_change:
        raise ResumeError(
            f"Checkpoint {checkpoint} was written by a run using {saved} CPU threads, this process "
            f"uses {now}: a different thread count changes floating-point sums, so the resumed run "
            f"would not be bit-exact. Set hardware.num_threads={saved}, or accept the difference "
            "with train.allow_thread_change=true."
        )
    log.warning(
        "WARNING: resuming with %d CPU threads instead of the checkpoint's %d "
        "(train.allow_thread_change=true): the run is no longer bit-exact.",
        now,
        saved,
    )


def latest_checkpoint(run_dir: Path) -> Path | None:
    """The newest complete checkpoint; the ones skipped as incomplete or corrupt go to the log."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        found = find_latest_checkpoint(run_dir)
    for w in caught:
        log.warning("WARNING: %s", w.message)
    return found


def load_trainer_state(checkpoint: Path) -> dict[str, Any]:
    path = checkpoint / TRAINER_STATE_FILE
    if not path.is_file():
        raise ResumeError(
            f"{checkpoint} has no {TRAINER_STATE_FILE}: it holds weights only (an export?). Use "
            f"train.init_from={checkpoint} to start a new run from its weights."
        )
    state = torch.load(path, map_location="cpu", weights_only=True)
    if state.get("format") != TRAINER_STATE_FORMAT:
        raise ResumeError(
            f"{path} has trainer-state format {state.get('format')!r}; this enlace-train reads "
            f"format {TRAINER_STATE_FORMAT}."
        )
    return state


def save_checkpoint(
    run_dir: Path,
    step: int,
    model: Transformer,
    model_cfg: ModelConfig,
    trainer_state: dict[str, Any],
    *,
    keep: int,
    extra_files: Callable[[Path], None] | None = None,
) -> Path:
    """Write RUN_DIR/checkpoints/step_<step>/ atomically, then keep only the newest `keep`."""
    with atomic_checkpoint(run_dir, step) as tmp:
        tmp = Path(tmp)
        save_model(tmp, model, model_cfg)
        torch.save(trainer_state, tmp / TRAINER_STATE_FILE)
        if extra_files is not None:
            extra_files(tmp)
    prune_checkpoints(run_dir, keep)
    return run_dir / "checkpoints" / f"step_{step}"


def prune_checkpoints(run_dir: Path, keep: int) -> None:
    complete = [Path(p) for p in list_checkpoints(run_dir)]
    for old in complete[:-keep] if keep > 0 else []:
        shutil.rmtree(old, ignore_errors=True)
