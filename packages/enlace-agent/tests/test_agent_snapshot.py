"""Snapshots of the household (enlace_agent.snapshot): made while the page serves, verified when
made, listed, restored whole or for one person (row by row), undone, pruned, encrypted, taken
before a migration and daily; the `enlace-assistant snapshot` CLI."""

from __future__ import annotations

import datetime as dt
import json
import os
import secrets
import sqlite3
import stat
import subprocess
import sys
import tarfile
import threading
import time
from collections.abc import Callable
from contextlib import closing
from pathlib import Path
from typing import Any

import httpx
import pytest
from enlace_config.schema.agent import AssistantConfig

from enlace_agent import snapshot as snap
from enlace_agent.cli.assistant import main as assistant_main
from enlace_agent.household.database import Store
from enlace_agent.household.schema import MIGRATIONS, SCHEMA_VERSION
from enlace_agent.snapshot import archive

FAMILY = ("Ana", "Luis", "Marta")
TOKEN = "ana-secret-token-0123456789"


def add_conversation(database: Path, person: str, title: str, texts: list[str]) -> str:
    """A conversation with its messages, written with the columns of schema 1 (the store's API
    is not what is tested here)."""
    cid = secrets.token_hex(16)
    now = time.time()
    with closing(sqlite3.connect(database)) as db, db:
        db.execute(
            "INSERT INTO conversations (id, person, title, created, updated) VALUES (?,?,?,?,?)",
            (cid, person, title, now, now),
        )
        for n, text in enumerate(texts):
            db.execute(
                "INSERT INTO messages (conversation_id, role, content, sources, created) "
                "VALUES (?, ?, ?, ?, ?)",
                (
                    cid,
                    "user" if n % 2 == 0 else "assistant",
                    text,
                    '[{"url": "https://e.es"}]',
                    now,
                ),
            )
    return cid


def add_session(database: Path, person: str) -> str:
    token_hash = secrets.token_hex(32)
    with closing(sqlite3.connect(database)) as db, db:
        db.execute(
            "INSERT INTO sessions (token_hash, person, csrf, expires) VALUES (?, ?, ?, ?)",
            (token_hash, person, "csrf", time.time() + 3600),
        )
    return token_hash


def fill(database: Path, conversations: int = 3) -> Store:
    """A household: three people with conversations and messages (rows hanging from each
    person's conversations by a foreign key), and a personal memory each. (Only Enlace's own
    tables: an archive with any other schema object is refused.)"""
    store = Store(database)
    for person in FAMILY:
        for i in range(conversations):
            texts = [f"Hola, soy {person} ({i})", f"Hola {person}"]
            add_conversation(database, person, f"Pregunta {i} de {person}", texts)
    for n, person in enumerate(FAMILY):
        add_memory(database, person, f"le gusta {n}")
    add_session(database, "Ana")
    return store


def add_memory(database: Path, person: str | None, text: str) -> int:
    with closing(sqlite3.connect(database)) as db, db:
        cursor = db.execute(
            "INSERT INTO memories (person, text, author, source, created, updated) "
            "VALUES (?, ?, ?, 'page', 1, 1)",
            (person, text, person or "Ana"),
        )
    assert cursor.lastrowid is not None
    return cursor.lastrowid


def rows(database: Path) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of every table but the sign-ins, sorted: the row-by-row comparison."""
    with closing(sqlite3.connect(database)) as db:
        tables = [
            r[0]
            for r in db.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' "
                "AND name NOT IN ('sessions', 'sqlite_sequence')"
            )
        ]
        return {t: sorted(db.execute(f'SELECT * FROM "{t}"').fetchall(), key=repr) for t in tables}


def person_rows(database: Path, person: str) -> dict[str, list[tuple[Any, ...]]]:
    with closing(sqlite3.connect(database)) as db:
        conversations = db.execute(
            "SELECT * FROM conversations WHERE person = ? ORDER BY id", (person,)
        ).fetchall()
        messages = db.execute(
            "SELECT m.* FROM messages m JOIN conversations c ON c.id = m.conversation_id "
            "WHERE c.person = ? ORDER BY m.id",
            (person,),
        ).fetchall()
        memories = db.execute("SELECT * FROM memories WHERE person = ?", (person,)).fetchall()
    return {"conversations": conversations, "messages": messages, "memories": memories}


@pytest.fixture
def home(clean_env: dict[str, str], tmp_path: Path) -> dict[str, Any]:
    """The household's config (people with a token variable) and environment."""
    config_dir = tmp_path / "config" / "enlace"
    config_dir.mkdir(parents=True)
    people = [{"name": "Ana", "token_env": "ENLACE_WEB_TOKEN_ANA"}, {"name": "Luis"}]
    (config_dir / "assistant.yaml").write_text(
        "web:\n  people:\n"
        + "".join(
            f"    - {{name: {p['name']}"
            + (f", token_env: {p['token_env']}" if "token_env" in p else "")
            + "}\n"
            for p in people
        )
    )
    (config_dir / ".env").write_text(f"ENLACE_WEB_TOKEN_ANA={TOKEN}\n")
    env = {**clean_env, "ENLACE_WEB_TOKEN_ANA": TOKEN}
    return {"env": env, "data": tmp_path / "data" / "enlace", "config": config_dir}


def household(home: dict[str, Any], **snapshots: Any) -> snap.Household:
    from enlace_agent.assistant import load_config

    config = load_config()
    if snapshots:
        web = config.web.model_copy(
            update={"snapshots": config.web.snapshots.model_copy(update=snapshots)}
        )
        config = config.model_copy(update={"web": web})
    return snap.household(config, home["env"])


def test_round_trip_a_person_deleted_is_restored_row_by_row(home: dict[str, Any]) -> None:
    h = household(home)
    fill(h.database)
    before = rows(h.database)
    made = snap.create(h)
    assert made.verified is not None
    assert made.contents["conversations"] == {p: 3 for p in FAMILY}

    luis_before = person_rows(h.database, "Luis")
    Store(h.database).delete_person("Luis")  # the damage
    # What the others wrote after the snapshot must survive a one-person restore.
    add_conversation(h.database, "Ana", "Una pregunta nueva", ["después de la copia"])
    ana_now = person_rows(h.database, "Ana")

    done = snap.restore(h, made.path, person="Luis")
    assert person_rows(h.database, "Luis") == luis_before
    luis = person_rows(h.database, "Luis")
    assert len(luis["conversations"]) == 3 and len(luis["messages"]) == 6
    assert len(luis["memories"]) == 1
    assert person_rows(h.database, "Ana") == ana_now  # Ana's new conversation is still there
    with closing(sqlite3.connect(h.database)) as db:  # sign-ins are untouched by a restore
        assert db.execute("SELECT person FROM sessions").fetchall() == [("Ana",)]
    # The undo snapshot holds the state right before the restore (Luis missing).
    assert done.undo is not None and done.undo.kind == "before-restore"
    assert "Luis" not in done.undo.contents["people"]

    # Whole-household restore: exactly the snapshot's rows.
    Store(h.database).delete_person("Marta")
    snap.restore(h, made.path)
    assert rows(h.database) == before
    with closing(sqlite3.connect(h.database)) as db:
        assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        assert db.execute("PRAGMA user_version").fetchone() == (SCHEMA_VERSION,)


def test_a_restore_is_undone_with_its_before_restore_snapshot(home: dict[str, Any]) -> None:
    h = household(home)
    fill(h.database)
    old = snap.create(h)
    add_conversation(h.database, "Ana", "Algo importante escrito después", ["no lo pierdas"])
    newer = rows(h.database)
    done = snap.restore(h, old.path)  # a mistake: back to before "Algo importante"
    assert rows(h.database) != newer
    assert done.undo is not None
    snap.restore(h, done.undo.path)
    assert rows(h.database) == newer


def test_archive_holds_settings_without_secrets_and_private_modes(home: dict[str, Any]) -> None:
    h = household(home)
    fill(h.database)
    token_hash = add_session(h.database, "Luis")
    made = snap.create(h)
    assert stat.S_IMODE(h.directory.stat().st_mode) == 0o700
    assert stat.S_IMODE(made.path.stat().st_mode) == 0o600
    with tarfile.open(made.path) as tar:
        names = tar.getnames()
        blob = b"".join(f.read() for m in tar.getmembers() if (f := tar.extractfile(m)) is not None)
        manifest = json.loads(tar.extractfile(snap.MANIFEST).read())  # type: ignore[union-attr]
    assert names[0] == snap.MANIFEST
    assert set(names) == {
        snap.MANIFEST,
        snap.DATABASE,
        "settings/assistant.yaml",
        "settings/people.json",
    }
    assert TOKEN.encode() not in blob and b".env" not in blob
    assert token_hash.encode() not in blob  # sign-ins are never archived...
    with closing(sqlite3.connect(h.database)) as db:  # ...and the live ones are untouched
        assert db.execute("SELECT COUNT(*) FROM sessions").fetchone() == (2,)
    assert manifest["schema_version"] == SCHEMA_VERSION and manifest["kind"] == "manual"
    assert manifest["enlace_version"] and manifest["created"].endswith("+00:00")
    assert manifest["model"] == {"name": "enlace-chat"}
    for name, entry in manifest["members"].items():
        assert len(entry["sha256"]) == 64 and entry["size"] >= 0, name
    people = json.loads(_member(made.path, "settings/people.json"))
    assert people == [
        {"name": "Ana", "token_env": "ENLACE_WEB_TOKEN_ANA"},
        {"name": "Luis", "token_env": None},
    ]


def _member(archive: Path, name: str) -> bytes:
    with tarfile.open(archive) as tar:
        file = tar.extractfile(name)
        assert file is not None
        return file.read()


def test_the_model_file_is_named_and_hashed(home: dict[str, Any], tmp_path: Path) -> None:
    gguf = tmp_path / "enlace-chat.gguf"
    gguf.write_bytes(b"GGUF" + b"\x00" * 1000)
    h = household(home, model_file=str(gguf))
    fill(h.database, 1)
    manifest = json.loads(_member(snap.create(h).path, snap.MANIFEST))
    import hashlib

    assert manifest["model"] == {
        "name": "enlace-chat",
        "file": "enlace-chat.gguf",
        "sha256": hashlib.sha256(gguf.read_bytes()).hexdigest(),
    }


def test_list_shows_only_whole_archives_and_whether_verified(home: dict[str, Any]) -> None:
    h = household(home)
    fill(h.database, 1)
    first = snap.create(h)
    second = snap.create(h)
    (h.directory / f".{snap.PREFIX}20990101T000000Z-manual.tar.gz{snap.PARTIAL}").write_bytes(
        b"half"
    )
    first.path.with_name(first.path.name + snap.VERIFIED).unlink()
    listed = snap.snapshots(h.directory)
    assert [s.path for s in listed] == [second.path, first.path]
    assert listed[0].verified is not None and listed[1].verified is None
    snap.verify(h, first.path)  # a full check records itself
    assert snap.snapshots(h.directory)[1].verified is not None


def test_restore_refuses_a_person_the_archive_does_not_have(home: dict[str, Any]) -> None:
    h = household(home)
    fill(h.database, 1)
    made = snap.create(h)
    before = rows(h.database)
    with pytest.raises(snap.SnapshotError, match="no tiene conversaciones de Pepe"):
        snap.restore(h, made.path, person="Pepe")
    assert rows(h.database) == before


def test_an_older_schema_snapshot_is_migrated_when_restored(home: dict[str, Any]) -> None:
    h = household(home)
    h.database.parent.mkdir(parents=True)
    with closing(sqlite3.connect(h.database)) as db:  # a version-1 file with Ana's history
        db.executescript(f"{MIGRATIONS[0]} PRAGMA user_version = 1;")
        db.execute("INSERT INTO conversations VALUES ('c1', 'Ana', 'Vieja', 1, 1, '[]')")
        db.execute("INSERT INTO messages VALUES (1, 'c1', 'user', 'hola', '[]', 1)")
        db.commit()
    old = snap.create(h)
    assert old.contents["people"] == ["Ana"]
    Store(h.database).delete_person("Ana")
    snap.restore(h, old.path)
    store = Store(h.database)
    assert [c["title"] for c in store.conversations("Ana", 10)] == ["Vieja"]
    with closing(sqlite3.connect(h.database)) as db:
        assert db.execute("PRAGMA user_version").fetchone() == (SCHEMA_VERSION,)


def schema_1_history(database: Path) -> None:
    """A history file as the first Enlace wrote it (schema 1), with one conversation of Ana's."""
    database.parent.mkdir(parents=True)
    with closing(sqlite3.connect(database)) as db:
        db.executescript(f"{MIGRATIONS[0]} PRAGMA user_version = 1;")
        db.execute("INSERT INTO conversations VALUES ('c1', 'Ana', 'Vieja', 1, 1, '[]')")
        db.commit()


def test_a_snapshot_is_taken_before_a_schema_migration(home: dict[str, Any]) -> None:
    from enlace_agent.household import store_for

    h = household(home)
    schema_1_history(h.database)
    config = AssistantConfig()
    store_for(config.web, home["env"], snap.before_migration(h))  # migrates 1 -> now
    made = snap.snapshots(h.directory)
    assert [s.kind for s in made] == ["before-migration"] and made[0].verified
    assert json.loads(_member(made[0].path, snap.MANIFEST))["schema_version"] == 1
    store_for(config.web, home["env"], snap.before_migration(h))  # up to date: no new one
    assert len(snap.snapshots(h.directory)) == 1


def test_pruning_keeps_daily_and_weekly_and_never_unverified_or_the_newest(
    home: dict[str, Any],
) -> None:
    h = household(home, keep_daily=2, keep_weekly=3)
    h.directory.mkdir(parents=True)

    def put(day: int, hour: int, verified: bool = True) -> str:
        stamp = f"202611{day:02d}T{hour:02d}0000Z"
        path = h.directory / f"{snap.PREFIX}{stamp}-daily.tar.gz"
        path.write_bytes(b"x" * day)
        if verified:
            record = {"verified": "2026-12-01T00:00:00+00:00", "size": day, "manifest": {}}
            path.with_name(path.name + snap.VERIFIED).write_text(json.dumps(record))
        return path.name

    # Two a day (12:00 and 13:00 UTC: the same local day in the household's time zone) for
    # November 2026; the oldest one never verified. Nov 30 is a Monday (ISO week 49).
    for day in range(1, 31):
        put(day, 12, verified=day != 1)
        put(day, 13)
    removed = snap.prune(h)
    kept = {s.path.name for s in snap.snapshots(h.directory)}
    assert kept == {
        f"{snap.PREFIX}20261130T130000Z-daily.tar.gz",  # newest; newest of Nov 30 and week 49
        f"{snap.PREFIX}20261129T130000Z-daily.tar.gz",  # newest of Nov 29 and of week 48
        f"{snap.PREFIX}20261122T130000Z-daily.tar.gz",  # newest of week 47
        f"{snap.PREFIX}20261101T120000Z-daily.tar.gz",  # never verified: never pruned
    }
    assert len(removed) == 56
    for path in removed:
        assert not path.exists() and not path.with_name(path.name + snap.VERIFIED).exists()
    # Nothing verified at all: nothing is deleted.
    for path in h.directory.glob(f"*{snap.VERIFIED}"):
        path.unlink()
    assert snap.prune(h) == []


def test_daily_snapshots_run_at_the_configured_hour_and_prune(home: dict[str, Any]) -> None:
    h = household(home, daily_hour=4, keep_daily=1, keep_weekly=0)
    fill(h.database, 1)
    snap.create(h)
    stop = threading.Event()
    base = dt.datetime(2026, 12, 4, 3, 59, 59, 800_000).astimezone()
    calls: list[dt.datetime] = []

    def now() -> dt.datetime:
        calls.append(base)
        if len(calls) > 1:
            stop.set()  # after the first daily snapshot
            return base.replace(hour=4, minute=0, second=1)
        return base

    assert snap.seconds_until(4, base) == pytest.approx(0.2)
    assert snap.seconds_until(4, base.replace(hour=5)) == pytest.approx(23 * 3600 - 59.8 - 59 * 60)
    thread = threading.Thread(target=snap.run_daily, args=(h, stop, now))
    thread.start()
    thread.join(30)
    assert not thread.is_alive()
    listed = snap.snapshots(h.directory)
    assert [s.kind for s in listed] == ["daily"]  # the manual one pruned (same day, older)


def test_encrypted_snapshot_round_trip_and_wrong_passphrase(home: dict[str, Any]) -> None:
    home["env"]["ENLACE_SNAPSHOT_PASSPHRASE"] = "correct horse battery staple"
    h = household(home, passphrase_env="ENLACE_SNAPSHOT_PASSPHRASE", kdf_log2_n=14)
    fill(h.database)
    before = rows(h.database)
    made = snap.create(h)
    assert made.sealed and made.path.name.endswith(snap.SEALED)
    raw = made.path.read_bytes()
    assert raw.startswith(snap.SEAL_MAGIC) and b"Hola, soy Ana" not in raw
    Store(h.database).delete_person("Ana")
    wrong = snap.Household(**{**h.__dict__, "passphrase": "incorrecta"})
    with pytest.raises(snap.ArchiveRefused, match="contraseña no es la de esta copia") as exc:
        snap.restore(wrong, made.path)
    assert exc.value.problem == "wrong_passphrase"
    none = snap.Household(**{**h.__dict__, "passphrase": None})
    with pytest.raises(snap.ArchiveRefused, match="ENLACE_SNAPSHOT_PASSPHRASE"):
        snap.verify(none, made.path)
    assert "Ana" not in {r[1] for r in rows(h.database)["conversations"]}
    snap.restore(h, made.path)
    assert rows(h.database) == before
    # A flipped byte inside a sealed chunk, and a cut file: each refused by name.
    flipped = made.path.with_name("flipped.tar.gz.enc")
    data = bytearray(raw)
    data[len(data) // 2] ^= 0x01
    flipped.write_bytes(bytes(data))
    with pytest.raises(snap.ArchiveRefused) as exc:
        snap.verify(h, flipped)
    assert exc.value.problem in ("corrupt", "truncated")
    cut = made.path.with_name("cut.tar.gz.enc")
    cut.write_bytes(raw[:-10])
    with pytest.raises(snap.ArchiveRefused) as exc:
        snap.verify(h, cut)
    assert exc.value.problem == "truncated"


def test_encryption_without_the_extra_is_a_clear_refusal(
    home: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "cryptography.hazmat.primitives.ciphers.aead", None)
    home["env"]["ENLACE_SNAPSHOT_PASSPHRASE"] = "una contraseña"
    h = household(home, passphrase_env="ENLACE_SNAPSHOT_PASSPHRASE")
    fill(h.database, 1)
    with pytest.raises(snap.SnapshotError, match=r"enlace-agent\[snapshot-crypto\]"):
        snap.create(h)
    assert snap.snapshots(h.directory) == []


def test_encryption_asked_without_its_passphrase_is_refused(home: dict[str, Any]) -> None:
    h = household(home, passphrase_env="ENLACE_SNAPSHOT_PASSPHRASE")
    fill(h.database, 1)
    with pytest.raises(snap.SnapshotError, match="ENLACE_SNAPSHOT_PASSPHRASE no está definida"):
        snap.create(h)
    assert snap.snapshots(h.directory) == []


# ---------------------------------------------------------------- the CLI
def run_cli(*argv: str) -> tuple[int, str, str]:
    import contextlib
    import io

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = assistant_main(["snapshot", *argv])
        except SystemExit as exc:
            code = int(exc.code or 0)
    return code, out.getvalue(), err.getvalue()


def test_cli_create_list_verify_restore_in_spanish(home: dict[str, Any]) -> None:
    h = household(home)
    fill(h.database)
    code, out, err = run_cli("create")
    assert code == 0, err
    assert out.startswith("Copia hecha y comprobada:") and "Ana (3)" in out
    archive = snap.snapshots(h.directory)[0].path
    code, out, _ = run_cli("list")
    assert code == 0 and "comprobada" in out and archive.name in out and "[manual]" in out
    code, out, _ = run_cli("verify", archive.name)  # a bare name: the snapshot folder's
    assert code == 0 and "está bien" in out
    Store(h.database).delete_person("Ana")
    code, out, _ = run_cli("restore", str(archive), "--person", "Ana")
    assert code == 0 and "Las conversaciones de Ana vuelve" in out
    assert "Para deshacerlo: enlace-assistant snapshot restore" in out
    assert len(Store(h.database).conversations("Ana", 50)) == 3
    code, out, _ = run_cli("restore", str(archive))
    assert code == 0 and "toda la casa" in out and "Los ajustes de la copia están en" in out


def test_cli_bad_input_exits_2_with_one_spanish_paragraph(home: dict[str, Any]) -> None:
    h = household(home)
    fill(h.database, 1)
    code, _, err = run_cli("verify", str(h.directory / "no-existe.tar.gz"))
    assert code == 2 and err.startswith("Error: no existe la copia") and "Traceback" not in err
    bad = h.database.parent / "foreign.tar.gz"
    bad.write_bytes(b"not an archive at all")
    code, _, err = run_cli("restore", str(bad))
    assert code == 2 and "no es una copia de Enlace" in err
    code, _, err = run_cli("restore")
    assert code == 2 and "FICHERO" in err
    code, out, _ = run_cli("--help")
    assert code == 0 and "enlace-assistant snapshot create --to /media/usb" in out


def test_cli_help_is_instant_and_imports_nothing_heavy() -> None:
    code = (
        "import sys; from enlace_agent.cli.assistant import main\n"
        "try: main(['snapshot', 'list', '--help'])\n"
        "except SystemExit: pass\n"
        "assert 'sqlite3' not in sys.modules and 'tarfile' not in sys.modules, 'heavy'\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "--config" in done.stdout


# ---------------------------------------------------------------- while the page serves
def test_snapshot_and_restore_while_the_page_serves(
    web_page: Callable[..., Any], model_server: Any, tmp_path: Path
) -> None:
    """Requests keep being answered during a snapshot and a restore, and each one sees either
    the whole old history or the whole restored one, never a mix."""
    page = web_page()
    database = tmp_path / "web.sqlite3"
    store = Store(database)
    for i in range(40):
        texts = [f"mensaje {j} " + "texto " * 200 for j in range(5)]
        add_conversation(database, "Ana", f"Conversación {i}", texts)
    config = AssistantConfig.model_validate({"web": {"database": str(database)}})
    h = snap.household(config, {})
    made = snap.create(h)
    for i in range(40, 80):
        add_conversation(database, "Ana", f"Conversación {i}", [])
    ana = page.login("Ana")
    seen: list[int] = []
    errors: list[str] = []
    done = threading.Event()

    def read() -> None:
        with httpx.Client(base_url=ana.base_url, cookies=ana.cookies, timeout=30) as client:
            while not done.is_set():
                got = client.get("/api/conversations")
                if got.status_code != 200:
                    errors.append(got.text)
                else:
                    seen.append(len(got.json()["conversations"]))

    readers = [threading.Thread(target=read) for _ in range(3)]
    for r in readers:
        r.start()
    time.sleep(0.2)
    snap.create(h)  # while serving
    snap.restore(h, made.path)  # back to 40 conversations, while serving
    time.sleep(0.2)
    done.set()
    for r in readers:
        r.join()
    assert not errors
    assert set(seen) <= {50, 40}  # the page lists at most 50: 80 before, 40 after
    assert seen[0] == 50 and seen[-1] == 40
    assert len(store.conversations("Ana", 1000)) == 40


def test_serving_is_not_slowed_to_a_halt_by_a_snapshot(home: dict[str, Any]) -> None:
    """A write during a snapshot goes through (WAL: the backup only reads)."""
    h = household(home)
    fill(h.database, 30)
    finished = threading.Event()

    def write() -> None:
        while not finished.is_set():
            add_conversation(h.database, "Ana", "durante la copia", ["sigo escribiendo"])

    writer = threading.Thread(target=write)
    writer.start()
    try:
        made = snap.create(h)
    finally:
        finished.set()
        writer.join()
    assert made.verified is not None
    assert os.environ.get(snap.KILL_ENV) is None


@pytest.mark.parametrize("person", [None, "Luis"])
def test_restore_on_a_new_machine_with_no_history_yet(
    home: dict[str, Any], tmp_path: Path, person: str | None
) -> None:
    h = household(home)
    fill(h.database)
    before = rows(h.database)
    made = snap.create(h, to=tmp_path / "usb")
    for leftover in h.database.parent.iterdir():  # the disk died: nothing left but the USB copy
        if leftover.is_dir():
            import shutil

            shutil.rmtree(leftover)
        else:
            leftover.unlink()
    done = snap.restore(h, made.path, person=person)
    assert done.undo is None
    assert stat.S_IMODE(h.database.stat().st_mode) == 0o600
    if person is None:
        assert rows(h.database) == before
    else:
        now = rows(h.database)
        assert now["conversations"] == [r for r in before["conversations"] if r[1] == "Luis"]
        luis = {r[0] for r in now["conversations"]}
        assert now["messages"] == [r for r in before["messages"] if r[1] in luis]
    code, out, _ = run_cli("list", "--in", str(tmp_path / "usb"))
    assert code == 0 and made.path.name in out


def test_the_page_takes_a_snapshot_before_it_migrates_an_old_history(
    web_page: Callable[..., Any], model_server: Any, tmp_path: Path
) -> None:
    database = tmp_path / "web.sqlite3"
    with closing(sqlite3.connect(database)) as db:
        db.executescript(f"{MIGRATIONS[0]} PRAGMA user_version = 1;")
        db.execute("INSERT INTO conversations VALUES ('c1', 'Ana', 'Vieja', 1, 1, '[]')")
        db.commit()
    page = web_page()  # the page's history file is tmp_path / "web.sqlite3"
    assert page.login("Ana").get("/api/conversations").json()["conversations"][0]["id"] == "c1"
    made = snap.snapshots(tmp_path / "snapshots")
    assert [s.kind for s in made] == ["before-migration"] and made[0].verified
    assert made[0].contents["people"] == ["Ana"]


def test_an_answer_being_written_in_the_snapshot_is_restored_as_interrupted(
    home: dict[str, Any],
) -> None:
    from enlace_agent.household.database import INTERRUPTED, WRITING

    h = household(home)
    fill(h.database, 1)
    cid = add_conversation(h.database, "Ana", "A medias", ["¿Qué tiempo hace?"])
    with closing(sqlite3.connect(h.database)) as db, db:
        db.execute(
            "INSERT INTO messages (conversation_id, role, content, sources, created) "
            "VALUES (?, ?, 'Hace sol y', '[]', 1)",
            (cid, WRITING),
        )
    made = snap.create(h)
    snap.restore(h, made.path)
    shown = Store(h.database).conversation("Ana", cid)
    assert shown is not None
    assert shown["messages"][-1]["role"] == "assistant"
    assert (
        shown["messages"][-1]["content"].startswith("Hace sol y")
        and INTERRUPTED in (shown["messages"][-1]["content"])
    )
    code, out, _ = run_cli("restore", "--help")
    assert code == 0 and "ejemplo:\n  enlace-assistant snapshot restore enlace-snapshot-" in out


def test_a_snapshot_that_fails_its_check_when_made_is_deleted_and_the_command_fails(
    home: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The read-back finds the database inside the new archive damaged (a bad disk)."""
    h = household(home)
    fill(h.database, 1)

    def damaged(path: Path, database: Path, manifest: Any) -> None:
        raise snap.ArchiveRefused(path, "corrupt_database", "su historial está dañado (prueba).")

    monkeypatch.setattr(archive, "check_database", damaged)
    with pytest.raises(snap.SnapshotError, match="no pasa la comprobación y se ha borrado"):
        snap.create(h)
    assert list(h.directory.iterdir()) == []
    code, _, err = run_cli("create")
    assert code == 1 and "se ha borrado" in err and list(h.directory.iterdir()) == []


# ---------------------------------------------------------------- issue 37: snapshots
def memories_of(database: Path, person: str) -> list[tuple[int, str]]:
    with closing(sqlite3.connect(database)) as db:
        query = "SELECT id, text FROM memories WHERE person IS ? ORDER BY id"
        return db.execute(query, (person,)).fetchall()


def test_undoing_a_whole_restore_for_one_person_after_someone_wrote(home: dict[str, Any]) -> None:
    """`restore <before-restore copy> --person Luis` once Ana has written since the restore: the
    restored ids never come back for new rows (it failed with «UNIQUE constraint failed:
    memories.id»: the restored sqlite_sequence handed Ana the id of Luis's newer memory)."""
    h = household(home)
    fill(h.database, 1)
    old = snap.create(h)
    add_memory(h.database, "Luis", "Luis empieza yoga el lunes")  # after the copy
    add_conversation(h.database, "Luis", "Yoga", ["¿dónde hay yoga?", "En el centro cívico"])
    luis_then = person_rows(h.database, "Luis")
    done = snap.restore(h, old.path)  # the whole house back: Luis's newer rows go
    assert done.undo is not None
    assert len(person_rows(h.database, "Luis")["memories"]) == 1
    add_memory(h.database, "Ana", "Ana cambia de turno")  # someone writes since
    add_conversation(h.database, "Ana", "Turnos", ["¿qué turno tengo?", "El de tarde"])
    ana_now = person_rows(h.database, "Ana")

    code, _out, err = run_cli("restore", str(done.undo.path), "--person", "Luis")
    assert code == 0, err
    assert person_rows(h.database, "Luis") == luis_then
    assert person_rows(h.database, "Ana") == ana_now
    with closing(sqlite3.connect(h.database)) as db:
        assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)


@pytest.mark.parametrize("existing", [0o1777, 0o2775])
def test_create_to_leaves_an_existing_folder_alone_and_the_archive_private(
    home: dict[str, Any], tmp_path: Path, existing: int
) -> None:
    h = household(home)
    fill(h.database, 1)
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(existing)
    code, _out, err = run_cli("create", "--to", str(shared))
    assert code == 0, err
    (made,) = snap.snapshots(shared)
    assert stat.S_IMODE(shared.stat().st_mode) == existing
    assert stat.S_IMODE(made.path.stat().st_mode) == 0o600
    record = made.path.with_name(made.path.name + snap.VERIFIED)
    assert stat.S_IMODE(record.stat().st_mode) == 0o600
    new = tmp_path / "new" / "copias"  # folders it makes are private, each of them
    snap.create(h, to=new)
    assert [stat.S_IMODE(p.stat().st_mode) for p in (new.parent, new)] == [0o700, 0o700]


def test_create_to_a_fat_stick_where_chmod_fails(
    home: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Simulated: this kernel has no vfat/exFAT to loop-mount, so chmod and fchmod fail with
    EPERM (as on a FAT stick) for everything under the stick's folder."""
    import errno

    h = household(home)
    fill(h.database, 1)
    stick = tmp_path / "media" / "usb"
    stick.mkdir(parents=True)
    real_chmod, real_fchmod = os.chmod, os.fchmod

    def on_stick(path: Any) -> bool:
        where = os.readlink(f"/proc/self/fd/{path}") if isinstance(path, int) else os.fspath(path)
        return str(where).startswith(str(stick))

    def chmod(path: Any, mode: int, **kwargs: Any) -> None:
        if on_stick(path):
            raise PermissionError(errno.EPERM, "Operation not permitted", str(path))
        real_chmod(path, mode, **kwargs)

    def fchmod(fd: int, mode: int) -> None:
        if on_stick(fd):
            raise PermissionError(errno.EPERM, "Operation not permitted")
        real_fchmod(fd, mode)

    monkeypatch.setattr(os, "chmod", chmod)
    monkeypatch.setattr(os, "fchmod", fchmod)
    code, _, err = run_cli("create", "--to", str(stick / "enlace"))
    assert code == 0, err
    (made,) = snap.snapshots(stick / "enlace")
    assert made.verified is not None
    code, _, err = run_cli("verify", str(made.path))
    assert code == 0, err
    Store(h.database).delete_person("Luis")
    code, _out, err = run_cli("restore", str(made.path), "--person", "Luis")
    assert code == 0, err
    assert len(Store(h.database).conversations("Luis", 10)) == 1


def test_another_households_archive_is_refused_without_otra_casa(
    home: dict[str, Any], tmp_path: Path
) -> None:
    h = household(home)
    fill(h.database, 1)
    ours = rows(h.database)
    theirs = AssistantConfig.model_validate(
        {
            "web": {
                "database": str(tmp_path / "pedro" / "web.sqlite3"),
                "people": [{"name": "Pedro"}],
            }
        }
    )
    other = snap.household(theirs, home["env"])
    Store(other.database)
    add_conversation(other.database, "Pedro", "La casa de Pedro", ["hola", "hola Pedro"])
    add_conversation(other.database, "Carmen", "La de Carmen", ["hola", "hola Carmen"])
    made = snap.create(other, to=tmp_path / "usb")

    for person in (None, "Pedro"):
        with pytest.raises(snap.CannotDo, match="otra casa") as refused:
            snap.restore(h, made.path, person=person)
        assert "--otra-casa" in str(refused.value) and "Pedro" in str(refused.value)
        assert "Ana" in str(refused.value)
    assert rows(h.database) == ours and snap.snapshots(h.directory) == []
    code, _, err = run_cli("restore", str(made.path))
    assert (
        code == 2 and err.startswith("Error: esta copia es de otra casa") and "Traceback" not in err
    )
    assert rows(h.database) == ours

    code, _out, err = run_cli("restore", str(made.path), "--otra-casa")
    assert code == 0, err
    assert sorted(c["title"] for c in Store(h.database).conversations("Pedro", 10)) == [
        "La casa de Pedro"
    ]
    assert Store(h.database).conversations("Ana", 10) == []
    # its own archives, older or newer, are this household's: no question asked
    assert snap.restore(h, snap.snapshots(h.directory)[0].path).undo is not None
    assert rows(h.database) == ours


def test_a_persons_restore_gives_new_ids_to_rows_that_clash_with_newer_ones(
    home: dict[str, Any],
) -> None:
    """A history where an id was already handed out twice (a whole restore by an older Enlace let
    the counters go back): Luis's rows that clash with Ana's newer ones come back with new ids,
    Ana's stay as they are."""
    h = household(home)
    fill(h.database, 1)
    yoga = add_memory(h.database, "Luis", "Luis empieza yoga el lunes")
    luis_then = memories_of(h.database, "Luis")
    copy = snap.create(h)
    with closing(sqlite3.connect(h.database)) as db, db:  # what the older whole restore left
        db.execute("DELETE FROM memories WHERE id = ?", (yoga,))
        db.execute("UPDATE sqlite_sequence SET seq = seq - 1 WHERE name = 'memories'")
    assert add_memory(h.database, "Ana", "Ana cambia de turno") == yoga  # the same id again
    ana_now = memories_of(h.database, "Ana")

    snap.restore(h, copy.path, person="Luis")
    assert [t for _, t in memories_of(h.database, "Luis")] == [t for _, t in luis_then]
    assert memories_of(h.database, "Ana") == ana_now
    with closing(sqlite3.connect(h.database)) as db:  # the full-text index follows the new id
        found = db.execute(
            "SELECT m.person FROM memories_fts f JOIN memories m ON m.id = f.rowid "
            "WHERE memories_fts MATCH 'yoga'"
        ).fetchall()
    assert found == [("Luis",)]


def test_a_history_migrated_step_by_step_has_exactly_a_fresh_schema(home: dict[str, Any]) -> None:
    """The schema check must never refuse a household's own file: one made at schema 1 and
    migrated on start, version by version, holds what a fresh database of the last version does,
    and its snapshots are made and verified."""
    from enlace_agent.household.schema import foreign_schema

    h = household(home)
    schema_1_history(h.database)
    Store(h.database)
    with closing(sqlite3.connect(h.database)) as db:
        assert db.execute("PRAGMA user_version").fetchone() == (SCHEMA_VERSION,)
        assert foreign_schema(db) == []
        db.execute("ANALYZE")  # SQLite's own statistics are not foreign
        assert foreign_schema(db) == []
    assert snap.verify(h, snap.create(h).path)["schema_version"] == SCHEMA_VERSION
