"""Running one training job on several processes: torchrun, DDP, FSDP2 and their collectives.

Everything the trainer needs to know about other ranks lives here, so that the loop stays the
single-process loop with a few calls at fixed points; without torchrun's environment every call
is a no-op. The small collectives (metrics, the stop flag, objects) run on a gloo "control" group
over CPU tensors, so they never wait on the GPU's queue. Checkpoint files are checkpointing.py's.

Bounded stop: a rank that dies ends the job through torchrun's own failure handling, and every
collective has a finite process-group timeout as the backstop for a rank that hangs.
"""

from __future__ import annotations

import inspect
import os
import sys
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Literal, cast

import torch
import torch.distributed as dist
from torch import nn

from enlace_train.errors import TrainError
from enlace_train.metrics import MetricsWriter

Parallelism = Literal["ddp", "fsdp"]

#: Backstop for a collective that never completes (a rank stuck without dying). Long enough for
#: rank 0 to write a large non-sharded checkpoint while the others wait at the barrier.
DEFAULT_TIMEOUT = timedelta(minutes=15)

_TORCHRUN_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK")


class DistributedError(TrainError):
    """A problem the user can fix: how the job was launched, or what a checkpoint was written by."""


@dataclass(frozen=True)
class DistInfo:
    """Where this process stands in the job. The single-process run is rank 0 of 1, no backend."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    local_world_size: int = 1
    backend: str | None = None
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    #: A gloo group over the same ranks for the small control-plane collectives (metrics, the
    #: stop flag, objects): on CPU tensors, they never wait for the GPU's queue of work.
    control_group: Any = field(default=None, compare=False, repr=False)

    @property
    def distributed(self) -> bool:
        """True under torchrun (even with one process: the wrapper is then in place)."""
        return self.backend is not None

    @property
    def is_main(self) -> bool:
        """Rank 0: the only rank that writes files and logs."""
        return self.rank == 0


def launched_by_torchrun(environ: Mapping[str, str] | None = None) -> bool:
    """Whether torchrun (or another launcher setting the same variables) started this process."""
    env = os.environ if environ is None else environ
    return all(name in env for name in _TORCHRUN_VARS)


def read_env(environ: Mapping[str, str] | None = None) -> DistInfo:
    """Rank, world size and local rank from torchrun's environment, without any collective."""
    env = os.environ if environ is None else environ
    if not launched_by_torchrun(env):
        return DistInfo()
    try:
        rank, world, local = (int(env[name]) for name in _TORCHRUN_VARS)
        local_world = int(env.get("LOCAL_WORLD_SIZE", env["WORLD_SIZE"]))
    except ValueError as exc:
        values = ", ".join(f"{n}={env.get(n)!r}" for n in (*_TORCHRUN_VARS, "LOCAL_WORLD_SIZE"))
        raise DistributedError(
            f"the launcher's environment is not a valid torchrun environment ({values}): start "
            "the job with `torchrun --nproc-per-node N -m enlace_train CONFIG`"
        ) from exc
    if not (0 <= rank < world and 0 <= local < local_world):
        raise DistributedError(
            f"inconsistent launcher environment: RANK={rank}, WORLD_SIZE={world}, "
            f"LOCAL_RANK={local}, LOCAL_WORLD_SIZE={local_world}"
        )
    return DistInfo(rank=rank, world_size=world, local_rank=local, local_world_size=local_world)


def backend_for(device: str) -> str:
    """The process-group backend for the hardware profile's device: NCCL on CUDA, gloo on CPU."""
    return "nccl" if device == "cuda" else "gloo"


def bind_local_device(device: str, environ: Mapping[str, str] | None = None) -> None:
    """Make this rank's GPU the current CUDA device before anything touches CUDA (so the hardware
    check and first allocations land on its own board, not all on GPU 0). No collective."""
    info = read_env(environ)
    if device != "cuda" or not launched_by_torchrun(environ) or not torch.cuda.is_available():
        return
    if info.local_rank < torch.cuda.device_count():  # else init_distributed says so
        torch.cuda.set_device(info.local_rank)


def init_distributed(
    device: str,
    *,
    timeout: timedelta = DEFAULT_TIMEOUT,
    environ: Mapping[str, str] | None = None,
) -> DistInfo:
    """Join the job's process group if torchrun started us; otherwise the single-process info.
    Called after the hardware check, so a bad profile fails on every rank before any collective."""
    info = read_env(environ)
    if not launched_by_torchrun(environ):
        return DistInfo(device=torch.device(device))
    backend = backend_for(device)
    if device == "cuda":
        count = torch.cuda.device_count()
        if info.local_rank >= count:
            raise DistributedError(
                f"local rank {info.local_rank} has no GPU: this node shows {count} CUDA "
                f"device(s) for {info.local_world_size} processes. Start torchrun with "
                f"--nproc-per-node {count} or fewer."
            )
        torch.cuda.set_device(info.local_rank)
        local_device = torch.device("cuda", info.local_rank)
    else:
        local_device = torch.device("cpu")
    if not dist.is_initialized():
        device_id = local_device if backend == "nccl" else None
        dist.init_process_group(backend, timeout=timeout, device_id=device_id)
    return DistInfo(
        rank=dist.get_rank(),
        world_size=dist.get_world_size(),
        local_rank=info.local_rank,
        local_world_size=info.local_world_size,
        backend=dist.get_backend(),
        device=local_device,
        control_group=dist.new_group(backend="gloo", timeout=timeout),
    )


def shutdown(info: DistInfo) -> None:
    """Leave the process group cleanly (a no-op for the single-process run)."""
    if info.distributed and dist.is_initialized():
        dist.destroy_process_group()


# --------------------------------------------------------------------------- model wrapping
def transformer_blocks(model: nn.Module) -> nn.ModuleList:
    """The model's list of transformer blocks (the FSDP2 sharding unit)."""
    blocks = getattr(model, "layers", None)
    if not isinstance(blocks, nn.ModuleList):
        raise TypeError(f"cannot find the transformer blocks of {type(model).__name__}")
    return blocks


def wrap_model(model: nn.Module, parallelism: Parallelism, info: DistInfo) -> nn.Module:
    """DDP or FSDP2 (``fully_shard`` on every block, then the root) around the model, already on
    ``info.device``; unchanged when not distributed. Every rank must have built the same initial
    weights (same seed): FSDP2 keeps each rank's own slice of its local copy."""
    if not info.distributed:
        return model
    if parallelism == "ddp":
        from torch.nn.parallel import DistributedDataParallel

        # Buffers (the rotary tables) are computed from the config, identical on every rank: no
        # need to broadcast them before each forward (newer torch renamed the keyword).
        params = inspect.signature(DistributedDataParallel.__init__).parameters
        sync = "forward_sync_buffers" if "forward_sync_buffers" in params else "broadcast_buffers"
        options: dict[str, Any] = {sync: False, "gradient_as_bucket_view": True}
        device_ids = [info.local_rank] if info.device.type == "cuda" else None
        return DistributedDataParallel(model, device_ids=device_ids, **options)
    if parallelism == "fsdp":
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard

        # The profile's device, not whatever accelerator torch finds (a CPU run on a GPU box).
        mesh = init_device_mesh(info.device.type, (info.world_size,))
        blocks = transformer_blocks(model)
        for i, block in enumerate(blocks):
            # The last block's parameters are needed again right away by backward: keep them.
            fully_shard(block, mesh=mesh, reshard_after_forward=i < len(blocks) - 1)
        fully_shard(model, mesh=mesh)  # the root: embeddings, final norm, head
        return model
    raise ValueError(f"unknown parallelism {parallelism!r} (expected 'ddp' or 'fsdp')")


def unwrap_model(model: nn.Module) -> nn.Module:
    """The user's module inside a DDP wrapper (FSDP2 wraps in place: the model itself)."""
    from torch.nn.parallel import DistributedDataParallel

    return model.module if isinstance(model, DistributedDataParallel) else model


def is_sharded(model: nn.Module) -> bool:
    """Whether FSDP2 shards this model's parameters. Never imports FSDP (seconds of start-up): if
    nothing imported it, nothing was sharded."""
    fsdp = sys.modules.get("torch.distributed.fsdp")
    module_class = getattr(fsdp, "FSDPModule", None)
    return module_class is not None and isinstance(model, module_class)


@contextmanager
def gradient_sync(model: nn.Module, enabled: bool) -> Iterator[None]:
    """Around one micro-step's forward and backward: reduce gradients across ranks only if enabled
    (the last micro-step of an optimizer step). Plain modules ignore it."""
    from torch.nn.parallel import DistributedDataParallel

    if isinstance(model, DistributedDataParallel):
        with nullcontext() if enabled else model.no_sync():
            yield
    elif is_sharded(model):
        sharded: Any = model  # an FSDPModule
        sharded.set_requires_gradient_sync(enabled)
        try:
            yield
        finally:
            sharded.set_requires_gradient_sync(True)
    else:
        yield


def clip_grad_norm(model: nn.Module, max_norm: float) -> torch.Tensor:
    """Total gradient norm over all ranks' parameters (0-dim), gradients clipped to ``max_norm``.
    Under FSDP2 the norm of the sharded DTensor gradients is reduced to the full value, the same on
    every rank, before clipping; anything else goes through ``clip_grad_norm_`` unchanged."""
    if not is_sharded(model):
        return torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    from torch.distributed.tensor import DTensor

    params = [p for p in model.parameters() if p.grad is not None]
    grads = [p.grad for p in params if p.grad is not None]
    total = torch.nn.utils.get_total_norm(grads, norm_type=2.0)
    if isinstance(total, DTensor):
        total = total.full_tensor()
    torch.nn.utils.clip_grads_with_norm_(params, max_norm, total)
    return total


def grad_scaler_for(scaler: torch.amp.GradScaler, model: nn.Module) -> torch.amp.GradScaler:
    """The GradScaler to use with this model: under FSDP2 with loss scaling, a sharded one, which
    all-reduces the inf/nan flag (a plain one would let one rank skip a step another takes)."""
    if not (is_sharded(model) and scaler.is_enabled()):
        return scaler
    from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler

    return ShardedGradScaler(
        scaler._device,  # pyright: ignore[reportPrivateUsage]
        init_scale=scaler.get_scale(),
        growth_factor=scaler.get_growth_factor(),
        backoff_factor=scaler.get_backoff_factor(),
        growth_interval=scaler.get_growth_interval(),
        enabled=True,
    )


# --------------------------------------------------------------------------- reductions
def _all_reduce(values: Sequence[float], info: DistInfo, op: Any) -> list[float]:
    # Python floats in, Python floats out: a CPU tensor over the gloo control group.
    t = torch.tensor([float(v) for v in values], dtype=torch.float64)
    dist.all_reduce(t, op=op, group=info.control_group)
    return t.tolist()


def reduce_mean(values: Sequence[float], info: DistInfo) -> list[float]:
    """The mean of each value over all ranks (identity for the single-process run)."""
    if not info.distributed or info.world_size == 1:
        return [float(v) for v in values]
    return [v / info.world_size for v in _all_reduce(values, info, dist.ReduceOp.SUM)]


def reduce_max(values: Sequence[float], info: DistInfo) -> list[float]:
    """The maximum of each value over all ranks (peak memory, for instance)."""
    if not info.distributed or info.world_size == 1:
        return [float(v) for v in values]
    return _all_reduce(values, info, dist.ReduceOp.MAX)


def any_rank(flag: bool, info: DistInfo) -> bool:
    """True on every rank if it is true on any: how all ranks agree to stop at the same step (a
    signal may reach them at different moments). On the CPU control group: no GPU sync."""
    return reduce_max([1.0 if flag else 0.0], info)[0] > 0


def broadcast_object(obj: Any, info: DistInfo, src: int = 0) -> Any:
    """Rank ``src``'s (picklable) object, on every rank."""
    if not info.distributed or info.world_size == 1:
        return obj
    box = [obj if info.rank == src else None]
    dist.broadcast_object_list(box, src=src, group=info.control_group)
    return box[0]


def gather_objects(obj: Any, info: DistInfo) -> list[Any] | None:
    """Every rank's object, in rank order, on rank 0; None on the other ranks."""
    if not info.distributed or info.world_size == 1:
        return [obj]
    out: list[Any] | None = [None] * info.world_size if info.is_main else None
    dist.gather_object(obj, out, dst=0, group=info.control_group)
    return out


def barrier(info: DistInfo) -> None:
    """Wait for every rank (no-op for the single-process run)."""
    if info.distributed and info.world_size > 1:
        dist.barrier(group=info.control_group)


# --------------------------------------------------------------------------- files and logs
class NullMetricsWriter(MetricsWriter):
    """What ranks other than 0 write metrics to: nothing (no file is opened)."""

    def __init__(self) -> None:
        pass

    def write(self, row: dict[str, Any]) -> None:
        pass

    def close(self) -> None:
        pass


# --------------------------------------------------------------------------- full weights
def consolidated_state_dict(model: nn.Module, info: DistInfo) -> dict[str, torch.Tensor] | None:
    """The full, unsharded model weights on rank 0's CPU (None elsewhere). Call on every rank:
    under FSDP2 it is a collective."""
    if is_sharded(model):
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

        full = get_model_state_dict(
            model, options=StateDictOptions(full_state_dict=True, cpu_offload=True)
        )
        return cast(dict[str, torch.Tensor], full) if info.is_main else None
    if not info.is_main:
        return None
    return {k: v.detach().cpu() for k, v in unwrap_model(model).state_dict().items()}


def load_full_weights(model: nn.Module, state_dict: Mapping[str, torch.Tensor]) -> None:
    """Load full (unsharded) weights, e.g. ``train.init_from``'s, into a plain or FSDP2 model."""
    if not is_sharded(model):
        unwrap_model(model).load_state_dict(state_dict)
        return
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

    set_model_state_dict(model, dict(state_dict), options=StateDictOptions(full_state_dict=True))


def refuse_sharded(model: nn.Module, what: str) -> None:
    """Raise for a feature that reads a single-process optimizer state into an FSDP2 model."""
    if is_sharded(model):
        raise DistributedError(
            f"{what} is not supported with train.parallelism=fsdp: the checkpoint's optimizer "
            "state is not sharded. Start without it (weights only), or with train.parallelism=ddp."
        )
