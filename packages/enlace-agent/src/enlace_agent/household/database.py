"""The household's database: one SQLite file (`web.sqlite3`, the name it has always had) with the
histories, the memories, the sign-ins and the shopping list; a versioned schema; one person's rows
never reachable from another's queries (every query names the person). No web framework here: the
page, memory, snapshots, `doctor` and the CLI all open it.

The schema version is SQLite's `user_version`; `MIGRATIONS[i]` takes a file from version i to i+1,
each in its own transaction, so an old file is brought up to date when the page starts and a file
from a newer version of Enlace is refused rather than misread.
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
from enlace_agent.settings import os_reason
from enlace_agent.shared import DiskFull, out_of_space

log = logging.getLogger("enlace_agent.household")

MIGRATIONS: tuple[str, ...] = (
    # 1: conversations and their messages.
    """
    CREATE TABLE conversations (
        id TEXT PRIMARY KEY,
        person TEXT NOT NULL,
        title TEXT NOT NULL,
        created REAL NOT NULL,
        updated REAL NOT NULL,
        history TEXT NOT NULL DEFAULT '[]'
    );
    CREATE TABLE messages (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        conversation_id TEXT NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
        role TEXT NOT NULL,
        content TEXT NOT NULL,
        sources TEXT NOT NULL DEFAULT '[]',
        created REAL NOT NULL
    );
    CREATE INDEX conversations_by_person ON conversations(person, updated);
    CREATE INDEX messages_by_conversation ON messages(conversation_id, id);
    """,
    # 2: sign-ins that survive a restart (only a hash of the cookie is kept).
    """
    CREATE TABLE sessions (
        token_hash TEXT PRIMARY KEY,
        person TEXT NOT NULL,
        csrf TEXT NOT NULL,
        expires REAL NOT NULL
    );
    CREATE INDEX sessions_by_person ON sessions(person);
    """,
    # 3: each sign-in tied to the person's token by a keyed fingerprint; older ones end.
    """
    DELETE FROM sessions;
    ALTER TABLE sessions ADD COLUMN fingerprint TEXT NOT NULL DEFAULT '';
    """,
    # 4: which model (and installed version) wrote each answer; NULL for older answers.
    """
    ALTER TABLE messages ADD COLUMN model TEXT;
    """,
    # 5: what Enlace remembers (enlace_agent.memory): a person's memories (`person`) and the
    # household's (`person` NULL), where each came from, a full-text index over them that
    # matches without accents, the people who paused their memory, and the memories each answer
    # used.
    """
    CREATE TABLE memories (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        person TEXT,
        text TEXT NOT NULL,
        author TEXT NOT NULL,
        source TEXT NOT NULL,
        conversation_id TEXT REFERENCES conversations(id) ON DELETE SET NULL,
        created REAL NOT NULL,
        updated REAL NOT NULL,
        last_used REAL
    );
    CREATE INDEX memories_by_person ON memories(person, updated);
    CREATE VIRTUAL TABLE memories_fts USING fts5(
        text, content='memories', content_rowid='id', tokenize='unicode61 remove_diacritics 2'
    );
    CREATE TRIGGER memories_added AFTER INSERT ON memories BEGIN
        INSERT INTO memories_fts(rowid, text) VALUES (new.id, new.text);
    END;
    CREATE TRIGGER memories_deleted AFTER DELETE ON memories BEGIN
        INSERT INTO memories_fts(memories_fts, rowid, text) VALUES ('delete', old.id, old.text);
    END;
    CREATE TRIGGER memories_changed AFTER UPDATE OF text ON memories BEGIN
        INSERT INTO memories_fts(memories_fts, rowid, text) VALUES ('delete', old.id, old.text);
        INSERT INTO memories_fts(rowid, text) VALUES (new.id, new.text);
    END;
    CREATE TABLE memory_pauses (person TEXT PRIMARY KEY);
    ALTER TABLE messages ADD COLUMN memories TEXT NOT NULL DEFAULT '[]';
    """,
    # 6: the household's shopping list (enlace_agent.tools.shopping): one row an item, `key` its
    # words without accents or case (one «leche» however it is written), who added it, ticked or
    # not. No `person` column: it is the household's (a person's restore and deletion leave it).
    """
    CREATE TABLE shopping_list (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        item TEXT NOT NULL,
        key TEXT NOT NULL UNIQUE,
        added_by TEXT NOT NULL,
        done INTEGER NOT NULL DEFAULT 0,
        created REAL NOT NULL,
        updated REAL NOT NULL
    );
    """,
    # 7: who last changed a memory (`updated` says when; NULL while it is as its author wrote it),
    # and an index that finds a memory already there by its text (an import of thousands).
    """
    ALTER TABLE memories ADD COLUMN changed_by TEXT;
    CREATE INDEX memories_by_text ON memories(text, person);
    """,
    # 8: the bearer tokens of the OpenAI-compatible endpoint (enlace_agent.household.tokens), one
    # per person's device or the household's (`holder` NULL), kept only as a hash; revoked ones
    # stay (revoked set) so a list says when. `holder`, not `person`: a person's restore never
    # brings back a token revoked since. Conversations say which device they came from and the
    # digest of what a client will resend to continue them.
    """
    CREATE TABLE api_tokens (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        token_hash TEXT NOT NULL UNIQUE,
        name TEXT NOT NULL,
        holder TEXT,
        voice INTEGER NOT NULL DEFAULT 0,
        created REAL NOT NULL,
        revoked REAL,
        last_used REAL
    );
    ALTER TABLE conversations ADD COLUMN device TEXT;
    ALTER TABLE conversations ADD COLUMN digest TEXT;
    CREATE INDEX conversations_by_digest ON conversations(person, digest);
    """,
)
SCHEMA_VERSION = len(MIGRATIONS)
# Never archived nor restored (a restore keeps the live rows): sign-ins (hashes of cookies) and
# the API's keys (a restored old snapshot must never bring back a key revoked since).
SECRET_TABLES = ("sessions", "api_tokens")
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
                "SELECT role, content, sources, created, model, memories FROM messages "
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
    ) -> bool:
        """The answer in `row` as the page shows it from now on (`assistant` or `error`);
        `history`, when given, replaces what the model will see next turn; `model`, the model
        that wrote it; `memories`, the memories it used («Recordé»). False (and nothing changes)
        when it was no longer being written: marked as interrupted on the way out."""
        now = time.time()
        saved = None if history is None else json.dumps(list(history), ensure_ascii=False)
        with self._db() as db:
            done = db.execute(
                "UPDATE messages SET role = ?, content = ?, sources = ?, created = ?, model = ?, "
                "memories = ? WHERE id = ? AND role = ? AND conversation_id IN "
                "(SELECT id FROM conversations WHERE id = ? AND person = ?)",
                (
                    role,
                    content,
                    _json(sources),
                    now,
                    model,
                    _json(memories),
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


# ---------------------------------------------------------------- what snapshots read of the file
def read_only_uri(database: Path) -> str:
    """The URI that opens `database` read-only (any character in the path is safe in it)."""
    return f"{database.resolve().as_uri()}?mode=ro"


def has_table(db: sqlite3.Connection, table: str, schema: str = "main") -> bool:
    """Whether `schema` (an attached file's name) has `table`."""
    query = f"SELECT 1 FROM {schema}.sqlite_master WHERE type = 'table' AND name = ?"
    return db.execute(query, (table,)).fetchone() is not None


def contents(database: Path) -> dict[str, Any]:
    """What a history file holds, as a snapshot's manifest and `snapshot list` tell it: the
    people with conversations, how many each, messages and memories."""
    with closing(sqlite3.connect(read_only_uri(database), uri=True)) as db:
        if not has_table(db, "conversations"):
            return {"people": [], "conversations": {}, "messages": 0}
        per_person = dict(
            db.execute(
                "SELECT person, COUNT(*) FROM conversations GROUP BY person ORDER BY person"
            ).fetchall()
        )
        messages = db.execute("SELECT COUNT(*) FROM messages").fetchone()[0]
        memories = (
            db.execute("SELECT COUNT(*) FROM memories").fetchone()[0]
            if has_table(db, "memories")
            else 0
        )
    return {
        "people": sorted(per_person),
        "conversations": per_person,
        "messages": messages,
        "memories": memories,
    }


def person_rows(db: sqlite3.Connection, person: str) -> int:
    """The person's conversations and personal memories in a (migrated) copy."""
    query = (
        "SELECT (SELECT COUNT(*) FROM conversations WHERE person = ?) + "
        "(SELECT COUNT(*) FROM memories WHERE person = ?)"
    )
    return db.execute(query, (person, person)).fetchone()[0]


def person_tables(db: sqlite3.Connection) -> list[tuple[str, str]]:
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


def people(db: sqlite3.Connection, schema: str = "main") -> set[str]:
    """Everyone with a conversation or a personal memory in `schema` (an attached file's name)."""
    query = f"SELECT person FROM {schema}.conversations"
    if has_table(db, "memories", schema):
        query += f" UNION SELECT person FROM {schema}.memories WHERE person IS NOT NULL"
    return {r[0] for r in db.execute(query)} if has_table(db, "conversations", schema) else set()


def keep_counters(db: sqlite3.Connection, live: str) -> None:
    """Row counters (`sqlite_sequence`) in `db` raised to the live file's (attached as `live`)
    before `db` replaces it: an id handed out before the restore is never handed out again, so
    the undo snapshot's rows never clash with rows written after the restore."""
    if not has_table(db, "sqlite_sequence") or not has_table(db, "sqlite_sequence", live):
        return
    db.execute(
        f"UPDATE main.sqlite_sequence SET seq = MAX(seq, (SELECT seq FROM {live}.sqlite_sequence "
        "AS l WHERE l.name = main.sqlite_sequence.name)) WHERE name IN "
        f"(SELECT name FROM {live}.sqlite_sequence)"
    )


# SQLite's own statistics tables (ANALYZE, `PRAGMA optimize`): data for the planner, never run.
STATISTICS = frozenset({"sqlite_stat1", "sqlite_stat2", "sqlite_stat3", "sqlite_stat4"})
# The tables an FTS5 table keeps its index in, made by SQLite's own code (which ones and their
# text may differ between SQLite versions): left out of the comparison; they hold data, never SQL.
FTS_SHADOWS = ("data", "idx", "content", "docsize", "config")
KIND_NAMES = {
    "table": "la tabla",
    "index": "el índice",
    "trigger": "el disparador",
    "view": "la vista",
}


def _schema_objects(db: sqlite3.Connection) -> dict[tuple[str, str], str]:
    """(type, name) -> its SQL with whitespace collapsed ("" for SQLite's automatic indexes)."""
    found: dict[tuple[str, str], str] = {}
    for kind, name, sql in db.execute("SELECT type, name, sql FROM main.sqlite_master"):
        if kind == "table" and name in STATISTICS:
            continue
        found[(kind, name)] = " ".join((sql or "").split())
    return found


def foreign_schema(db: sqlite3.Connection) -> list[str]:
    """What `db` holds that Enlace's migrations do not make at its schema version (tables,
    indexes, triggers, views), what it lacks, and what it has changed, compared with a fresh
    database of that version; each as the family reads it («el disparador «x»»). Empty: exactly
    Enlace's schema. A trigger or a view is SQL that would run inside the live history."""
    version: int = db.execute("PRAGMA user_version").fetchone()[0]
    with closing(sqlite3.connect(":memory:")) as fresh:
        for script in MIGRATIONS[: min(version, SCHEMA_VERSION)]:
            fresh.executescript(script)
        expected = _schema_objects(fresh)
    found = _schema_objects(db)
    shadows = {
        ("table", f"{name}_{suffix}")
        for (kind, name), sql in expected.items()
        if kind == "table" and sql.upper().startswith("CREATE VIRTUAL TABLE")
        for suffix in FTS_SHADOWS
    }

    def said(key: tuple[str, str]) -> str:
        return f"{KIND_NAMES.get(key[0], key[0])} «{key[1]}»"

    found_keys, expected_keys = found.keys() - shadows, expected.keys() - shadows
    extra = [f"{said(k)} de más" for k in sorted(found_keys - expected_keys)]
    missing = [f"falta {said(k)}" for k in sorted(expected_keys - found_keys)]
    changed = [
        f"{said(k)} cambiado" for k in sorted(found_keys & expected_keys) if found[k] != expected[k]
    ]
    return extra + changed + missing
