"""`enlace-train report`: the page, the plots and report.json from real (tiny) run directories."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

PLOTS = ["loss.png", "val_bpb.png", "lr.png", "grad_norm.png", "tokens_per_s.png"]


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory, h) -> list[Path]:
    from enlace_train.trainer import train

    tmp = tmp_path_factory.mktemp("report")
    dirs = []
    for name, lr in (("lr-high", 3e-3), ("lr-low", 1e-3)):
        run_file = h.make_run_file(tmp, name, train={"lr": lr, "max_steps": 8})
        train(h.load(run_file))
        dirs.append(h.run_dir_of(run_file))
    return dirs


def test_report_writes_page_plots_and_the_expected_series(two_runs, tmp_path):
    out = tmp_path / "report"
    proc = subprocess.run(
        [sys.executable, "-m", "enlace_train", "report", *map(str, two_runs), "--out", str(out)],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"report: {out / 'report.md'}"
    for name in PLOTS:
        png = (out / name).read_bytes()
        assert png.startswith(b"\x89PNG") and len(png) > 5000, name
    report = json.loads((out / "report.json").read_text())
    steps = {
        "loss": 8,
        "val_bpb": 2,
        "lr": 8,
        "grad_norm": 8,
        "tokens_per_s": 8,
    }  # log_every 1, eval_every 4
    for name in PLOTS:
        series = report["plots"][name]
        assert [s["run"] for s in series] == ["lr-high", "lr-low"]  # both runs on one plot
        assert all(s["points"] == steps[s["key"]] for s in series), series
    high = report["runs"]["lr-high"]
    assert high["steps"] == 8 and high["tokens_seen"] == 8 * 4 * 32
    assert high["best_val_bpb"] <= high["final_val_bpb"] and high["tokens_per_s_median"] > 0
    page = (out / "report.md").read_text()
    for text in (
        "## lr-high",
        "## lr-low",
        "CPU (",
        "| tokens seen | 1,024 |",
        "![Training loss](loss.png)",
    ):
        assert text in page


def test_report_of_a_folder_that_is_no_run_exits_2(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "enlace_train", "report", str(tmp_path)],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert proc.returncode == 2
    assert "no metrics.jsonl here; give a run directory" in proc.stderr


def test_a_chat_run_gets_the_chat_measures_plotted_and_stated(two_runs, tmp_path):
    import shutil

    run = tmp_path / "sft"
    shutil.copytree(two_runs[0], run)
    rows = [
        {"step": s, "chat_turn_end": 1.0, "chat_tool_call": 1.0, "chat_argument_fidelity": f,
         "chat_grounded": g, "chat_invention": 0.5, "chat_spurious_calls": 0.25,
         "chat_no_search_calls": 0.125}
        for s, f, g in ((4, 0.0, 0.0), (8, 0.75, 0.5))
    ]  # fmt: skip
    with (run / "metrics.jsonl").open("a") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows)
    from enlace_train.report import write_report

    page = write_report([run], tmp_path / "out").read_text()
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert (tmp_path / "out" / "chat.png").read_bytes().startswith(b"\x89PNG")
    assert {s["key"] for s in report["plots"]["chat.png"]} >= {"chat_argument_fidelity"}
    chat = next(iter(report["runs"].values()))["chat"]
    assert chat["chat_argument_fidelity"] == 0.75 and chat["chat_grounded"] == 0.5
    assert "| argument fidelity (last chat evaluation) | 75.0% |" in page
    assert "![Chat measures](chat.png)" in page
