"""CPU training speed against OpenMP's spin count (`hardware.openmp_spin_count`), quiet and loaded.

    uv run python benchmarks/bench_cpu_wait.py [--spins 0,3000,10000,300000] [--busy 0,2]
        [--rounds 2] [--steps 60] [--config configs/runs/smoke-cpu.yaml]

For each number of busy background processes (pure-Python loops standing in for other jobs on the
same cores), the rounds run the real trainer (`enlace-train CONFIG`, fresh run directory) once per
spin count, alternating so that drift in the machine's speed hits every spin count alike. A run's
figure is the median tokens/s of its log rows after the first (the trainer keeps evaluation and
start-up out of them). Printed: median tokens/s per spin count and its ratio to spin 0 (sleep at
once), with the load average. 300,000 is libgomp's default when nothing is set.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from enlace_train.metrics import read_metrics

REPO = Path(__file__).resolve().parents[1]
BUSY_LOOP = "while True: pass"


def trainer_tokens_per_s(
    config: str, steps: int, out_dir: Path, *overrides: str, log_every: int = 10
) -> float:
    """The real trainer on `config` for `steps` steps (fresh run directory, `overrides` last): the
    median tokens/s of its log rows after the first."""
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    schedule = [
        f"run.out_dir={out_dir}",
        f"train.max_steps={steps}",
        "train.warmup_steps=5",
        f"train.decay_steps={steps // 3}",
        f"train.log_every={log_every}",
        f"train.eval_every={steps}",
        f"train.checkpoint_every={steps}",
    ]
    cmd = [sys.executable, "-m", "enlace_train.cli", config, *schedule, *overrides]
    subprocess.run(cmd, cwd=REPO, env=env, check=True, capture_output=True)
    rows = [r for r in read_metrics(out_dir / "metrics.jsonl") if "tokens_per_s" in r]
    return statistics.median(r["tokens_per_s"] for r in rows[1:])


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--config", default="configs/runs/smoke-cpu.yaml")
    ap.add_argument("--spins", default="0,3000,10000,300000")
    ap.add_argument("--busy", default="0,2", help="background busy processes, one block each")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--steps", type=int, default=60)
    args = ap.parse_args()
    spins = [int(s) for s in args.spins.split(",")]
    print(f"{os.cpu_count()} CPUs, {args.config}, {args.steps} steps a run, {args.rounds} rounds")
    with tempfile.TemporaryDirectory() as tmp:
        for busy in (int(b) for b in args.busy.split(",")):
            others = [subprocess.Popen([sys.executable, "-c", BUSY_LOOP]) for _ in range(busy)]
            try:
                runs: dict[int, list[float]] = {s: [] for s in spins}
                loads = []
                for rnd in range(args.rounds):
                    for spin in spins:
                        out = Path(tmp) / f"b{busy}-r{rnd}-s{spin}"
                        runs[spin].append(
                            trainer_tokens_per_s(
                                args.config, args.steps, out, f"hardware.openmp_spin_count={spin}"
                            )
                        )
                        loads.append(os.getloadavg()[0])
                        print(f"  busy {busy} round {rnd} spin {spin:>7}: {runs[spin][-1]:7.0f} "
                              f"tok/s (load {loads[-1]:.1f})", flush=True)  # fmt: skip
            finally:
                for p in others:
                    p.kill()
            base = statistics.median(runs[spins[0]])
            print(f"{busy} busy processes (median load {statistics.median(loads):.1f}):")
            for spin in spins:
                med = statistics.median(runs[spin])
                print(
                    f"  spin {spin:>7}: median {med:7.0f} tok/s, {med / base:.2f}x spin {spins[0]}"
                )


if __name__ == "__main__":
    main()
