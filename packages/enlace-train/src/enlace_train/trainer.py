"""The training loop, and the plain functions it calls.

Start-up runs in the order that fails fastest: run directory and hardware profile (backends.py),
then data and model, checked against each other, then resume or start (checkpointing.py). The
loop reads top to bottom: schedule -> micro-steps with accumulation -> unscale, clip, check
finite, step -> log -> eval -> checkpoint.

Exactness: everything that decides the numbers (weights, optimizer moments, GradScaler, RNGs, loader
position, step) is in the checkpoint, the schedule is a function of the step, and the logged loss
is the step's own, so a stopped and resumed CPU run matches one that never stopped, bit for bit.
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
from enlace_config import ResolvedConfig
from enlace_config.schema import RunConfig
from enlace_data.loader import build_loader, eval_batches, split_bytes_per_token
from enlace_data.stream import StreamLoader
from enlace_model import Transformer, build_model, count_parameters, flops_per_token

from enlace_train import distributed
from enlace_train.backends import Backend, setup_backend
from enlace_train.checkpointing import Training, TrainProgress, resume_or_init, save
from enlace_train.copy_mixing import copy_token_ids, mix_copy_records
from enlace_train.errors import Diverged, OutOfMemory, SetupError
from enlace_train.evaluate_text import held_out_text
from enlace_train.metrics import (
    METRICS_FILE,
    MetricsWriter,
    Progress,
    close_logging,
    format_duration,
    log,
    read_metrics,
    setup_logging,
)
from enlace_train.optim import build_optimizer
from enlace_train.schedule import lr_at
from enlace_train.state import seed_everything

Batch = tuple[torch.Tensor, ...]  # inputs, targets (and segments for packed chat rows)


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
    best_val_bpb: float | None = None  # kept in checkpoints/best
    best_step: int | None = None


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
def build_train_loader(cfg: RunConfig, info: distributed.DistInfo) -> StreamLoader:
    """This rank's share of the training data (enlace-data refuses a vocabulary larger than the
    model's)."""
    return build_loader(
        cfg.data,
        split="train",
        micro_batch_size=cfg.hardware.micro_batch_size,
        seed=cfg.train.seed,
        rank=info.rank,
        world_size=info.world_size,
        vocab_size=cfg.model.vocab_size,
    )


def build_eval_batches(
    cfg: RunConfig, backend: Backend, info: distributed.DistInfo
) -> tuple[list[Batch], float]:
    """This rank's fixed validation batches, on the device, and the val split's bytes per token."""
    batches = eval_batches(
        cfg.data,
        micro_batch_size=cfg.hardware.micro_batch_size,
        rank=info.rank,
        world_size=info.world_size,
        vocab_size=cfg.model.vocab_size,
    )
    on_device = [tuple(backend.to_device(a) for a in batch) for batch in batches]
    return on_device, split_bytes_per_token(cfg.data, "val", vocab_size=cfg.model.vocab_size)


def check_memory(cfg: RunConfig, backend: Backend, world_size: int) -> None:
    """Refuse at start-up a model and micro-batch that cannot fit the device even in the best case:
    a lower bound of 12 bytes a parameter (float32 weights, gradients, one optimizer moment; FSDP2
    shards them) plus one micro-batch's float32 logits and their gradient, activations left out."""
    params = count_parameters(cfg.model)
    shards = world_size if cfg.train.parallelism == "fsdp" else 1
    logits = 8 * cfg.hardware.micro_batch_size * cfg.data.context_length * cfg.model.vocab_size
    need, have = 12 * params // shards + logits, backend.memory_bytes()
    if need > have:
        raise SetupError(
            f"model.* and hardware.micro_batch_size need at least {need / 2**30:,.1f} GiB "
            f"({params / 1e6:,.0f} M parameters x 12 bytes, plus {logits / 2**30:,.1f} GiB of logits "
            f"for one micro-batch) and this device has {have / 2**30:,.1f} GiB: make the model "
            "smaller (model.d_model, model.n_layers, model.vocab_size) or lower "
            "hardware.micro_batch_size / data.context_length"
        )


def micro_batch_suggestion(micro_batch: int, per_step: int) -> int | None:
    """The next micro-batch size down that still divides the per-device batch of a step."""
    return next((d for d in range(micro_batch - 1, 0, -1) if per_step % d == 0), None)


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


DIVERGED_FIX = (
    "Nothing was saved from it: the run's checkpoints hold the last good state. Lower train.lr, "
    "check model.init_std and train.weight_decay, then resume or restart the run."
)


def train_step(
    training: Training,
    wrapped: torch.nn.Module,
    forward: Callable[..., Any],
    cfg: RunConfig,
    lr: float,
    accum: int,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One optimizer step: micro-steps with accumulation -> unscale, clip -> check finite -> step.
    Returns the step's mean cross-entropy, z-loss and gradient norm. A non-finite loss or gradient
    stops the run before the step is taken, except under float16's GradScaler, which skips such
    steps: only a long streak of them stops it."""
    tc, backend, info = cfg.train, training.backend, training.info
    optimizer, scaler, prog = training.optimizer, training.scaler, training.progress
    for group in optimizer.param_groups:
        group["lr"] = lr * group["lr_scale"]  # Muon's matrices have their own peak
    ce_sum, z_sum = torch.zeros((), device=backend.device), torch.zeros((), device=backend.device)
    try:
        for micro in range(accum):
            batch = next(training.loader)  # x, y (, segments (, loss weights))
            if tc.copy_records_share or tc.aba_rows_share:
                draw = f"{tc.seed}-{prog.step}-{micro}-{info.rank}"
                data = cfg.data
                ordinary = copy_token_ids(
                    data.kind, data.path, data.tokenizer, cfg.model.vocab_size
                )
                batch = mix_copy_records(batch, tc, prog.step, draw, ordinary)
            batch = [backend.to_device(a) for a in batch]
            # DDP/FSDP2: gradients are reduced across ranks on the last micro-step only
            with distributed.gradient_sync(wrapped, micro == accum - 1):
                with backend.autocast():
                    out = forward(*batch, z_loss_weight=tc.z_loss_weight)
                scaler.scale(out.loss / accum).backward()
            ce_sum += out.ce_loss.detach().float()
            z_sum += out.z_loss.detach().float()
    except torch.OutOfMemoryError as exc:
        raise out_of_memory(cfg, info.world_size) from exc
    scaler.unscale_(optimizer)
    grad_norm = distributed.clip_grad_norm(training.model, tc.grad_clip or math.inf)  # FSDP: global
    ce, z = ce_sum / accum, z_sum / accum
    finite = bool(torch.isfinite(ce + z) & torch.isfinite(grad_norm))
    if distributed.any_rank(not finite, info) and not scaler.is_enabled():
        raise Diverged(
            f"step {prog.step + 1}: loss {float(ce):.4g}, gradient norm {float(grad_norm):.4g}: "
            f"not finite in {cfg.hardware.dtype}, the training diverged. {DIVERGED_FIX}"
        )
    scale_before = scaler.get_scale()
    scaler.step(optimizer)  # float16: a step with inf/nan gradients is skipped
    scaler.update()
    optimizer.zero_grad(set_to_none=True)
    skipped = scaler.is_enabled() and scaler.get_scale() < scale_before
    prog.skipped_steps += int(skipped)
    prog.skip_streak = prog.skip_streak + 1 if skipped else 0
    if prog.skip_streak > tc.max_skipped_steps_in_a_row:
        raise Diverged(
            f"steps {prog.step + 2 - prog.skip_streak}-{prog.step + 1}: {prog.skip_streak} "
            "optimizer steps in a row skipped by the float16 GradScaler (inf/nan gradients; loss "
            f"scale now {scaler.get_scale():g}), more than train.max_skipped_steps_in_a_row="
            f"{tc.max_skipped_steps_in_a_row}: the training diverged. {DIVERGED_FIX}"
        )
    prog.step += 1
    return ce, z, grad_norm


@torch.no_grad()
def evaluate(
    model: torch.nn.Module,
    batches: list[Batch],
    backend: Backend,
    bytes_per_token: float,
    info: distributed.DistInfo,
) -> tuple[float, float]:
    """Mean validation cross-entropy (nats/token) and bits per byte over all ranks' fixed batches."""
    was_training = model.training
    model.eval()
    total = torch.zeros((), dtype=torch.float64, device=backend.device)
    for batch in batches:
        with backend.autocast():
            total += model(*batch).ce_loss.double()
    model.train(was_training)
    val_loss = float(total.item()) / len(batches)
    val_bpb = val_loss / math.log(2) / bytes_per_token
    val_loss, val_bpb = distributed.reduce_mean([val_loss, val_bpb], info)  # all ranks' share
    return val_loss, val_bpb


def write_tokenizer(cfg: RunConfig) -> Callable[[Path], None] | None:
    """What puts the run's tokenizer into a checkpoint directory, so that `sample` and the export
    find it there. Shards without a tokenizer beside them (synthetic data): a warning, and None."""
    from enlace_data import DataError
    from enlace_data.chat.loader import chat_tokenizer
    from enlace_data.tokenizer import ByteTokenizer, load_tokenizer

    try:
        if cfg.data.kind == "chat":
            return chat_tokenizer(cfg.data).save
        return (ByteTokenizer() if cfg.data.kind == "bytes" else load_tokenizer(cfg.data.path)).save
    except DataError as exc:
        log.warning(
            "WARNING: no tokenizer for the checkpoints (%s); `enlace-train sample` will "
            "need one copied in",
            exc,
        )
        return None


# ----------------------------------------------------------------------------- the run
def train(resolved: ResolvedConfig) -> TrainSummary:
    """Run (or resume) the training described by a resolved config."""
    cfg = resolved.config
    hw = cfg.hardware
    run_dir = Path(cfg.run.out_dir)
    if run_dir.exists() and not run_dir.is_dir():
        raise SetupError(f"run.out_dir={cfg.run.out_dir!r} is a file, not a directory")
    progress_line = Progress()
    distributed.bind_local_device(hw.device)  # under torchrun: this rank's GPU, before any CUDA
    backend = setup_backend(hw)  # exits through HardwareError before any data is read
    info = distributed.init_distributed(hw.device)  # only now: every rank checked its hardware
    if info.is_main:  # only rank 0 writes files and logs; the others print warnings and errors
        try:
            run_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise SetupError(f"run.out_dir={cfg.run.out_dir!r} cannot be created: {exc}") from exc
        setup_logging(run_dir, progress_line)
    else:
        progress_line.active = False
        setup_logging(None, progress_line)
        log.setLevel(logging.WARNING)
    try:
        return _train(resolved, backend, progress_line, info)
    finally:
        progress_line.clear()
        close_logging()
        distributed.shutdown(info)


def _train(
    resolved: ResolvedConfig,
    backend: Backend,
    progress_line: Progress,
    info: distributed.DistInfo,
) -> TrainSummary:
    cfg = resolved.config
    tc, hw, run_dir = cfg.train, cfg.hardware, Path(cfg.run.out_dir)
    seed_everything(tc.seed)
    check_memory(cfg, backend, info.world_size)
    # --- data and model, checked against each other
    loader = build_train_loader(cfg, info)
    val_batches, bytes_per_token = build_eval_batches(cfg, backend, info)
    text_eval = held_out_text(cfg, backend.autocast)  # None without data.eval_text_files
    model = build_model(cfg.model, attention=hw.attention).to(backend.device)
    wrapped = distributed.wrap_model(model, tc.parallelism, info)  # torchrun: DDP or FSDP2 shards
    optimizer = build_optimizer(model, cfg, backend)
    scaler = distributed.grad_scaler_for(backend.grad_scaler(), model)
    training = Training(model, optimizer, scaler, loader, backend, info)
    accum = cfg.grad_accumulation_steps(info.world_size)  # exits 2 if the batch does not split
    # --- the run directory: resume, init_from, or a new run
    resume_or_init(training, resolved)
    if info.is_main:
        (run_dir / "config.yaml").write_text(resolved.to_yaml(), encoding="utf-8")
    log_start(cfg, backend, loader, model, accum)
    prog = training.progress
    if prog.step >= tc.max_steps:
        log.info("run already complete at step %d (train.max_steps=%d)", prog.step, tc.max_steps)
        return TrainSummary(run_dir, prog.step, False, None, None, [], prog.elapsed_s)

    # --- the loop
    metrics_path = run_dir / METRICS_FILE
    metrics = MetricsWriter(metrics_path) if info.is_main else distributed.NullMetricsWriter()
    tokenizer_files = write_tokenizer(cfg) if info.is_main else None
    signals = StopSignals()
    signals.install()
    model.train()
    forward = torch.compile(wrapped) if hw.compile else wrapped
    summary = TrainSummary(run_dir, prog.step, False, None, None)
    tokens_per_step = tc.global_batch_size * cfg.data.context_length
    meter = Throughput(prog.step, prog.elapsed_s, tokens_per_step)
    try:
        while prog.step < tc.max_steps:
            lr = lr_at(prog.step, tc)  # schedule
            ce, z, grad_norm = train_step(training, wrapped, forward, cfg, lr, accum)
            prog.tokens_seen += tokens_per_step
            prog.elapsed_s = meter.elapsed()
            step = prog.step
            stop = distributed.any_rank(bool(signals.requested), info)  # all ranks stop at one step
            if step % tc.log_every == 0 or step == tc.max_steps:  # log
                backend.synchronize()
                loss, z_loss = distributed.reduce_mean([ce.item(), z.item()], info)
                row = {"step": step, "loss": loss, "z_loss": z_loss, "lr": lr}
                row |= {"grad_norm": float(grad_norm), **meter.measure(step, tc.max_steps)}
                log_step(row, metrics, cfg, prog, backend, scaler, info)
                summary.tokens_per_s.append(row["tokens_per_s"])
            with meter.aside():  # evaluation and checkpoints are kept out of tokens/s
                if step % tc.eval_every == 0 or step == tc.max_steps:
                    val = evaluate(model, val_batches, backend, bytes_per_token, info)
                    row = {"step": step, "val_loss": val[0], "val_bpb": val[1]}
                    if text_eval is not None:  # every rank scores the same text (FSDP needs all)
                        row["val_text_bpb"] = text_eval(model)
                    metrics.write(row)
                    text = (
                        f" | held-out text bits/byte {row['val_text_bpb']:.4f}" if text_eval else ""
                    )
                    log.info("step %d | val loss %.4f | val bits/byte %.4f%s", step, *val, text)
                    summary.final_val_loss, summary.final_val_bpb = val
                    if prog.best_val_bpb is None or val[1] < prog.best_val_bpb:
                        prog.best_val_bpb, prog.best_step = val[1], step
                        save(training, resolved, extra_files=tokenizer_files, best=True)
                    if cfg.data.kind == "chat" and info.is_main:
                        from enlace_train.chat_eval import log_chat_eval

                        log_chat_eval(model, cfg, backend, step, metrics)
                if step % tc.checkpoint_every == 0 or step == tc.max_steps or stop:
                    log.info("checkpoint %s", save(training, resolved, extra_files=tokenizer_files))
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
    summary.best_val_bpb, summary.best_step = prog.best_val_bpb, prog.best_step
    return summary


def final_line(summary: TrainSummary) -> str:
    """The run's last line: its final figure and, when that is not its best, says so plainly."""
    line = (
        f"done: step {summary.step}, val loss {summary.final_val_loss:.4f}, "
        f"val bits/byte {summary.final_val_bpb:.4f}"
    )
    best = summary.best_val_bpb
    if best is not None and summary.final_val_bpb is not None and summary.final_val_bpb > best:
        later = [
            r for r in read_metrics(summary.run_dir / METRICS_FILE)
            if "val_bpb" in r and r["step"] > (summary.best_step or 0)
        ]  # fmt: skip
        line += (
            f" -- WORSE than its best, {best:.4f} at step {summary.best_step}: validation rose over "
            f"the last {len(later)} evaluation(s); the best weights are in "
            f"{summary.run_dir / 'checkpoints' / 'best'}"
        )
    return f"{line}, run directory {summary.run_dir}"


def log_start(
    cfg: RunConfig, backend: Backend, loader: StreamLoader, model: Transformer, accum: int
) -> None:
    """The run's first log lines: where it writes, the hardware, the data, the model, the batch."""
    log.info("run %s -> %s | %s", cfg.run.name, cfg.run.out_dir, backend.describe())
    params = count_parameters(model, include_embeddings=False) / 1e6
    log.info(
        f"data: {loader.description} | model: {params:.2f}M non-embedding parameters | batch "
        f"{cfg.train.global_batch_size} x {cfg.data.context_length} tokens = "
        f"{cfg.hardware.micro_batch_size} micro x {accum} accumulation | "
        f"{torch.get_num_threads()} threads"
    )


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
    info: distributed.DistInfo,
) -> None:
    """Complete a logged step's row (MFU, memory, counters), append it to metrics.jsonl, print it."""
    peak = cfg.hardware.peak_flops
    # per device: MFU compares tokens/s of all ranks with one board's peak times the world size
    flops_per_tok = flops_per_token(cfg.model, cfg.data.context_length) / info.world_size
    row["mfu"] = flops_per_tok * row["tokens_per_s"] / peak if peak else None
    row.update(
        tokens_seen=prog.tokens_seen,
        elapsed_s=prog.elapsed_s,
        peak_mem_mb=backend.peak_memory_mb(),
        skipped_steps=prog.skipped_steps,
    )
    scaled = ""
    if scaler.is_enabled():
        row["loss_scale"] = scaler.get_scale()
        scaled = f" | loss scale {row['loss_scale']:.0f}, skipped steps {prog.skipped_steps}"
    metrics.write(row)
    mfu = f"{row['mfu']:.1%}" if row["mfu"] is not None else "n/a"
    log.info(
        f"step {row['step']}/{cfg.train.max_steps} | loss {row['loss']:.4f} | z {row['z_loss']:.2e} "
        f"| lr {row['lr']:.3e} | grad norm {row['grad_norm']:.3f} | {row['tokens_per_s']:.0f} "
        f"tok/s | MFU {mfu} | elapsed {format_duration(prog.elapsed_s)} | ETA "
        f"{format_duration(row['eta_s'])} | peak mem {row['peak_mem_mb']:.0f} MB{scaled}"
    )
