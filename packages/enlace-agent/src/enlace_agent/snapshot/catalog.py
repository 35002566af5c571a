"""The snapshots in a folder as `list` shows them, the record of each one's last check
(`<archive>.verified.json`, written when it is made and by `verify`), and sweeping what a killed
run left."""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import re
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from enlace_agent import files
from enlace_agent.snapshot.archive import KINDS, PARTIAL, PREFIX, SEALED, VERIFIED, read_archive
from enlace_agent.snapshot.household import WORK, Household, locked, work_dir


@dataclass(frozen=True)
class Snapshot:
    """One archive in the snapshot folder, as `list` shows it."""

    path: Path
    size: int
    created: dt.datetime
    kind: str
    sealed: bool
    verified: str | None  # when it was last verified (ISO), None: never
    contents: Mapping[str, Any]  # people, conversations per person, messages


def mark_verified(path: Path, manifest: Mapping[str, Any]) -> None:
    record = {
        "verified": dt.datetime.now(dt.UTC).replace(microsecond=0).isoformat(),
        "size": path.stat().st_size,
        "sha256": files.sha256_file(path),
        "manifest": {k: v for k, v in manifest.items() if k != "members"},
    }
    side = path.with_name(path.name + VERIFIED)
    with files.atomic_file(side, temp=path.with_name(f".{side.name}{PARTIAL}")) as out:
        out.write(json.dumps(record, ensure_ascii=False, indent=2).encode())


def verify(h: Household, path: Path) -> dict[str, Any]:
    """Reads the whole archive (every hash, the database's integrity); returns its manifest and
    records the check next to it. Raises ArchiveRefused naming the problem."""
    with locked(h):
        work = work_dir(h)
        try:
            manifest = read_archive(path, h, work / "check")
        finally:
            shutil.rmtree(work, ignore_errors=True)
        with contextlib.suppress(OSError):  # a read-only folder: verified all the same
            mark_verified(path, manifest)
    return manifest


def created_of(path: Path) -> tuple[dt.datetime, str] | None:
    match = re.match(
        rf"^{PREFIX}(\d{{8}}T\d{{6}}Z)-([a-z-]+?)(?:-\d+)?\.tar\.gz(?:\.enc)?$", path.name
    )
    if match is None or match.group(2) not in KINDS:
        return None
    created = dt.datetime.strptime(match.group(1), "%Y%m%dT%H%M%SZ").replace(tzinfo=dt.UTC)
    return created, match.group(2)


def describe(path: Path) -> Snapshot:
    from enlace_agent.shared import loads_json  # the agent's one JSON reader

    created, kind = created_of(path) or (dt.datetime.fromtimestamp(0, dt.UTC), "manual")
    size = path.stat().st_size
    verified: str | None = None
    contents: dict[str, Any] = {}
    side = path.with_name(path.name + VERIFIED)
    with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
        record = loads_json(side.read_text("utf-8"))
        contents = record["manifest"].get("contents", {})
        if record["size"] == size:
            verified = record["verified"]
    return Snapshot(path, size, created, kind, path.name.endswith(SEALED), verified, contents)


def snapshots(directory: Path) -> list[Snapshot]:
    """The complete archives in `directory`, newest first (never a `.partial` one)."""
    if not directory.is_dir():
        return []
    found = [
        describe(p)
        for p in directory.iterdir()
        if p.is_file() and not p.name.startswith(".") and created_of(p) is not None
    ]
    # Two made in the same second: the later written is the newer.
    return sorted(found, key=lambda s: (s.created, s.path.stat().st_mtime_ns), reverse=True)


def sweep(h: Household, directory: Path) -> None:
    """Leftovers of a run that was killed (called under the lock)."""
    for leftover in directory.glob(f".{PREFIX}*{PARTIAL}"):
        leftover.unlink(missing_ok=True)
    for work in h.work_root.glob(f"{WORK}*"):
        shutil.rmtree(work, ignore_errors=True)
