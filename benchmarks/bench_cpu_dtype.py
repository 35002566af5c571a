"""CPU training speed of scripts/chat-cpu.sh's three stages in float32 and in bfloat16 autocast.

    uv run python benchmarks/bench_cpu_dtype.py [--dtypes float32,bfloat16] [--rounds 2]
        [--steps 30] [--threads N]

The stages are the script's own run files (the base configs/runs/smoke-cpu-copy.yaml, the warm-up
configs/runs/warmup-cpu.yaml and the fine-tuning configs/runs/sft-cpu.yaml) on the data sets the
script builds, each for `--steps` steps from a fresh initialisation (speed does not depend on the
weights) with its evaluation cut to one batch. Rounds alternate the dtypes so that drift in the
machine's speed hits each alike. Printed per stage: the median tokens/s of each dtype, its ratio to
the first, and the stage's training time at its full step count projected from that median; then
the three stages together, with the load average. bfloat16 runs fast only on a CPU with bfloat16
instructions (AVX512-BF16 or AMX), which the first line says.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from bench_cpu_wait import REPO, trainer_tokens_per_s
from enlace_config import load_run_config
from enlace_train.backends import cpu_bf16_in_silicon

STAGES = {
    "base": "configs/runs/smoke-cpu-copy.yaml",
    "warm-up": "configs/runs/warmup-cpu.yaml",
    "fine-tuning": "configs/runs/sft-cpu.yaml",
}
# The warm-up set's options as scripts/chat-cpu.sh writes them (tests/test_chat_cpu_script.py
# keeps the two the same).
WARMUP_DATA_OPTIONS = (
    "--household-requests", "--searches", "0.3", "--plain", "0.2", "--builtin-size", "5000",
)  # fmt: skip


def build_data(tmp: Path) -> dict[str, list[str]]:
    """The script's data sets (scripts/chat-cpu.sh), and each stage's overrides that use them."""
    tools = tmp / "assistant-tools.json"
    spec = subprocess.run(
        [sys.executable, "-m", "enlace_agent.cli.assistant", "--tools-json"],
        cwd=REPO, check=True, capture_output=True, text=True,
    )  # fmt: skip
    tools.write_text(spec.stdout, encoding="utf-8")
    chat = [sys.executable, "-m", "enlace_data.cli", "chat", "builtin"]
    subprocess.run(
        [*chat, str(tmp / "warmup-data"), "--tools", str(tools), *WARMUP_DATA_OPTIONS],
        cwd=REPO, check=True, capture_output=True,
    )  # fmt: skip
    subprocess.run(
        [*chat, str(tmp / "chat-data"), "--tools", str(tools)],
        cwd=REPO, check=True, capture_output=True,
    )  # fmt: skip
    cheap_eval = ["data.eval_batches=1", "data.chat_eval_conversations=1"]
    return {
        "base": ["data.eval_batches=1"],
        "warm-up": ["train.init_from=null", f"data.path={tmp / 'warmup-data'}", *cheap_eval],
        "fine-tuning": ["train.init_from=null", f"data.path={tmp / 'chat-data'}", *cheap_eval],
    }


def stage_seconds(config: str, tokens_per_s: float) -> float:
    """The stage's training time at its full step count, at `tokens_per_s`."""
    cfg = load_run_config(REPO / config).config
    tokens_per_step = cfg.train.global_batch_size * cfg.data.context_length
    return cfg.train.max_steps * tokens_per_step / tokens_per_s


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--dtypes", default="float32,bfloat16")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--threads", type=int, default=None, help="default: one per core")
    args = ap.parse_args()
    dtypes = args.dtypes.split(",")
    threads = [] if args.threads is None else [f"hardware.num_threads={args.threads}"]
    print(
        f"{os.cpu_count()} CPUs (bfloat16 instructions: {'yes' if cpu_bf16_in_silicon() else 'no'}), "
        f"{args.steps} steps a run, {args.rounds} rounds"
    )
    with tempfile.TemporaryDirectory() as tmp:
        overrides = build_data(Path(tmp))
        runs = {(s, d): [] for s in STAGES for d in dtypes}
        loads: list[float] = []
        for rnd in range(args.rounds):
            for stage, config in STAGES.items():
                for dtype in dtypes:
                    out = Path(tmp) / f"r{rnd}-{stage}-{dtype}"
                    extra = [*overrides[stage], *threads, f"hardware.dtype={dtype}"]
                    runs[stage, dtype].append(
                        trainer_tokens_per_s(config, args.steps, out, *extra, log_every=5)
                    )
                    loads.append(os.getloadavg()[0])
                    print(f"  round {rnd} {stage:<11} {dtype:<8}: {runs[stage, dtype][-1]:7.0f} "
                          f"tok/s (load {loads[-1]:.1f})", flush=True)  # fmt: skip
    totals = dict.fromkeys(dtypes, 0.0)
    print(f"median load {statistics.median(loads):.1f}")
    for stage, config in STAGES.items():
        first = statistics.median(runs[stage, dtypes[0]])
        for dtype in dtypes:
            med = statistics.median(runs[stage, dtype])
            seconds = stage_seconds(config, med)
            totals[dtype] += seconds
            print(f"  {stage:<11} {dtype:<8}: median {med:7.0f} tok/s, {med / first:.2f}x "
                  f"{dtypes[0]}; {seconds / 60:4.1f} min at the full step count")  # fmt: skip
    for dtype in dtypes:
        print(f"  three stages {dtype:<8}: {totals[dtype] / 60:4.1f} min of training, "
              f"{totals[dtypes[0]] / totals[dtype]:.2f}x faster than {dtypes[0]}")  # fmt: skip


if __name__ == "__main__":
    main()
