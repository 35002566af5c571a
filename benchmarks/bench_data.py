"""enlace-data speed and memory: batch assembly from shards vs nanoGPT's get_batch, and RSS while iterating.

Run by hand (not part of the tests):

    uv run python benchmarks/bench_data.py                 # defaults: 2 GB of shards, T=1024, B=16
    uv run python benchmarks/bench_data.py --gb 0.5 --repeats 3

1. Throughput, side by side in one process on the same page-cached data: enlace-data's loader
   (permuted windows over 100 MB shards, LRU of memory maps) against the plain np.memmap
   random-window approach of nanoGPT's `get_batch` (a fresh np.memmap of one big train.bin per
   call, random offsets, two int64 copies stacked; numpy in place of torch.from_numpy/torch.stack,
   since enlace-data has no torch). Median tokens/s over repeats, and the ratio.
2. Memory: one process iterates every window of all shards once, reading
   /proc/self/smaps_rollup every 1000 batches; reports peak Anonymous (private memory) and peak
   Rss (which also counts the file pages of the live memory maps).
3. The smoke run's share (`--smoke-run configs/runs/smoke-cpu.yaml`, needs torch and
   enlace-model): batch assembly at the smoke shapes (its data section, built-in sample if
   data/smoke is absent) against a full training step of the smoke model on CPU (to tensor,
   forward, backward, AdamW step), medians of repeats, and the ratio.
   `--step-ms X` instead gives the batch time as a fraction of a step of X ms.

The shards are written under --dir (default: a temporary directory, removed at the end).
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from enlace_config.schema.data import DataConfig
from enlace_data.loader import build_loader
from enlace_data.shards import shard_name, write_shard

SHARD_TOKENS = 50_000_000  # 100 MB per shard
READERS = ("pread", "mmap")


def smaps() -> dict[str, int]:
    """Anonymous and Rss of this process in MB (Linux)."""
    out: dict[str, int] = {}
    for line in Path("/proc/self/smaps_rollup").read_text().splitlines():
        key, _, rest = line.partition(":")
        if key in ("Rss", "Anonymous"):
            out[key] = int(rest.split()[0]) // 1024
    return out


def make_data(root: Path, total_tokens: int, seed: int = 0) -> None:
    """Shards of SHARD_TOKENS tokens (train) plus one small val shard, and the same tokens as one
    raw train.bin (nanoGPT's layout: headerless uint16)."""
    rng = np.random.default_rng(seed)
    root.mkdir(parents=True, exist_ok=True)
    with open(root / "train.bin", "wb") as raw:
        i = 0
        left = total_tokens
        while left > 0:
            n = min(SHARD_TOKENS, left)
            tokens = rng.integers(0, 32768, size=n, dtype=np.uint16)
            write_shard(
                root / shard_name("train", i),
                tokens,
                vocab_size=32768,
                tokenizer_id="bench",
                text_bytes=4 * n,
            )
            raw.write(tokens.tobytes())
            left -= n
            i += 1
    write_shard(
        root / shard_name("val", 0),
        np.arange(100_000) % 32768,
        vocab_size=32768,
        tokenizer_id="bench",
        text_bytes=400_000,
    )


def nanogpt_get_batch(
    path: Path, T: int, B: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    # nanoGPT train.py: "recreate np.memmap every batch to avoid a memory leak"
    data = np.memmap(path, dtype=np.uint16, mode="r")
    ix = rng.integers(0, len(data) - T, size=B)
    x = np.stack([data[i : i + T].astype(np.int64) for i in ix])
    y = np.stack([data[i + 1 : i + 1 + T].astype(np.int64) for i in ix])
    return x, y


def bench_throughput(root: Path, T: int, B: int, batches: int, repeats: int) -> dict[str, float]:
    cfg = DataConfig(kind="shards", path=str(root), context_length=T, eval_batches=1)
    loaders = {r: build_loader(cfg, micro_batch_size=B, seed=0, reader=r) for r in READERS}
    rng = np.random.default_rng(0)
    for _ in range(50):  # warm every path
        for loader in loaders.values():
            next(loader)
        nanogpt_get_batch(root / "train.bin", T, B, rng)
    rates: dict[str, list[float]] = {name: [] for name in (*READERS, "nanogpt")}
    for _ in range(repeats):  # interleaved, so all see the same machine state
        for name, loader in loaders.items():
            t0 = time.perf_counter()
            for _ in range(batches):
                next(loader)
            rates[name].append(batches * B * T / (time.perf_counter() - t0))
        t0 = time.perf_counter()
        for _ in range(batches):
            nanogpt_get_batch(root / "train.bin", T, B, rng)
        rates["nanogpt"].append(batches * B * T / (time.perf_counter() - t0))
    return {name: statistics.median(r) for name, r in rates.items()}


def memory_child(root: str, T: int, B: int, reader: str) -> None:
    """Runs in a fresh process: iterate every window once, print peak Anonymous and Rss."""
    cfg = DataConfig(kind="shards", path=root, context_length=T, eval_batches=1)
    start = smaps()
    loader = build_loader(cfg, micro_batch_size=B, seed=0, reader=reader)  # type: ignore[arg-type]
    n = loader.samples_per_epoch // B
    peak = dict(start)
    t0 = time.perf_counter()
    for i in range(n):
        next(loader)
        if i % 1000 == 0:
            now = smaps()
            peak = {k: max(peak[k], now[k]) for k in peak}
    now = smaps()
    peak = {k: max(peak[k], now[k]) for k in peak}
    dt = time.perf_counter() - t0
    print(
        f"  reader={reader}: {n} batches ({n * B * T / 1e9:.2f} G tokens) in {dt:.1f} s; at start Anonymous "
        f"{start['Anonymous']} MB, Rss {start['Rss']} MB; peak Anonymous {peak['Anonymous']} MB, "
        f"peak Rss {peak['Rss']} MB"
    )


def bench_smoke_step(run_file: str, repeats: int) -> None:
    """Batch assembly vs one smoke-model training step, side by side."""
    try:
        import torch
        from enlace_config import load_run_config
        from enlace_model import build_model
    except ImportError as e:  # pragma: no cover - a slim environment
        print(f"smoke step: skipped ({e})")
        return
    cfg = load_run_config(run_file).config
    B = cfg.hardware.micro_batch_size
    loader = build_loader(cfg.data, micro_batch_size=B, seed=0)
    model = build_model(cfg.model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)

    def batch_time() -> float:
        t0 = time.perf_counter()
        for _ in range(100):
            next(loader)
        return (time.perf_counter() - t0) / 100

    def step_time() -> float:
        t0 = time.perf_counter()
        for _ in range(5):
            x, y = next(loader)
            out = model(torch.from_numpy(x), torch.from_numpy(y))
            out.loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
        return (time.perf_counter() - t0) / 5

    step_time()  # warm-up
    batches, steps = [], []
    for _ in range(repeats):
        batches.append(batch_time())
        steps.append(step_time())
    b, s = statistics.median(batches), statistics.median(steps)
    print(
        f"smoke run ({run_file}: {loader.description}, T={cfg.data.context_length}, B={B}, "
        f"{torch.get_num_threads()} threads): batch {b * 1e3:.3f} ms, micro-step {s * 1e3:.1f} ms "
        f"(batch included) -> batch assembly is {b / s:.2%} of a micro-step"
    )


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--gb", type=float, default=2.0, help="GB of train shards (uint16)")
    ap.add_argument("--context", type=int, default=1024)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--batches", type=int, default=500, help="batches per timed repeat")
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--dir", type=Path, default=None, help="where to write the shards (kept)")
    ap.add_argument(
        "--step-ms", type=float, default=None, help="a training step's time, for the fraction"
    )
    ap.add_argument(
        "--smoke-run",
        default=None,
        help="also time the smoke run's step (e.g. configs/runs/smoke-cpu.yaml)",
    )
    ap.add_argument("--skip-shards", action="store_true", help="only the smoke-run comparison")
    ap.add_argument("--memory-child", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--reader", default="pread", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.memory_child:
        memory_child(args.memory_child, args.context, args.batch, args.reader)
        return

    if args.smoke_run:
        bench_smoke_step(args.smoke_run, args.repeats)
    if args.skip_shards:
        return
    root = args.dir or Path(tempfile.mkdtemp(prefix="bench-data-"))
    try:
        total = int(args.gb * 1e9 / 2)
        t0 = time.perf_counter()
        make_data(root, total)
        print(
            f"wrote {total / 1e9:.2f} G tokens ({args.gb:g} GB) of shards and train.bin in {time.perf_counter() - t0:.1f} s under {root}"
        )
        r = bench_throughput(root, args.context, args.batch, args.batches, args.repeats)
        print(
            f"throughput (T={args.context}, B={args.batch}, median of {args.repeats} x {args.batches} batches):"
        )
        for name in (*READERS, "nanogpt"):
            label = "nanoGPT get_batch" if name == "nanogpt" else f"enlace-data reader={name}"
            ms = args.batch * args.context / r[name] * 1e3
            ratio = "" if name == "nanogpt" else f"   {r[name] / r['nanogpt']:.2f}x nanoGPT"
            step = (
                f"   {ms / args.step_ms:.2%} of a {args.step_ms:g} ms step" if args.step_ms else ""
            )
            print(f"  {label:26s} {r[name] / 1e6:8.1f} M tokens/s  {ms:7.3f} ms/batch{ratio}{step}")
        print("memory (fresh process per reader, one full pass over every window):")
        for reader in READERS:
            cmd = [sys.executable, __file__, "--memory-child", str(root), "--reader", reader]
            subprocess.run(
                [*cmd, "--context", str(args.context), "--batch", str(args.batch)], check=True
            )
    finally:
        if args.dir is None:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
