"""The household database's schema: the migrations that make it (`MIGRATIONS[i]` takes a file
from version i to i+1; SQLite's `user_version` is the version), which tables are never archived,
and what snapshots read of a file without opening a `Store`: its contents, a person's rows, the
row counters, and whether it holds exactly the schema objects these migrations make (an archive
that brings its own SQL is refused). The store that reads and writes the rows is `database.py`.
"""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any

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
    # 9: how many of the conversation's oldest turns the model did not see for each answer (no
    # room in its context), so the answer says so under it however the page opens it later.
    """
    ALTER TABLE messages ADD COLUMN left_out INTEGER NOT NULL DEFAULT 0;
    """,
)
SCHEMA_VERSION = len(MIGRATIONS)
# Never archived nor restored (a restore keeps the live rows): sign-ins (hashes of cookies) and
# the API's keys (a restored old snapshot must never bring back a key revoked since).
SECRET_TABLES = ("sessions", "api_tokens")


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
