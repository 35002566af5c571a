"""The household's database: one SQLite file (`web.sqlite3`, the name it has always had) with the
histories, the memories, the sign-ins and the shopping list; a versioned schema; one person's rows
never reachable from another's queries (every query names the person). No web framework here: the
page, memory, snapshots, `doctor` and the CLI all open it.

The schema (`schema.py`: the migrations, and what snapshots read of a file) is brought up to date
here when the file is opened, each migration in its own transaction; a file from a newer version
of Enlace is refused rather than misread.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import secrets
import sqlite3
import time
from collections.abc import Callable, Generator, Mapping, Sequence
from contextlib import AbstractContextManager, closing, contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from enlace_config.schema.agent import WebConfig

from enlace_agent import files
from enlace_agent.household.paths import database_path
from enlace_agent.household.schema import MIGRATIONS, SCHEMA_VERSION
from enlace_agent.settings import os_reason
from enlace_agent.shared import DiskFull, out_of_space

log = logging.getLogger("enlace_agent.household")

TITLE_CHARS = 60
WRITING = "writing"  # the role of an answer being written (until it ends or is marked cut)
INTERRUPTED = (
    "(La respuesta se interrumpió: Enlace se detuvo mientras la escribía. Vuelve a preguntar si "
    "la necesitas entera.)"
)


FREE_SPACE = (
    "libera espacio en ese disco (las copias antiguas se ven con «enlace-assistant snapshot "
    "list»; las versiones del modelo, con «enlace-assistant model list») y vuelve a intentarlo. "
    "No se ha cambiado nada."
)


class StoreError(RuntimeError):
    """The history file cannot be used (unreadable, or written by a newer Enlace)."""


class StoreBusy(StoreError):
    """Another writer held the history file for longer than the store's timeout."""


@dataclass(frozen=True)
class Session:
    person: str
    csrf: str
    fingerprint: str  # of the token the person signed in with (`Store.fingerprint`)


def store_for(
    config: WebConfig,
    env: Mapping[str, str],
    before_migration: Callable[[Path, int], None] | None = None,
) -> Store:
    """The household's store as `config` places it (`household.paths.database_path`); the default
    folder is Enlace's own (made 0700 even when it exists)."""
    path, private = database_path(config, env)
    return Store(
        path, before_migration, private_folder=private, timeout_s=config.database_timeout_s
    )


def _hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


class Store:
    def __init__(
        self,
        path: Path,
        before_migration: Callable[[Path, int], None] | None = None,
        *,
        private_folder: bool = False,
        timeout_s: float | None = None,
    ) -> None:
        """`before_migration(path, found)` runs before an existing file at schema `found` is
        migrated (the snapshot hook). `private_folder`: the folder is Enlace's own and is made
        0700 even when it exists (one named in the configuration is only created 0700).
        `timeout_s`: how long a write waits for another writer (None: the schema's default),
        then `StoreBusy`."""
        self.path = path
        default: float = WebConfig.model_fields["database_timeout_s"].default
        self.timeout_s = default if timeout_s is None else timeout_s
        self.key_path = Path(f"{path}.key")  # the server's secret for session fingerprints
        self._key: bytes | None = None
        try:
            make_private(path, (self.key_path,), private_folder=private_folder)
        except OSError as exc:
            if out_of_space(exc):
                raise DiskFull(path.parent, FREE_SPACE) from None
            raise StoreError(
                f"no se puede proteger el historial {path} (permisos 0600): {os_reason(exc)}"
            ) from None
        try:
            if before_migration is not None and path.is_file():
                with self._db() as db:
                    found: int = db.execute("PRAGMA user_version").fetchone()[0]
                if 0 < found < SCHEMA_VERSION:
                    before_migration(path, found)
            with self._db() as db:
                migrate(db)
        except sqlite3.DatabaseError as exc:
            if out_of_space(exc, path.parent):
                raise DiskFull(path.parent, FREE_SPACE) from None
            log.debug("cannot use the history file %s: %s", path, exc)
            raise StoreError(
                f"el fichero {path} está dañado o no es un historial de Enlace (con --debug se "
                "ve el detalle técnico)"
            ) from None

    @contextmanager
    def _db(self) -> Generator[sqlite3.Connection]:
        """A connection in one transaction; `StoreBusy` when the file stays locked, `DiskFull`
        when its disk is (the transaction rolled back: nothing changed). Every
        connection overwrites what it deletes or replaces (`secure_delete`): no free page or
        free space in a page keeps old text."""
        try:
            with closing(sqlite3.connect(self.path, timeout=self.timeout_s)) as db:
                db.row_factory = sqlite3.Row
                db.execute("PRAGMA foreign_keys = ON")
                db.execute("PRAGMA secure_delete = ON")
                with db:
                    yield db
        except sqlite3.OperationalError as exc:
            if out_of_space(exc, self.path.parent):
                raise DiskFull(self.path.parent, FREE_SPACE) from None
            code = getattr(exc, "sqlite_errorcode", 0) & 0xFF
            if code not in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED):
                raise
            raise StoreBusy(f"the history file {self.path} is busy: {exc}") from None

    def transaction(self) -> AbstractContextManager[sqlite3.Connection]:
        """A connection in one transaction (for the memory, `enlace_agent.memory`, which keeps
        its rows in this file); `StoreBusy` when the file stays locked."""
        return self._db()

    @contextmanager
    def erasing(self) -> Generator[sqlite3.Connection]:
        """A transaction that deletes or corrects what the family wrote, after which no byte of
        the old text stays anywhere in the files: the freed bytes are overwritten
        (`secure_delete`), the memories' full-text index is merged without the deleted words
        (FTS5 keeps them in older segments until `optimize`), and the WAL, which still holds the
        pages as they were before, is copied into the file and emptied (a checkpoint that waits
        up to the store's timeout for readers to move on, then truncates it)."""
        with self._db() as db:
            yield db
            db.execute("INSERT INTO memories_fts(memories_fts) VALUES ('optimize')")
        with self._db() as db:
            busy, _, _ = db.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
        if busy:
            log.info("a reader kept the WAL from being emptied: old pages stay until the next")

    # ---------------------------------------------------------------- sessions
    def fingerprint(self, access_token: str | None) -> str:
        """A keyed fingerprint of a person's access token (None: signs in by name): kept with
        each session, so a session made under another token no longer matches. Keyed with the
        server's secret (`key_path`, 0600, made on first use), so a copy of the history file
        alone cannot be used to guess tokens."""
        if self._key is None:
            self._key = read_or_make_key(self.key_path)
        # A token is never empty (min_token_chars), so "" stands for "no token".
        return hmac.new(self._key, (access_token or "").encode(), hashlib.sha256).hexdigest()

    def create_session(
        self, person: str, lifetime_s: float, fingerprint: str
    ) -> tuple[str, Session]:
        """A new sign-in: the cookie value (kept only as a hash here) and its session."""
        token, csrf = secrets.token_urlsafe(32), secrets.token_urlsafe(32)
        now = time.time()
        with self._db() as db:
            db.execute("DELETE FROM sessions WHERE expires < ?", (now,))
            db.execute(
                "INSERT INTO sessions (token_hash, person, csrf, expires, fingerprint) "
                "VALUES (?, ?, ?, ?, ?)",
                (_hash(token), person, csrf, now + lifetime_s, fingerprint),
            )
        return token, Session(person, csrf, fingerprint)

    def session(self, token: str) -> Session | None:
        with self._db() as db:
            row = db.execute(
                "SELECT person, csrf, fingerprint FROM sessions "
                "WHERE token_hash = ? AND expires > ?",
                (_hash(token), time.time()),
            ).fetchone()
        return Session(row["person"], row["csrf"], row["fingerprint"]) if row else None

    def end_session(self, token: str) -> None:
        with self._db() as db:
            db.execute("DELETE FROM sessions WHERE token_hash = ?", (_hash(token),))

    def end_sessions(self, person: str) -> int:
        """Ends every sign-in of `person` (on every device); returns how many there were."""
        with self._db() as db:
            return db.execute("DELETE FROM sessions WHERE person = ?", (person,)).rowcount

    # ---------------------------------------------------------------- conversations
    def create_conversation(self, person: str, first_question: str) -> str:
        with self._db() as db:
            return _new_conversation(db, person, first_question, time.time())

    def conversations(self, person: str, limit: int) -> list[dict[str, Any]]:
        with self._db() as db:
            rows = db.execute(
                "SELECT id, title, created, updated, device FROM conversations WHERE person = ? "
                "ORDER BY updated DESC LIMIT ?",
                (person, limit),
            ).fetchall()
        return [dict(r) for r in rows]

    def rename_conversation(self, person: str, conversation_id: str, title: str) -> str | None:
        """Gives the conversation `title` (spaces collapsed, cut like a first question's); the
        title saved, or None when it is not this person's. ValueError for a blank title."""
        cleaned = _title(title)
        if not cleaned:
            raise ValueError("blank title")
        with self._db() as db:
            renamed = db.execute(
                "UPDATE conversations SET title = ? WHERE id = ? AND person = ?",
                (cleaned, conversation_id, person),
            ).rowcount
        return cleaned if renamed else None

    def delete_conversation(self, person: str, conversation_id: str) -> bool:
        """Deletes the conversation and its messages; False when it is not this person's. No
        byte of the deleted text stays in the files (`erasing`)."""
        with self.erasing() as db:
            deleted = db.execute(
                "DELETE FROM conversations WHERE id = ? AND person = ?",
                (conversation_id, person),
            ).rowcount
        return deleted == 1

    def owns(self, person: str, conversation_id: str) -> bool:
        with self._db() as db:
            row = db.execute(
                "SELECT 1 FROM conversations WHERE id = ? AND person = ?",
                (conversation_id, person),
            ).fetchone()
        return row is not None

    def conversation(self, person: str, conversation_id: str) -> dict[str, Any] | None:
        """Its title and messages (each with its sources), or None when it is not this person's."""
        with self._db() as db:
            head = db.execute(
                "SELECT id, title, updated FROM conversations WHERE id = ? AND person = ?",
                (conversation_id, person),
            ).fetchone()
            if head is None:
                return None
            rows = db.execute(  # an answer being written is followed live, not read from here
                "SELECT role, content, sources, created, model, memories, left_out FROM messages "
                "WHERE conversation_id = ? AND role != ? ORDER BY id",
                (conversation_id, WRITING),
            ).fetchall()
        messages = [
            {**dict(r), "sources": json.loads(r["sources"]), "memories": json.loads(r["memories"])}
            for r in rows
        ]
        return {**dict(head), "messages": messages}

    def history(self, person: str, conversation_id: str) -> list[dict[str, Any]]:
        """What the model saw so far in this conversation (the loop's `TurnEnd.messages`)."""
        with self._db() as db:
            row = db.execute(
                "SELECT history FROM conversations WHERE id = ? AND person = ?",
                (conversation_id, person),
            ).fetchone()
        return json.loads(row["history"]) if row else []

    # ---------------------------------------------------------------- answers
    def start_answer(
        self, person: str, conversation_id: str | None, question: str, *, resume: bool = False
    ) -> tuple[str, int]:
        """Saves a question with the answer that will follow it (role `writing`, empty), in a
        new conversation when `conversation_id` is None; returns the conversation and the
        answer's row. KeyError when the conversation is not this person's. `resume`: the
        question is saved already (a turn an application's tools interrupted goes on)."""
        now = time.time()
        with self._db() as db:
            if conversation_id is None:
                conversation_id = _new_conversation(db, person, question, now)
            elif not db.execute(
                "UPDATE conversations SET updated = ? WHERE id = ? AND person = ?",
                (now, conversation_id, person),
            ).rowcount:
                raise KeyError(conversation_id)
            if not resume:
                _insert_message(db, conversation_id, "user", question, now)
            return conversation_id, _insert_message(db, conversation_id, WRITING, "", now)

    def save_partial(self, texts: Mapping[int, str]) -> None:
        """The text so far of answers being written (answer row -> text), in one write."""
        with self._db() as db:
            db.executemany(
                "UPDATE messages SET content = ? WHERE id = ? AND role = ?",
                [(text, row, WRITING) for row, text in texts.items()],
            )

    def finish_answer(
        self,
        person: str,
        conversation_id: str,
        row: int,
        role: str,
        content: str,
        sources: Sequence[Mapping[str, Any]] = (),
        history: Sequence[Mapping[str, Any]] | None = None,
        model: str | None = None,
        memories: Sequence[Mapping[str, Any]] = (),
        left_out: int = 0,
    ) -> bool:
        """The answer in `row` as the page shows it from now on (`assistant` or `error`);
        `history`, when given, replaces what the model will see next turn; `model`, the model
        that wrote it; `memories`, the memories it used («Recordé»); `left_out`, the oldest turns
        the model did not see. False (and nothing changes) when it was no longer being written:
        marked as interrupted on the way out."""
        now = time.time()
        saved = None if history is None else json.dumps(list(history), ensure_ascii=False)
        with self._db() as db:
            done = db.execute(
                "UPDATE messages SET role = ?, content = ?, sources = ?, created = ?, model = ?, "
                "memories = ?, left_out = ? WHERE id = ? AND role = ? AND conversation_id IN "
                "(SELECT id FROM conversations WHERE id = ? AND person = ?)",
                (
                    role,
                    content,
                    _json(sources),
                    now,
                    model,
                    _json(memories),
                    left_out,
                    row,
                    WRITING,
                    conversation_id,
                    person,
                ),
            ).rowcount
            if done:
                db.execute(
                    "UPDATE conversations SET updated = ?, history = COALESCE(?, history) "
                    "WHERE id = ? AND person = ?",
                    (now, saved, conversation_id, person),
                )
        return bool(done)

    def mark_interrupted(self) -> int:
        """Every answer still being written becomes an answer with its text so far and the
        `INTERRUPTED` note, and the model's history gains its question and that answer (so the
        next turn sees both, user and assistant alternating). For a restart after a kill or a
        power cut, and for the answers a stopping page leaves. Returns how many."""
        now = time.time()
        with self._db() as db:
            cut = db.execute(
                "SELECT id, conversation_id, content FROM messages WHERE role = ? ORDER BY id",
                (WRITING,),
            ).fetchall()
            for answer in cut:
                question = db.execute(
                    "SELECT content FROM messages WHERE conversation_id = ? AND id < ? "
                    "AND role = 'user' ORDER BY id DESC LIMIT 1",
                    (answer["conversation_id"], answer["id"]),
                ).fetchone()
                partial = answer["content"].strip()
                text = f"{partial}\n\n{INTERRUPTED}" if partial else INTERRUPTED
                db.execute(
                    "UPDATE messages SET role = 'assistant', content = ? WHERE id = ?",
                    (text, answer["id"]),
                )
                turn = [{"role": "user", "content": question["content"] if question else ""}]
                turn.append({"role": "assistant", "content": text})
                history = db.execute(
                    "SELECT history FROM conversations WHERE id = ?", (answer["conversation_id"],)
                ).fetchone()["history"]
                db.execute(
                    "UPDATE conversations SET history = ?, updated = ? WHERE id = ?",
                    (_json([*json.loads(history), *turn]), now, answer["conversation_id"]),
                )
        return len(cut)

    # ---------------------------------------------------------------- a person's whole history
    def export(self, person: str) -> dict[str, Any]:
        with self._db() as db:
            query = "SELECT id FROM conversations WHERE person = ? ORDER BY created"
            ids = [r["id"] for r in db.execute(query, (person,))]
        found = [self.conversation(person, i) for i in ids]
        conversations = [c for c in found if c is not None]
        return {"person": person, "schema_version": SCHEMA_VERSION, "conversations": conversations}

    def delete_person(self, person: str) -> int:
        """Deletes every conversation, personal memory and sign-in of `person`, no byte of them
        left in the files (`erasing`); returns how many conversations."""
        with self.erasing() as db:
            count = db.execute("DELETE FROM conversations WHERE person = ?", (person,)).rowcount
            db.execute("DELETE FROM memories WHERE person = ?", (person,))
            db.execute("DELETE FROM memory_pauses WHERE person = ?", (person,))
            db.execute("DELETE FROM sessions WHERE person = ?", (person,))
        return count

    # ---------------------------------------------------------------- the OpenAI-compatible API
    def api_conversation(self, person: str, digest: str) -> str | None:
        """The conversation of `person` whose messages so far hash to `digest` (a client resends
        them all to continue it: `web.openai_api.digest`), or None."""
        with self._db() as db:
            row = db.execute(
                "SELECT id FROM conversations WHERE person = ? AND digest = ? "
                "ORDER BY updated DESC LIMIT 1",
                (person, digest),
            ).fetchone()
        return row["id"] if row else None

    def mark_api(self, person: str, conversation_id: str, device: str, digest: str) -> None:
        """The conversation came from the device `device`; `digest`, of what its client will
        resend to continue it."""
        with self._db() as db:
            db.execute(
                "UPDATE conversations SET device = ?, digest = ? WHERE id = ? AND person = ?",
                (device, digest, conversation_id, person),
            )


def _new_conversation(db: sqlite3.Connection, person: str, first_question: str, now: float) -> str:
    conversation_id = secrets.token_hex(16)
    title = _title(first_question) or "Conversación"
    db.execute(
        "INSERT INTO conversations (id, person, title, created, updated) VALUES (?, ?, ?, ?, ?)",
        (conversation_id, person, title, now, now),
    )
    return conversation_id


def _title(text: str) -> str:
    return " ".join(text.split())[:TITLE_CHARS]


def _insert_message(
    db: sqlite3.Connection, conversation_id: str, role: str, content: str, now: float
) -> int:
    cursor = db.execute(
        "INSERT INTO messages (conversation_id, role, content, created) VALUES (?, ?, ?, ?)",
        (conversation_id, role, content, now),
    )
    assert cursor.lastrowid is not None
    return cursor.lastrowid


def _json(value: Any) -> str:
    return json.dumps(list(value), ensure_ascii=False)


def migrate(db: sqlite3.Connection) -> None:
    """Brings `db` to `SCHEMA_VERSION`."""
    found: int = db.execute("PRAGMA user_version").fetchone()[0]
    if found > SCHEMA_VERSION:
        raise StoreError(
            f"el historial tiene la versión de esquema {found}, más nueva que la que conoce "
            f"este Enlace ({SCHEMA_VERSION}): actualiza enlace-agent"
        )
    db.execute("PRAGMA journal_mode = WAL")
    for version in range(found, SCHEMA_VERSION):
        db.executescript(
            f"BEGIN; {MIGRATIONS[version]} PRAGMA user_version = {version + 1}; COMMIT;"
        )


# ---------------------------------------------------------------- private files
def make_private(path: Path, others: Sequence[Path], *, private_folder: bool) -> None:
    """The history's folder 0700 and file 0600 whatever the umask (SQLite gives its -wal and -shm
    the file's mode); looser ones left by an older Enlace are tightened, with `others` beside it.
    An existing folder only when `private_folder`."""
    folder = path.parent
    if not folder.is_dir():
        files.private_folder(folder)
    elif private_folder:
        _tighten(folder, files.PRIVATE_DIR)
    with suppress(FileExistsError):
        files.open_new(path).close()
    for file in (path, Path(f"{path}-wal"), Path(f"{path}-shm"), *others):
        if file.exists():
            _tighten(file, files.PRIVATE_FILE)


def _tighten(path: Path, mode: int) -> None:
    if path.stat().st_mode & 0o777 & ~mode:
        files.set_mode(path, mode)


def read_or_make_key(path: Path) -> bytes:
    """The server's secret: 32 random bytes (hex) in a 0600 file, made when missing."""
    try:
        with files.open_new(path) as out:
            out.write((secrets.token_hex(32) + "\n").encode("ascii"))
    except FileExistsError:
        pass
    except OSError as exc:  # not made, or made and not written: no empty key left behind
        path.unlink(missing_ok=True)
        if out_of_space(exc):
            raise DiskFull(path.parent, FREE_SPACE) from None
        raise StoreError(
            f"no se puede crear la clave de las sesiones {path}: {os_reason(exc)}"
        ) from None
    try:
        text = path.read_text(encoding="ascii").strip()
    except UnicodeDecodeError:
        text = ""  # damaged: said just below
    except OSError as exc:
        raise StoreError(
            f"no se puede leer la clave de las sesiones {path}: {os_reason(exc)}"
        ) from None
    if len(text) != 64 or not all(c in "0123456789abcdef" for c in text):
        raise StoreError(
            f"la clave de las sesiones {path} está dañada: bórrala (todos tendrán que volver a "
            "entrar)"
        )
    return text.encode()
