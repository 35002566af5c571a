"""benchmarks/speedrun.py: the record row comes from a run's metrics.jsonl, never by hand."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("speedrun", REPO / "benchmarks" / "speedrun.py")
assert spec and spec.loader
speedrun = importlib.util.module_from_spec(spec)
spec.loader.exec_module(speedrun)


def _write(run_dir: Path, val: list[tuple[int, float]], seconds_per_step: float) -> Path:
    run_dir.mkdir()
    with (run_dir / "metrics.jsonl").open("w") as f:
        for step in range(10, 401, 10):  # logged every 10 steps, 4096 tokens a step
            row = {"step": step, "loss": 2.0, "tokens_seen": step * 4096}
            f.write(json.dumps({**row, "elapsed_s": step * seconds_per_step}) + "\n")
            f.write(json.dumps({"step": step, "val_bpb": dict(val).get(step)}) + "\n")
    return run_dir


def test_figures_are_read_from_the_metrics(tmp_path: Path) -> None:
    val = [(100, 3.0), (200, 2.6), (300, 2.49), (400, 2.40)]
    figs = speedrun.run_figures(_write(tmp_path / "a", val, 0.5), target=2.5)
    assert (figs["steps"], figs["tokens"], figs["wall_s"]) == (300, 300 * 4096, 150.0)
    assert figs["bpb_3min"] == 2.49 and figs["bpb_10min"] == 2.40 and figs["final_bpb"] == 2.40
    slow = speedrun.run_figures(_write(tmp_path / "b", val, 1.0), target=2.0)
    assert slow["steps"] is None and slow["bpb_3min"] == 3.0  # step 200 = 200 s: past 3 min


def test_row_is_the_median_of_the_runs(tmp_path: Path) -> None:
    runs = [
        _write(tmp_path / f"r{i}", [(100, 2.7), (200, b), (400, 2.3)], s)
        for i, (b, s) in enumerate([(2.45, 0.5), (2.55, 0.6), (2.48, 0.7)])
    ]
    figs = [speedrun.run_figures(r, target=2.5) for r in runs]
    row = speedrun.record_row(figs, "uv run enlace-train x.yaml", [1.0, 3.0, 2.0], "test")
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[3] == "3" and cells[4] == "200"  # median of 200, 400, 200 steps
    assert "(load 2.0)" in cells[6] and cells[-1] == "test"
