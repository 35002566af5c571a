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

from enlace_agent import files, shared
from enlace_agent.household.database import Store, migrate
from enlace_agent.household.schema import (
    SECRET_TABLES,
    has_table,
    keep_counters,
    people,
    person_rows,
    person_tables,
    read_only_uri,
)
from enlace_agent.shared import out_of_space
from enlace_agent.snapshot.archive import DATABASE, VERIFIED, read_archive
from enlace_agent.snapshot.catalog import Snapshot, sweep
from enlace_agent.snapshot.errors import CannotDo, DiskFull
from enlace_agent.snapshot.household import Household, checkpoint, locked, work_dir
from enlace_agent.snapshot.make import create_locked

RESTORE_STEP_PAGES = 256  # the restore's backup copies in steps inside one write transaction


@dataclass(frozen=True)
class Restored:
    manifest: Mapping[str, Any]
    undo: Snapshot | None  # the snapshot of the state before (None: there was no history)
    person: str | None
    settings: Path | None  # where the archive's settings were put, for the family to look at


def restore(
    h: Household, path: Path, person: str | None = None, *, other_household: bool = False
) -> Restored:
    """The household (or one person's conversations and memories) as in the archive; a snapshot
    of the current state is taken first. Either the old state or the restored one, never a mix.
    An archive of another household (none of its people live here) needs `other_household`."""
    with locked(h):
        files.private_folder(h.directory)
        sweep(h, h.directory)
        work = work_dir(h)
        undo: Snapshot | None = None
        reading = True  # until the archive is read and checked: nothing written outside work
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
                theirs = people(db) | _configured(into)
            if not other_household:
                _same_household(h, theirs, person)
            # An answer being written when the snapshot was taken ends there, as after a kill.
            Store(restored).mark_interrupted()
            reading = False
            checkpoint("restore-read")
            if h.database.is_file():
                undo = create_locked(h, "before-restore", h.directory)
            elif person is not None:  # a new machine: an empty history to put one person in
                Store(h.database)
            checkpoint("restore-undo-made")
            if person is None:
                replace_all(restored, h.database, h.timeout_s)
            else:
                _replace_person(restored, h.database, person, h.timeout_s)
            checkpoint("restore-done")
            settings = _keep_settings(into, h.directory, path)
            return Restored(manifest, undo, person, settings)
        except (OSError, sqlite3.OperationalError, shared.DiskFull) as exc:
            if not isinstance(exc, shared.DiskFull) and not out_of_space(exc):
                raise
            if isinstance(exc, DiskFull) and reading:
                raise  # before anything was written: it says what the archive needs
            _forget(undo)  # the live history is as it was: its undo copy is not needed
            folder = exc.folder if isinstance(exc, shared.DiskFull) else h.work_root
            raise DiskFull(
                folder,
                "libera espacio allí (las copias antiguas se ven con «enlace-assistant snapshot "
                "list») y vuelve a intentarlo. El historial no se ha tocado: sigue como antes de "
                "restaurar.",
            ) from None
        finally:
            shutil.rmtree(work, ignore_errors=True)


def _configured(into: Path) -> set[str]:
    """The names in the archive's `settings/people.json` (none when it has none)."""
    from enlace_agent.shared import loads_json  # the agent's one JSON reader

    try:
        listed = loads_json((into / "settings" / "people.json").read_text("utf-8"))
    except (OSError, ValueError):
        return set()
    if not isinstance(listed, list):
        return set()
    entries: list[Any] = listed  # pyright: ignore[reportUnknownVariableType]
    return {e["name"] for e in entries if isinstance(e, dict) and isinstance(e.get("name"), str)}  # pyright: ignore[reportUnknownMemberType]


def _same_household(h: Household, theirs: set[str], person: str | None) -> None:
    """Refuses an archive none of whose people live here (a household with no one yet, a new
    machine, takes any)."""
    ours = {str(p["name"]) for p in h.people if p.get("name")}
    if h.database.is_file():
        with closing(sqlite3.connect(read_only_uri(h.database), uri=True)) as live:
            ours |= people(live)
    if not theirs or not ours or theirs & ours:
        return
    what = (
        "cambiaría el historial de toda la familia por el suyo"
        if person is None
        else f"traería aquí las conversaciones de {person}"
    )
    raise CannotDo(
        f"esta copia es de otra casa: en ella están {', '.join(sorted(theirs))} y aquí "
        f"{', '.join(sorted(ours))}. Restaurarla {what} (antes se guardaría una copia de lo de "
        "ahora). Si es lo que quieres, repite la orden con --otra-casa."
    )


def _forget(undo: Snapshot | None) -> None:
    if undo is not None:
        undo.path.unlink(missing_ok=True)
        undo.path.with_name(undo.path.name + VERIFIED).unlink(missing_ok=True)


def replace_all(restored: Path, live: Path, timeout_s: float) -> None:
    """The live file becomes the restored one in one write transaction (the backup API into it):
    readers see the old state until the commit; a kill before it leaves the old state. The
    sign-ins of now are kept (a snapshot holds none), and so are the row counters (an id once
    given is never given again)."""
    if not live.is_file():  # a new machine: the history file is made private from the start
        files.private_folder(live.parent)
        os.close(os.open(live, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    with closing(sqlite3.connect(restored, uri=True)) as db:
        db.execute("ATTACH DATABASE ? AS live", (read_only_uri(live),))
        for table in SECRET_TABLES:
            if has_table(db, table) and has_table(db, table, "live"):
                db.execute(f'INSERT OR IGNORE INTO main."{table}" SELECT * FROM live."{table}"')
        keep_counters(db, "live")
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
                shared = [c for c in live_columns if c in snap_columns]
                scoped = where.replace("{schema}", "snap")
                params = (person,) * scoped.count("?")
                key = _renumberable_key(db, table, [t for t, _ in tables])
                if key is None or key not in shared:
                    _copy_rows(db, table, shared, scoped, params)
                else:
                    _copy_rows_renumbering_clashes(db, table, shared, key, scoped, params)
                checkpoint("restore-person-writing")
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise


def _copy_rows(
    db: sqlite3.Connection, table: str, columns: list[str], where: str, params: tuple[str, ...]
) -> None:
    names = ", ".join(f'"{c}"' for c in columns)
    db.execute(
        f'INSERT INTO main."{table}" ({names}) SELECT {names} FROM snap."{table}" WHERE {where}',
        params,
    )


def _copy_rows_renumbering_clashes(
    db: sqlite3.Connection,
    table: str,
    columns: list[str],
    key: str,
    where: str,
    params: tuple[str, ...],
) -> None:
    """The archive's rows with their own ids, but those whose id another row now has (a history
    whose counters once went back, as an older Enlace's whole restore left them): those get new
    ids, and the other row stays as it is."""
    db.execute(
        f'CREATE TEMP TABLE clashes AS SELECT "{key}" AS id FROM snap."{table}" WHERE {where} '
        f'AND "{key}" IN (SELECT "{key}" FROM main."{table}")',
        params,
    )
    try:
        _copy_rows(db, table, columns, f'{where} AND "{key}" NOT IN temp.clashes', params)
        rest = [c for c in columns if c != key]
        _copy_rows(db, table, rest, f'{where} AND "{key}" IN temp.clashes ORDER BY "{key}"', params)
    finally:
        db.execute("DROP TABLE temp.clashes")


def _renumberable_key(db: sqlite3.Connection, table: str, tables: list[str]) -> str | None:
    """The table's INTEGER PRIMARY KEY (its rowid) when no table of a person's rows points at it
    (a new id would leave them pointing at another row); None otherwise."""
    keys = [c for c in db.execute(f'PRAGMA main.table_info("{table}")') if c[5]]
    if len(keys) != 1 or str(keys[0][2]).upper() != "INTEGER":
        return None
    for other in tables:
        if any(fk[2] == table for fk in db.execute(f'PRAGMA main.foreign_key_list("{other}")')):
            return None
    return str(keys[0][1])


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
