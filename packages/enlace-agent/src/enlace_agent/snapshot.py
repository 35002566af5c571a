"""Snapshots of the household: the histories (and memories) and the settings in one archive that
is proven restorable when it is made, and a restore that can always be undone.

An archive is a gzip'd tar (`enlace-snapshot-<UTC stamp>-<kind>.tar.gz`; `.tar.gz.enc` when
sealed with a passphrase) whose first member is `manifest.json`: format, Enlace and schema
versions, creation time, the model the page serves, what it holds, and the size and sha256 of
every other member. The members:

- `web.sqlite3`: the history file, copied with SQLite's online backup API while the page keeps
  serving (never a file copy of a live database); sign-in sessions are emptied from the copy.
- `settings/assistant.yaml`, `settings/search.yaml` (when they exist) and `settings/people.json`
  (names and the *names* of their token variables). The .env file and every key value stay out.

Making one: the database is copied into a private work folder in the data directory, the archive
written under a hidden `.partial` name in the snapshot folder, fsync'd, read back in full (every
hash, the database opened with `PRAGMA integrity_check`), and only then renamed into place; a
`<archive>.verified.json` next to it records the check. A kill at any moment leaves either no
archive or a whole, verified one: `.partial` files are never listed and are swept by the next
run (under the folder's lock).

Reading one (verify, restore): members are read sequentially from the stream, never extracted by
tarfile: only regular files named in the manifest, with plain relative names, each copied with a
bound at its declared size into a private folder inside the data directory; the gzip stream is
read to its end so a truncated tail or a flipped byte is noticed. Each refusal is an
`ArchiveRefused` whose `problem` names it and whose message (Spanish) says what to do.

Restoring: a snapshot of the current state is taken first (the undo). The whole household is
restored with the backup API into the live file: one write transaction, so the page keeps
answering from the old state until it commits and no request sees a mix; one person's rows are
replaced in one transaction on the live file. A kill before the commit leaves the live file as it
was (SQLite's journal rolls it back).

Encryption (optional extra `snapshot-crypto`): scrypt turns the passphrase into an AES-256-GCM key;
the archive is sealed in 1 MiB chunks, each authenticated with its index and a last-chunk flag
(so reordering or cutting is noticed), after a header with a key check (a wrong passphrase is told
apart from a damaged file).

Tests may set ENLACE_SNAPSHOT_TEST_KILL_AT to one of the names passed to `_checkpoint` to make the
process SIGKILL itself there (the "kill -9 at this moment" tests); nothing else reads it.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import errno
import gzip
import hashlib
import io
import json
import logging
import os
import re
import shutil
import signal
import sqlite3
import tarfile
import tempfile
import threading
import zlib
from collections.abc import Callable, Generator, Mapping
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import IO, Any, cast

from enlace_config.schema.agent import AssistantConfig, SnapshotConfig

from enlace_agent import files
from enlace_agent.settings import config_dir
from enlace_agent.web.store import SCHEMA_VERSION, Store, StoreError, default_path, migrate

log = logging.getLogger("enlace_agent.snapshot")

FORMAT = "enlace-snapshot"
FORMAT_VERSION = 1
PREFIX = "enlace-snapshot-"
PLAIN, SEALED = ".tar.gz", ".tar.gz.enc"
PARTIAL = ".partial"
VERIFIED = ".verified.json"
MANIFEST = "manifest.json"
DATABASE = "web.sqlite3"
SECRET_TABLES = ("sessions",)  # sign-ins: hashes of cookies, never archived nor restored
KINDS = ("manual", "daily", "before-migration", "before-restore")
MEMBER_NAME = re.compile(r"^[A-Za-z0-9_-][A-Za-z0-9._-]*(/[A-Za-z0-9_-][A-Za-z0-9._-]*)?$")
COPY_BYTES = 1 << 20  # read/write buffer and encrypted chunk size (part of the sealed format)
RESTORE_STEP_PAGES = 256  # the restore's backup copies in steps inside one write transaction
SEAL_MAGIC = b"ENLACE-SNAPSHOT-SEALED\x00\x01"
SEAL_CHECK = b"enlace-snapshot-key-check"
KILL_ENV = "ENLACE_SNAPSHOT_TEST_KILL_AT"
LOCK = ".snapshot.lock"  # beside the history file
WORK = ".snapshot-work-"  # private scratch folders beside the history file


# ---------------------------------------------------------------- errors (Spanish messages)
class SnapshotError(Exception):
    """A snapshot cannot be made, read or restored; the message says why (Spanish)."""

    usage = False  # True: the family asked for something that cannot be (exit code 2)


class ArchiveRefused(SnapshotError):
    """An archive that will not be trusted; `problem` names why (stable, English)."""

    usage = True

    def __init__(self, path: Path, problem: str, detail: str) -> None:
        self.path = path
        self.problem = problem
        super().__init__(f"la copia {path.name} no se puede usar: {detail}")


class CannotDo(SnapshotError):
    """A request that cannot be met as asked (no such archive, no such person, no passphrase)."""

    usage = True


class DiskFull(SnapshotError):
    """No space left while writing; nothing partial is left behind."""


# ---------------------------------------------------------------- what a household is
@dataclass(frozen=True)
class Household:
    """Where the histories live, where snapshots go, and what goes in them besides the database."""

    database: Path
    directory: Path
    config: SnapshotConfig
    timeout_s: float  # a write waits this long for a busy history file (web.database_timeout_s)
    settings: Mapping[str, Path] = field(default_factory=lambda: {})  # member name -> file
    people: tuple[Mapping[str, str | None], ...] = ()
    model: str | None = None
    passphrase: str | None = None

    @property
    def work_root(self) -> Path:
        """Private scratch space, always inside the data directory (same disk as the database)."""
        return self.database.parent


def household(
    config: AssistantConfig,
    env: Mapping[str, str],
    config_path: Path | None = None,
) -> Household:
    """The household as the assistant's configuration describes it."""
    web, snap = config.web, config.web.snapshots
    database = Path(web.database) if web.database else default_path(env)
    directory = Path(snap.directory) if snap.directory else database.parent / "snapshots"
    settings: dict[str, Path] = {}
    assistant_file = config_path or config_dir(env) / "assistant.yaml"
    if assistant_file.is_file():
        settings["settings/assistant.yaml"] = assistant_file
    search_file = Path(config.search_config) if config.search_config else None
    search_file = search_file or config_dir(env) / "search.yaml"
    if search_file.is_file():
        settings["settings/search.yaml"] = search_file
    passphrase = None
    if snap.passphrase_env is not None:
        passphrase = env.get(snap.passphrase_env, "") or None
    people = tuple({"name": p.name, "token_env": p.token_env} for p in web.people)
    return Household(
        database,
        directory,
        snap,
        web.database_timeout_s,
        settings=settings,
        people=people,
        model=config.model,
        passphrase=passphrase,
    )


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


def _checkpoint(name: str) -> None:
    if os.environ.get(KILL_ENV) == name:
        os.kill(os.getpid(), signal.SIGKILL)


# ---------------------------------------------------------------- files and locks
def _private_dir(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    path.chmod(0o700)
    return path


@contextlib.contextmanager
def _locked(h: Household) -> Generator[None]:
    """One snapshot, check, restore or pruning at a time per household (across processes and
    threads): the lock file lives beside the history file."""
    with files.locked(_private_dir(h.work_root) / LOCK):
        yield


def _work_dir(h: Household) -> Path:
    return Path(tempfile.mkdtemp(prefix=WORK, dir=h.work_root))


def _sweep(h: Household, directory: Path) -> None:
    """Leftovers of a run that was killed (called under the lock)."""
    for leftover in directory.glob(f".{PREFIX}*{PARTIAL}"):
        leftover.unlink(missing_ok=True)
    for work in h.work_root.glob(f"{WORK}*"):
        shutil.rmtree(work, ignore_errors=True)


def _space_error(exc: BaseException) -> bool:
    if isinstance(exc, OSError):
        return exc.errno in (errno.ENOSPC, errno.EDQUOT)
    return isinstance(exc, sqlite3.OperationalError) and "full" in str(exc)


# ---------------------------------------------------------------- making one
def create(h: Household, kind: str = "manual", to: Path | None = None) -> Snapshot:
    """A verified snapshot of the household in `to` (default: the snapshot folder)."""
    directory = to if to is not None else h.directory
    with _locked(h):
        _sweep(h, _private_dir(directory))
        return _create_locked(h, kind, directory)


def _create_locked(h: Household, kind: str, directory: Path) -> Snapshot:
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
    sealer = _sealer() if h.passphrase is not None else None
    created = dt.datetime.now(dt.UTC).replace(microsecond=0)
    name = _free_name(directory, created, kind, SEALED if sealer else PLAIN)
    partial = directory / f".{name}{PARTIAL}"
    work = _work_dir(h)
    try:
        copy = work / DATABASE
        _copy_database(h.database, copy, h.timeout_s)
        _checkpoint("create-copied")
        members = {DATABASE: copy, **h.settings}
        people = work / "people.json"
        people.write_text(json.dumps(list(h.people), ensure_ascii=False, indent=2), "utf-8")
        members["settings/people.json"] = people
        manifest = _manifest(created, kind, copy, members, h)
        final = directory / name
        with files.atomic_file(final, temp=partial) as out:
            if sealer is None:
                _write_tar(out, manifest, members, h.config.compress_level)
            else:
                plain = work / "archive.tar.gz"
                with files.open_new(plain) as tmp:
                    _write_tar(tmp, manifest, members, h.config.compress_level)
                with plain.open("rb") as source:
                    sealer(source, out, h.passphrase or "", h.config.kdf_log2_n)
            out.flush()
            _checkpoint("create-written")
            _read_archive(partial, h, work / "check")
            _checkpoint("create-verified")
        _checkpoint("create-renamed")
        _mark_verified(final, manifest)
        return _describe(final)
    except BaseException as exc:
        partial.unlink(missing_ok=True)
        if _space_error(exc):
            raise DiskFull(
                f"no queda espacio en el disco para la copia ({directory}): libera espacio o "
                "usa otra carpeta con --to. El historial no se ha tocado y no queda ninguna "
                "copia a medias."
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
        closing(sqlite3.connect(_read_only(live), uri=True, timeout=timeout_s)) as source,
        closing(sqlite3.connect(copy)) as target,
    ):
        source.backup(target)
        target.execute("PRAGMA journal_mode = DELETE")
        for table in SECRET_TABLES:
            if _has_table(target, table):
                target.execute(f'DELETE FROM "{table}"')
        target.commit()
        target.execute("VACUUM")  # nothing of the removed rows stays in free pages
    copy.chmod(0o600)


def _read_only(database: Path) -> str:
    """The URI that opens `database` read-only (any character in the path is safe in it)."""
    return f"{database.resolve().as_uri()}?mode=ro"


def _has_table(db: sqlite3.Connection, table: str, schema: str = "main") -> bool:
    query = f"SELECT 1 FROM {schema}.sqlite_master WHERE type = 'table' AND name = ?"
    return db.execute(query, (table,)).fetchone() is not None


def _contents(database: Path) -> dict[str, Any]:
    with closing(sqlite3.connect(_read_only(database), uri=True)) as db:
        if not _has_table(db, "conversations"):
            return {"people": [], "conversations": {}, "messages": 0}
        per_person = dict(
            db.execute(
                "SELECT person, COUNT(*) FROM conversations GROUP BY person ORDER BY person"
            ).fetchall()
        )
        messages = db.execute("SELECT COUNT(*) FROM messages").fetchone()[0]
        memories = (
            db.execute("SELECT COUNT(*) FROM memories").fetchone()[0]
            if _has_table(db, "memories")
            else 0
        )
    return {
        "people": sorted(per_person),
        "conversations": per_person,
        "messages": messages,
        "memories": memories,
    }


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
        "contents": _contents(copy),
        "members": {
            name: {"size": path.stat().st_size, "sha256": files.sha256_file(path)}
            for name, path in members.items()
        },
    }


def _write_tar(
    out: IO[bytes], manifest: Mapping[str, Any], members: Mapping[str, Path], level: int
) -> None:
    def info(name: str, size: int) -> tarfile.TarInfo:
        entry = tarfile.TarInfo(name)
        entry.size, entry.mode, entry.mtime = size, 0o600, int(dt.datetime.now(dt.UTC).timestamp())
        return entry

    body = json.dumps(manifest, ensure_ascii=False, indent=2).encode()
    with (
        gzip.GzipFile(fileobj=out, mode="wb", compresslevel=level, mtime=0) as gz,
        tarfile.open(fileobj=gz, mode="w|", format=tarfile.PAX_FORMAT) as tar,
    ):
        tar.addfile(info(MANIFEST, len(body)), io.BytesIO(body))
        for name, path in members.items():
            with path.open("rb") as file:
                tar.addfile(info(name, manifest["members"][name]["size"]), file)


def _mark_verified(path: Path, manifest: Mapping[str, Any]) -> None:
    record = {
        "verified": dt.datetime.now(dt.UTC).replace(microsecond=0).isoformat(),
        "size": path.stat().st_size,
        "sha256": files.sha256_file(path),
        "manifest": {k: v for k, v in manifest.items() if k != "members"},
    }
    side = path.with_name(path.name + VERIFIED)
    with files.atomic_file(side, temp=path.with_name(f".{side.name}{PARTIAL}")) as out:
        out.write(json.dumps(record, ensure_ascii=False, indent=2).encode())


# ---------------------------------------------------------------- reading one
def verify(h: Household, path: Path) -> dict[str, Any]:
    """Reads the whole archive (every hash, the database's integrity); returns its manifest and
    records the check next to it. Raises ArchiveRefused naming the problem."""
    with _locked(h):
        work = _work_dir(h)
        try:
            manifest = _read_archive(path, h, work / "check")
        finally:
            shutil.rmtree(work, ignore_errors=True)
        with contextlib.suppress(OSError):  # a read-only folder: verified all the same
            _mark_verified(path, manifest)
    return manifest


def _read_archive(path: Path, h: Household, into: Path) -> dict[str, Any]:
    """Every member checked and copied into `into` (a new private folder); the manifest."""
    if not path.is_file():
        raise CannotDo(f"no existe la copia {path}.")
    into.mkdir(mode=0o700)
    with path.open("rb") as raw:
        head = raw.read(len(SEAL_MAGIC))
        raw.seek(0)
        if head == SEAL_MAGIC:
            if h.passphrase is None:
                env = h.config.passphrase_env or "la variable de web.snapshots.passphrase_env"
                raise ArchiveRefused(
                    path,
                    "passphrase_missing",
                    f"está cifrada y no hay contraseña: define {env} con la contraseña con la "
                    "que se hizo.",
                )
            plain = into / "archive.tar.gz"
            with files.open_new(plain) as out:
                _unsealer()(raw, out, h.passphrase, path)
            with plain.open("rb") as source:
                manifest = _read_tar(source, path, into, h.config.max_manifest_bytes)
            plain.unlink()
        elif head[:2] == b"\x1f\x8b":
            manifest = _read_tar(raw, path, into, h.config.max_manifest_bytes)
        else:
            raise ArchiveRefused(path, "foreign", "no es una copia de Enlace.")
    _check_database(path, into / DATABASE, manifest)
    return manifest


def _check_name(path: Path, name: str) -> None:
    """A plain relative name (`settings/x.yaml`): never absolute, never `..`."""
    pure = PurePosixPath(name)
    if name.startswith("/") or pure.is_absolute() or "\\" in name or ":" in name:
        raise ArchiveRefused(path, "absolute_path", f"contiene una ruta absoluta ({name!r}).")
    if ".." in pure.parts:
        raise ArchiveRefused(path, "parent_path", f"contiene una ruta que sale fuera ({name!r}).")
    if not MEMBER_NAME.match(name):
        raise ArchiveRefused(path, "bad_name", f"contiene un nombre no válido ({name!r}).")


def _refuse_member(path: Path, entry: tarfile.TarInfo) -> None:
    """Only regular files with plain relative names: never links, devices, `..` or `/`."""
    name = entry.name
    _check_name(path, name)
    if entry.issym():
        raise ArchiveRefused(path, "symlink", f"contiene un enlace simbólico ({name!r}).")
    if entry.islnk():
        raise ArchiveRefused(path, "hardlink", f"contiene un enlace duro ({name!r}).")
    if entry.ischr() or entry.isblk():
        raise ArchiveRefused(path, "device", f"contiene un dispositivo ({name!r}).")
    if not entry.isfile():
        raise ArchiveRefused(path, "not_a_file", f"contiene algo que no es un fichero ({name!r}).")


def _bounded_copy(source: IO[bytes], out: IO[bytes] | None, limit: int) -> tuple[int, str]:
    """Copies at most `limit` bytes (one more is read to notice a longer member)."""
    digest, seen = hashlib.sha256(), 0
    while seen <= limit:
        chunk = source.read(min(COPY_BYTES, limit + 1 - seen))
        if not chunk:
            break
        seen += len(chunk)
        if seen > limit:
            break
        digest.update(chunk)
        if out is not None:
            out.write(chunk)
    return seen, digest.hexdigest()


def _read_tar(raw: IO[bytes], path: Path, into: Path, max_manifest: int) -> dict[str, Any]:
    try:
        with (
            gzip.GzipFile(fileobj=raw, mode="rb") as gz,
            tarfile.open(fileobj=gz, mode="r|") as tar,
        ):
            manifest = _read_members(tar, path, into, max_manifest)
            # The tar's end is not the file's: read the gzip stream to its end (its CRC and
            # length are checked there), refusing more than a tar's padding after it.
            rest, _ = _bounded_copy(cast(IO[bytes], gz), None, tarfile.RECORDSIZE)
            if rest > tarfile.RECORDSIZE:
                raise ArchiveRefused(path, "trailing_data", "tiene datos de más al final.")
    except EOFError:
        raise ArchiveRefused(
            path, "truncated", "está cortada (el fichero termina antes de tiempo)."
        ) from None
    except (tarfile.TarError, zlib.error, gzip.BadGzipFile, UnicodeDecodeError) as exc:
        if "unexpected end" in str(exc) or "ended before" in str(exc):
            raise ArchiveRefused(
                path, "truncated", "está cortada (el fichero termina antes de tiempo)."
            ) from None
        raise ArchiveRefused(
            path, "corrupt", f"está dañada (un byte cambiado o un fichero roto: {exc})."
        ) from None
    return manifest


def _read_members(
    tar: tarfile.TarFile, path: Path, into: Path, max_manifest: int
) -> dict[str, Any]:
    manifest: dict[str, Any] | None = None
    declared: dict[str, Any] = {}
    seen: set[str] = set()
    for entry in tar:
        _refuse_member(path, entry)
        if manifest is None:
            if entry.name != MANIFEST:
                raise ArchiveRefused(path, "foreign", "no empieza por su manifiesto.")
            if entry.size > max_manifest:
                raise ArchiveRefused(path, "too_large", "su manifiesto es demasiado grande.")
            source = tar.extractfile(entry)
            assert source is not None
            size, _ = _bounded_copy(source, body := io.BytesIO(), max_manifest)
            if size > max_manifest:
                raise ArchiveRefused(path, "too_large", "su manifiesto es demasiado grande.")
            manifest = _parse_manifest(path, body.getvalue())
            declared = manifest["members"]
            continue
        name = entry.name
        if name not in declared or name in seen:
            raise ArchiveRefused(
                path, "undeclared", f"contiene {name!r}, que el manifiesto no nombra."
            )
        seen.add(name)
        expected = declared[name]
        if entry.size > expected["size"]:
            raise ArchiveRefused(
                path,
                "bomb",
                f"{name} es mucho más grande de lo declarado ({entry.size} bytes frente a "
                f"{expected['size']}): podría llenar el disco, no se lee.",
            )
        target = into / Path(*PurePosixPath(name).parts)
        if into.resolve() not in target.resolve().parents:
            raise ArchiveRefused(
                path, "parent_path", f"contiene una ruta que sale fuera ({name!r})."
            )
        target.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        source = tar.extractfile(entry)
        assert source is not None
        with files.open_new(target) as out:
            size, digest = _bounded_copy(source, out, expected["size"])
        if size != expected["size"]:
            raise ArchiveRefused(
                path, "size_mismatch", f"{name} no tiene el tamaño que dice el manifiesto."
            )
        if digest != expected["sha256"]:
            raise ArchiveRefused(
                path, "hash_mismatch", f"está dañada: la huella (sha256) de {name} no coincide."
            )
    if manifest is None:
        raise ArchiveRefused(path, "foreign", "está vacía o no es una copia de Enlace.")
    if missing := sorted(set(declared) - seen):
        raise ArchiveRefused(
            path,
            "missing_member",
            f"el manifiesto nombra ficheros que no están: {', '.join(missing)}.",
        )
    return manifest


def _parse_manifest(path: Path, body: bytes) -> dict[str, Any]:
    from enlace_agent.shared import loads_json  # the agent's one JSON reader

    try:
        manifest = loads_json(body)  # deep nesting too
    except ValueError:  # UnicodeDecodeError included
        raise ArchiveRefused(
            path, "corrupt", "está dañada: su manifiesto no se puede leer."
        ) from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:  # pyright: ignore[reportUnknownMemberType]
        raise ArchiveRefused(path, "foreign", "no es una copia de Enlace.")
    manifest_: dict[str, Any] = manifest  # pyright: ignore[reportUnknownVariableType]
    version, schema = manifest_.get("format_version"), manifest_.get("schema_version")
    if not isinstance(version, int) or not isinstance(schema, int):
        raise ArchiveRefused(path, "corrupt", "está dañada: su manifiesto no tiene versiones.")
    if version > FORMAT_VERSION or schema > SCHEMA_VERSION:
        raise ArchiveRefused(
            path,
            "newer",
            f"la hizo una versión más nueva de Enlace ({manifest_.get('enlace_version')}, "
            f"esquema {schema}; esta conoce el {SCHEMA_VERSION}): actualiza enlace-agent.",
        )
    broken = ArchiveRefused(path, "corrupt", "está dañada: su manifiesto no describe los ficheros.")
    members: Any = manifest_.get("members")
    if not isinstance(members, dict) or DATABASE not in members:
        raise broken
    for name, entry in cast(dict[Any, Any], members).items():
        if not isinstance(name, str):
            raise broken
        _check_name(path, name)
        described: dict[str, Any] = cast(dict[str, Any], entry) if isinstance(entry, dict) else {}
        size, digest = described.get("size"), described.get("sha256")
        if not isinstance(size, int) or size < 0 or not isinstance(digest, str):
            raise broken
    return manifest_


def _check_database(path: Path, database: Path, manifest: Mapping[str, Any]) -> None:
    try:
        with closing(sqlite3.connect(_read_only(database), uri=True)) as db:
            result = db.execute("PRAGMA integrity_check").fetchall()
            schema = db.execute("PRAGMA user_version").fetchone()[0]
    except sqlite3.DatabaseError as exc:
        raise ArchiveRefused(
            path, "corrupt_database", f"su historial está dañado ({exc})."
        ) from None
    if result != [("ok",)]:
        raise ArchiveRefused(
            path, "corrupt_database", f"su historial está dañado ({result[0][0]})."
        )
    if schema != manifest["schema_version"]:
        raise ArchiveRefused(
            path, "corrupt", "su historial no es la versión que dice el manifiesto."
        )


# ---------------------------------------------------------------- listing and pruning
def _created_of(path: Path) -> tuple[dt.datetime, str] | None:
    match = re.match(
        rf"^{PREFIX}(\d{{8}}T\d{{6}}Z)-([a-z-]+?)(?:-\d+)?\.tar\.gz(?:\.enc)?$", path.name
    )
    if match is None or match.group(2) not in KINDS:
        return None
    created = dt.datetime.strptime(match.group(1), "%Y%m%dT%H%M%SZ").replace(tzinfo=dt.UTC)
    return created, match.group(2)


def _describe(path: Path) -> Snapshot:
    from enlace_agent.shared import loads_json  # the agent's one JSON reader

    created, kind = _created_of(path) or (dt.datetime.fromtimestamp(0, dt.UTC), "manual")
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
        _describe(p)
        for p in directory.iterdir()
        if p.is_file() and not p.name.startswith(".") and _created_of(p) is not None
    ]
    # Two made in the same second: the later written is the newer.
    return sorted(found, key=lambda s: (s.created, s.path.stat().st_mtime_ns), reverse=True)


def prune(h: Household) -> list[Path]:
    """Deletes verified snapshots beyond the newest of each of the last `keep_daily` days and
    `keep_weekly` ISO weeks; never an unverified one, never the newest verified one."""
    with _locked(h):
        verified = [s for s in snapshots(h.directory) if s.verified is not None]
        keep: set[Path] = {verified[0].path} if verified else set()
        days: dict[dt.date, Path] = {}
        weeks: dict[tuple[int, int], Path] = {}
        for s in verified:  # newest first: the first of each day / week is its newest
            local = s.created.astimezone()
            days.setdefault(local.date(), s.path)
            weeks.setdefault(local.isocalendar()[:2], s.path)
        keep.update(list(days.values())[: h.config.keep_daily])
        keep.update(list(weeks.values())[: h.config.keep_weekly])
        removed = [s.path for s in verified if s.path not in keep]
        for path in removed:
            path.unlink(missing_ok=True)
            path.with_name(path.name + VERIFIED).unlink(missing_ok=True)
        return removed


# ---------------------------------------------------------------- restoring
@dataclass(frozen=True)
class Restored:
    manifest: Mapping[str, Any]
    undo: Snapshot | None  # the snapshot of the state before (None: there was no history)
    person: str | None
    settings: Path | None  # where the archive's settings were put, for the family to look at


def restore(h: Household, path: Path, person: str | None = None) -> Restored:
    """The household (or one person's conversations and memories) as in the archive; a snapshot
    of the current state is taken first. Either the old state or the restored one, never a mix."""
    with _locked(h):
        _private_dir(h.directory)
        _sweep(h, h.directory)
        work = _work_dir(h)
        try:
            into = work / "archive"
            manifest = _read_archive(path, h, into)
            restored = into / DATABASE
            with closing(sqlite3.connect(restored)) as db:
                migrate(db)  # an older snapshot is brought to this schema before it goes live
                if person is not None and not _person_rows(db, person):
                    names = ", ".join(manifest.get("contents", {}).get("people", [])) or "nadie"
                    raise CannotDo(
                        f"la copia no tiene conversaciones de {person} (tiene de: {names})."
                    )
            # An answer being written when the snapshot was taken ends there, as after a kill.
            Store(restored).mark_interrupted()
            _checkpoint("restore-read")
            undo = None
            if h.database.is_file():
                undo = _create_locked(h, "before-restore", h.directory)
            elif person is not None:  # a new machine: an empty history to put one person in
                Store(h.database)
            _checkpoint("restore-undo-made")
            if person is None:
                _replace_all(restored, h.database, h.timeout_s)
            else:
                _replace_person(restored, h.database, person, h.timeout_s)
            _checkpoint("restore-done")
            settings = _keep_settings(into, h.directory, path)
            return Restored(manifest, undo, person, settings)
        finally:
            shutil.rmtree(work, ignore_errors=True)


def _person_rows(db: sqlite3.Connection, person: str) -> int:
    """The person's conversations and personal memories in a (migrated) copy."""
    query = (
        "SELECT (SELECT COUNT(*) FROM conversations WHERE person = ?) + "
        "(SELECT COUNT(*) FROM memories WHERE person = ?)"
    )
    return db.execute(query, (person, person)).fetchone()[0]


def _replace_all(restored: Path, live: Path, timeout_s: float) -> None:
    """The live file becomes the restored one in one write transaction (the backup API into it):
    readers see the old state until the commit; a kill before it leaves the old state. The
    sign-ins of now are kept (a snapshot holds none)."""
    if not live.is_file():  # a new machine: the history file is made private from the start
        _private_dir(live.parent)
        os.close(os.open(live, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    with closing(sqlite3.connect(restored, uri=True)) as db:
        db.execute("ATTACH DATABASE ? AS live", (_read_only(live),))
        for table in SECRET_TABLES:
            if _has_table(db, table) and _has_table(db, table, "live"):
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
            progress=lambda *_: _checkpoint("restore-copying"),  # pyright: ignore[reportUnknownLambdaType, reportUnknownArgumentType]
        )
        target.execute("PRAGMA journal_mode = WAL")


def _person_tables(db: sqlite3.Connection) -> list[tuple[str, str]]:
    """(table, the WHERE clause picking one person's rows, `?` the person) for every table that
    holds a person's data: tables with a `person` column (sign-ins excepted) and, following
    foreign keys, the tables that hang from them. Parents before children."""
    tables = [
        r[0]
        for r in db.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
        )
    ]
    columns = {t: [c[1] for c in db.execute(f'PRAGMA table_info("{t}")')] for t in tables}
    chosen: dict[str, str] = {
        t: "person = ?" for t in tables if "person" in columns[t] and t not in SECRET_TABLES
    }
    grew = True
    while grew:
        grew = False
        for t in tables:
            if t in chosen or t in SECRET_TABLES:
                continue
            for fk in db.execute(f'PRAGMA foreign_key_list("{t}")'):
                parent, column, parent_column = fk[2], fk[3], fk[4] or "rowid"
                if parent in chosen:
                    chosen[t] = (
                        f'"{column}" IN (SELECT "{parent_column}" FROM {{schema}}."{parent}" '
                        f"WHERE {chosen[parent]})"
                    )
                    grew = True
                    break
    return list(chosen.items())


def _replace_person(restored: Path, live: Path, person: str, timeout_s: float) -> None:
    """One person's rows replaced by the archive's, in one transaction on the live file."""
    with closing(sqlite3.connect(live, uri=True, timeout=timeout_s, isolation_level=None)) as db:
        db.execute("ATTACH DATABASE ? AS snap", (_read_only(restored),))
        db.execute("PRAGMA foreign_keys = OFF")  # rows are deleted and written in order here
        db.execute("BEGIN IMMEDIATE")
        try:
            tables = _person_tables(db)
            for table, where in reversed(tables):
                scoped = where.replace("{schema}", "main")
                params = (person,) * scoped.count("?")
                db.execute(f'DELETE FROM main."{table}" WHERE {scoped}', params)
            for table, where in tables:
                if not _has_table(db, table, "snap"):
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
                _checkpoint("restore-person-writing")
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


# ---------------------------------------------------------------- automatic snapshots
def before_migration(h: Household) -> Callable[[Path, int], None]:
    """The store's hook: a snapshot before the file at `path` leaves schema `found`."""

    def hook(path: Path, found: int) -> None:
        if h.config.before_migration:
            log.warning("schema %d -> %d: taking a snapshot first", found, SCHEMA_VERSION)
            try:
                create(h, "before-migration")
            except SnapshotError as exc:  # no migration without its snapshot
                raise StoreError(
                    f"la copia previa a la migración no se pudo hacer: {exc}"
                ) from None

    return hook


def seconds_until(hour: int, now: dt.datetime) -> float:
    """Seconds from `now` (local, aware) to the next `hour`:00 local time."""
    target = now.replace(hour=hour, minute=0, second=0, microsecond=0)
    if target <= now:
        target += dt.timedelta(days=1)
    return (target - now).total_seconds()


def run_daily(
    h: Household,
    stop: threading.Event,
    now: Callable[[], dt.datetime] = lambda: dt.datetime.now().astimezone(),
) -> None:
    """While `serve` runs: a snapshot every day at `daily_hour`, then pruning. A failure is
    logged and retried the next day; it never stops the page."""
    hour = h.config.daily_hour
    if hour is None:
        return
    while not stop.wait(seconds_until(hour, now())):
        try:
            made = create(h, "daily")
            log.warning("daily snapshot %s", made.path.name)
            prune(h)
        except Exception:
            log.exception("the daily snapshot failed")


def start_daily(h: Household) -> threading.Event:
    """Starts `run_daily` in a daemon thread; set the returned event to stop it."""
    stop = threading.Event()
    threading.Thread(target=run_daily, args=(h, stop), name="snapshots", daemon=True).start()
    return stop


# ---------------------------------------------------------------- encryption (optional extra)
Sealer = Callable[[IO[bytes], IO[bytes], str, int], None]


def _crypto() -> Any:
    try:
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM
        from cryptography.hazmat.primitives.kdf.scrypt import Scrypt
    except ImportError:
        raise SnapshotError(
            "las copias cifradas necesitan el extra «snapshot-crypto»: "
            'pip install "enlace-agent[snapshot-crypto]".'
        ) from None
    return AESGCM, Scrypt


def _key(passphrase: str, salt: bytes, log2_n: int) -> bytes:
    _, scrypt = _crypto()
    return scrypt(salt=salt, length=32, n=2**log2_n, r=8, p=1).derive(passphrase.encode())


def _nonce(prefix: bytes, index: int, last: bool) -> bytes:
    return prefix + index.to_bytes(4, "big") + (b"\x01" if last else b"\x00")


def _sealer() -> Sealer:
    aesgcm, _ = _crypto()

    def seal(source: IO[bytes], out: IO[bytes], passphrase: str, log2_n: int) -> None:
        salt, prefix = os.urandom(16), os.urandom(7)
        header = SEAL_MAGIC + salt + bytes([log2_n]) + prefix
        cipher = aesgcm(_key(passphrase, salt, log2_n))
        out.write(header + cipher.encrypt(_nonce(prefix, 0xFFFFFFFF, False), SEAL_CHECK, header))
        index, chunk = 0, source.read(COPY_BYTES)
        while True:
            following = source.read(COPY_BYTES)
            sealed = cipher.encrypt(_nonce(prefix, index, not following), chunk, header)
            out.write(len(sealed).to_bytes(4, "big") + sealed)
            if not following:
                return
            index, chunk = index + 1, following

    return seal


def _unsealer() -> Callable[[IO[bytes], IO[bytes], str, Path], None]:
    aesgcm, _ = _crypto()
    from cryptography.exceptions import InvalidTag

    def unseal(raw: IO[bytes], out: IO[bytes], passphrase: str, path: Path) -> None:
        header = raw.read(len(SEAL_MAGIC) + 16 + 1 + 7)
        check = raw.read(len(SEAL_CHECK) + 16)
        if len(header) < len(SEAL_MAGIC) + 24 or len(check) < len(SEAL_CHECK) + 16:
            raise ArchiveRefused(
                path, "truncated", "está cortada (el fichero termina antes de tiempo)."
            )
        salt, log2_n, prefix = header[-24:-8], header[-8], header[-7:]
        if not 10 <= log2_n <= 24:
            raise ArchiveRefused(path, "corrupt", "está dañada: su cabecera no se entiende.")
        cipher = aesgcm(_key(passphrase, salt, log2_n))
        try:
            cipher.decrypt(_nonce(prefix, 0xFFFFFFFF, False), check, header)
        except InvalidTag:
            raise ArchiveRefused(
                path, "wrong_passphrase", "la contraseña no es la de esta copia (o está dañada)."
            ) from None
        index = 0
        while True:
            size_bytes = raw.read(4)
            if len(size_bytes) < 4:
                raise ArchiveRefused(path, "truncated", "está cortada (le falta el final).")
            size = int.from_bytes(size_bytes, "big")
            if size > COPY_BYTES + 16:
                raise ArchiveRefused(path, "corrupt", "está dañada (un trozo imposible).")
            sealed = raw.read(size)
            if len(sealed) < size:
                raise ArchiveRefused(path, "truncated", "está cortada (le falta el final).")
            last = not raw.read(1)
            if not last:
                raw.seek(-1, os.SEEK_CUR)
            try:
                out.write(cipher.decrypt(_nonce(prefix, index, last), sealed, header))
            except InvalidTag:
                problem = "truncated" if last else "corrupt"
                words = (
                    "está cortada (le falta el final)."
                    if last
                    else "está dañada (un byte cambiado)."
                )
                raise ArchiveRefused(path, problem, words) from None
            if last:
                return
            index += 1

    return unseal
