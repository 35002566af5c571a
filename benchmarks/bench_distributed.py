"""What the distributed wrapper costs: the same run, one process, with and without torchrun.

Run by hand (not part of the tests), on the machine the figure is for:

    uv run python benchmarks/bench_distributed.py                                  # CPU smoke shape
    uv run python benchmarks/bench_distributed.py configs/runs/smoke-5090.yaml     # one GPU
    uv run python benchmarks/bench_distributed.py CONFIG --steps 60 --nproc 2      # also 2 ranks

Cases, each a fresh run directory, run one after the other in this one invocation:

- `single`: `python -m enlace_train CONFIG` (no process group, the plain model);
- `torchrun ddp x1`: `torchrun --standalone --nproc-per-node 1 -m enlace_train CONFIG` (a process
  group of one, the model inside DistributedDataParallel: the wrapper's overhead);
- `torchrun fsdp x1`: the same with `train.parallelism=fsdp` (FSDP2 hooks on every block);
- with `--nproc N` (N > 1), also `torchrun ddp xN`: N ranks, same global batch.

Each case runs `--steps` optimizer steps, logging every `--log-every`; the figure is the median of
the logged `tokens_per_s` after the first log interval (warm-up, and with torch.compile the
compilation, excluded), with its ratio to `single`. `tokens_per_s` counts all ranks' tokens.
Evaluation and checkpoints are pushed past the end of the run so they are not in the way; the
`--repeats` option runs the whole set of cases several times, interleaved, and takes the median.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path


def run_case(
    argv_prefix: list[str], config: str, out: Path, extra: list[str], omp_threads: int
) -> list[float]:
    overrides = [f"run.out_dir={out}", *extra]
    # torchrun sets OMP_NUM_THREADS=1 in its workers unless it is set: set it for every case, so
    # the cases differ only by the wrapper (OpenMP's spinning threads alone move CPU figures).
    env = dict(os.environ, PYTHONUNBUFFERED="1", OMP_NUM_THREADS=str(omp_threads))
    proc = subprocess.run(
        [*argv_prefix, config, *overrides], env=env, capture_output=True, text=True, check=False
    )
    if proc.returncode != 0:
        sys.exit(
            f"case failed ({' '.join(argv_prefix)}):\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}"
        )
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    rates = [r["tokens_per_s"] for r in rows if "tokens_per_s" in r]
    return rates[1:] if len(rates) > 1 else rates


def main() -> None:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("config", nargs="?", default="configs/runs/smoke-cpu.yaml")
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--log-every", type=int, default=5)
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--nproc", type=int, default=1, help="also run DDP with this many ranks")
    p.add_argument("--omp-threads", type=int, default=1, help="OMP_NUM_THREADS of every case")
    p.add_argument("overrides", nargs="*", help="key=value overrides for every case")
    args = p.parse_intermixed_args()

    common = [
        f"train.max_steps={args.steps}",
        f"train.log_every={args.log_every}",
        f"train.eval_every={args.steps * 10}",
        f"train.checkpoint_every={args.steps * 10}",
        "train.warmup_steps=0",
        "train.decay_steps=0",
        *args.overrides,
    ]
    python = [sys.executable]
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
    cases: list[tuple[str, list[str], list[str]]] = [
        ("single", [*python, "-m", "enlace_train"], []),
        ("torchrun ddp x1", [*torchrun, "--nproc-per-node", "1", "-m", "enlace_train"], []),
        (
            "torchrun fsdp x1",
            [*torchrun, "--nproc-per-node", "1", "-m", "enlace_train"],
            ["train.parallelism=fsdp"],
        ),
    ]
    if args.nproc > 1:
        cases.append(
            (
                f"torchrun ddp x{args.nproc}",
                [*torchrun, "--nproc-per-node", str(args.nproc), "-m", "enlace_train"],
                [],
            )
        )
    rates: dict[str, list[float]] = {name: [] for name, _, _ in cases}
    with tempfile.TemporaryDirectory(prefix="bench-distributed-") as tmp:
        for repeat in range(args.repeats):
            for i, (name, prefix, extra) in enumerate(cases):
                out = Path(tmp) / f"r{repeat}-c{i}"
                rates[name] += run_case(
                    prefix, args.config, out, [*common, *extra], args.omp_threads
                )
                print(f"  repeat {repeat + 1}/{args.repeats}: {name} done", file=sys.stderr)
    base = statistics.median(rates["single"])
    print(
        f"{args.config}: {args.steps} steps, OMP_NUM_THREADS={args.omp_threads}, "
        "median tokens/s after the first log interval"
    )
    for name, values in rates.items():
        med = statistics.median(values)
        print(
            f"  {name:<20} {med:>12.0f} tokens/s   {med / base:6.3f} x single   ({len(values)} intervals)"
        )


if __name__ == "__main__":
    main()
