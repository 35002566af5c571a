"""The archive's format, and reading one without trusting it.

An archive is a gzip'd tar (`enlace-snapshot-<UTC stamp>-<kind>.tar.gz`; `.tar.gz.enc` when
sealed, `seal`) whose first member is `manifest.json`: format, Enlace and schema versions,
creation time, the model the page serves, what it holds, and the size and sha256 of every other
member (`web.sqlite3`, the history; `settings/…`).

Reading one (verify, restore): members are read sequentially from the stream, never extracted by
tarfile: only regular files named in the manifest, with plain relative names, each copied with a
bound at its declared size into a private folder inside the data directory; the gzip stream is
read to its end so a truncated tail or a flipped byte is noticed. Each refusal is an
`ArchiveRefused` whose `problem` names it and whose message (Spanish) says what to do.
"""

from __future__ import annotations

import datetime as dt
import gzip
import hashlib
import io
import json
import re
import shutil
import sqlite3
import tarfile
import zlib
from collections.abc import Mapping
from contextlib import closing
from pathlib import Path, PurePosixPath
from typing import IO, Any, cast

from enlace_agent import files
from enlace_agent.household.paths import DATABASE as DATABASE_FILE
from enlace_agent.household.schema import SCHEMA_VERSION, foreign_schema, read_only_uri
from enlace_agent.snapshot.errors import ArchiveRefused, CannotDo, DiskFull
from enlace_agent.snapshot.household import Household
from enlace_agent.snapshot.seal import SEAL_MAGIC, unsealer

FORMAT = "enlace-snapshot"
FORMAT_VERSION = 1
PREFIX = "enlace-snapshot-"
PLAIN, SEALED = ".tar.gz", ".tar.gz.enc"
PARTIAL = ".partial"
VERIFIED = ".verified.json"
MANIFEST = "manifest.json"
DATABASE = DATABASE_FILE  # the archive member keeps the household file's own name
KINDS = ("manual", "daily", "before-migration", "before-restore")
MEMBER_NAME = re.compile(r"^[A-Za-z0-9_-][A-Za-z0-9._-]*(/[A-Za-z0-9_-][A-Za-z0-9._-]*)?$")
COPY_BYTES = 1 << 20  # read buffer of a member


def write_tar(
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


def read_archive(path: Path, h: Household, into: Path) -> dict[str, Any]:
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
            check_room(path, h, path.stat().st_size)
            plain = into / "archive.tar.gz"
            with files.open_new(plain) as out:
                unsealer()(raw, out, h.passphrase, path)
            with plain.open("rb") as source:
                manifest = _read_tar(source, path, into, h)
            plain.unlink()
        elif head[:2] == b"\x1f\x8b":
            manifest = _read_tar(raw, path, into, h)
        else:
            raise ArchiveRefused(path, "foreign", "no es una copia de Enlace.")
    check_database(path, into / DATABASE, manifest)
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


def bounded_copy(source: IO[bytes], out: IO[bytes] | None, limit: int) -> tuple[int, str]:
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


def _read_tar(raw: IO[bytes], path: Path, into: Path, h: Household) -> dict[str, Any]:
    try:
        with (
            gzip.GzipFile(fileobj=raw, mode="rb") as gz,
            tarfile.open(fileobj=gz, mode="r|") as tar,
        ):
            manifest = _read_members(tar, path, into, h)
            # The tar's end is not the file's: read the gzip stream to its end (its CRC and
            # length are checked there), refusing more than a tar's padding after it.
            rest, _ = bounded_copy(cast(IO[bytes], gz), None, tarfile.RECORDSIZE)
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


def _read_members(tar: tarfile.TarFile, path: Path, into: Path, h: Household) -> dict[str, Any]:
    max_manifest = h.config.max_manifest_bytes
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
            size, _ = bounded_copy(source, body := io.BytesIO(), max_manifest)
            if size > max_manifest:
                raise ArchiveRefused(path, "too_large", "su manifiesto es demasiado grande.")
            manifest = parse_manifest(path, body.getvalue())
            declared = manifest["members"]
            check_room(path, h, sum(m["size"] for m in declared.values()))
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
            size, digest = bounded_copy(source, out, expected["size"])
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


def parse_manifest(path: Path, body: bytes) -> dict[str, Any]:
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


def check_database(path: Path, database: Path, manifest: Mapping[str, Any]) -> None:
    """The archive's history is whole, of the version its manifest says, and holds exactly the
    schema objects Enlace's migrations make: no trigger or view of its own that would run inside
    the live history (the store compares it with a fresh database of that version)."""
    try:
        with closing(sqlite3.connect(read_only_uri(database), uri=True)) as db:
            result = db.execute("PRAGMA integrity_check").fetchall()
            schema = db.execute("PRAGMA user_version").fetchone()[0]
            foreign = foreign_schema(db) if result == [("ok",)] else []
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
    if foreign:
        raise ArchiveRefused(
            path,
            "foreign_schema",
            f"su historial no tiene la forma que le da Enlace ({'; '.join(foreign)}): podría "
            "cambiar lo que la familia escribe o quién lo lee, así que no se usa. Usa otra copia.",
        )


def megabytes(size: int) -> str:
    return f"{size / 2**20:.0f} MB" if size >= 10 * 2**20 else f"{size / 2**20:.1f} MB"


def check_room(path: Path, h: Household, need: int) -> None:
    """Before a byte of the archive is written: what it declares (`need` bytes) must be within
    what a household's history can reach (`max_archive_bytes`) and fit in the data folder."""
    limit = h.config.max_archive_bytes
    if need > limit:
        raise ArchiveRefused(
            path,
            "too_large",
            f"dice traer {megabytes(need)} de ficheros, más de lo que llega a ocupar el historial "
            f"de una casa ({megabytes(limit)}, web.snapshots.max_archive_bytes): no se lee. Si "
            "de verdad es vuestra, sube ese límite en assistant.yaml.",
        )
    free = shutil.disk_usage(h.work_root).free
    if need > free:
        raise DiskFull(
            h.work_root,
            f"leer la copia {path.name} necesita {megabytes(need)} y quedan {megabytes(free)}. "
            f"Libera espacio allí (por ejemplo, borra copias antiguas de {h.directory}) y vuelve "
            "a intentarlo. El historial no se ha tocado.",
        )
