"""scripts/chat-cpu.sh's wiring, against a fake uv that records each command: the 10-minute
recipe (CI's chat stage runs it for real) and `--long`, the longer recipe, whose three runs must
be the *-long.yaml twins, each started from the run before it (CI never runs it: it takes ~15
minutes; benchmarks/CHAT.md measures it)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

FAKE_UV = """#!/usr/bin/env bash
printf '%s\\n' "$*" >> "$CALLS"
for a in "$@"; do
  case "$a" in
    run.out_dir=*) d=${a#run.out_dir=}; mkdir -p "$d"; echo "step 1 | chat: fake" > "$d/train.log" ;;
    --tools-json) echo "[]" ;;
  esac
done
"""


def _trainings(tmp_path: Path, *options: str) -> list[list[str]]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "uv").write_text(FAKE_UV)
    (bin_dir / "uv").chmod(0o755)
    calls, runs = tmp_path / "calls.txt", tmp_path / "runs"
    runs.mkdir()
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "CALLS": str(calls)}
    script = REPO / "scripts" / "chat-cpu.sh"
    command = ["bash", str(script), "--runs", str(runs), "--seed", "7", *options, "--no-chat"]
    proc = subprocess.run(command, env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "chat: fake" in proc.stdout  # the last run's chat line
    lines = [line.split() for line in calls.read_text().splitlines()]
    return [line[2:] for line in lines if line[:2] == ["run", "enlace-train"]]


def _named(args: list[str], key: str) -> str:
    return next(a.split("=", 1)[1] for a in args if a.startswith(f"{key}="))


def test_the_script_trains_base_warm_up_and_chat_each_from_the_one_before(tmp_path: Path) -> None:
    for options, suffix in (((), ""), (("--long",), "-long")):
        recipe = tmp_path / (suffix or "short")
        runs = recipe / "runs"
        trainings = _trainings(recipe, *options)
        names = [f"smoke-cpu-copy{suffix}", f"warmup-cpu{suffix}", f"sft-cpu{suffix}"]
        assert [t[0] for t in trainings] == [f"configs/runs/{n}.yaml" for n in names]
        assert all((REPO / t[0]).is_file() for t in trainings)
        assert [_named(t, "run.out_dir") for t in trainings] == [str(runs / n) for n in names]
        assert [_named(t, "train.init_from") for t in trainings[1:]] == [
            str(runs / n) for n in names[:2]
        ]
        assert all(_named(t, "train.seed") == "7" for t in trainings)


def test_float32_trains_every_run_in_float32_and_by_default_the_profile_decides(tmp_path: Path):
    from enlace_config import load_run_config

    default = _trainings(tmp_path / "default")
    assert not any(a.startswith("hardware.dtype=") for t in default for a in t)
    dtypes = {load_run_config(REPO / t[0]).config.hardware.dtype for t in default}
    # configs/hardware/cpu-bf16.yaml: CI's cores have its instructions
    assert dtypes == {"bfloat16"}
    for options in (("--float32",), ("--float32", "--long")):
        trainings = _trainings(tmp_path / "-".join(options), *options)
        assert len(trainings) == 3
        assert all(_named(t, "hardware.dtype") == "float32" for t in trainings)


def test_the_speed_bench_builds_the_warm_up_set_as_the_script_does(monkeypatch) -> None:
    """benchmarks/bench_cpu_dtype.py times the warm-up on the rows the script trains on."""
    import importlib

    monkeypatch.syspath_prepend(str(REPO / "benchmarks"))
    options = importlib.import_module("bench_cpu_dtype").WARMUP_DATA_OPTIONS
    script = (REPO / "scripts" / "chat-cpu.sh").read_text().replace("\\\n", " ")
    warm_up = next(line for line in script.splitlines() if '"$runs/warmup-data" --tools' in line)
    assert warm_up.split('assistant-tools.json"', 1)[1].split() == list(options)
