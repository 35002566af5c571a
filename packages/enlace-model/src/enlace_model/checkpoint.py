"""The checkpoint layout, defined once for the trainer, the export, `sample` and `remote.sh pull`.

    RUN_DIR/checkpoints/step_<N>/
        model.safetensors   the weights (safetensors: loading never unpickles anything)
        model.json          {"format": "enlace-checkpoint", "format_version": 1, "config": {...}}
        tokenizer files     written by enlace-data (TOKENIZER_FILES), copied by the export; a
                            chat model's template is tokenizer_config.json's `chat_template`
        trainer_state.pt    the trainer's state (optimizer, RNGs, loader...), its own format
        COMPLETE            written last: {"format_version", "step", "files": {name: {sha256, bytes}}}

A checkpoint directory appears under its final name only once complete: `atomic_checkpoint`
writes into a temporary directory beside it, writes COMPLETE with the sha256 of every file, fsyncs
and renames. A `step_<N>` directory without COMPLETE, or whose files do not match their recorded
hashes, is incomplete or corrupt: `find_latest_checkpoint` skips it with a warning naming it.

The attention backend and the dtype are chosen when loading (`load_model`), never stored: a model
trained in float16 with mem_efficient attention on a GPU loads in float32 on a CPU-only server.
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import json
import os
import re
import shutil
import struct
import sys
import warnings
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import torch
from enlace_config.schema.model import ModelConfig
from pydantic import ValidationError
from torch import Tensor

from enlace_model.errors import CheckpointError
from enlace_model.hf import config_from_hf, state_dict_from_hf
from enlace_model.model import Transformer

__all__ = [
    "CHECKPOINTS_DIR",
    "COMPLETE_FILE",
    "CONFIG_FILE",
    "FORMAT_VERSION",
    "MODEL_FILE",
    "TOKENIZER_DESCRIPTION_FILE",
    "TOKENIZER_FILES",
    "TRAINER_STATE_FILE",
    "CheckpointError",
    "atomic_checkpoint",
    "check_state_dict",
    "checkpoint_step",
    "find_latest_checkpoint",
    "list_checkpoints",
    "load_model",
    "load_state_dict",
    "read_model_config",
    "resolve_checkpoint",
    "save_model",
    "step_dirs",
    "verify_checkpoint",
]

FORMAT = "enlace-checkpoint"
FORMAT_VERSION = 1
CHECKPOINTS_DIR = "checkpoints"
MODEL_FILE = "model.safetensors"
CONFIG_FILE = "model.json"
TOKENIZER_DESCRIPTION_FILE = "enlace_tokenizer.json"
# What enlace-data's Tokenizer.save writes (enlace_data.tokenizer.files); each present one is copied.
HF_TOKENIZER_FILE = "tokenizer.json"
HF_TOKENIZER_CONFIG_FILE = "tokenizer_config.json"
TOKENIZER_FILES = (
    HF_TOKENIZER_FILE,
    HF_TOKENIZER_CONFIG_FILE,
    "special_tokens_map.json",
    "tokenizer.model",
    TOKENIZER_DESCRIPTION_FILE,
)
TRAINER_STATE_FILE = "trainer_state.pt"
COMPLETE_FILE = "COMPLETE"
HF_CONFIG_FILE = "config.json"
_STEP_RE = re.compile(r"^step_(\d+)$")
_TMP_PREFIX = ".tmp-"

PathLike = str | os.PathLike[str]


# --- layout -------------------------------------------------------------------------------------
def checkpoint_step(path: PathLike) -> int | None:
    """N for a directory named step_<N>, else None."""
    m = _STEP_RE.match(Path(path).name)
    return int(m.group(1)) if m else None


def step_dirs(run_dir: PathLike) -> list[Path]:
    """Every checkpoints/step_<N> directory of a run, complete or not, oldest step first."""
    root = Path(run_dir) / CHECKPOINTS_DIR
    found = root.iterdir() if root.is_dir() else ()
    steps = [(n, p) for p in found if (n := checkpoint_step(p)) is not None and p.is_dir()]
    return [p for _, p in sorted(steps)]


def list_checkpoints(run_dir: PathLike) -> list[Path]:
    """The run's checkpoint directories that carry a COMPLETE marker, oldest step first (hashes
    are not checked here: `find_latest_checkpoint` and `verify_checkpoint` do that)."""
    return [p for p in step_dirs(run_dir) if (p / COMPLETE_FILE).is_file()]


# --- writing ------------------------------------------------------------------------------------
def _sha256(path: Path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def _fsync_dir(path: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _write_complete(directory: Path, step: int | None) -> None:
    files: dict[str, dict[str, Any]] = {}
    for p in sorted(p for p in directory.rglob("*") if p.is_file() and p.name != COMPLETE_FILE):
        with open(p, "rb") as f:
            os.fsync(f.fileno())
        files[p.relative_to(directory).as_posix()] = {
            "sha256": _sha256(p),
            "bytes": p.stat().st_size,
        }
    marker = {"format": FORMAT, "format_version": FORMAT_VERSION, "step": step, "files": files}
    with atomic_file(directory / COMPLETE_FILE) as tmp:
        tmp.write_bytes((json.dumps(marker, indent=1) + "\n").encode())
    _fsync_dir(directory)


@contextlib.contextmanager
def atomic_file(path: Path) -> Iterator[Path]:
    """enlace-model's one atomic file write: yield a temporary path beside `path` to write; on a
    clean exit it is fsynced and renamed over `path`, on an exception removed. (The directory's
    fsync is the caller's: a checkpoint fsyncs its directory once, after all its files.)"""
    tmp = path.with_name(f"{_TMP_PREFIX}{path.name}-{os.getpid()}")
    try:
        yield tmp
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _remove_stale_temporaries(root: Path) -> None:
    """Temporary checkpoint directories left by a process that died mid-save (kill -9)."""
    for p in root.glob(f"{_TMP_PREFIX}*"):
        m = re.search(r"-(\d+)$", p.name)
        if p.is_dir() and m and int(m.group(1)) != os.getpid() and not _pid_alive(int(m.group(1))):
            shutil.rmtree(p, ignore_errors=True)


@contextlib.contextmanager
def atomic_checkpoint(run_dir: PathLike, step: int, name: str | None = None) -> Iterator[Path]:
    """Yield a temporary directory inside RUN_DIR/checkpoints/ to write a checkpoint into.

    On a clean exit: COMPLETE (sha256 of every file) is written, everything fsynced, and the
    directory renamed to step_<N> (or `name`, e.g. "best": not a step directory, so never resumed
    from nor pruned), replacing an older one of that name. On an exception the temporary
    directory is removed and the exception propagates: no partial step_<N> ever exists."""
    if step < 0:
        raise ValueError(f"step must be >= 0, got {step}")
    root = Path(run_dir) / CHECKPOINTS_DIR
    root.mkdir(parents=True, exist_ok=True)
    _remove_stale_temporaries(root)
    final = root / (name or f"step_{step}")
    tmp = root / f"{_TMP_PREFIX}{final.name}-{os.getpid()}"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    try:
        yield tmp
        _write_complete(tmp, step)
        old = None
        if final.exists():
            old = root / f"{_TMP_PREFIX}old-{final.name}-{os.getpid()}"
            os.replace(final, old)
        os.replace(tmp, final)
        _fsync_dir(root)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


_SAFETENSORS_DTYPES = {
    torch.float64: "F64",
    torch.float32: "F32",
    torch.float16: "F16",
    torch.bfloat16: "BF16",
    torch.int64: "I64",
    torch.int32: "I32",
    torch.int16: "I16",
    torch.int8: "I8",
    torch.uint8: "U8",
    torch.bool: "BOOL",
}


def write_safetensors(
    path: PathLike, tensors: Mapping[str, Tensor], metadata: dict[str, str]
) -> None:
    """Write a .safetensors file (8-byte little-endian header length, JSON header, raw data),
    fsynced. Written here because safetensors' own torch writer needs numpy, which enlace-model
    does not depend on; the files are read by safetensors, transformers and llama.cpp alike."""
    if sys.byteorder != "little":
        raise RuntimeError("writing safetensors on a big-endian machine is not supported")
    header: dict[str, Any] = {}
    blobs: list[Tensor] = []
    offset = 0
    for name, value in tensors.items():
        t = value.detach().to("cpu").contiguous()
        if t.dtype not in _SAFETENSORS_DTYPES:
            raise ValueError(f"tensor {name!r}: dtype {t.dtype} has no safetensors code")
        nbytes = t.numel() * t.element_size()
        header[name] = {
            "dtype": _SAFETENSORS_DTYPES[t.dtype],
            "shape": list(t.shape),
            "data_offsets": [offset, offset + nbytes],
        }
        blobs.append(t)
        offset += nbytes
    header["__metadata__"] = metadata
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)  # the data starts 8-byte aligned
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(raw)))
        f.write(raw)
        for t in blobs:
            n = t.numel() * t.element_size()
            if n:  # a view of the tensor's memory, no copy
                f.write((ctypes.c_ubyte * n).from_address(t.data_ptr()))
        f.flush()
        os.fsync(f.fileno())


def save_model(directory: PathLike, model: Transformer, cfg: ModelConfig) -> None:
    """Write model.safetensors and model.json into `directory` (each file atomically). The weights
    are saved in the dtype they have, each tensor once."""
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    with atomic_file(d / MODEL_FILE) as tmp:
        write_safetensors(tmp, model.state_dict(), {"format": "pt"})
    meta = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "config": cfg.model_dump(mode="json"),
    }
    with atomic_file(d / CONFIG_FILE) as tmp:
        tmp.write_bytes((json.dumps(meta, indent=2) + "\n").encode())


# --- finding and checking -----------------------------------------------------------------------
def verify_checkpoint(path: PathLike, files: tuple[str, ...] | None = None) -> None:
    """Raise CheckpointError unless `path` holds a COMPLETE marker and every file it lists (or
    only `files` of them) has the recorded size and sha256."""
    d = Path(path)
    marker_path = d / COMPLETE_FILE
    if not marker_path.is_file():
        raise CheckpointError(
            f"{d}: incomplete checkpoint (no {COMPLETE_FILE} marker: the save was interrupted). "
            f"Use an earlier checkpoint or the run directory, which picks the newest complete one."
        )
    try:
        listed = json.loads(marker_path.read_text())["files"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise CheckpointError(f"{marker_path}: unreadable completion marker ({e})") from e
    if not isinstance(listed, dict) or not listed:
        raise CheckpointError(
            f"{marker_path}: the completion marker lists no files (its 'files' is "
            f"{type(listed).__name__} {str(listed)[:60]}), so nothing in {d} can be checked. "
            "Do not use it; use another checkpoint."
        )
    for name in files if files is not None else tuple(listed):
        entry = listed.get(name)
        p = d / name
        if entry is None:
            if p.exists():
                raise CheckpointError(f"{p}: not listed in {COMPLETE_FILE}; it was added later")
            continue
        if not isinstance(entry, dict):
            raise CheckpointError(f"{marker_path}: the entry of {name!r} is not a size and hash")
        if not p.is_file():
            raise CheckpointError(f"{p}: missing (listed in {COMPLETE_FILE})")
        if p.stat().st_size != entry.get("bytes") or _sha256(p) != entry.get("sha256"):
            raise CheckpointError(
                f"{p}: checksum mismatch with {COMPLETE_FILE}: the file was modified or damaged "
                f"after the checkpoint was written. Do not use it; use another checkpoint."
            )


def find_latest_checkpoint(run_dir: PathLike) -> Path | None:
    """The newest complete and intact step_<N> of a run directory, or None. Incomplete or corrupt
    ones are skipped with a warning naming them."""
    for p in reversed(step_dirs(run_dir)):
        try:
            verify_checkpoint(p)
        except CheckpointError as e:
            warnings.warn(f"skipping checkpoint: {e}", stacklevel=2)
            continue
        return p
    return None


def is_hf_folder(d: Path) -> bool:
    return (d / HF_CONFIG_FILE).is_file() and not (d / CONFIG_FILE).is_file()


def resolve_checkpoint(path: PathLike) -> Path:
    """A checkpoint directory from a run directory (its newest complete checkpoint), a checkpoint
    directory, a directory written by `save_model`, or an exported Hugging Face folder."""
    p = Path(path)
    if not p.exists():
        raise CheckpointError(f"{p}: no such file or directory")
    if p.is_file():
        if p.name in (MODEL_FILE, CONFIG_FILE, HF_CONFIG_FILE):
            return resolve_checkpoint(p.parent)
        raise CheckpointError(f"{p}: give a run directory or a checkpoint directory, not a file")
    if (p / CONFIG_FILE).is_file() or (p / MODEL_FILE).is_file() or is_hf_folder(p):
        return p
    if (p / CHECKPOINTS_DIR).is_dir():
        latest = find_latest_checkpoint(p)
        if latest is None:
            raise CheckpointError(
                f"{p}: no complete checkpoint in {p / CHECKPOINTS_DIR} (none finished saving, or "
                f"all are damaged); train longer or point at a checkpoint directory"
            )
        return latest
    raise CheckpointError(
        f"{p}: neither a run directory (no {CHECKPOINTS_DIR}/), a checkpoint ({CONFIG_FILE}) nor an "
        f"exported Hugging Face folder ({HF_CONFIG_FILE})"
    )


def read_model_config(path: PathLike) -> ModelConfig:
    """The ModelConfig of a checkpoint (model.json) or an exported folder (config.json)."""
    d = resolve_checkpoint(path)
    if is_hf_folder(d):
        return config_from_hf(d / HF_CONFIG_FILE)
    f = d / CONFIG_FILE
    try:
        meta = json.loads(f.read_text())
    except OSError as e:
        raise CheckpointError(f"{f}: cannot read ({e.strerror})") from e
    except ValueError as e:
        raise CheckpointError(f"{f}: not valid JSON ({e})") from e
    if not isinstance(meta, dict) or meta.get("format") != FORMAT or "config" not in meta:
        raise CheckpointError(f"{f}: not an Enlace model description (format {FORMAT!r})")
    version = meta.get("format_version")
    if not isinstance(version, int) or version > FORMAT_VERSION:
        raise CheckpointError(
            f"{f}: checkpoint format version {version!r}; this enlace-model reads up to "
            f"{FORMAT_VERSION}. Upgrade enlace-model."
        )
    try:
        return ModelConfig.model_validate(meta["config"])
    except ValidationError as e:
        raise CheckpointError(f"{f}: invalid model config: {e}") from e


def load_state_dict(path: PathLike) -> dict[str, Tensor]:
    """The weights of a checkpoint with Enlace's key names (an exported folder's are renamed),
    checked against its config: a tensor that disagrees is named (CheckpointError)."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    d = resolve_checkpoint(path)
    hf = is_hf_folder(d)
    f = d / MODEL_FILE
    if not f.is_file():
        raise CheckpointError(f"{f}: missing (the checkpoint holds no weights)")
    if not hf and (d / COMPLETE_FILE).is_file():
        verify_checkpoint(d, (MODEL_FILE, CONFIG_FILE))
    elif not hf and checkpoint_step(d) is not None:
        verify_checkpoint(d)  # a step_<N> without its marker: raises "incomplete"
    try:
        state = load_file(str(f), device="cpu")
    except (SafetensorError, OSError, ValueError) as e:
        raise CheckpointError(f"{f}: not a readable safetensors file ({e})") from e
    cfg = read_model_config(d)
    if hf:
        state = state_dict_from_hf(state, cfg)
    with torch.device("meta"):
        reference = Transformer(cfg)
    check_state_dict(state, reference, str(f))
    return state


def check_state_dict(state: Mapping[str, Tensor], model: Transformer, origin: str) -> None:
    """Raise CheckpointError naming the first tensor whose name or shape differs from the model."""
    expected, problem = model.state_dict(), None
    for name, ref in expected.items():
        got = state.get(name)
        if got is None:
            problem = f"{name!r} {tuple(ref.shape)} is missing from the file"
        elif tuple(got.shape) != tuple(ref.shape):
            problem = f"{name!r} has shape {tuple(got.shape)} in the file but the config gives {tuple(ref.shape)}"
        if problem:
            break
    else:
        extra = [k for k in state if k not in expected]
        problem = (
            f"{extra[0]!r} is in the file but not in a model of this config" if extra else None
        )
    if problem:
        raise CheckpointError(
            f"{origin}: weights do not match the config; first mismatched tensor: {problem}"
        )


_DTYPES = {n: getattr(torch, n) for n in ("float32", "float16", "bfloat16", "float64")}
_DTYPES |= {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


def load_model(
    path: PathLike,
    *,
    device: str | torch.device = "cpu",
    dtype: torch.dtype | str = torch.float32,
    attention: str = "auto",
) -> Transformer:
    """Build the model of a training checkpoint, a run directory (newest complete checkpoint) or an
    exported Hugging Face folder, on `device` in `dtype`, with the `attention` backend. Safetensors
    only: nothing in the files can run code. In eval mode."""
    if isinstance(dtype, str) and dtype not in _DTYPES:
        raise ValueError(f"unknown dtype {dtype!r}; choose one of {', '.join(_DTYPES)}")
    d = resolve_checkpoint(path)
    state = load_state_dict(d)
    with torch.device("meta"):
        model = Transformer(read_model_config(d), attention=attention)
    model.to_empty(device="cpu")
    model.reset_rotary()  # buffers are not in the file; every parameter is loaded just below
    model.load_state_dict(state, strict=True)
    model.to(device=device, dtype=_DTYPES[dtype] if isinstance(dtype, str) else dtype)
    return model.eval()
