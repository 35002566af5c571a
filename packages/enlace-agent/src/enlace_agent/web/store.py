"""The histories of the web page: one SQLite file, a versioned schema, one person's rows never
reachable from another's queries (every query names the person).

The schema version is SQLite's `user_version`; `MIGRATIONS[i]` takes a file from version i to i+1,
each in its own transaction, so an old file is brought up to date when the page starts and a file
from a newer version of Enlace is refused rather than misread.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
import sqlite3
import time
from collections.abc import Callable, Generator, Mapping, Sequence
from contextlib import closing, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from enlace_agent.settings import data_dir

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
)
SCHEMA_VERSION = len(MIGRATIONS)
TITLE_CHARS = 60


class StoreError(RuntimeError):
    """The history file cannot be used (unreadable, or written by a newer Enlace)."""


@dataclass(frozen=True)
class Session:
    person: str
    csrf: str
    fingerprint: str  # of the token the person signed in with (`Store.fingerprint`)


def default_path(environ: Mapping[str, str] | None = None) -> Path:
    return data_dir(environ) / "web.sqlite3"


def _hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


class Store:
    def __init__(
        self,
        path: Path,
        before_migration: Callable[[Path, int], None] | None = None,
        *,
        private_folder: bool = False,
    ) -> None:
        """`before_migration(path, found)` runs before an existing file at schema `found` is
        migrated (the snapshot hook). `private_folder`: the folder is Enlace's own and is made
        0700 even when it exists (one named in the configuration is only created 0700)."""
        self.path = path
        self.key_path = Path(f"{path}.key")  # the server's secret for session fingerprints
        self._key: bytes | None = None
        try:
            make_private(path, (self.key_path,), private_folder=private_folder)
        except OSError as exc:
            raise StoreError(f"cannot make the history file {path} private: {exc}") from None
        try:
            if before_migration is not None and path.is_file():
                with self._db() as db:
                    found: int = db.execute("PRAGMA user_version").fetchone()[0]
                if 0 < found < SCHEMA_VERSION:
                    before_migration(path, found)
            with self._db() as db:
                migrate(db)
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"cannot use the history file {path}: {exc}") from None

    @contextmanager
    def _db(self) -> Generator[sqlite3.Connection]:
        with closing(sqlite3.connect(self.path, timeout=30)) as db:
            db.row_factory = sqlite3.Row
            db.execute("PRAGMA foreign_keys = ON")
            with db:
                yield db

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
        conversation_id = secrets.token_hex(16)
        title = " ".join(first_question.split())[:TITLE_CHARS] or "Conversación"
        now = time.time()
        with self._db() as db:
            db.execute(
                "INSERT INTO conversations (id, person, title, created, updated) "
                "VALUES (?, ?, ?, ?, ?)",
                (conversation_id, person, title, now, now),
            )
        return conversation_id

    def conversations(self, person: str, limit: int) -> list[dict[str, Any]]:
        with self._db() as db:
            rows = db.execute(
                "SELECT id, title, updated FROM conversations WHERE person = ? "
                "ORDER BY updated DESC LIMIT ?",
                (person, limit),
            ).fetchall()
        return [dict(r) for r in rows]

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
            rows = db.execute(
                "SELECT role, content, sources, created FROM messages "
                "WHERE conversation_id = ? ORDER BY id",
                (conversation_id,),
            ).fetchall()
        messages = [{**dict(r), "sources": json.loads(r["sources"])} for r in rows]
        return {**dict(head), "messages": messages}

    def history(self, person: str, conversation_id: str) -> list[dict[str, Any]]:
        """What the model saw so far in this conversation (the loop's `TurnEnd.messages`)."""
        with self._db() as db:
            row = db.execute(
                "SELECT history FROM conversations WHERE id = ? AND person = ?",
                (conversation_id, person),
            ).fetchone()
        return json.loads(row["history"]) if row else []

    def add_message(
        self,
        person: str,
        conversation_id: str,
        role: str,
        content: str,
        sources: Sequence[Mapping[str, Any]] = (),
        history: Sequence[Mapping[str, Any]] | None = None,
    ) -> None:
        """A message shown on the page (`user`, `assistant` or `error`); `history`, when given,
        replaces what the model will see next turn."""
        now = time.time()
        saved = None if history is None else json.dumps(list(history), ensure_ascii=False)
        with self._db() as db:
            updated = db.execute(
                "UPDATE conversations SET updated = ?, history = COALESCE(?, history) "
                "WHERE id = ? AND person = ?",
                (now, saved, conversation_id, person),
            ).rowcount
            if updated != 1:
                raise KeyError(conversation_id)
            db.execute(
                "INSERT INTO messages (conversation_id, role, content, sources, created) "
                "VALUES (?, ?, ?, ?, ?)",
                (
                    conversation_id,
                    role,
                    content,
                    json.dumps(list(sources), ensure_ascii=False),
                    now,
                ),
            )

    # ---------------------------------------------------------------- a person's whole history
    def export(self, person: str) -> dict[str, Any]:
        with self._db() as db:
            query = "SELECT id FROM conversations WHERE person = ? ORDER BY created"
            ids = [r["id"] for r in db.execute(query, (person,))]
        found = [self.conversation(person, i) for i in ids]
        conversations = [c for c in found if c is not None]
        return {"person": person, "schema_version": SCHEMA_VERSION, "conversations": conversations}

    def delete_person(self, person: str) -> int:
        """Deletes every conversation and sign-in of `person`; returns how many conversations."""
        with self._db() as db:
            count = db.execute("DELETE FROM conversations WHERE person = ?", (person,)).rowcount
        self.end_sessions(person)
        with closing(sqlite3.connect(self.path)) as db:
            db.execute("VACUUM")  # deleted text does not linger in free pages
        return count


def migrate(db: sqlite3.Connection) -> None:
    """Brings `db` to `SCHEMA_VERSION`."""
    found: int = db.execute("PRAGMA user_version").fetchone()[0]
    if found > SCHEMA_VERSION:
        raise StoreError(
            f"the history file has schema version {found}, newer than this Enlace knows "
            f"({SCHEMA_VERSION}): update enlace-agent"
        )
    db.execute("PRAGMA journal_mode = WAL")
    for version in range(found, SCHEMA_VERSION):
        db.executescript(
            f"BEGIN; {MIGRATIONS[version]} PRAGMA user_version = {version + 1}; COMMIT;"
        )


# ---------------------------------------------------------------- private files
PRIVATE_DIR, PRIVATE_FILE = 0o700, 0o600


def make_private(path: Path, others: Sequence[Path], *, private_folder: bool) -> None:
    """The history's folder 0700 and file 0600 whatever the umask (SQLite gives its -wal and -shm
    the file's mode); looser ones left by an older Enlace are tightened, with `others` beside it.
    An existing folder only when `private_folder`."""
    folder = path.parent
    if not folder.is_dir():
        folder.mkdir(parents=True, mode=PRIVATE_DIR)
        folder.chmod(PRIVATE_DIR)
    elif private_folder:
        _tighten(folder, PRIVATE_DIR)
    try:
        os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, PRIVATE_FILE))
        path.chmod(PRIVATE_FILE)
    except FileExistsError:
        pass
    for file in (path, Path(f"{path}-wal"), Path(f"{path}-shm"), *others):
        if file.exists():
            _tighten(file, PRIVATE_FILE)


def _tighten(path: Path, mode: int) -> None:
    if path.stat().st_mode & 0o777 & ~mode:
        path.chmod(mode)


def read_or_make_key(path: Path) -> bytes:
    """The server's secret: 32 random bytes (hex) in a 0600 file, made when missing."""
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, PRIVATE_FILE)
    except FileExistsError:
        pass
    except OSError as exc:
        raise StoreError(f"cannot create the session key {path}: {exc}") from None
    else:
        with os.fdopen(fd, "w", encoding="ascii") as out:
            os.fchmod(fd, PRIVATE_FILE)
            out.write(secrets.token_hex(32) + "\n")
    try:
        text = path.read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise StoreError(f"cannot read the session key {path}: {exc}") from None
    if len(text) != 64 or not all(c in "0123456789abcdef" for c in text):
        raise StoreError(f"the session key {path} is damaged: delete it (everyone signs in again)")
    return text.encode()
