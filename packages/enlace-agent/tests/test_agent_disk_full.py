"""A full data disk (issue 37): `serve`, the page's sign-in and writes, `memory add` and the
other household commands say «no queda espacio en <carpeta>» with what to free, and change
nothing: not «está dañado», not «Error inesperado», not a 500. Twice: SQLite's own error
monkeypatched onto every write (always runs), and a real full tmpfs (needs `mount`, as root)."""

from __future__ import annotations

import contextlib
import functools
import json
import os
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from enlace_agent.cli.assistant import main as assistant_main

FREE = "libera espacio en ese disco"
WRITES = ("INSERT", "UPDATE", "DELETE", "REPLACE")


class FullDisk(sqlite3.Connection):
    """A connection whose every write fails as SQLite's does on a full disk."""

    def execute(self, sql: str, *args: Any) -> sqlite3.Cursor:
        if sql.lstrip().upper().startswith(WRITES):
            raise sqlite3.OperationalError("database or disk is full")
        return super().execute(sql, *args)

    def executemany(self, sql: str, *args: Any) -> sqlite3.Cursor:
        if sql.lstrip().upper().startswith(WRITES):
            raise sqlite3.OperationalError("database or disk is full")
        return super().executemany(sql, *args)


def household(tmp_path: Path, database: Path) -> Path:
    config = tmp_path / "assistant.yaml"
    web = {"database": str(database), "people": [{"name": "Ana"}, {"name": "Bruno"}]}
    config.write_text(json.dumps({"web": web}))
    return config


def said_full(text: str, folder: Path) -> bool:
    lowered = text.lower()
    return f"no queda espacio en {folder}" in lowered and FREE in lowered


def check_page_writes_refused(page: Any, ana: Any, folder: Path) -> None:
    """Sign-in, a memory, a question and the shopping list: each a 507 saying what to free."""
    for answer in (
        page.client().post("/api/login", json={"name": "Bruno", "token": ""}),
        ana.post("/api/memories", json={"text": "El perro se llama Tor"}),
        ana.post("/api/conversations", json={"text": "Hola"}),
        ana.post("/api/shopping", json={"text": "leche"}),
    ):
        assert answer.status_code == 507, answer.text
        assert said_full(answer.json()["error"], folder)
        assert answer.json()["error"].startswith("No queda espacio")


def test_a_full_disk_on_every_write_is_said_and_changes_nothing(
    web_page: Callable[..., Any],
    in_process: Callable[..., Any],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    database = tmp_path / "web.sqlite3"
    config = household(tmp_path, database)
    page = web_page()
    ana = page.login("Ana")
    ana.post("/api/memories", json={"text": "La abuela vive en Soria", "scope": "familia"})
    before = ana.get("/api/memories").json()
    monkeypatch.setattr(sqlite3, "connect", functools.partial(sqlite3.connect, factory=FullDisk))

    check_page_writes_refused(page, ana, tmp_path)
    added = in_process(assistant_main, "memory", "add", "Ana", "Otra cosa", "--config", str(config))
    assert added.returncode == 1 and said_full(added.stderr, tmp_path), added.stderr
    assert "inesperado" not in added.stderr and "Traceback" not in added.stderr
    listed = in_process(assistant_main, "lista", "añadir", "pan", "--config", str(config))
    assert listed.returncode == 1 and said_full(listed.stderr, tmp_path), listed.stderr

    monkeypatch.undo()
    assert ana.get("/api/memories").json() == before
    assert ana.get("/api/conversations").json()["conversations"] == []
    assert ana.get("/api/shopping").json()["items"] == []


# ---------------------------------------------------------------- a real full disk


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 1 MiB tmpfs mounted at tmp_path/disk (skipped where mounting is refused)."""
    folder = tmp_path / "disk"
    folder.mkdir()
    if shutil.which("mount") is None:
        pytest.skip("no mount command here: the full-disk test needs a small tmpfs")
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(folder)],
        capture_output=True,
        text=True,
        check=False,
    )
    if mounted.returncode != 0:
        pytest.skip(f"mounting a small tmpfs was refused ({mounted.stderr.strip()})")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False)


def fill(folder: Path) -> Path:
    """Writes a file in `folder` until the disk is full; the file, to delete to free it."""
    filler = folder / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
    with contextlib.suppress(OSError):
        while True:
            os.write(fd, b"x" * 4096)
    os.close(fd)
    return filler


def test_a_real_full_disk_for_serve_the_page_and_memory_add(
    small_disk: Path,
    web_page: Callable[..., Any],
    in_process: Callable[..., Any],
    tmp_path: Path,
) -> None:
    database = small_disk / "web.sqlite3"
    config = household(tmp_path, database)
    page = web_page(database=str(database))
    ana = page.login("Ana")
    ana.post("/api/memories", json={"text": "La abuela vive en Soria", "scope": "familia"})
    before = ana.get("/api/memories").json()
    filler = fill(small_disk)

    check_page_writes_refused(page, ana, small_disk)
    added = in_process(assistant_main, "memory", "add", "Ana", "Otra cosa", "--config", str(config))
    assert added.returncode == 1 and said_full(added.stderr, small_disk), added.stderr
    assert "dañado" not in added.stderr and "inesperado" not in added.stderr
    page.stop()
    serve = [sys.executable, "-m", "enlace_agent.cli.assistant", "serve", "--config", str(config)]
    env = {**os.environ, "BRAVE_SEARCH_API_KEY": "not-used-key"}  # fails before any search
    started = subprocess.run(
        serve, env=env, capture_output=True, text=True, timeout=60, check=False
    )
    assert started.returncode == 1 and said_full(started.stderr, small_disk), started.stderr
    assert "dañado" not in started.stderr and "Traceback" not in started.stderr

    filler.unlink()
    page = web_page(database=str(database))
    ana = page.login("Ana")
    assert ana.get("/api/memories").json() == before  # nothing changed
    assert ana.post("/api/memories", json={"text": "Otra cosa"}).status_code == 201
