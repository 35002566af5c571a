"""Snapshots under faults and bad input: damaged, cut, foreign, newer and hostile archives (each
refused by name, nothing written outside the data directory, the live history untouched), kill -9
during `snapshot create` and `snapshot restore` at several moments (the module's test hook,
ENLACE_SNAPSHOT_TEST_KILL_AT, and kills after a delay), and a full disk."""

from __future__ import annotations

import contextlib
import errno
import gzip
import hashlib
import io
import json
import os
import secrets
import signal
import sqlite3
import subprocess
import sys
import tarfile
import time
import zlib
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path
from typing import IO, Any

import pytest
from enlace_config.schema.agent import AssistantConfig

from enlace_agent import files, shared
from enlace_agent import snapshot as snap
from enlace_agent.household.database import Store
from enlace_agent.household.schema import SCHEMA_VERSION


def fill(database: Path, people: int = 3, conversations: int = 5, text: str = "hola") -> None:
    Store(database)
    now = time.time()
    with closing(sqlite3.connect(database)) as db, db:
        for p in range(people):
            for c in range(conversations):
                cid = secrets.token_hex(16)
                db.execute(
                    "INSERT INTO conversations (id, person, title, created, updated) "
                    "VALUES (?, ?, ?, ?, ?)",
                    (cid, f"P{p}", f"Conversación {c}", now, now),
                )
                db.execute(
                    "INSERT INTO messages (conversation_id, role, content, sources, created) "
                    "VALUES (?, 'user', ?, '[]', ?)",
                    (cid, f"{text} {p} {c}", now),
                )


def dump(database: Path) -> str:
    """A digest of every row but the sign-ins: equal means the same history."""
    with closing(sqlite3.connect(database)) as db:
        rows = [
            (t, sorted(db.execute(f'SELECT * FROM "{t}"').fetchall(), key=repr))
            for (t,) in db.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' "
                "AND name NOT IN ('sessions', 'sqlite_sequence') ORDER BY name"
            )
        ]
        assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    return hashlib.sha256(repr(rows).encode()).hexdigest()


@pytest.fixture
def house(tmp_path: Path) -> snap.Household:
    database = tmp_path / "data" / "enlace" / "web.sqlite3"
    config = AssistantConfig.model_validate({"web": {"database": str(database)}})
    h = snap.household(config, {"XDG_CONFIG_HOME": str(tmp_path / "config")})
    fill(h.database)
    return h


def files_under(root: Path) -> set[Path]:
    return {p for p in root.rglob("*")}


# ---------------------------------------------------------------- hostile and damaged archives
def manifest_json(members: dict[str, Any], **manifest: Any) -> bytes:
    """A manifest.json describing `members` (name -> size and sha256), `manifest` overriding."""
    body = {
        "format": snap.FORMAT,
        "format_version": snap.FORMAT_VERSION,
        "enlace_version": "0.0.0",
        "schema_version": SCHEMA_VERSION,
        "created": "2026-12-01T00:00:00+00:00",
        "kind": "manual",
        "model": {"name": "x"},
        "contents": {},
        "members": members,
        **manifest,
    }
    return json.dumps(body).encode()


def forge(
    path: Path,
    members: list[tuple[tarfile.TarInfo, bytes]],
    declared: dict[str, bytes] | None = None,
    **manifest: Any,
) -> Path:
    """A gzip'd tar whose manifest declares `declared` (name -> content) and whose members are
    `members` (after the manifest), written by hand."""
    declared = declared if declared is not None else {m.name: data for m, data in members}
    described = {
        n: {"size": len(d), "sha256": hashlib.sha256(d).hexdigest()} for n, d in declared.items()
    }
    raw = manifest_json(described, **manifest)
    with gzip.open(path, "wb") as gz, tarfile.open(fileobj=gz, mode="w|") as tar:
        info = tarfile.TarInfo(snap.MANIFEST)
        info.size = len(raw)
        tar.addfile(info, io.BytesIO(raw))
        for info, data in members:
            if info.isfile():
                info.size = len(data)
            tar.addfile(info, io.BytesIO(data) if info.isfile() else None)
    return path


def entry(name: str, kind: bytes = tarfile.REGTYPE, link: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, link
    return info


@pytest.fixture
def good_db(house: snap.Household) -> bytes:
    made = snap.create(house)
    with tarfile.open(made.path) as tar:
        file = tar.extractfile(snap.DATABASE)
        assert file is not None
        return file.read()


def refused(h: snap.Household, archive: Path, tmp_path: Path) -> snap.ArchiveRefused:
    """Refused by verify and by restore, the live history untouched, nothing new anywhere but
    the snapshot folder (where verify and restore write nothing either)."""
    before_rows, before_files = dump(h.database), files_under(tmp_path)
    with pytest.raises(snap.ArchiveRefused) as by_verify:
        snap.verify(h, archive)
    with pytest.raises(snap.ArchiveRefused) as by_restore:
        snap.restore(h, archive)
    assert by_verify.value.problem == by_restore.value.problem
    assert dump(h.database) == before_rows
    new = files_under(tmp_path) - before_files - {h.directory, h.work_root / snap.LOCK}
    assert not new, new  # no undo snapshot either: the archive is refused before anything
    assert str(by_verify.value).startswith(f"la copia {archive.name} no se puede usar: ")
    return by_verify.value


def flipped(good: bytes, at: int) -> bytes:
    """`good` with one byte flipped: at `at`, or at the first byte after it whose flip changes
    what the archive holds. A flip inside a deflate back-reference that points from one run of
    zeros to another (SQLite's empty page space) decompresses to the very same bytes: gzip's CRC
    and every member's sha256 agree, and the copy restores exactly; verify rightly accepts it
    (CI met one, about one archive in eight at 0.5, the archive's timestamps change each run)."""
    for i in range(at, len(good)):
        data = bytearray(good)
        data[i] ^= 0x20
        try:
            if gzip.decompress(bytes(data)) != gzip.decompress(good):
                return bytes(data)
        except (OSError, EOFError, zlib.error):  # BadGzipFile is an OSError
            return bytes(data)
    raise AssertionError(f"no flip from byte {at} on changes the archive")


@pytest.mark.parametrize("where", [0.1, 0.5, 0.9, -6])
def test_a_flipped_byte_is_refused(house: snap.Household, tmp_path: Path, where: float) -> None:
    good = snap.create(house).path.read_bytes()
    bad = tmp_path / "flipped.tar.gz"
    bad.write_bytes(flipped(good, int(len(good) * where) if where > 0 else len(good) + int(where)))
    problem = refused(house, bad, tmp_path)
    assert problem.problem in ("corrupt", "hash_mismatch", "corrupt_database", "truncated")
    assert "dañad" in str(problem) or "cortada" in str(problem)


@pytest.mark.parametrize("cut", [1, 8, 300, 0.5])
def test_a_truncated_tail_is_refused(house: snap.Household, tmp_path: Path, cut: float) -> None:
    made = snap.create(house)
    data = made.path.read_bytes()
    keep = int(len(data) * cut) if cut < 1 else len(data) - int(cut)
    bad = tmp_path / "cut.tar.gz"
    bad.write_bytes(data[:keep])
    problem = refused(house, bad, tmp_path)
    assert problem.problem == "truncated" and "cortada" in str(problem)


@pytest.mark.parametrize(
    ("member", "problem"),
    [
        (entry("../escaped.txt"), "parent_path"),
        (entry("settings/../../escaped.txt"), "parent_path"),
        (entry("/tmp/escaped-absolute.txt"), "absolute_path"),
        (entry("settings/link", tarfile.SYMTYPE, "/etc/passwd"), "symlink"),
        (entry("settings/hard", tarfile.LNKTYPE, snap.DATABASE), "hardlink"),
        (entry("settings/dev", tarfile.CHRTYPE), "device"),
        (entry("settings/blk", tarfile.BLKTYPE), "device"),
        (entry("settings/fifo", tarfile.FIFOTYPE), "not_a_file"),
        (entry("settings/dir", tarfile.DIRTYPE), "not_a_file"),
    ],
)
def test_hostile_members_are_refused_by_name(
    house: snap.Household, good_db: bytes, tmp_path: Path, member: tarfile.TarInfo, problem: str
) -> None:
    declared = {snap.DATABASE: good_db, member.name: b"pwned"}
    bad = forge(
        tmp_path / "hostile.tar.gz",
        [(entry(snap.DATABASE), good_db), (member, b"pwned")],
        declared,
    )
    found = refused(house, bad, tmp_path)
    assert found.problem == problem
    assert member.name in str(found)
    assert (
        not (tmp_path / "escaped.txt").exists() and not Path("/tmp/escaped-absolute.txt").exists()
    )


def test_a_manifest_naming_missing_files_is_refused(
    house: snap.Household, good_db: bytes, tmp_path: Path
) -> None:
    declared = {snap.DATABASE: good_db, "settings/assistant.yaml": b"web: {}\n"}
    bad = forge(tmp_path / "missing.tar.gz", [(entry(snap.DATABASE), good_db)], declared)
    found = refused(house, bad, tmp_path)
    assert found.problem == "missing_member" and "settings/assistant.yaml" in str(found)


def test_an_undeclared_member_is_refused(
    house: snap.Household, good_db: bytes, tmp_path: Path
) -> None:
    members = [(entry(snap.DATABASE), good_db), (entry("settings/extra.yaml"), b"x")]
    bad = forge(tmp_path / "extra.tar.gz", members, {snap.DATABASE: good_db})
    assert refused(house, bad, tmp_path).problem == "undeclared"


def test_a_member_far_larger_than_declared_is_never_written(
    house: snap.Household, good_db: bytes, tmp_path: Path
) -> None:
    """A decompression bomb: 64 MiB of zeros (about 64 KiB compressed) declared as 100 bytes."""
    bomb = b"\x00" * (64 << 20)
    declared = {snap.DATABASE: good_db, "settings/people.json": b"x" * 100}
    members = [(entry(snap.DATABASE), good_db), (entry("settings/people.json"), bomb)]
    bad = forge(tmp_path / "bomb.tar.gz", members, declared)
    assert bad.stat().st_size < 1 << 20
    started = time.monotonic()
    found = refused(house, bad, tmp_path)
    assert found.problem == "bomb" and "más grande de lo declarado" in str(found)
    assert time.monotonic() - started < 30


def test_a_huge_manifest_is_refused_unread(
    house: snap.Household, good_db: bytes, tmp_path: Path
) -> None:
    bad = forge(
        tmp_path / "fat.tar.gz",
        [(entry(snap.DATABASE), good_db)],
        padding="x" * (house.config.max_manifest_bytes + 1),
    )
    assert refused(house, bad, tmp_path).problem == "too_large"


def test_a_member_that_lies_about_its_hash_is_refused(
    house: snap.Household, good_db: bytes, tmp_path: Path
) -> None:
    declared = {snap.DATABASE: good_db, "settings/people.json": b"[1]"}
    members = [(entry(snap.DATABASE), good_db), (entry("settings/people.json"), b"[2]")]
    bad = forge(tmp_path / "lies.tar.gz", members, declared)
    found = refused(house, bad, tmp_path)
    assert found.problem == "hash_mismatch" and "settings/people.json" in str(found)


def test_foreign_archives_are_refused(house: snap.Household, tmp_path: Path) -> None:
    text = tmp_path / "notes.tar.gz"
    text.write_text("la lista de la compra")
    assert refused(house, text, tmp_path).problem == "foreign"
    other = tmp_path / "other.tar.gz"
    with gzip.open(other, "wb") as gz, tarfile.open(fileobj=gz, mode="w|") as tar:
        info = tarfile.TarInfo("photo.jpg")
        info.size = 3
        tar.addfile(info, io.BytesIO(b"jpg"))
    assert refused(house, other, tmp_path).problem == "foreign"
    stranger = forge(tmp_path / "stranger.tar.gz", [], {}, format="someone-else")
    assert refused(house, stranger, tmp_path).problem == "foreign"


def test_a_newer_schema_or_format_is_refused(
    house: snap.Household, good_db: bytes, tmp_path: Path
) -> None:
    newer = forge(
        tmp_path / "newer.tar.gz",
        [(entry(snap.DATABASE), good_db)],
        schema_version=SCHEMA_VERSION + 1,
        enlace_version="9.0.0",
    )
    found = refused(house, newer, tmp_path)
    assert found.problem == "newer" and "9.0.0" in str(found) and "actualiza" in str(found)
    later = forge(tmp_path / "later.tar.gz", [(entry(snap.DATABASE), good_db)], format_version=2)
    assert refused(house, later, tmp_path).problem == "newer"


def test_a_damaged_database_inside_a_well_formed_archive_is_refused(
    house: snap.Household, good_db: bytes, tmp_path: Path
) -> None:
    damaged = bytearray(good_db)
    page = len(damaged) // 2 // 4096 * 4096  # a page's header (not the unused end of a page)
    damaged[page : page + 64] = b"\xff" * 64
    bad = forge(tmp_path / "rotten.tar.gz", [(entry(snap.DATABASE), bytes(damaged))])
    assert refused(house, bad, tmp_path).problem in ("corrupt_database", "corrupt")


def with_sql(good_db: bytes, tmp_path: Path, sql: str) -> bytes:
    """`good_db` (an archive's history file) after `sql`."""
    copy = tmp_path / "edited.sqlite3"
    copy.write_bytes(good_db)
    with closing(sqlite3.connect(copy)) as db:
        db.executescript(sql)
    data = copy.read_bytes()
    copy.unlink()
    return data


TO_HOUSEHOLD = (
    "CREATE TRIGGER everyone_reads AFTER INSERT ON memories BEGIN "
    "UPDATE memories SET person = NULL WHERE id = new.id; END;"
)


@pytest.mark.parametrize(
    ("sql", "named"),
    [
        (TO_HOUSEHOLD, "everyone_reads"),
        ("CREATE VIEW everything AS SELECT * FROM memories;", "everything"),
        ("CREATE TABLE extra (x);", "extra"),
        ("CREATE INDEX by_text ON memories(text);", "by_text"),
        (  # one of Enlace's own triggers, rewritten under its own name
            "DROP TRIGGER memories_added; CREATE TRIGGER memories_added AFTER INSERT ON memories "
            "BEGIN INSERT INTO memories_fts(rowid, text) VALUES (new.id, new.text); "
            "UPDATE memories SET person = NULL WHERE id = new.id; END;",
            "memories_added",
        ),
        ("DROP INDEX memories_by_person;", "memories_by_person"),
    ],
)
def test_an_archive_that_carries_its_own_sql_is_refused_naming_it(
    house: snap.Household, good_db: bytes, tmp_path: Path, sql: str, named: str
) -> None:
    """The issue's hostile archive: its history holds an extra trigger (every new personal memory
    becomes the household's), its manifest's size and sha256 made to match. Refused by verify,
    by a whole restore and by a one-person restore, naming the object."""
    bad = forge(tmp_path / "sql.tar.gz", [(entry(snap.DATABASE), with_sql(good_db, tmp_path, sql))])
    found = refused(house, bad, tmp_path)
    assert found.problem == "foreign_schema" and f"«{named}»" in str(found), str(found)
    with pytest.raises(snap.ArchiveRefused, match=named):
        snap.restore(house, bad, person="P1")


def test_an_older_schema_archive_is_compared_with_that_schema(
    house: snap.Household, tmp_path: Path
) -> None:
    from enlace_agent.household.schema import MIGRATIONS

    old = tmp_path / "old.sqlite3"
    with closing(sqlite3.connect(old)) as db:
        for version, script in enumerate(MIGRATIONS[:4]):
            db.executescript(f"{script} PRAGMA user_version = {version + 1};")
        db.execute("INSERT INTO conversations VALUES ('c1', 'P1', 'Vieja', 1, 1, '[]')")
        db.commit()
    clean = old.read_bytes()
    good = forge(tmp_path / "v4.tar.gz", [(entry(snap.DATABASE), clean)], schema_version=4)
    assert snap.verify(house, good)["schema_version"] == 4
    hostile = with_sql(
        clean, tmp_path, "CREATE TRIGGER t4 AFTER INSERT ON messages BEGIN SELECT 1; END;"
    )
    bad = forge(tmp_path / "v4-sql.tar.gz", [(entry(snap.DATABASE), hostile)], schema_version=4)
    assert refused(house, bad, tmp_path).problem == "foreign_schema"


def huge_archive(path: Path, good_db: bytes, declared: int) -> Path:
    """A gzip'd tar of about 1 MB whose manifest (and the member's own header) say honestly that
    `web.sqlite3` has `declared` bytes; only its first MiB of zeros follows, never expanded."""
    body = manifest_json({snap.DATABASE: {"size": declared, "sha256": "0" * 64}})
    manifest = tarfile.TarInfo(snap.MANIFEST)
    manifest.size = len(body)
    member = tarfile.TarInfo(snap.DATABASE)
    member.size = declared
    padding = b"\x00" * (-len(body) % tarfile.BLOCKSIZE)
    raw = io.BytesIO()
    raw.write(manifest.tobuf(tarfile.PAX_FORMAT) + body + padding)
    raw.write(member.tobuf(tarfile.PAX_FORMAT) + good_db + b"\x00" * (1 << 20))  # cut here
    path.write_bytes(gzip.compress(raw.getvalue()))
    return path


def test_a_small_archive_declaring_a_2_gib_history_is_refused_before_a_byte_is_written(
    house: snap.Household, good_db: bytes, tmp_path: Path
) -> None:
    bad = huge_archive(tmp_path / "bomb.tar.gz", good_db, 2 << 30)
    assert bad.stat().st_size < 2 << 20
    found = refused(house, bad, tmp_path)  # nothing new anywhere: not a byte of it written
    assert found.problem == "too_large" and "max_archive_bytes" in str(found)


def test_declared_sizes_are_checked_against_the_free_space_first(
    house: snap.Household, good_db: bytes, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import shutil

    bad = huge_archive(tmp_path / "big.tar.gz", good_db, 300 << 20)  # under the limit
    real = shutil.disk_usage

    def little_room(path: Any) -> Any:
        usage = real(path)
        return usage._replace(free=200 << 20)

    monkeypatch.setattr(shutil, "disk_usage", little_room)
    before_rows, before_files = dump(house.database), files_under(tmp_path)
    for attempt in (lambda: snap.verify(house, bad), lambda: snap.restore(house, bad)):
        with pytest.raises(snap.DiskFull) as full:
            attempt()
        assert str(full.value).startswith(f"no queda espacio en {house.work_root}")
        assert "300 MB" in str(full.value) and "200 MB" in str(full.value)
    assert dump(house.database) == before_rows
    assert files_under(tmp_path) - before_files <= {house.directory, house.work_root / snap.LOCK}


# ---------------------------------------------------------------- a full disk
class FullDisk(io.RawIOBase):
    """A file on a disk that fills up after `room` bytes."""

    def __init__(self, real: IO[bytes], room: int) -> None:
        self.real, self.room = real, room

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        if len(data) > self.room:
            raise OSError(errno.ENOSPC, "No space left on device")
        self.room -= len(data)
        return self.real.write(data)

    def fileno(self) -> int:
        return self.real.fileno()

    def flush(self) -> None:
        if not self.real.closed:
            self.real.flush()

    def close(self) -> None:
        self.real.close()
        super().close()


@pytest.mark.parametrize("room", [0, 100, 1000])
def test_a_full_disk_leaves_no_partial_archive_and_the_history_untouched(
    house: snap.Household, monkeypatch: pytest.MonkeyPatch, room: int
) -> None:
    real_open = files.open_new

    def open_new(path: Path, mode: int = files.PRIVATE_FILE) -> IO[bytes]:
        file = real_open(path, mode)
        return FullDisk(file, room) if path.name.endswith(snap.PARTIAL) else file  # type: ignore[return-value]

    monkeypatch.setattr(files, "open_new", open_new)
    before = dump(house.database)
    with pytest.raises(snap.DiskFull, match="no queda espacio") as exc:
        snap.create(house)
    assert str(exc.value).startswith(f"no queda espacio en {house.directory}: ")
    assert "no queda ninguna copia a medias" in str(exc.value)
    assert dump(house.database) == before
    assert list(house.directory.iterdir()) == []
    assert not list(house.work_root.glob(f"{snap.WORK}*"))


def test_a_full_disk_at_the_cli_is_one_spanish_paragraph(
    house: snap.Household, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from enlace_agent.cli.snapshot import main

    def no_room(path: Path, mode: int = files.PRIVATE_FILE) -> IO[bytes]:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(files, "open_new", no_room)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(house.database.parent.parent.parent / "config"))
    config = house.database.parent.parent.parent / "assistant.yaml"
    config.write_text(f"web:\n  database: {house.database}\n")
    assert main(["create", "--config", str(config)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("Error: no queda espacio") and "Traceback" not in err


@contextlib.contextmanager
def tmpfs(mount: Path, size: str) -> Iterator[Path]:
    """A real tmpfs of `size` at `mount` (needs root and mount; the test is skipped otherwise)."""
    mount.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", str(mount)],
        capture_output=True,
    )
    if done.returncode != 0:
        pytest.skip("cannot mount a tmpfs here (needs root): the monkeypatched ENOSPC covers it")
    try:
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], check=False)


@pytest.fixture
def tiny_disk(tmp_path: Path) -> Iterator[Path]:
    """A real 256 KiB tmpfs."""
    with tmpfs(tmp_path / "tiny", "256k") as mount:
        yield mount


def test_a_really_full_disk(house: snap.Household, tiny_disk: Path) -> None:
    for _ in range(100):  # ~1.6 MB that does not compress
        fill(house.database, people=1, conversations=2, text=secrets.token_hex(4000))
    before = dump(house.database)
    with pytest.raises(snap.DiskFull) as full:
        snap.create(house, to=tiny_disk)
    assert str(full.value).startswith(f"no queda espacio en {tiny_disk}: ")
    assert dump(house.database) == before
    assert list(tiny_disk.iterdir()) == []


def test_a_restore_on_a_really_full_data_disk_changes_nothing(tmp_path: Path) -> None:
    """The history (about 0.6 MB) lives on a 2 MiB tmpfs, the snapshots elsewhere: making one
    fits (the copy and its read-back beside the history), a restore does not (the archive read
    back, then the copy of now made first, each beside the history): it says where, and
    nothing has changed."""
    with tmpfs(tmp_path / "small", "2m") as disk:
        restore_on_a_full_disk(tmp_path, disk)


def restore_on_a_full_disk(tmp_path: Path, tiny_disk: Path) -> None:
    database = tiny_disk / "web.sqlite3"
    config = AssistantConfig.model_validate(
        {"web": {"database": str(database), "snapshots": {"directory": str(tmp_path / "snaps")}}}
    )
    h = snap.household(config, {"XDG_CONFIG_HOME": str(tmp_path / "config")})
    fill(h.database, people=3, conversations=15, text=secrets.token_hex(6000))
    made = snap.create(h)
    fill(h.database, people=1, conversations=1, text="después")
    before, files_before = dump(h.database), files_under(tiny_disk)
    taken = snap.snapshots(h.directory)
    with pytest.raises(snap.DiskFull) as full:
        snap.restore(h, made.path)
    assert str(full.value).startswith(f"no queda espacio en {tiny_disk}: "), str(full.value)
    assert "no se ha tocado" in str(full.value) and "--to" not in str(full.value)  # not create's
    assert dump(h.database) == before
    assert snap.snapshots(h.directory) == taken  # no undo copy left either
    assert files_under(tiny_disk) <= files_before | {tiny_disk / snap.LOCK}


@pytest.mark.parametrize("step", ["undo", "replace", "store"])
def test_a_full_disk_during_restore_is_one_spanish_paragraph_and_changes_nothing(
    house: snap.Household,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    step: str,
) -> None:
    from enlace_agent.cli.snapshot import main
    from enlace_agent.snapshot import restoring

    made = snap.create(house)
    fill(house.database, people=1, conversations=1, text="después")
    before, taken = dump(house.database), snap.snapshots(house.directory)
    if step == "undo":
        real_open = files.open_new

        def open_new(path: Path, mode: int = files.PRIVATE_FILE) -> IO[bytes]:
            if path.name.endswith(snap.PARTIAL):
                raise OSError(errno.ENOSPC, "No space left on device")
            return real_open(path, mode)

        monkeypatch.setattr(files, "open_new", open_new)
        folder = house.directory
    else:

        def disk_full(*_: Any) -> None:
            raise sqlite3.OperationalError("database or disk is full")

        monkeypatch.setattr(restoring, "replace_all", disk_full)
        folder = house.work_root
    if step == "store":  # the household's database says it itself (shared.DiskFull)

        def store_full(*_: Any) -> None:
            raise shared.DiskFull(house.database.parent, "libera espacio")

        monkeypatch.setattr(restoring, "replace_all", store_full)
        folder = house.database.parent
    monkeypatch.setenv("XDG_CONFIG_HOME", str(house.database.parent.parent.parent / "config"))
    config = house.database.parent.parent.parent / "assistant.yaml"
    config.write_text(f"web:\n  database: {house.database}\n")
    assert main(["restore", str(made.path), "--config", str(config)]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"Error: no queda espacio en {folder}: "), err
    assert "Traceback" not in err and "no se ha tocado" in err and "--to" not in err
    assert dump(house.database) == before
    assert snap.snapshots(house.directory) == taken


# ---------------------------------------------------------------- kill -9
def cli(h: snap.Household, tmp_path: Path, *argv: str, kill_at: str | None = None) -> Any:
    config = tmp_path / "assistant.yaml"
    config.write_text(f"web:\n  database: {h.database}\n")
    env = {**os.environ, "XDG_CONFIG_HOME": str(tmp_path / "config")}
    env.pop(snap.KILL_ENV, None)
    if kill_at is not None:
        env[snap.KILL_ENV] = kill_at
    command = [sys.executable, "-m", "enlace_agent.cli.snapshot", *argv, "--config", str(config)]
    return subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def whole_archives(h: snap.Household) -> list[snap.Snapshot]:
    """Listed archives; each one must be complete (a full verify passes)."""
    listed = snap.snapshots(h.directory)
    for s in listed:
        snap.verify(h, s.path)
    return listed


@pytest.mark.parametrize(
    "moment", ["create-copied", "create-written", "create-verified", "create-renamed"]
)
def test_kill_9_during_create(house: snap.Household, tmp_path: Path, moment: str) -> None:
    before = dump(house.database)
    process = cli(house, tmp_path, "create", kill_at=moment)
    assert process.wait(60) == -signal.SIGKILL
    assert dump(house.database) == before
    listed = whole_archives(house)
    if moment == "create-renamed":  # complete, renamed, only its check record missing
        assert len(listed) == 1 and listed[0].verified is None
    else:
        assert listed == []
    # The next run sweeps what the killed one left and works.
    assert cli(house, tmp_path, "create").wait(60) == 0
    assert not list(house.directory.glob(f"*{snap.PARTIAL}"))
    assert not list(house.work_root.glob(f"{snap.WORK}*"))
    assert len(whole_archives(house)) == len(listed) + 1


@pytest.mark.parametrize(
    ("moment", "person", "restored"),
    [
        ("restore-read", None, False),
        ("restore-undo-made", None, False),
        ("restore-copying", None, False),
        ("restore-done", None, True),
        ("restore-undo-made", "P1", False),
        ("restore-person-writing", "P1", False),
        ("restore-done", "P1", True),
    ],
)
def test_kill_9_during_restore(
    house: snap.Household, tmp_path: Path, moment: str, person: str | None, restored: bool
) -> None:
    fill(house.database, conversations=300, text="relleno " * 100)  # several backup steps
    made = snap.create(house)
    Store(house.database).delete_person("P1")
    fill(house.database, people=1, conversations=2, text="después")
    damaged = dump(house.database)
    argv = ["restore", str(made.path), *(["--person", person] if person else [])]
    process = cli(house, tmp_path, *argv, kill_at=moment)
    assert process.wait(60) == -signal.SIGKILL
    now = dump(house.database)
    assert now != damaged if restored else now == damaged
    for s in whole_archives(house):  # only whole archives are ever listed
        assert s.path.name.endswith(snap.PLAIN)
    # Run again to the end: the history is the snapshot's (for P1 at least).
    again = cli(house, tmp_path, *argv)
    assert again.wait(60) == 0, again.communicate()
    with closing(sqlite3.connect(house.database)) as db:
        count = db.execute("SELECT COUNT(*) FROM conversations WHERE person = 'P1'").fetchone()
    assert count == (305,)


@pytest.mark.parametrize("after_ms", [200, 600, 1200])
def test_kill_9_after_a_delay_during_restore(
    house: snap.Household, tmp_path: Path, after_ms: int
) -> None:
    fill(house.database, conversations=1000, text="relleno " * 200)
    made = snap.create(house)
    restored = dump(house.database)
    Store(house.database).delete_person("P2")
    damaged = dump(house.database)
    process = cli(house, tmp_path, "restore", str(made.path))
    time.sleep(after_ms / 1000)
    process.kill()
    process.wait(60)
    assert dump(house.database) in (damaged, restored)
    whole_archives(house)


@pytest.mark.parametrize("after_ms", [200, 600])
def test_kill_9_after_a_delay_during_create(
    house: snap.Household, tmp_path: Path, after_ms: int
) -> None:
    fill(house.database, conversations=1000, text="relleno " * 200)
    before = dump(house.database)
    process = cli(house, tmp_path, "create")
    time.sleep(after_ms / 1000)
    process.kill()
    process.wait(60)
    assert dump(house.database) == before
    whole_archives(house)  # none, or one that verifies


def test_the_hook_is_inert_without_its_variable(house: snap.Household) -> None:
    assert os.environ.get(snap.KILL_ENV) is None
    for moment in ("create-copied", "restore-copying"):
        snap.checkpoint(moment)
