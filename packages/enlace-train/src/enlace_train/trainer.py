"""The training loop, and the plain functions it calls.

Start-up runs in the order that fails fastest: the hardware profile is checked against this machine
(backends.py), then data and model are built and checked against each other, then the run directory
is prepared (resume from its newest complete checkpoint, or a new run, optionally from
`train.init_from`). Only then does `train` enter the loop, which reads top to bottom:
schedule -> micro-steps with accumulation -> unscale, clip, step -> log -> eval -> checkpoint.

Exactness: everything that decides the numbers (weights, optimizer moments, GradScaler, RNGs, loader
position, step) is in the checkpoint, the schedule is a function of the step, and the logged loss
is the step's own (no running average), so a stopped and resumed CPU run writes the same losses and
ends with the same weights, bit for bit, as one that never stopped.
"""

from __future__ import annotations

import contextlib
import logging
import math
import signal
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

import torch
from enlace_config.schema import RunConfig
from enlace_data.loader import Loader, build_loader, eval_batches
from enlace_model import Transformer, build_model, count_parameters, flops_per_token
from enlace_model.checkpoint import check_state_dict, load_state_dict, resolve_checkpoint

from enlace_train import distributed
from enlace_train.backends import Backend, setup_backend
from enlace_train.checkpointing import (
    TRAINER_STATE_FORMAT,
    check_resume_allowed,
    check_threads,
    latest_checkpoint,
    load_trainer_state,
    save_checkpoint,
)
from enlace_train.errors import OutOfMemory, SetupError
from enlace_train.evaluate_text import held_out_text
from enlace_train.metrics import (
    METRICS_FILE,
    MetricsWriter,
    Progress,
    close_logging,
    format_duration,
    log,
    setup_logging,
    truncate_metrics,
)
from enlace_train.optim import build_optimizer
from enlace_train.schedule import lr_at
from enlace_train.state import provenance, rng_state, seed_everything, set_rng_state

Batch = tuple[torch.Tensor, ...]  # inputs, targets (and segments for packed chat rows)


@dataclass
class TrainProgress:
    """The counters a checkpoint carries besides the tensors."""

    step: int = 0
    tokens_seen: int = 0
    skipped_steps: int = 0
    elapsed_s: float = 0.0  # training wall time of earlier segments of this run


@dataclass
class TrainSummary:
    """What `train` returns: where the run ended and how fast it went (benchmarks read it)."""

    run_dir: Path
    step: int
    stopped_by_signal: bool
    final_val_loss: float | None
    final_val_bpb: float | None
    tokens_per_s: list[float] = field(default_factory=list)
    elapsed_s: float = 0.0


class StopSignals:
    """SIGINT/SIGTERM ask the loop to finish the current step, save and exit cleanly. A second
    SIGINT stops at once (KeyboardInterrupt; the atomic checkpoint leaves nothing half-written)."""

    def __init__(self) -> None:
        self.requested: str | None = None
        self._previous: dict[int, Any] = {}

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.requested and signum == signal.SIGINT:
            raise KeyboardInterrupt
        self.requested = signal.Signals(signum).name  # only a flag: the loop logs and saves

    def install(self) -> None:
        for sig in (signal.SIGINT, signal.SIGTERM):
            try:
                self._previous[sig] = signal.signal(sig, self._handle)
            except ValueError:  # not the main thread (e.g. a benchmark's worker): no handlers
                return

    def restore(self) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()


# ----------------------------------------------------------------------------- building blocks
def micro_batch_suggestion(micro_batch: int, per_step: int) -> int | None:
    """The next micro-batch size down that still divides the per-device batch of a step."""
    smaller = [d for d in range(micro_batch - 1, 0, -1) if per_step % d == 0]
    return smaller[0] if smaller else None


def out_of_memory(cfg: RunConfig, world_size: int) -> OutOfMemory:
    mb = cfg.hardware.micro_batch_size
    per_step = cfg.train.global_batch_size // world_size
    nxt = micro_batch_suggestion(mb, per_step)
    hint = (
        f"try hardware.micro_batch_size={nxt} (gradient accumulation grows to keep "
        f"train.global_batch_size={cfg.train.global_batch_size})"
        if nxt
        else "micro-batch 1 does not fit: use a smaller model or a shorter data.context_length"
    )
    return OutOfMemory(
        f"Out of GPU memory at hardware.micro_batch_size={mb} (profile '{cfg.hardware.name}', "
        f"context {cfg.data.context_length}): {hint}. Nothing was saved from the failed step; the "
        f"run resumes from its last complete checkpoint."
    )


@torch.no_grad()
def evaluate(
    model: torch.nn.Module, batches: list[Batch], backend: Backend, bytes_per_token: float
) -> tuple[float, float]:
    """Mean validation cross-entropy (nats/token) and bits per byte, on the fixed val batches."""
    was_training = model.training
    model.eval()
    total = torch.zeros((), dtype=torch.float64, device=backend.device)
    for batch in batches:
        with backend.autocast():
            total += model(*batch).ce_loss.double()
    model.train(was_training)
    val_loss = float(total.item()) / len(batches)
    return val_loss, val_loss / math.log(2) / bytes_per_token


def trainer_state(
    *,
    progress: TrainProgress,
    optimizer: torch.optim.Optimizer,
    scaler: torch.amp.GradScaler,
    loader: Loader,
    backend: Backend,
    resolved: Any,
    init_from: str | None,
) -> dict[str, Any]:
    """Everything besides the weights that a resumed run needs to continue bit for bit (plain data
    and tensors only: it loads with weights_only=True)."""
    return {
        "format": TRAINER_STATE_FORMAT,
        "step": progress.step,
        "tokens_seen": progress.tokens_seen,
        "skipped_steps": progress.skipped_steps,
        "elapsed_s": progress.elapsed_s,
        "optimizer": optimizer.state_dict(),
        "scheduler": {"kind": "wsd", "step": progress.step},
        "grad_scaler": scaler.state_dict(),
        "rng": rng_state(backend.rng_state()),
        "loader": loader.state_dict(),
        "num_threads": torch.get_num_threads(),
        "world_size": 1,
        "config": resolved.to_dict(),
        "origins": resolved.origins_as_text(),
        "init_from": init_from,
        **provenance(),
    }


def write_tokenizer(cfg: RunConfig) -> Callable[[Path], None]:
    """A function that puts the run's tokenizer into a checkpoint directory, so that `sample` and
    the export find it there. Shards without a tokenizer beside them (synthetic data): a warning
    now, and checkpoints without a tokenizer."""
    from enlace_data import DataError
    from enlace_data.chat_loader import chat_tokenizer
    from enlace_data.tokenizer import ByteTokenizer, load_tokenizer

    try:
        if cfg.data.kind == "chat":
            tokenizer = chat_tokenizer(cfg.data)
        else:
            tokenizer = (
                ByteTokenizer() if cfg.data.kind == "bytes" else load_tokenizer(cfg.data.path)
            )
    except DataError as exc:
        log.warning(
            "WARNING: no tokenizer for the checkpoints (%s); `enlace-train sample` will "
            "need one copied in",
            exc,
        )
        tokenizer = None
    save = getattr(tokenizer, "save", None)

    def write(directory: Path) -> None:
        if save is not None:
            save(directory)

    return write


def _load_weights(model: Transformer, checkpoint: Path) -> None:
    """The checkpoint's weights into `model` (safetensors; a shape mismatch names the tensor)."""
    state = load_state_dict(checkpoint)
    check_state_dict(state, model, str(checkpoint))
    distributed.load_full_weights(model, state)  # plain, DDP or FSDP2-sharded model


# ----------------------------------------------------------------------------- the run
def train(resolved: Any) -> TrainSummary:
    """Run (or resume) the training described by a resolved config (enlace_config.ResolvedConfig)."""
    cfg: RunConfig = resolved.config
    hw = cfg.hardware
    progress_line = Progress()
    # under torchrun: this rank's GPU, before any CUDA call
    distributed.bind_local_device(hw.device)
    backend = setup_backend(hw)  # exits through HardwareError before any data is read
    # Under torchrun, join the process group only now: every rank has checked its hardware.
    info = distributed.init_distributed(hw.device)
    run_dir = Path(cfg.run.out_dir)
    if info.is_main:  # only rank 0 writes files and logs; the others print warnings and errors
        run_dir.mkdir(parents=True, exist_ok=True)
        setup_logging(run_dir, progress_line)
    else:
        progress_line.active = False
        setup_logging(None, progress_line)
        log.setLevel(logging.WARNING)
    try:
        return _train(resolved, cfg, backend, run_dir, progress_line, info)
    finally:
        progress_line.clear()
        close_logging()
        distributed.shutdown(info)


def _train(
    resolved: Any,
    cfg: RunConfig,
    backend: Backend,
    run_dir: Path,
    progress_line: Progress,
    info: distributed.DistInfo,
) -> TrainSummary:
    tc, hw = cfg.train, cfg.hardware
    world_size, rank = info.world_size, info.rank
    seed_everything(tc.seed)
    # --- data and model, checked against each other
    loader = build_loader(
        cfg.data,
        split="train",
        micro_batch_size=hw.micro_batch_size,
        seed=tc.seed,
        rank=rank,
        world_size=world_size,
        vocab_size=cfg.model.vocab_size,
    )
    val_loader = build_loader(
        cfg.data,
        split="val",
        micro_batch_size=hw.micro_batch_size,
        seed=tc.seed,
        vocab_size=cfg.model.vocab_size,
    )
    bytes_per_token = val_loader.bytes_per_token
    val_batches = [
        tuple(backend.to_device(a) for a in batch)
        for batch in eval_batches(
            cfg.data,
            micro_batch_size=hw.micro_batch_size,
            rank=rank,
            world_size=world_size,
            vocab_size=cfg.model.vocab_size,
        )
    ]
    if loader.vocab_size > cfg.model.vocab_size:
        raise SetupError(
            f"the data ({loader.description}) has vocabulary {loader.vocab_size}, larger than "
            f"model.vocab_size={cfg.model.vocab_size}"
        )
    text_eval = held_out_text(cfg, backend.autocast)  # None without data.eval_text_files
    model = build_model(cfg.model, attention=hw.attention).to(backend.device)
    wrapped = distributed.wrap_model(model, tc.parallelism, info)  # torchrun: DDP or FSDP2 shards
    optimizer = build_optimizer(model, cfg, backend)
    scaler = distributed.grad_scaler_for(backend.grad_scaler(), model)
    accum = cfg.grad_accumulation_steps(world_size)
    tokens_per_step = tc.global_batch_size * cfg.data.context_length
    # per device: MFU compares tokens/s of all ranks with one board's peak times the world size
    flops_per_tok = flops_per_token(cfg.model, cfg.data.context_length) / world_size

    # --- the run directory: resume, init_from, or a new run
    prog = TrainProgress()
    init_from = tc.init_from
    checkpoint = distributed.broadcast_object(
        latest_checkpoint(run_dir) if info.is_main else None, info
    )
    metrics_path = run_dir / METRICS_FILE
    if checkpoint is not None:
        state = load_trainer_state(checkpoint)
        allowed = check_resume_allowed(
            state["config"],
            resolved.to_dict(),
            dict(resolved.origins),
            checkpoint=checkpoint,
            step=state["step"],
        )
        check_threads(
            state["num_threads"],
            torch.get_num_threads(),
            allow_change=tc.allow_thread_change,
            checkpoint=checkpoint,
        )
        if distributed.is_sharded(model) or distributed.has_sharded_state(checkpoint):
            distributed.load_sharded(checkpoint, model, optimizer)  # FSDP: re-sharded on load
        else:
            _load_weights(model, checkpoint)
            optimizer.load_state_dict(state["optimizer"])
        if state["grad_scaler"]:
            scaler.load_state_dict(state["grad_scaler"])
        mine, world_size_warning = distributed.rank_resume_state(state, info)  # this rank's own
        loader.load_state_dict(mine["loader"])
        backend.set_rng_state(set_rng_state(mine["rng"]))
        if world_size_warning:
            log.warning(world_size_warning)
        prog = TrainProgress(
            state["step"], state["tokens_seen"], state["skipped_steps"], state["elapsed_s"]
        )
        init_from = state.get("init_from")
        kept = truncate_metrics(metrics_path, prog.step) if info.is_main else 0
        log.info(
            "resuming %s from %s (step %d; metrics.jsonl cut back to %d rows)%s",
            cfg.run.name,
            checkpoint,
            prog.step,
            kept,
            f"; allowed changes: {'; '.join(allowed)}" if allowed else "",
        )
    else:
        if info.is_main:
            truncate_metrics(metrics_path, 0)
        if tc.init_from:
            source = resolve_checkpoint(tc.init_from)
            _load_weights(model, source)
            if tc.init_optimizer:
                distributed.refuse_sharded(model, "train.init_optimizer")
                optimizer.load_state_dict(load_trainer_state(source)["optimizer"])
            log.info(
                "new run %s initialised from %s (weights%s; not an exact resume)",
                cfg.run.name,
                source,
                " and optimizer state" if tc.init_optimizer else "",
            )
    if info.is_main:
        (run_dir / "config.yaml").write_text(resolved.to_yaml(), encoding="utf-8")

    n_params = count_parameters(model, include_embeddings=False)
    log.info("run %s -> %s | %s", cfg.run.name, run_dir, backend.describe())
    log.info(
        "data: %s | model: %.2fM non-embedding parameters | batch %d x %d tokens = %d micro x %d "
        "accumulation | %d threads",
        loader.description,
        n_params / 1e6,
        tc.global_batch_size,
        cfg.data.context_length,
        hw.micro_batch_size,
        accum,
        torch.get_num_threads(),
    )
    if prog.step >= tc.max_steps:
        log.info("run already complete at step %d (train.max_steps=%d)", prog.step, tc.max_steps)
        return TrainSummary(run_dir, prog.step, False, None, None, [], prog.elapsed_s)

    metrics = MetricsWriter(metrics_path) if info.is_main else distributed.NullMetricsWriter()
    signals = StopSignals()
    signals.install()
    model.train()
    train_model = torch.compile(wrapped) if hw.compile else wrapped
    summary = TrainSummary(run_dir, prog.step, False, None, None)
    meter = Throughput(prog.step, prog.elapsed_s, tokens_per_step)

    tokenizer_files = write_tokenizer(cfg) if info.is_main else None

    def save(step: int) -> None:
        state = trainer_state(
            progress=prog,
            optimizer=optimizer,
            scaler=scaler,
            loader=loader,
            backend=backend,
            resolved=resolved,
            init_from=init_from,
        )
        # torchrun: rank 0 writes (FSDP: each rank its shard), with every rank's RNG and data state
        if info.distributed:
            path = distributed.save_distributed_checkpoint(
                run_dir,
                step,
                model,
                optimizer,
                cfg.model,
                state,
                info,
                keep=tc.keep_checkpoints,
                extra_files=tokenizer_files,
            )
        else:
            path = save_checkpoint(
                run_dir,
                step,
                model,
                cfg.model,
                state,
                keep=tc.keep_checkpoints,
                extra_files=tokenizer_files,
            )
        log.info("checkpoint %s", path)

    try:
        while prog.step < tc.max_steps:
            lr = lr_at(prog.step, tc)  # schedule
            for group in optimizer.param_groups:
                group["lr"] = lr * group["lr_scale"]  # Muon's matrices have their own peak
            # micro-steps: the loss is divided by `accum` so k micro-batches of b make one batch of k*b
            ce_sum = torch.zeros((), device=backend.device)
            z_sum = torch.zeros((), device=backend.device)
            try:
                for micro in range(accum):
                    batch = [backend.to_device(a) for a in next(loader)]  # x, y (, segments)
                    # DDP/FSDP2: gradients are reduced across ranks on the last micro-step only
                    with distributed.gradient_sync(wrapped, micro == accum - 1):
                        with backend.autocast():
                            out = train_model(*batch, z_loss_weight=tc.z_loss_weight)
                        scaler.scale(out.loss / accum).backward()
                    ce_sum += out.ce_loss.detach().float()
                    z_sum += out.z_loss.detach().float()
            except torch.OutOfMemoryError as exc:
                raise out_of_memory(cfg, world_size) from exc
            # unscale, clip (the norm is logged either way), step; fp16 steps with inf/nan are skipped
            scaler.unscale_(optimizer)
            grad_norm = distributed.clip_grad_norm(
                model, tc.grad_clip or math.inf
            )  # FSDP: global norm
            scale_before = scaler.get_scale()
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad(set_to_none=True)
            prog.skipped_steps += int(scaler.is_enabled() and scaler.get_scale() < scale_before)
            prog.step += 1
            prog.tokens_seen += tokens_per_step
            step = prog.step
            prog.elapsed_s = meter.elapsed()
            stop = distributed.any_rank(bool(signals.requested), info)  # all ranks stop at one step
            if step % tc.log_every == 0 or step == tc.max_steps:  # log
                backend.synchronize()
                loss, z_loss = distributed.reduce_mean(
                    [(ce_sum / accum).item(), (z_sum / accum).item()], info
                )
                row = {
                    "step": step,
                    "loss": loss,
                    "z_loss": z_loss,
                    "lr": lr,
                    "grad_norm": float(grad_norm),
                    **meter.measure(step, tc.max_steps),
                }
                log_step(row, metrics, cfg, prog, backend, scaler, flops_per_tok)
                summary.tokens_per_s.append(row["tokens_per_s"])
            with meter.aside():  # evaluation and checkpoints are kept out of tokens/s
                if step % tc.eval_every == 0 or step == tc.max_steps:
                    val_loss, val_bpb = evaluate(model, val_batches, backend, bytes_per_token)
                    val_loss, val_bpb = distributed.reduce_mean(
                        [val_loss, val_bpb], info
                    )  # all ranks' share
                    row = {"step": step, "val_loss": val_loss, "val_bpb": val_bpb}
                    if text_eval is not None:  # every rank scores the same text (FSDP needs all)
                        row["val_text_bpb"] = text_eval(model)
                    metrics.write(row)
                    log.info(
                        "step %d | val loss %.4f | val bits/byte %.4f%s",
                        step,
                        val_loss,
                        val_bpb,
                        f" | held-out text bits/byte {row['val_text_bpb']:.4f}"
                        if text_eval
                        else "",
                    )
                    summary.final_val_loss, summary.final_val_bpb = val_loss, val_bpb
                    if cfg.data.kind == "chat" and info.is_main:
                        from enlace_train.chat_eval import log_chat_eval

                        log_chat_eval(model, cfg, backend, step, metrics)
                if step % tc.checkpoint_every == 0 or step == tc.max_steps or stop:
                    save(step)
            progress_line.update(
                f"[{cfg.run.name}] step {step}/{tc.max_steps} ({100 * step / tc.max_steps:.0f}%) "
                f"elapsed {format_duration(prog.elapsed_s)}"
            )
            if stop:
                log.info(
                    "%s received: stopped after step %d with a checkpoint; rerun the same command "
                    "to resume",
                    signals.requested or "a stop signal (on another rank)",
                    step,
                )
                summary.stopped_by_signal = True
                break
    finally:
        signals.restore()
        metrics.close()
    summary.step, summary.elapsed_s = prog.step, prog.elapsed_s
    return summary


class Throughput:
    """tokens/s and ETA over the interval since the last log line, minus time spent aside (eval,
    checkpoints); elapsed time carried across resumes."""

    def __init__(self, step: int, elapsed_before: float, tokens_per_step: int) -> None:
        self.start = self.interval_start = time.perf_counter()
        self.elapsed_before = elapsed_before
        self.interval_step = step
        self.tokens_per_step = tokens_per_step
        self.excluded = 0.0

    def elapsed(self) -> float:
        return self.elapsed_before + time.perf_counter() - self.start

    @contextlib.contextmanager
    def aside(self) -> Iterator[None]:
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.excluded += time.perf_counter() - t0

    def measure(self, step: int, max_steps: int) -> dict[str, float]:
        now = time.perf_counter()
        seconds = max(now - self.interval_start - self.excluded, 1e-9)
        steps = max(step - self.interval_step, 1)
        self.interval_start, self.interval_step, self.excluded = now, step, 0.0
        return {
            "tokens_per_s": steps * self.tokens_per_step / seconds,
            "eta_s": (max_steps - step) * seconds / steps,
        }


def log_step(
    row: dict[str, Any],
    metrics: MetricsWriter,
    cfg: RunConfig,
    prog: TrainProgress,
    backend: Backend,
    scaler: torch.amp.GradScaler,
    flops_per_tok: float,
) -> None:
    """Complete a logged step's row (MFU, memory, counters), append it to metrics.jsonl, print it."""
    peak = cfg.hardware.peak_flops
    row["mfu"] = flops_per_tok * row["tokens_per_s"] / peak if peak else None
    row.update(
        tokens_seen=prog.tokens_seen,
        elapsed_s=prog.elapsed_s,
        peak_mem_mb=backend.peak_memory_mb(),
        skipped_steps=prog.skipped_steps,
    )
    if scaler.is_enabled():
        row["loss_scale"] = scaler.get_scale()
    metrics.write(row)
    log.info(
        "step %d/%d | loss %.4f | z %.2e | lr %.3e | grad norm %.3f | %.0f tok/s | MFU %s | elapsed %s "
        "| ETA %s | peak mem %.0f MB%s",
        row["step"],
        cfg.train.max_steps,
        row["loss"],
        row["z_loss"],
        row["lr"],
        row["grad_norm"],
        row["tokens_per_s"],
        f"{row['mfu']:.1%}" if row["mfu"] is not None else "n/a",
        format_duration(prog.elapsed_s),
        format_duration(row["eta_s"]),
        row["peak_mem_mb"],
        f" | loss scale {row['loss_scale']:.0f}, skipped steps {prog.skipped_steps}"
        if scaler.is_enabled()
        else "",
    )
