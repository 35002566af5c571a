"""scripts/gpu-check.sh on a machine without CUDA: the path CI can run. It must say what it skips and
why, still prove the fail-fast refusal users see, and write its summary as JSON. (On a CUDA machine
the whole check runs instead; see the README's "GPU check".)"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parent.parent


def test_a_python_without_torch_is_named_in_one_line_with_the_fix(tmp_path):
    """The default python3 of a machine without torch: one line saying which Python the check needs
    and how to point GPU_CHECK_PYTHON at the project's environment; no traceback."""
    bare = tmp_path / "bare"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(bare)], check=True)
    proc = subprocess.run(
        ["bash", "scripts/gpu-check.sh", "--out", str(tmp_path / "out")],
        cwd=REPO,
        env={
            **os.environ,
            "GPU_CHECK_PYTHON": str(bare / "bin" / "python"),
            "GPU_CHECK_WHEELS": str(tmp_path / "no-wheels"),
        },
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr and "ModuleNotFoundError" not in proc.stderr
    [line] = proc.stderr.splitlines()
    assert str(bare / "bin" / "python") in line and "torch" in line
    assert "GPU_CHECK_PYTHON=.venv/bin/python" in line
    assert not (tmp_path / "out").exists()


@pytest.mark.slow  # two trainer start-ups
@pytest.mark.skipif(torch.cuda.is_available(), reason="on a CUDA machine the full check runs")
def test_cpu_path_skips_with_reasons_refuses_the_gpu_profiles_and_writes_json(tmp_path):
    env = {
        **os.environ,
        "GPU_CHECK_PYTHON": sys.executable,
        "GPU_CHECK_WHEELS": str(tmp_path / "no-wheels"),
    }
    proc = subprocess.run(
        ["bash", "scripts/gpu-check.sh", "--out", str(tmp_path / "out"), "--budget-s", "120"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads((tmp_path / "out" / "gpu-check.json").read_text())
    rows = {row["check"]: row for row in report["rows"]}
    assert report["board"].startswith("CPU")

    install = rows["install from gpu-wheels/"]
    assert install["status"] == "skip" and "scripts/gpu-check.sh --prepare" in install["detail"]
    for profile, name in (("blackwell-5090", "rtx-5090"), ("turing-2060", "rtx-2060-12gb")):
        refusal = rows[f"refuse {profile} on {report['board']}"]
        assert refusal["status"] == "pass", refusal
        assert refusal["detail"].startswith("exit 2: enlace-train: error: Hardware profile")
        assert f"'{name}' asks for hardware.device=cuda" in refusal["detail"]
        assert "Use instead: configs/hardware/cpu.yaml" in refusal["detail"]
    gpu_only = [row for check, row in rows.items() if not check.startswith(("install", "refuse"))]
    assert {row["check"] for row in gpu_only} >= {
        "pytest -m gpu",
        "smoke turing-2060: train, kill, resume",
        "torchrun 1 GPU, NCCL, fsdp",
        "tiny-50m blackwell-5090, compile true",
    }
    for row in gpu_only:
        assert row["status"] == "skip"
        assert row["detail"] == "skipped: no CUDA device (torch.cuda.is_available() is False)"
    for line in ("GPU check on CPU", "pytest -m gpu", "written:"):  # the printed table
        assert line in proc.stdout
