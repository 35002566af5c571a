"""Restoring: the whole household, or one person's conversations and memories.

A snapshot of the current state is taken first (the undo). The whole household is restored with
the backup API into the live file: one write transaction, so the page keeps answering from the old
state until it commits and no request sees a mix; one person's rows are replaced in one
transaction on the live file. A kill before the commit leaves the live file as it was (SQLite's
journal rolls it back).
"""

from __future__ import annotations

import os
import shutil
import sqlite3
from collections.abc import Mapping
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from enlace_agent import files
from enlace_agent.snapshot.archive import DATABASE, read_archive
from enlace_agent.snapshot.catalog import Snapshot
from enlace_agent.snapshot.errors import CannotDo
from enlace_agent.snapshot.household import Household, checkpoint, locked, sweep, work_dir
from enlace_agent.snapshot.make import create_locked
from enlace_agent.web.store import (
    SECRET_TABLES,
    Store,
    has_table,
    migrate,
    person_rows,
    person_tables,
    read_only_uri,
)

RESTORE_STEP_PAGES = 256  # the restore's backup copies in steps inside one write transaction


@dataclass(frozen=True)
class Restored:
    manifest: Mapping[str, Any]
    undo: Snapshot | None  # the snapshot of the state before (None: there was no history)
    person: str | None
    settings: Path | None  # where the archive's settings were put, for the family to look at


def restore(h: Household, path: Path, person: str | None = None) -> Restored:
    """The household (or one person's conversations and memories) as in the archive; a snapshot
    of the current state is taken first. Either the old state or the restored one, never a mix."""
    with locked(h):
        files.private_folder(h.directory)
        sweep(h, h.directory)
        work = work_dir(h)
        try:
            into = work / "archive"
            manifest = read_archive(path, h, into)
            restored = into / DATABASE
            with closing(sqlite3.connect(restored)) as db:
                migrate(db)  # an older snapshot is brought to this schema before it goes live
                if person is not None and not person_rows(db, person):
                    names = ", ".join(manifest.get("contents", {}).get("people", [])) or "nadie"
                    raise CannotDo(
                        f"la copia no tiene conversaciones de {person} (tiene de: {names})."
                    )
            # An answer being written when the snapshot was taken ends there, as after a kill.
            Store(restored).mark_interrupted()
            checkpoint("restore-read")
            undo = None
            if h.database.is_file():
                undo = create_locked(h, "before-restore", h.directory)
            elif person is not None:  # a new machine: an empty history to put one person in
                Store(h.database)
            checkpoint("restore-undo-made")
            if person is None:
                _replace_all(restored, h.database, h.timeout_s)
            else:
                _replace_person(restored, h.database, person, h.timeout_s)
            checkpoint("restore-done")
            settings = _keep_settings(into, h.directory, path)
            return Restored(manifest, undo, person, settings)
        finally:
            shutil.rmtree(work, ignore_errors=True)


def _replace_all(restored: Path, live: Path, timeout_s: float) -> None:
    """The live file becomes the restored one in one write transaction (the backup API into it):
    readers see the old state until the commit; a kill before it leaves the old state. The
    sign-ins of now are kept (a snapshot holds none)."""
    if not live.is_file():  # a new machine: the history file is made private from the start
        files.private_folder(live.parent)
        os.close(os.open(live, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    with closing(sqlite3.connect(restored, uri=True)) as db:
        db.execute("ATTACH DATABASE ? AS live", (read_only_uri(live),))
        for table in SECRET_TABLES:
            if has_table(db, table) and has_table(db, table, "live"):
                db.execute(f'INSERT OR IGNORE INTO main."{table}" SELECT * FROM live."{table}"')
        db.commit()
        db.execute("DETACH DATABASE live")
    with (
        closing(sqlite3.connect(restored)) as source,
        closing(sqlite3.connect(live, timeout=timeout_s)) as target,
    ):
        source.backup(
            target,
            pages=RESTORE_STEP_PAGES,
            progress=lambda *_: checkpoint("restore-copying"),  # pyright: ignore[reportUnknownLambdaType, reportUnknownArgumentType]
        )
        target.execute("PRAGMA journal_mode = WAL")


def _replace_person(restored: Path, live: Path, person: str, timeout_s: float) -> None:
    """One person's rows replaced by the archive's, in one transaction on the live file."""
    with closing(sqlite3.connect(live, uri=True, timeout=timeout_s, isolation_level=None)) as db:
        db.execute("ATTACH DATABASE ? AS snap", (read_only_uri(restored),))
        db.execute("PRAGMA foreign_keys = OFF")  # rows are deleted and written in order here
        db.execute("BEGIN IMMEDIATE")
        try:
            tables = person_tables(db)
            for table, where in reversed(tables):
                scoped = where.replace("{schema}", "main")
                params = (person,) * scoped.count("?")
                db.execute(f'DELETE FROM main."{table}" WHERE {scoped}', params)
            for table, where in tables:
                if not has_table(db, table, "snap"):
                    continue
                live_columns = [c[1] for c in db.execute(f'PRAGMA main.table_info("{table}")')]
                snap_columns = {c[1] for c in db.execute(f'PRAGMA snap.table_info("{table}")')}
                names = ", ".join(f'"{c}"' for c in live_columns if c in snap_columns)
                scoped = where.replace("{schema}", "snap")
                params = (person,) * scoped.count("?")
                db.execute(
                    f'INSERT INTO main."{table}" ({names}) SELECT {names} FROM snap."{table}" '
                    f"WHERE {scoped}",
                    params,
                )
                checkpoint("restore-person-writing")
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise


def _keep_settings(into: Path, directory: Path, archive: Path) -> Path | None:
    """The archive's settings, put where the family can compare them with their own (the
    settings in use are never overwritten)."""
    found = into / "settings"
    if not found.is_dir():
        return None
    target = directory / f"ajustes-de-{archive.name.split('.')[0]}"
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(found, target)
    return target
