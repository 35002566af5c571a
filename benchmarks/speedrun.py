"""The CPU speedrun record: steps, tokens and wall time to a fixed validation bits/byte.

    uv run python benchmarks/speedrun.py run CONFIG [key=value ...] [--repeats 3] [--change TEXT]
    uv run python benchmarks/speedrun.py row RUN_DIR [RUN_DIR ...] [--change TEXT]

`run` trains CONFIG `--repeats` times (fresh run directories under runs/speedrun/), sampling the load
average every few seconds while each run trains, then prints the record row for SPEEDRUN.md. `row`
makes the row from run directories that already exist (their load is unknown: shown as "?").
Nothing is copied by hand: every figure comes from the runs' metrics.jsonl.

A row: steps and tokens to the target (the first evaluation at or below it: primary, since they do
not depend on the machine's load), wall time to the target with the load beside it, and the
validation bits/byte reached within 3 and within 10 minutes of training time; medians over the runs.
The evaluation interval decides how finely "steps to target" is resolved: speedrun configs
evaluate every 25 steps.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import shutil
import statistics
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

from enlace_train.metrics import read_metrics

REPO = Path(__file__).resolve().parents[1]

TARGET_BPB = 2.50  # what the smoke config of 2026-12 reaches in about 3 minutes on 2 cores
WINDOWS_S = (180.0, 600.0)


def run_figures(run_dir: Path, target: float = TARGET_BPB) -> dict[str, Any]:
    """The record's figures for one finished run directory."""
    rows = read_metrics(run_dir / "metrics.jsonl")
    steps = {r["step"]: r for r in rows if "loss" in r}
    vals = [(r["step"], r["val_bpb"]) for r in rows if r.get("val_bpb") is not None]
    if not steps or not vals:
        raise SystemExit(f"{run_dir}: no training or validation rows in metrics.jsonl")
    known = sorted(steps)

    def at(step: int, key: str) -> float:  # linear between logged steps (log_every may be > 1)
        lo = max((s for s in known if s <= step), default=known[0])
        hi = min((s for s in known if s >= step), default=known[-1])
        if hi == lo:
            return float(steps[lo][key])
        w = (step - lo) / (hi - lo)
        return float(steps[lo][key]) * (1 - w) + float(steps[hi][key]) * w

    hit = next(((s, b) for s, b in vals if b <= target), None)
    out: dict[str, Any] = {
        "final_bpb": vals[-1][1],
        "steps": hit[0] if hit else None,
        "tokens": round(at(hit[0], "tokens_seen")) if hit else None,
        "wall_s": at(hit[0], "elapsed_s") if hit else None,
    }
    for window in WINDOWS_S:
        within = [b for s, b in vals if at(s, "elapsed_s") <= window]
        out[f"bpb_{int(window // 60)}min"] = min(within) if within else None
    return out


def _median(values: list[Any]) -> Any:
    present = [v for v in values if v is not None]
    return statistics.median(present) if len(present) == len(values) and present else None


def record_row(figs: list[dict[str, Any]], command: str, loads: list[float], change: str) -> str:
    def fmt(v: Any, spec: str) -> str:
        return "not reached" if v is None else format(v, spec)

    med = {k: _median([f[k] for f in figs]) for k in figs[0]}
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True
    ).stdout.strip()
    load = f"{statistics.median(loads):.1f}" if loads else "?"
    wall = "not reached" if med["wall_s"] is None else f"{med['wall_s'] / 60:.2f} min"
    return (
        f"| {dt.date.today()} | {commit} | `{command}` | {len(figs)} "
        f"| {fmt(med['steps'], '.0f')} | {fmt(med['tokens'], ',.0f')} | {wall} (load {load}) "
        f"| {fmt(med['bpb_3min'], '.3f')} | {fmt(med['bpb_10min'], '.3f')} "
        f"| {fmt(med['final_bpb'], '.3f')} | {change} |"
    )


def _train_sampling_load(cmd: list[str], log_path: Path) -> list[float]:
    loads: list[float] = []
    done = threading.Event()

    def sample() -> None:
        while not done.wait(5.0):
            loads.append(os.getloadavg()[0])

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    with log_path.open("w") as log:
        rc = subprocess.run(cmd, cwd=REPO, stdout=log, stderr=subprocess.STDOUT).returncode
    done.set()
    thread.join()
    if rc != 0:
        raise SystemExit(f"training failed (exit {rc}); see {log_path}")
    return loads


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    sub = parser.add_subparsers(dest="verb", required=True)
    run_p = sub.add_parser("run", help="train CONFIG --repeats times and print the row")
    run_p.add_argument("config")
    run_p.add_argument("overrides", nargs="*")
    run_p.add_argument("--repeats", type=int, default=3)
    row_p = sub.add_parser("row", help="the row of existing run directories")
    row_p.add_argument("run_dirs", nargs="+", type=Path)
    for p in (run_p, row_p):
        p.add_argument("--change", default="", help="what this record changed")
        p.add_argument("--target", type=float, default=TARGET_BPB)
    args = parser.parse_args(argv)

    if args.verb == "row":
        figs = [run_figures(d, args.target) for d in args.run_dirs]
        print(record_row(figs, f"(run dirs) {' '.join(map(str, args.run_dirs))}", [], args.change))
        return 0
    command = " ".join(["uv run enlace-train", args.config, *args.overrides])
    figs, loads = [], []
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    for i in range(args.repeats):
        out = REPO / "runs" / "speedrun" / f"{Path(args.config).stem}-{stamp}-{i}"
        shutil.rmtree(out, ignore_errors=True)
        out.parent.mkdir(parents=True, exist_ok=True)
        cmd = [sys.executable, "-m", "enlace_train", args.config, *args.overrides]
        cmd.append(f"run.out_dir={out}")
        loads += _train_sampling_load(cmd, out.with_suffix(".log"))
        figs.append(run_figures(out, args.target))
        print(f"run {i + 1}/{args.repeats}: {figs[-1]}", file=sys.stderr)
    print(record_row(figs, command, loads, args.change))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
