"""The checks of scripts/gpu-check.sh once the project is installed: one row per check, one table.

Run by scripts/gpu-check.sh with the Python it installed into; by hand:
`python scripts/gpu_check.py --out DIR [--install-row JSON] [--budget-s SECONDS]`.

Every check runs the trainer as a user would (`python -m enlace_train RUN key=value ...`, torchrun
for the distributed ones) and reads what it wrote (metrics.jsonl, stderr). Without a CUDA device the
GPU checks are skipped with the reason, and the fail-fast check proves the CPU-machine refusal
instead. The checks run cheapest first; one that would not fit in what is left of --budget-s is
skipped and says so, so the whole script ends inside the time a lent GPU is held.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RUNS = {
    "blackwell-5090": "configs/runs/smoke-5090.yaml",
    "turing-2060": "configs/runs/smoke-2060.yaml",
}
PROFILES = {
    "blackwell-5090": "hardware/blackwell-5090.yaml",
    "turing-2060": "hardware/turing-2060.yaml",
}
OTHER_BOARD = "hardware.allow_other_board=true"
# Dense tensor-core peak FLOP/s (float32 accumulation) of the boards a check may run on, for MFU
# against the board that is there (the profiles' peak_flops are their own boards'). NVIDIA H100/H200
# SXM datasheets: 1,979 TFLOPS bf16/fp16 "with sparsity" = 989.5e12 dense.
BOARD_PEAK_FLOPS = {"H200": 989.5e12, "H100 80GB HBM3": 989.5e12}
SMOKE_STEPS, CHECKPOINT_EVERY, KILL_AFTER = 150, 20, 30
BENCH_STEPS, BENCH_LOG_EVERY, BENCH_VOCAB = 30, 10, 32768
NO_CUDA = "skipped: no CUDA device (torch.cuda.is_available() is False)"


@dataclass
class Row:
    check: str
    status: str  # pass, fail, skip
    detail: str
    seconds: float = 0.0
    figures: dict[str, Any] = field(default_factory=dict)


@dataclass
class Context:
    cuda: bool
    board: str
    work: Path
    deadline: float

    def left(self) -> float:
        return self.deadline - time.monotonic()


# ----------------------------------------------------------------------------- running the trainer
def trainer(run: str, overrides: list[str], *, torchrun: bool = False) -> list[str]:
    launcher = [sys.executable]
    if torchrun:
        launcher += ["-m", "torch.distributed.run", "--standalone", "--nproc_per_node=1"]
    return [*launcher, "-m", "enlace_train", run, *overrides]


def run_trainer(cmd: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    return subprocess.run(
        cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=max(timeout, 1), check=False
    )


def metrics(run_dir: Path) -> list[dict[str, Any]]:
    path = run_dir / "metrics.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def losses(run_dir: Path) -> dict[int, float]:
    return {r["step"]: r["loss"] for r in metrics(run_dir) if "loss" in r}


def tail(text: str, lines: int = 3) -> str:
    return " | ".join(text.strip().splitlines()[-lines:])


# ----------------------------------------------------------------------------- the checks
def check_fail_fast(ctx: Context) -> list[Row]:
    """Each profile asked of a machine that is not its board: refused, exit 2, the user's message."""
    rows = []
    for profile, run in RUNS.items():
        t0 = time.monotonic()
        proc = run_trainer(trainer(run, [f"run.out_dir={ctx.work / 'refused'}"]), ctx.left())
        message = proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else ""
        own_board = proc.returncode == 0
        if own_board:
            status, detail = "skip", f"skipped: this board is the profile's own ({ctx.board})"
        else:
            refused = proc.returncode == 2 and "Use instead:" in message
            status, detail = ("pass" if refused else "fail"), f"exit {proc.returncode}: {message}"
        rows.append(Row(f"refuse {profile} on {ctx.board}", status, detail, time.monotonic() - t0))
    if ctx.cuda:
        import torch

        native = bool(torch.cuda.is_bf16_supported(including_emulation=False))
        cap = torch.cuda.get_device_capability(0)
        ok = native == (tuple(cap) >= (8, 0))
        rows.append(
            Row(
                "bf16 in silicon (including_emulation=False)",
                "pass" if ok else "fail",
                f"{ctx.board}: compute capability {cap[0]}.{cap[1]}, bf16 native {native}",
                figures={"bf16_native": native, "capability": list(cap)},
            )
        )
    return rows


def check_gpu_tests(ctx: Context) -> list[Row]:
    if not ctx.cuda:
        return [Row("pytest -m gpu", "skip", NO_CUDA)]
    t0 = time.monotonic()
    cmd = [sys.executable, "-m", "pytest", "-m", "gpu", "-q", "-p", "no:cacheprovider"]
    cmd += ["packages/enlace-model/tests", "packages/enlace-train/tests"]
    proc = run_trainer(cmd, min(ctx.left(), 240))
    summary = tail(proc.stdout, 1)
    status = "pass" if proc.returncode == 0 else "fail"
    return [Row("pytest -m gpu", status, summary, time.monotonic() - t0)]


def smoke_overrides(run_dir: Path) -> list[str]:
    return [
        OTHER_BOARD,
        f"run.out_dir={run_dir}",
        f"train.max_steps={SMOKE_STEPS}",
        "train.warmup_steps=5",
        "train.decay_steps=20",
        "train.log_every=1",
        f"train.eval_every={SMOKE_STEPS}",
        f"train.checkpoint_every={CHECKPOINT_EVERY}",
    ]


def run_killed_and_resumed(run: str, run_dir: Path, timeout: float) -> tuple[int, str]:
    """Start the run, SIGKILL it once it logged step KILL_AFTER, rerun: (step it was killed at, log)."""
    cmd = trainer(run, smoke_overrides(run_dir))
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(
        cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    end = time.monotonic() + timeout
    while proc.poll() is None and time.monotonic() < end:
        if max(losses(run_dir), default=0) >= KILL_AFTER:
            proc.send_signal(signal.SIGKILL)
            break
        time.sleep(0.02)
    proc.wait()
    if proc.returncode != -signal.SIGKILL:
        raise RuntimeError(
            f"not killed mid-run (exit {proc.returncode}): {tail(proc.stderr or '')}"
        )
    killed_at = max(losses(run_dir), default=0)
    resumed = run_trainer(cmd, end - time.monotonic())
    if resumed.returncode != 0:
        raise RuntimeError(f"resume failed (exit {resumed.returncode}): {tail(resumed.stderr)}")
    return killed_at, resumed.stderr


def compare(a: dict[int, float], b: dict[int, float]) -> tuple[bool, float]:
    same = a.keys() == b.keys() and all(a[s] == b[s] for s in a)
    diff = max((abs(a[s] - b[s]) for s in a.keys() & b.keys()), default=math.inf)
    return same, diff


def check_smoke(ctx: Context, profile: str) -> list[Row]:
    """Losses finite and falling; killed and resumed equals uninterrupted (bitwise, or why not)."""
    name = f"smoke {profile}: train, kill, resume"
    if not ctx.cuda:
        return [Row(name, "skip", NO_CUDA)]
    t0, run = time.monotonic(), RUNS[profile]
    whole = ctx.work / f"smoke-{profile}-whole"
    proc = run_trainer(trainer(run, smoke_overrides(whole)), min(ctx.left(), 120))
    a = losses(whole)
    if proc.returncode != 0 or len(a) != SMOKE_STEPS:
        return [
            Row(name, "fail", f"exit {proc.returncode}: {tail(proc.stderr)}", time.monotonic() - t0)
        ]
    values = [a[s] for s in sorted(a)]
    finite = all(math.isfinite(v) for v in values)
    falling = sum(values[-10:]) / 10 < 0.8 * sum(values[:10]) / 10
    try:
        killed_at, _ = run_killed_and_resumed(
            run, ctx.work / f"smoke-{profile}-killed", min(ctx.left(), 120)
        )
    except (RuntimeError, subprocess.TimeoutExpired) as exc:
        return [Row(name, "fail", str(exc), time.monotonic() - t0)]
    same, diff = compare(a, losses(ctx.work / f"smoke-{profile}-killed"))
    figures = {"first_loss": values[0], "last_loss": values[-1], "killed_at_step": killed_at}
    if same:
        verdict = f"killed at step {killed_at}, resumed: all {SMOKE_STEPS} losses bitwise equal"
    else:  # tell a resume defect from kernels that differ run to run
        again = ctx.work / f"smoke-{profile}-again"
        run_trainer(trainer(run, smoke_overrides(again)), min(ctx.left(), 120))
        rerun_same, rerun_diff = compare(a, losses(again))
        figures.update(resume_max_diff=diff, rerun_max_diff=rerun_diff)
        verdict = (
            f"resumed losses differ by up to {diff:.3g}; two uninterrupted runs differ by "
            f"{rerun_diff:.3g}: "
            + (
                "the resume is at fault (the kernels are deterministic here)"
                if rerun_same
                else "the kernels are not deterministic on this board (atomic adds in the "
                "attention backward and fused optimizer), so no bitwise equality is possible"
            )
        )
        same = not rerun_same and diff <= 10 * max(rerun_diff, 1e-6)
    ok = finite and falling and same
    detail = (
        f"loss {values[0]:.3f} -> {values[-1]:.3f} (finite {finite}, falling {falling}); {verdict}"
    )
    return [Row(name, "pass" if ok else "fail", detail, time.monotonic() - t0, figures)]


def check_torchrun(ctx: Context, parallelism: str) -> list[Row]:
    name = f"torchrun 1 GPU, NCCL, {parallelism}"
    if not ctx.cuda:
        return [Row(name, "skip", NO_CUDA)]
    t0, run_dir = time.monotonic(), ctx.work / f"torchrun-{parallelism}"
    overrides = [
        OTHER_BOARD,
        f"run.out_dir={run_dir}",
        f"train.parallelism={parallelism}",
        "train.max_steps=20",
        "train.warmup_steps=5",
        "train.decay_steps=5",
        "train.log_every=5",
        "train.eval_every=20",
        "train.checkpoint_every=20",
    ]
    proc = run_trainer(
        trainer(RUNS["blackwell-5090"], overrides, torchrun=True), min(ctx.left(), 120)
    )
    a = losses(run_dir)
    ok = proc.returncode == 0 and len(a) == 4 and all(math.isfinite(v) for v in a.values())
    detail = f"exit {proc.returncode}; losses {[round(v, 3) for v in a.values()]}"
    if not ok:
        detail += f": {tail(proc.stderr)}"
    return [Row(name, "pass" if ok else "fail", detail, time.monotonic() - t0)]


def bench_run_file(ctx: Context, profile: str) -> Path:
    """tiny-50m on the profile, fed synthetic uint16 shards at its own vocabulary and context
    (throughput needs no real text; benchmarks/bench_train.py does the same on CPU)."""
    import numpy as np
    from enlace_data.shards import write_shard

    data = ctx.work / "bench-shards"
    if not data.exists():
        data.mkdir()
        rng = np.random.default_rng(0)
        for split, count in (("train", 4_000_000), ("val", 100_000)):
            write_shard(
                data / f"{split}_000000.shard",
                rng.integers(0, BENCH_VOCAB, size=count, dtype=np.int64),
                vocab_size=BENCH_VOCAB,
                tokenizer_id="synthetic-gpu-check",
                text_bytes=count * 4,
            )
    path = ctx.work / f"bench-{profile}.yaml"
    path.write_text(
        "include:\n"
        f"  hardware: {PROFILES[profile]}\n"
        "  model: model/tiny-50m.yaml\n"
        "  train: train/smoke.yaml\n"
        f"data:\n  kind: shards\n  path: {data}\n  context_length: 1024\n  eval_batches: 1\n"
    )
    return path


def check_bench(ctx: Context, profile: str, compile_: bool) -> list[Row]:
    name = f"tiny-50m {profile}, compile {str(compile_).lower()}"
    if not ctx.cuda:
        return [Row(name, "skip", NO_CUDA)]
    if ctx.left() < (150 if compile_ else 60):
        return [Row(name, "skip", f"skipped: {ctx.left():.0f} s left of the time budget")]
    from enlace_config import load_run_config

    t0, run_dir = time.monotonic(), ctx.work / f"bench-{profile}-{compile_}"
    run_file = bench_run_file(ctx, profile)
    micro = load_run_config(run_file, [OTHER_BOARD]).config.hardware.micro_batch_size
    peak = next((v for k, v in BOARD_PEAK_FLOPS.items() if k in ctx.board), None)
    overrides = [
        OTHER_BOARD,
        f"run.out_dir={run_dir}",
        f"hardware.compile={str(compile_).lower()}",
        f"hardware.peak_flops={peak if peak else 'null'}",
        f"train.global_batch_size={micro}",
        f"train.max_steps={BENCH_STEPS}",
        "train.warmup_steps=5",
        "train.decay_steps=5",
        f"train.log_every={BENCH_LOG_EVERY}",
        f"train.eval_every={BENCH_STEPS}",
        f"train.checkpoint_every={BENCH_STEPS}",
    ]
    proc = run_trainer(trainer(str(run_file), overrides), ctx.left() - 5)
    rows = [r for r in metrics(run_dir) if "tokens_per_s" in r]
    if proc.returncode != 0 or not rows:
        return [
            Row(name, "fail", f"exit {proc.returncode}: {tail(proc.stderr)}", time.monotonic() - t0)
        ]
    last = rows[-1]  # steady state: the first interval holds warm-up (and compilation)
    figures = {
        "micro_batch_size": micro,
        "dtype": profile_dtype(profile),
        "tokens_per_s": last["tokens_per_s"],
        "mfu": last["mfu"],
        "peak_mem_mb": last["peak_mem_mb"],
    }
    mfu = (
        f"{last['mfu']:.1%} of {peak / 1e12:.0f} TFLOP/s"
        if last["mfu"]
        else "MFU n/a (board peak unknown)"
    )
    detail = f"micro-batch {micro}: {last['tokens_per_s']:.0f} tok/s, {mfu}, peak {last['peak_mem_mb']:.0f} MB"
    return [Row(name, "pass", detail, time.monotonic() - t0, figures)]


def profile_dtype(profile: str) -> str:
    return {"blackwell-5090": "bfloat16", "turing-2060": "float16"}[profile]


# ----------------------------------------------------------------------------- the table
def table(rows: list[Row]) -> str:
    width = max(len(r.check) for r in rows)
    lines = [f"{'check':<{width}}  status  {'s':>5}  detail", "-" * (width + 40)]
    lines += [f"{r.check:<{width}}  {r.status:<6}  {r.seconds:5.0f}  {r.detail}" for r in rows]
    return "\n".join(lines)


def checks() -> list[Callable[[Context], list[Row]]]:
    """In order of cost: what must be proven first comes first."""
    return [
        check_fail_fast,
        check_gpu_tests,
        *(lambda ctx, p=p: check_smoke(ctx, p) for p in RUNS),
        *(lambda ctx, par=par: check_torchrun(ctx, par) for par in ("ddp", "fsdp")),
        *(lambda ctx, p=p, c=c: check_bench(ctx, p, c) for c in (False, True) for p in RUNS),
    ]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--out", type=Path, required=True, help="where gpu-check.json is written")
    p.add_argument("--install-row", default=None, help="the install step's row, as JSON")
    p.add_argument("--budget-s", type=float, default=420.0, help="stop starting checks after this")
    ns = p.parse_args(argv)
    import torch

    cuda = torch.cuda.is_available()
    board = torch.cuda.get_device_name(0) if cuda else f"CPU ({os.cpu_count()} cores)"
    rows = [Row(**json.loads(ns.install_row))] if ns.install_row else []
    with tempfile.TemporaryDirectory(prefix="gpu-check-") as work:
        ctx = Context(cuda, board, Path(work), time.monotonic() + ns.budget_s)
        for check in checks():
            try:
                rows += check(ctx)
            except subprocess.TimeoutExpired as exc:
                after = rows[-1].check if rows else "the start"
                rows.append(Row(f"(the check after {after})", "fail", f"timed out: {exc}"))
    report = {
        "board": board,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "rows": [asdict(r) for r in rows],
    }
    ns.out.mkdir(parents=True, exist_ok=True)
    (ns.out / "gpu-check.json").write_text(json.dumps(report, indent=2) + "\n")
    print(f"\nGPU check on {board} (torch {torch.__version__}, CUDA {torch.version.cuda})")
    print(table(rows))
    print(f"\nwritten: {ns.out / 'gpu-check.json'}")
    return 1 if any(r.status == "fail" for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
