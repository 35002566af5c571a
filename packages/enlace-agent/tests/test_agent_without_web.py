"""`pip install enlace-agent` without the `web` extra (issue 36): the household core needs no web
framework, so memory, snapshots, doctor, the terminal chat with --person, the shopping list, the
services and the model versions all run from the built wheel in a fresh environment where
Starlette is absent. Built and installed offline from uv.lock and uv's cache (see `slim`)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def slim(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh virtual environment with enlace-config and enlace-agent built as wheels and
    installed without extras or dev tools; its bin folder.

    `uv sync --no-editable` builds the two wheels with their backend (what `uv build` runs) and
    takes every other package from uv.lock's own file addresses, which this package's environment
    has just put in uv's cache: offline, whatever the cache holds of the index. (Installing the
    built wheels with `uv pip install` resolves httpx from the index instead, which an offline run
    finds only when something else happened to fetch it; on a clean CI clone nothing has.)"""
    where = tmp_path_factory.mktemp("slim")
    machine = {k: v for k, v in os.environ.items() if not k.startswith("VIRTUAL_ENV")}
    machine["UV_OFFLINE"] = "1"
    machine["UV_PROJECT_ENVIRONMENT"] = str(where / "venv")
    sync = ["uv", "sync", "-q", "--locked", "--exact", "--package", "enlace-agent"]
    sync += ["--no-dev", "--no-editable", "--python", sys.executable]
    done = subprocess.run(sync, cwd=ROOT, env=machine, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    site = next((where / "venv" / "lib").glob("*/site-packages"))
    assert (site / "enlace_agent" / "assistant").is_dir(), "not installed from a wheel"
    assert not list(site.glob("enlace_*.pth")), "installed editable, not from the wheels"
    return where / "venv" / "bin"


def test_every_household_command_runs_without_the_web_extra(
    slim: Path,
    model_server: Any,
    assistant_files: dict[str, Path],
    gguf: Callable[..., Path],
    clean_env: dict[str, str],
    tmp_path: Path,
) -> None:
    python = str(slim / "python")
    absent = "import importlib.util as u; assert u.find_spec('starlette') is None"
    assert subprocess.run([python, "-c", absent]).returncode == 0
    config = tmp_path / "assistant.yaml"
    settings = json.loads(assistant_files["assistant"].read_text(encoding="utf-8"))
    settings["web"] = {"people": [{"name": "Ana"}], "database": str(tmp_path / "web.sqlite3")}
    config.write_text(json.dumps(settings), encoding="utf-8")
    env = {**clean_env, "XDG_DATA_HOME": str(tmp_path / "data")}
    c = ["--config", str(config)]

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            [str(slim / "enlace-assistant"), *args], env=env, capture_output=True, text=True
        )
        assert "Traceback" not in done.stderr and "extra «web»" not in done.stderr, done.stderr
        return done

    model_server.script = [model_server.say("Hola, Ana.")]
    assert run("--once", "Hola", "--person", "Ana", *c).returncode == 0
    assert run("memory", "add", "Ana", "La abuela vive en Soria", *c).returncode == 0
    assert "Soria" in run("memory", "list", "Ana", *c).stdout
    assert run("lista", "añadir", "leche", *c).returncode == 0
    assert run("lista", *c).stdout == "[ ] leche\n"
    made = run("snapshot", "create", *c)
    assert made.returncode == 0, made.stderr
    assert run("snapshot", "list", *c).returncode == 0
    installed = run("model", "install", str(gguf(tmp_path / "m.gguf")), "--use", "--no-restart", *c)
    assert installed.returncode == 0, installed.stderr
    assert run("model", "list", *c).stdout.startswith("*")
    assert run("service", "status", *c).returncode == 0
    doctor = run("doctor", *c)
    assert doctor.returncode in (0, 1) and "✓" in doctor.stdout  # its checks ran
    # The page itself is the extra: `serve` says how to install it.
    served = subprocess.run(
        [str(slim / "enlace-assistant"), "serve", *c], env=env, capture_output=True, text=True
    )
    assert served.returncode == 2 and "enlace-agent[web]" in served.stderr
