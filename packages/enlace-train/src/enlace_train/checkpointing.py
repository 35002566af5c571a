"""The trainer's checkpoints: one `save` and one `resume_or_init`, for one process or many.

The layout and the atomic write belong to enlace_model.checkpoint. This module adds what only the
trainer knows: trainer_state.pt, which checkpoint a run continues from, keeping the last K, and
what may change on resume. The collectives of distributed.py are no-ops for one process. Rank 0
writes every file except, under FSDP2, each rank's shard of model and optimizer in ``distcp/``
(``torch.distributed.checkpoint``, which re-shards on load); ``model.safetensors`` is always the
full model, so ``load_model`` and the export read any run's checkpoint alike.

Nothing is discarded silently: a checkpoint that fails verification is skipped with a warning and
moved to ``checkpoints/corrupt/`` (so pruning never counts it); when all fail the run stops with
the list, unless ``train.on_corrupt_checkpoints=restart``.
"""

from __future__ import annotations

import json
import pickle
import shutil
import zipfile
from collections.abc import Callable, Mapping
from contextlib import nullcontext
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from enlace_config.schema import ModelConfig
from enlace_model import build_model
from enlace_model.checkpoint import (
    CHECKPOINTS_DIR,
    CONFIG_FILE,
    MODEL_FILE,
    TRAINER_STATE_FILE,
    CheckpointError,
    atomic_checkpoint,
    check_state_dict,
    checkpoint_step,
    list_checkpoints,
    load_state_dict,
    resolve_checkpoint,
    save_model,
    step_dirs,
    verify_checkpoint,
)

from enlace_train import distributed
from enlace_train.distributed import DistInfo
from enlace_train.errors import ResumeError, SetupError
from enlace_train.metrics import METRICS_FILE, log, read_metrics, truncate_metrics
from enlace_train.state import provenance, rng_state, set_rng_state

if TYPE_CHECKING:
    from enlace_config import ResolvedConfig
    from enlace_data.stream import StreamLoader

    from enlace_train.backends import Backend

TRAINER_STATE_FORMAT = 1
#: Sub-directory of a checkpoint holding the FSDP shards (``torch.distributed.checkpoint``).
SHARDED_DIR = "distcp"
#: Key of the per-rank state list inside ``trainer_state.pt``.
RANK_STATES_KEY = "rank_states"
#: Where checkpoints that fail verification are moved, inside RUN_DIR/checkpoints/.
CORRUPT_DIR = "corrupt"

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
        "train.on_corrupt_checkpoints",
        "train.max_skipped_steps_in_a_row",
        "hardware.num_threads",  # the thread count actually used is checked apart (check_threads)
        "hardware.openmp_spin_count",  # how idle threads wait: speed only
        "hardware.name",  # the profile's label: what it sets (dtype, ...) is checked key by key
        "run.out_dir",  # a run directory that was moved or copied is still the same run
        # evaluation and start-up checks only: they decide no number of the training itself
        "data.eval_text_files",
        "data.eval_text_stride",
        "hardware.compute_capability",
        "hardware.allow_other_board",
    }
)

# The trainer state's keys and their types: anything else is not a state this trainer wrote.
_STATE_KEYS: dict[str, type | tuple[type, ...]] = {
    "step": int,
    "tokens_seen": int,
    "skipped_steps": int,
    "elapsed_s": (int, float),
    "optimizer": (dict, type(None)),
    "grad_scaler": dict,
    "rng": dict,
    "loader": dict,
    "num_threads": int,
    "config": dict,
}


@dataclass
class TrainProgress:
    """The counters a checkpoint carries besides the tensors."""

    step: int = 0
    tokens_seen: int = 0
    skipped_steps: int = 0
    elapsed_s: float = 0.0  # training wall time of earlier segments of this run
    skip_streak: int = 0  # float16: optimizer steps skipped in a row by the GradScaler, up to now
    best_val_bpb: float | None = None  # the lowest validation bits/byte so far (checkpoints/best)
    best_step: int | None = None


@dataclass
class Training:
    """Everything a checkpoint saves and restores, and where this process stands in the job."""

    model: torch.nn.Module  # the user's module (FSDP2 shards it in place; DDP wraps it apart)
    optimizer: torch.optim.Optimizer
    scaler: torch.amp.GradScaler
    loader: StreamLoader
    backend: Backend
    info: DistInfo
    progress: TrainProgress = field(default_factory=TrainProgress)
    init_from: str | None = None  # the run's origin, carried across resumes


# ----------------------------------------------------------------------------- saving
BEST_DIR = "best"


def trainer_state(training: Training, resolved: ResolvedConfig) -> dict[str, Any]:
    """Everything besides the weights that a resumed run needs to continue bit for bit (plain data
    and tensors only: it loads with weights_only=True)."""
    prog = training.progress
    sharded = distributed.is_sharded(training.model)
    return {
        "format": TRAINER_STATE_FORMAT,
        **asdict(prog),
        "optimizer": None if sharded else training.optimizer.state_dict(),  # FSDP: in distcp/
        "scheduler": {"kind": "wsd", "step": prog.step},
        "grad_scaler": training.scaler.state_dict(),
        "rng": rng_state(training.backend.rng_state()),
        "loader": training.loader.state_dict(),
        "num_threads": torch.get_num_threads(),
        "world_size": training.info.world_size,
        "parallelism": "fsdp" if sharded else ("ddp" if training.info.distributed else None),
        "config": resolved.to_dict(),
        "origins": resolved.origins_as_text(),
        "init_from": training.init_from,
        **provenance(),
    }


def save(
    training: Training,
    resolved: ResolvedConfig,
    *,
    extra_files: Callable[[Path], None] | None = None,
    best: bool = False,
) -> Path:
    """Write RUN_DIR/checkpoints/step_<step>/ atomically, then keep only the newest
    `train.keep_checkpoints`. Every rank calls it; rank 0 owns the temporary directory, writes
    COMPLETE and renames it. `best`: the weights (and `extra_files`) only, to checkpoints/best/,
    replacing the previous best: never resumed from nor pruned, read like any checkpoint."""
    info, model, step = training.info, training.model, training.progress.step
    run_dir = Path(resolved.config.run.out_dir)
    state = None if best else trainer_state(training, resolved)
    if state is not None:
        per_rank = {"rng": state["rng"], "loader": state["loader"]}  # CPU tensors and plain data
        state[RANK_STATES_KEY] = distributed.gather_objects(per_rank, info)
    name = BEST_DIR if best else f"step_{step}"
    writing = atomic_checkpoint(run_dir, step, name=name) if info.is_main else nullcontext(None)
    with writing as tmp:
        local = Path(tmp) if tmp is not None else None  # None on ranks other than 0
        _save_full_model(local, model, resolved.config.model, info)
        if state is not None and distributed.is_sharded(model):
            shared = distributed.broadcast_object(str(local), info)  # rank 0's directory
            _save_sharded(Path(shared), model, training.optimizer)
        if local is not None and state is not None:
            torch.save(state, local / TRAINER_STATE_FILE)
        if local is not None and extra_files is not None:
            extra_files(local)
    if info.is_main and not best:
        prune_checkpoints(run_dir, resolved.config.train.keep_checkpoints)
    distributed.barrier(info)  # nobody moves on (or exits) before the checkpoint is complete
    return run_dir / CHECKPOINTS_DIR / name


def prune_checkpoints(run_dir: Path, keep: int) -> None:
    """Keep the newest `keep` complete checkpoints (the ones that failed verification were moved
    to checkpoints/corrupt/ at start-up, so those kept beside the new one are good)."""
    for old in list_checkpoints(run_dir)[:-keep] if keep > 0 else []:
        shutil.rmtree(old, ignore_errors=True)


def _save_full_model(
    directory: Path | None, model: torch.nn.Module, model_cfg: ModelConfig, info: DistInfo
) -> None:
    """`save_model`'s files from rank 0 into `directory`. Every rank calls it: under FSDP2
    gathering the full weights is collective."""
    if not distributed.is_sharded(model):
        if directory is not None:
            save_model(directory, distributed.unwrap_model(model), model_cfg)  # pyright: ignore[reportArgumentType]
        return
    full = distributed.consolidated_state_dict(model, info)
    if directory is not None and full is not None:
        with torch.random.fork_rng(devices=[]):  # the replica's init must not move rank 0's RNG
            plain = build_model(model_cfg)  # a plain replica on the CPU, to reuse the one writer
        plain.load_state_dict(full)
        save_model(directory, plain, model_cfg)


def has_sharded_state(checkpoint: Path) -> bool:
    """Whether a checkpoint carries FSDP shards (model and optimizer) in ``distcp/``."""
    return (Path(checkpoint) / SHARDED_DIR / ".metadata").is_file()


def _save_sharded(
    directory: Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer
) -> None:
    """Each rank writes its shard of the model and optimizer to ``directory/distcp``. Collective."""
    from torch.distributed.checkpoint.state_dict import get_state_dict
    from torch.distributed.checkpoint.state_dict_saver import save as dcp_save

    model_sd, optim_sd = get_state_dict(model, optimizer)
    dcp_save({"model": model_sd, "optimizer": optim_sd}, checkpoint_id=directory / SHARDED_DIR)


def load_sharded(directory: Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
    """Load model and optimizer from ``directory/distcp``, re-sharded to this world size (a plain
    model in a single process too)."""
    import warnings

    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
    from torch.distributed.checkpoint.state_dict_loader import load

    if not has_sharded_state(directory):
        raise distributed.DistributedError(
            f"{directory} holds no sharded (FSDP) state in {SHARDED_DIR}/: it was written by a "
            "single-process or DDP run, and an FSDP job resumes only FSDP checkpoints. Resume it "
            "the way it was written, or start a new run from its weights with "
            f"train.init_from={directory}."
        )
    model_sd, optim_sd = get_state_dict(model, optimizer)
    with warnings.catch_warnings():
        # Without a process group DCP warns that it assumes a single-process load: the intent.
        warnings.filterwarnings("ignore", message="torch.distributed is disabled")
        load({"model": model_sd, "optimizer": optim_sd}, checkpoint_id=directory / SHARDED_DIR)
    set_state_dict(model, optimizer, model_state_dict=model_sd, optim_state_dict=optim_sd)


# ----------------------------------------------------------------------------- reading
def load_trainer_state(checkpoint: Path) -> dict[str, Any]:
    """trainer_state.pt of a checkpoint, checked to be one this trainer wrote (CheckpointError
    naming the checkpoint and the problem otherwise)."""
    path = checkpoint / TRAINER_STATE_FILE
    if not path.is_file():
        raise CheckpointError(
            f"{checkpoint}: no {TRAINER_STATE_FILE}: it holds weights only (an export?). Use "
            f"train.init_from={checkpoint} to start a new run from its weights."
        )
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except (pickle.UnpicklingError, RuntimeError, EOFError, OSError, zipfile.BadZipFile) as exc:
        raise CheckpointError(
            f"{path}: not a trainer state this enlace-train wrote ({exc})"
        ) from exc
    if not isinstance(state, dict) or state.get("format") != TRAINER_STATE_FORMAT:
        found = state.get("format") if isinstance(state, dict) else type(state).__name__
        raise CheckpointError(
            f"{path}: trainer-state format {found!r}; this enlace-train reads format "
            f"{TRAINER_STATE_FORMAT}"
        )
    wrong = [
        k
        for k, kind in _STATE_KEYS.items()
        if k not in state or not isinstance(state[k], kind) or isinstance(state[k], bool)
    ]
    if wrong:
        raise CheckpointError(f"{path}: not a trainer state this enlace-train wrote (bad {wrong})")
    return state


def rank_resume_state(
    trainer_state: Mapping[str, Any], info: DistInfo
) -> tuple[dict[str, Any], str | None]:
    """This rank's RNG and loader state from a checkpoint, and a warning when the world size changed.

    The loader state counts *global* samples and the accumulation is re-derived, so every step sees
    the same samples at any world size; only the order of the floating-point sums changes, so the
    run is no longer bit-exact, and the warning says so. No per-rank list: one process wrote it."""
    states: list[dict[str, Any]] = list(trainer_state.get(RANK_STATES_KEY) or [])
    if not states:
        states = [{"rng": trainer_state["rng"], "loader": trainer_state["loader"]}]
    saved = len(states)
    if saved == info.world_size:
        return states[info.rank], None
    loaders = {json.dumps(s["loader"], sort_keys=True) for s in states}
    if len(loaders) != 1:
        raise distributed.DistributedError(
            f"the checkpoint's {saved} per-rank data loader states disagree, so its data position "
            f"cannot be re-split over {info.world_size} processes: resume it with {saved} "
            "processes in total."
        )
    mine = {"loader": states[0]["loader"], "rng": states[info.rank % saved]["rng"]}
    warning = (
        f"WARNING: resuming with {info.world_size} process(es) from a checkpoint written by "
        f"{saved}: the data continues at the same global sample and every step keeps the same "
        "global batch (gradient accumulation re-derived), but the sums over ranks run in "
        "another order, so the run is no longer bit-exact. Relaunch with "
        f"{saved} process(es) for an exact resume."
    )
    return mine, warning


def _check_optimizer_state(state: dict[str, Any], optimizer: torch.optim.Optimizer) -> str | None:
    """Why the optimizer state does not fit this optimizer (groups, parameter counts, moment
    shapes), or None: checked before anything is loaded."""
    groups = state.get("param_groups")
    if not isinstance(groups, list) or len(groups) != len(optimizer.param_groups):
        return "its optimizer state has another number of parameter groups"
    params = [p for g in optimizer.param_groups for p in g["params"]]
    ids = [i for g in groups if isinstance(g, dict) for i in g.get("params", [])]
    if len(ids) != len(params):
        return f"its optimizer state covers {len(ids)} parameters, this model has {len(params)}"
    moments = state.get("state")
    for pid, param in zip(ids, params, strict=True):
        entry = moments.get(pid) if isinstance(moments, dict) else None
        for name, value in (entry or {}).items():
            if name != "step" and getattr(value, "shape", param.shape) != param.shape:
                return f"its optimizer state has {name} of shape {tuple(value.shape)} for a parameter of shape {tuple(param.shape)}"
    return None


def read_checkpoint(
    path: Path, training: Training, resolved: ResolvedConfig, *, verify: bool
) -> tuple[dict[str, Any], dict[str, torch.Tensor] | None, list[str]]:
    """(trainer state, full weights or None for FSDP shards, allowed config changes), checked
    before anything is loaded: CheckpointError when the checkpoint is damaged or not this
    trainer's, ResumeError when this config may not continue it. `verify`: check the sha256s."""
    if verify:
        verify_checkpoint(path)
        verify_checkpoint(path, (MODEL_FILE, CONFIG_FILE, TRAINER_STATE_FILE))  # all listed
    state = load_trainer_state(path)
    if state["step"] != checkpoint_step(path):
        raise CheckpointError(f"{path}: its trainer state is that of step {state['step']}")
    allowed = check_resume_allowed(
        state["config"], resolved.to_dict(), resolved.origins, checkpoint=path, step=state["step"]
    )
    allow = resolved.config.train.allow_thread_change
    check_threads(
        state["num_threads"], torch.get_num_threads(), allow_change=allow, checkpoint=path
    )
    # Same config, so the files must fit this model and optimizer: if not, they were replaced.
    weights = None
    if not (distributed.is_sharded(training.model) or has_sharded_state(path)):
        weights = load_state_dict(path)
        plain = distributed.unwrap_model(training.model)
        check_state_dict(weights, plain, str(path / MODEL_FILE))  # pyright: ignore[reportArgumentType]
        problem = _check_optimizer_state(state["optimizer"] or {}, training.optimizer)
        if problem:
            raise CheckpointError(f"{path / TRAINER_STATE_FILE}: {problem}")
    return state, weights, allowed


def choose_checkpoint(
    run_dir: Path, training: Training, resolved: ResolvedConfig
) -> tuple[Path | None, Any, list[tuple[Path, str]]]:
    """The newest checkpoint that reads back whole on every rank: (its path, what
    `read_checkpoint` read, the newer ones that failed and why). Collective."""
    info = training.info
    newest_first = [str(p) for p in reversed(step_dirs(run_dir))] if info.is_main else []
    candidates = distributed.broadcast_object(newest_first, info)
    failed: list[tuple[Path, str]] = []
    for candidate in map(Path, candidates):
        read, problem = None, None
        try:
            read = read_checkpoint(candidate, training, resolved, verify=info.is_main)
        except CheckpointError as exc:
            problem = str(exc)
        if not distributed.any_rank(problem is not None, info):
            return candidate, read, failed
        failed.append((candidate, problem or "unreadable on another rank"))
    return None, None, failed


def _older_failing(run_dir: Path, chosen: Path) -> list[tuple[Path, str]]:
    """The checkpoints older than the one resumed whose files fail their hashes: pruning must
    not count them among the ones it keeps."""
    failing = []
    for older in reversed(step_dirs(run_dir)):
        if (checkpoint_step(older) or 0) < (checkpoint_step(chosen) or 0):
            try:
                verify_checkpoint(older)
            except CheckpointError as exc:
                failing.append((older, str(exc)))
    return failing


def set_aside(run_dir: Path, path: Path) -> Path:
    """Move `path` into checkpoints/corrupt/ under a free name (name.1, name.2... if taken)."""
    aside = run_dir / CHECKPOINTS_DIR / CORRUPT_DIR
    aside.mkdir(exist_ok=True)
    target, n = aside / path.name, 1
    while target.exists():
        target, n = aside / f"{path.name}.{n}", n + 1
    return path.replace(target)


# ----------------------------------------------------------------------------- resuming
def resume_or_init(training: Training, resolved: ResolvedConfig) -> None:
    """Continue the run from its newest usable checkpoint, or start it (from step 0, or from
    `train.init_from`'s weights). Every rank calls it; the collectives agree on the checkpoint."""
    cfg, info = resolved.config, training.info
    run_dir = Path(cfg.run.out_dir)
    path, read, failed = choose_checkpoint(run_dir, training, resolved)
    if failed and path is None and cfg.train.on_corrupt_checkpoints == "stop":
        listed = "; ".join(f"{p}: {why}" for p, why in failed)
        raise ResumeError(
            f"{run_dir} holds checkpoints, and none of them can be resumed: {listed}. Nothing was "
            "changed. Restore them from a copy, or start this run over from step 0 with "
            "train.on_corrupt_checkpoints=restart (they are then moved to "
            f"{run_dir / CHECKPOINTS_DIR / CORRUPT_DIR} and metrics.jsonl is kept beside it)."
        )
    if info.is_main:
        for bad, why in failed + (_older_failing(run_dir, path) if path else []):
            moved = set_aside(run_dir, bad)
            log.warning("WARNING: skipping checkpoint %s (moved to %s): %s", bad, moved, why)
    if path is not None:
        return _resume(training, resolved, path, read)
    # a restart from step 0 keeps the old run's metrics and best weights beside the corrupt ones
    for old in (run_dir / METRICS_FILE, run_dir / CHECKPOINTS_DIR / BEST_DIR):
        if failed and info.is_main and old.exists():
            kept = set_aside(run_dir, old)
            log.warning("WARNING: restarting from step 0; the old %s is kept as %s", old.name, kept)
    _init(training, resolved)


def _resume(training: Training, resolved: ResolvedConfig, path: Path, read: Any) -> None:
    state, weights, allowed = read
    info, model, optimizer = training.info, training.model, training.optimizer
    if weights is None:
        load_sharded(path, model, optimizer)  # FSDP: re-sharded on load
    else:
        distributed.load_full_weights(model, weights)
        optimizer.load_state_dict(state["optimizer"])
    if state["grad_scaler"]:
        training.scaler.load_state_dict(state["grad_scaler"])
    mine, world_size_warning = rank_resume_state(state, info)  # this rank's own
    training.loader.load_state_dict(mine["loader"])
    training.backend.set_rng_state(set_rng_state(mine["rng"]))
    if world_size_warning:
        log.warning(world_size_warning)
    training.progress = TrainProgress(
        **{f.name: state.get(f.name, f.default) for f in fields(TrainProgress)}
    )
    training.init_from = state.get("init_from")
    metrics = Path(resolved.config.run.out_dir) / METRICS_FILE
    kept = truncate_metrics(metrics, state["step"]) if info.is_main else 0
    changes = f"; allowed changes: {'; '.join(allowed)}" if allowed else ""
    name, step = resolved.config.run.name, state["step"]
    log.info(
        f"resuming {name} from {path} (step {step}; metrics.jsonl cut back to {kept} rows){changes}"
    )


def _init(training: Training, resolved: ResolvedConfig) -> None:
    """A new run: step 0, optionally from `train.init_from`'s weights (and optimizer state)."""
    cfg = resolved.config
    tc = cfg.train
    training.init_from = tc.init_from
    if training.info.is_main:
        metrics = Path(cfg.run.out_dir) / METRICS_FILE
        if rows := len(read_metrics(metrics)):
            log.info("%s: %d rows of an attempt that saved no checkpoint dropped", metrics, rows)
        truncate_metrics(metrics, 0)
    if not tc.init_from:
        return
    try:
        source = resolve_checkpoint(tc.init_from)
        weights = load_state_dict(source)
        check_state_dict(weights, distributed.unwrap_model(training.model), str(source))  # pyright: ignore[reportArgumentType]
        optimizer_state = load_trainer_state(source)["optimizer"] if tc.init_optimizer else None
    except CheckpointError as exc:
        raise SetupError(
            f"train.init_from={tc.init_from!r} is not a usable run or checkpoint: {exc}"
        ) from exc
    distributed.load_full_weights(training.model, weights)  # plain, DDP or FSDP2-sharded model
    if optimizer_state is not None:
        distributed.refuse_sharded(training.model, "train.init_optimizer")
        training.optimizer.load_state_dict(optimizer_state)
    also = " and optimizer state" if tc.init_optimizer else ""
    log.info(
        f"new run {cfg.run.name} initialised from {source} (weights{also}; not an exact resume)"
    )


# ----------------------------------------------------------------------------- what may change
def flatten(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in tree.items():
        if isinstance(value, dict):
            flat |= flatten(value, f"{prefix}{key}.")
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def check_resume_allowed(
    saved: dict[str, Any],
    current: dict[str, Any],
    origins: Mapping[str, object],
    *,
    checkpoint: Path,
    step: int,
) -> list[str]:
    """Raise ResumeError listing every change outside RESUME_MAY_CHANGE; return the allowed ones.

    A key the checkpoint's config does not hold (added to Enlace after it was written) whose value
    now is its schema default is no change: updating Enlace never strands a run."""
    refused: list[str] = []
    allowed: list[str] = []
    old, new = flatten(saved), flatten(current)
    for key in sorted(old.keys() | new.keys()):
        before, after = old.get(key), new.get(key)
        if (key in old, before) == (key in new, after) or (
            key not in old and _is_default(key, after)
        ):
            continue  # unchanged, or a key newer than the checkpoint at its default: same run
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


def _is_default(key: str, value: Any) -> bool:
    """Whether `value` is today's schema default of the dotted config `key`."""
    from enlace_config.schema import RunConfig
    from enlace_config.schema_keys import schema_default

    try:
        return schema_default(RunConfig, key) == value
    except KeyError:
        return False


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
        f"WARNING: resuming with {now} CPU threads instead of the checkpoint's {saved} "
        "(train.allow_thread_change=true): the run is no longer bit-exact."
    )
