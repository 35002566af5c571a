"""Making a snapshot that is proven restorable when it is made.

The database is copied with SQLite's online backup API while the page keeps serving (never a file
copy of a live database) into a private work folder in the data directory, sign-in sessions
emptied from the copy; the archive is written under a hidden `.partial` name in the snapshot
folder, read back in full (every hash, the database opened with `PRAGMA integrity_check`), fsync'd
and only then renamed into place; a `<archive>.verified.json` next to it records the check. A kill
at any moment leaves either no archive or a whole, verified one: `.partial` files are never listed
and are swept by the next run (under the household's lock). The settings members:
`settings/assistant.yaml`, `settings/search.yaml` (when they exist) and `settings/people.json`
(names and the *names* of their token variables); the .env file and every key value stay out.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import shutil
import sqlite3
from collections.abc import Mapping
from contextlib import closing
from pathlib import Path
from typing import Any

from enlace_agent import files
from enlace_agent.household.schema import SECRET_TABLES, contents, has_table, read_only_uri
from enlace_agent.shared import out_of_space
from enlace_agent.snapshot.archive import (
    DATABASE,
    FORMAT,
    FORMAT_VERSION,
    KINDS,
    PARTIAL,
    PLAIN,
    PREFIX,
    SEALED,
    read_archive,
    write_tar,
)
from enlace_agent.snapshot.catalog import Snapshot, describe, mark_verified, sweep
from enlace_agent.snapshot.errors import (
    ArchiveRefused,
    CannotDo,
    DiskFull,
    SnapshotError,
)
from enlace_agent.snapshot.household import Household, checkpoint, locked, work_dir
from enlace_agent.snapshot.seal import sealer

log = logging.getLogger("enlace_agent.snapshot")


def create(h: Household, kind: str = "manual", to: Path | None = None) -> Snapshot:
    """A verified snapshot of the household in `to` (default: the snapshot folder)."""
    directory = to if to is not None else h.directory
    with locked(h):
        sweep(h, files.private_folder(directory))
        return create_locked(h, kind, directory)


def create_locked(h: Household, kind: str, directory: Path) -> Snapshot:
    if kind not in KINDS:
        raise ValueError(kind)
    if not h.database.is_file():
        raise SnapshotError(f"no hay historial que guardar todavía ({h.database} no existe).")
    if h.config.passphrase_env is not None and h.passphrase is None:
        raise CannotDo(
            f"la copia debe ir cifrada y {h.config.passphrase_env} no está definida: define "
            f"{h.config.passphrase_env} (en el entorno o en ~/.config/enlace/.env) o quita "
            "web.snapshots.passphrase_env de assistant.yaml."
        )
    seal = sealer() if h.passphrase is not None else None
    created = dt.datetime.now(dt.UTC).replace(microsecond=0)
    name = _free_name(directory, created, kind, SEALED if seal else PLAIN)
    partial = directory / f".{name}{PARTIAL}"
    work = work_dir(h)
    where = h.work_root  # the folder being written, named when it fills up
    try:
        copy = work / DATABASE
        _copy_database(h.database, copy, h.timeout_s)
        checkpoint("create-copied")
        members = {DATABASE: copy, **h.settings}
        people = work / "people.json"
        people.write_text(json.dumps(list(h.people), ensure_ascii=False, indent=2), "utf-8")
        members["settings/people.json"] = people
        manifest = _manifest(created, kind, copy, members, h)
        final, where = directory / name, directory
        with files.atomic_file(final, temp=partial) as out:
            if seal is None:
                write_tar(out, manifest, members, h.config.compress_level)
            else:
                plain = work / "archive.tar.gz"
                with files.open_new(plain) as tmp:
                    write_tar(tmp, manifest, members, h.config.compress_level)
                with plain.open("rb") as source:
                    seal(source, out, h.passphrase or "", h.config.kdf_log2_n)
            out.flush()
            checkpoint("create-written")
            where = h.work_root
            read_archive(partial, h, work / "check")
            checkpoint("create-verified")
            where = directory
        checkpoint("create-renamed")
        mark_verified(final, manifest)
        return describe(final)
    except BaseException as exc:
        partial.unlink(missing_ok=True)
        if out_of_space(exc):
            raise DiskFull(
                where,
                "libera espacio allí (las copias antiguas se ven con «enlace-assistant snapshot "
                "list») o haz la copia en otra carpeta con --to. El historial no se ha tocado y "
                "no queda ninguna copia a medias.",
            ) from None
        if isinstance(exc, ArchiveRefused):
            raise SnapshotError(
                f"la copia recién hecha no pasa la comprobación y se ha borrado ({exc}). "
                "El historial no se ha tocado; revisa el disco y vuelve a intentarlo."
            ) from None
        raise
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _free_name(directory: Path, created: dt.datetime, kind: str, suffix: str) -> str:
    stamp = created.strftime("%Y%m%dT%H%M%SZ")
    for n in range(1, 1000):
        name = f"{PREFIX}{stamp}-{kind}{'' if n == 1 else f'-{n}'}{suffix}"
        if not (directory / name).exists():
            return name
    raise SnapshotError(f"demasiadas copias con la misma hora en {directory}.")


def _copy_database(live: Path, copy: Path, timeout_s: float) -> None:
    """A consistent copy with the online backup API (one read transaction: writers go on in
    WAL mode), then sign-in sessions removed and the copy compacted."""
    with (
        closing(sqlite3.connect(read_only_uri(live), uri=True, timeout=timeout_s)) as source,
        closing(sqlite3.connect(copy)) as target,
    ):
        source.backup(target)
        target.execute("PRAGMA journal_mode = DELETE")
        for table in SECRET_TABLES:
            if has_table(target, table):
                target.execute(f'DELETE FROM "{table}"')
        target.commit()
        target.execute("VACUUM")  # nothing of the removed rows stays in free pages
    copy.chmod(0o600)


def _manifest(
    created: dt.datetime, kind: str, copy: Path, members: Mapping[str, Path], h: Household
) -> dict[str, Any]:
    import enlace_agent

    with closing(sqlite3.connect(copy)) as db:
        schema = db.execute("PRAGMA user_version").fetchone()[0]
    model: dict[str, Any] = {"name": h.model}
    if h.config.model_file:
        model_file = Path(h.config.model_file)
        if model_file.is_file():
            model.update(file=model_file.name, sha256=files.sha256_file(model_file))
        else:
            log.warning("model_file %s does not exist: not recorded", model_file)
    return {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "enlace_version": enlace_agent.__version__,
        "schema_version": schema,
        "created": created.isoformat(),
        "kind": kind,
        "model": model,
        "contents": contents(copy),
        "members": {
            name: {"size": path.stat().st_size, "sha256": files.sha256_file(path)}
            for name, path in members.items()
        },
    }
