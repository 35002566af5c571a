"""The memories, kept in the history file (`enlace_agent.household.database`, schema 5): each one a short
statement owned by one person or by the household (`person` NULL), with who wrote it, how
(`page`, `cli`, `assistant`, `import`), the conversation it came from (shown only to the person
whose conversation it is), when it was created and last used, and who changed it last and when.

Every query names the person who acts and sees only their own memories and the household's: a
person never reads, finds, changes or deletes another's personal memory, by id or by a search.
A paused person's memory is neither read nor written (deleting stays possible). Relevance is
SQLite's FTS5 ranking (bm25) over words without accents (`unicode61 remove_diacritics 2`).
"""

from __future__ import annotations

import itertools
import re
import sqlite3
import time
import unicodedata
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, Literal

from enlace_config.schema.agent import MemoryConfig

from enlace_agent.memory.secrets import refusal, secret_kind
from enlace_agent.shared import one_line

if TYPE_CHECKING:
    from enlace_agent.household.database import Store

Scope = Literal["personal", "familia"]
SCOPES: tuple[Scope, ...] = ("personal", "familia")
SOURCES = ("page", "cli", "assistant", "import")
PAUSED = (
    "La memoria de Enlace está en pausa: no se lee ni se guarda nada. Reanúdala para añadir o "
    "cambiar recuerdos."
)
# Words that say nothing about what a question is about: they never rank a memory.
STOPWORDS = frozenset(
    """
    que como cual cuales cuando cuanto cuanta cuantos cuantas donde quien quienes por para con
    sin sobre entre desde hasta los las del una uno unos unas este esta estos estas ese esa esos
    esas aquel aquella mis tus sus nuestro nuestra vuestro vuestra muy mas pero tambien porque
    ser son soy eres es esta estan estoy hay tiene tienen tengo hace hacer puede puedes puedo
    algo nada todo todos todas otra otro otros otras ahora hoy ayer manana bien mal asi aqui
    alli entonces cosa cosas sabes sabe dime decir favor gracias hola recuerda recuerdas olvida
    """.split()  # noqa: SIM905 (a paragraph of words reads better than a list)
)


class MemoryRefused(ValueError):
    """A memory that cannot be written as asked; the message is Spanish, for the person."""


@dataclass(frozen=True)
class Memory:
    id: int
    text: str
    scope: Scope
    author: str
    source: str
    conversation_id: str | None
    created: float
    updated: float
    last_used: float | None
    changed_by: str | None = None  # who last corrected it (None: as its author wrote it)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def brief(self) -> dict[str, Any]:
        """What an answer keeps of a memory it used (the page's «Recordé»)."""
        return {"id": self.id, "text": self.text, "scope": self.scope}


def plain(word: str) -> str:
    """`word` lower case and without accents (as the full-text index reads it)."""
    decomposed = unicodedata.normalize("NFKD", word.casefold())
    return "".join(c for c in decomposed if not unicodedata.combining(c))


def _memory(row: sqlite3.Row, viewer: str) -> Memory:
    """The memory as `viewer` sees it: the conversation it came from only when it is theirs (a
    memory is saved from its author's own conversation: `MemoryStore.add`)."""
    return Memory(
        row["id"],
        row["text"],
        "familia" if row["person"] is None else "personal",
        row["author"],
        row["source"],
        row["conversation_id"] if row["author"] == viewer else None,
        row["created"],
        row["updated"],
        row["last_used"],
        row["changed_by"],
    )


VISIBLE = "(person IS NULL OR person = ?)"  # what `person` may see: theirs and the household's
COLUMNS = (
    "id, person, text, author, source, conversation_id, created, updated, last_used, changed_by"
)


class MemoryStore:
    """The memories of a household, in `store`'s file. `secrets`: the values of the keys the
    configuration names (`configured_secrets`), never stored."""

    def __init__(self, store: Store, config: MemoryConfig, secrets: Iterable[str] = ()) -> None:
        self.store = store
        self.config = config
        self.secrets = tuple(secrets)

    # ------------------------------------------------------------ checks
    def clean(self, text: object) -> str:
        """`text` as a memory is kept (one line), or `MemoryRefused` saying why not."""
        if not isinstance(text, str) or not (line := one_line(text)):
            raise MemoryRefused("El recuerdo está vacío: escribe qué tiene que recordar Enlace.")
        if len(line) > self.config.max_memory_chars:
            raise MemoryRefused(
                f"El recuerdo es demasiado largo ({len(line)} caracteres; como mucho "
                f"{self.config.max_memory_chars}): escríbelo más corto."
            )
        kind = secret_kind(line, self.secrets)
        if kind is not None:
            raise MemoryRefused(refusal(kind))
        return line

    def terms(self, text: str) -> list[str]:
        """The words of `text` that rank memories (plain, without stop words), in order."""
        words = (plain(w) for w in re.findall(r"\w+", text))
        found = [w for w in words if len(w) >= self.config.min_term_chars and w not in STOPWORDS]
        return list(dict.fromkeys(found))

    def _match(self, text: str) -> str | None:
        """The FTS5 query for `text`: any of its terms, each as a prefix ("hija"*)."""
        terms = self.terms(text)
        return " OR ".join(f'"{t}"*' for t in terms) if terms else None

    # ------------------------------------------------------------ pause
    def paused(self, person: str) -> bool:
        with self.store.transaction() as db:
            row = db.execute("SELECT 1 FROM memory_pauses WHERE person = ?", (person,)).fetchone()
        return row is not None

    def set_paused(self, person: str, paused: bool) -> None:
        with self.store.transaction() as db:
            if paused:
                db.execute("INSERT OR IGNORE INTO memory_pauses (person) VALUES (?)", (person,))
            else:
                db.execute("DELETE FROM memory_pauses WHERE person = ?", (person,))

    def _writable(self, db: sqlite3.Connection, person: str) -> None:
        if db.execute("SELECT 1 FROM memory_pauses WHERE person = ?", (person,)).fetchone():
            raise MemoryRefused(PAUSED)

    # ------------------------------------------------------------ reading
    def list(
        self, person: str, limit: int = -1, after: tuple[float, int] | None = None
    ) -> list[Memory]:
        """`person`'s memories and the household's, the most recently changed first: all, or
        the `limit` (-1: all) that come after the memory `after` (its `updated` and `id`: the
        last one of the page before)."""
        since = "" if after is None else "AND (updated, id) < (?, ?)"
        with self.store.transaction() as db:
            rows = db.execute(
                f"SELECT {COLUMNS} FROM memories WHERE {VISIBLE} {since} "
                "ORDER BY updated DESC, id DESC LIMIT ?",
                (person, *(after or ()), limit),
            ).fetchall()
        return [_memory(r, person) for r in rows]

    def titles(self, person: str, memories: Sequence[Memory]) -> dict[str, str]:
        """The titles of `person`'s own conversations the memories came from (another's
        conversation is not named: a household memory keeps its origin private)."""
        ids = list({m.conversation_id for m in memories if m.conversation_id})
        if not ids:
            return {}
        with self.store.transaction() as db:
            rows = db.execute(
                f"SELECT id, title FROM conversations WHERE person = ? AND id IN "
                f"({', '.join('?' * len(ids))})",
                (person, *ids),
            ).fetchall()
        return {r["id"]: r["title"] for r in rows}

    def get(self, person: str, memory_id: int) -> Memory | None:
        with self.store.transaction() as db:
            row = db.execute(
                f"SELECT {COLUMNS} FROM memories WHERE id = ? AND {VISIBLE}", (memory_id, person)
            ).fetchone()
        return _memory(row, person) if row else None

    def search(self, person: str, text: str, limit: int) -> list[Memory]:
        """The memories `person` may see that share words with `text`, the most relevant first."""
        query = self._match(text)
        if query is None:
            return []
        with self.store.transaction() as db:
            return [_memory(r, person) for r in self._ranked(db, person, query, limit)]

    def _ranked(
        self, db: sqlite3.Connection, person: str, query: str, limit: int = -1
    ) -> sqlite3.Cursor:
        return db.execute(
            f"SELECT {', '.join(f'm.{c}' for c in COLUMNS.split(', '))} FROM memories_fts f "
            f"JOIN memories m ON m.id = f.rowid WHERE memories_fts MATCH ? AND "
            f"(m.person IS NULL OR m.person = ?) ORDER BY f.rank LIMIT ?",
            (query, person, limit),
        )

    def recall(
        self, person: str, question: str, measure: Callable[[int, Memory], int]
    ) -> list[Memory]:
        """The memories for the prompt of `question`, in the order they are numbered: the ones
        the question's words rank first (bm25), then the most recently changed, while they fit
        in `prompt_budget_tokens` (`measure(number, memory)`: the characters of its line in the
        prompt; the first that does not fit ends the list) and up to `max_prompt_memories`.
        Nothing while `person` has paused their memory."""
        config = self.config
        budget = config.prompt_budget_tokens * config.chars_per_token
        chosen: list[Memory] = []
        seen: set[int] = set()
        with self.store.transaction() as db:
            if db.execute("SELECT 1 FROM memory_pauses WHERE person = ?", (person,)).fetchone():
                return []
            query = self._match(question)
            ranked = self._ranked(db, person, query) if query else ()
            recent = db.execute(
                f"SELECT {COLUMNS} FROM memories WHERE {VISIBLE} ORDER BY updated DESC, id DESC",
                (person,),
            )
            for row in itertools.chain(ranked, recent):
                if row["id"] in seen:
                    continue
                if len(chosen) >= config.max_prompt_memories:
                    break
                memory = _memory(row, person)
                cost = measure(len(chosen) + 1, memory)
                if cost > budget:
                    break
                budget -= cost
                seen.add(memory.id)
                chosen.append(memory)
        return chosen

    def used(self, person: str, recalled: Sequence[Memory], *texts: str) -> list[Memory]:
        """The `recalled` memories that share words with `texts` (the question and the answer):
        the ones the answer used. Their `last_used` becomes now."""
        query = self._match(" ".join(texts))
        if not recalled or query is None:
            return []
        ids = [m.id for m in recalled]
        with self.store.transaction() as db:
            marks = ", ".join("?" * len(ids))
            matched = [
                r[0]
                for r in db.execute(
                    f"SELECT rowid FROM memories_fts WHERE memories_fts MATCH ? AND rowid IN "
                    f"(SELECT id FROM memories WHERE id IN ({marks}) AND {VISIBLE})",
                    (query, *ids, person),
                )
            ]
            db.executemany(
                f"UPDATE memories SET last_used = ? WHERE id = ? AND {VISIBLE}",
                [(time.time(), i, person) for i in matched],
            )
        return [m for m in recalled if m.id in matched]

    # ------------------------------------------------------------ writing
    def add(
        self,
        person: str,
        text: object,
        scope: str = "personal",
        *,
        source: str,
        conversation_id: str | None = None,
    ) -> tuple[Memory, bool]:
        """A new memory written by `person` (theirs, or the household's with scope `familia`);
        returns it and whether it is new (the same text already there is not written twice).
        `MemoryRefused` for an empty, long or secret text, or while `person` has paused."""
        if scope not in SCOPES:
            raise MemoryRefused("El alcance de un recuerdo es «personal» o «familia».")
        line = self.clean(text)
        with self.store.transaction() as db:
            self._writable(db, person)
            if (
                conversation_id is not None
                and not db.execute(
                    "SELECT 1 FROM conversations WHERE id = ? AND person = ?",
                    (conversation_id, person),
                ).fetchone()
            ):
                conversation_id = None
            found, new = _insert(db, person, line, scope, source, conversation_id)
            row = db.execute(f"SELECT {COLUMNS} FROM memories WHERE id = ?", (found,)).fetchone()
        return _memory(row, person), new

    def update(self, person: str, memory_id: int, text: object) -> Memory | None:
        """The memory with its text corrected by `person` (who changed it last: `changed_by`; its
        author stays the first); None when they may not see it."""
        line = self.clean(text)
        with self.store.erasing() as db:  # the old words leave the files
            self._writable(db, person)
            changed = db.execute(
                f"UPDATE memories SET text = ?, updated = ?, changed_by = ? WHERE id = ? AND "
                f"{VISIBLE}",
                (line, time.time(), person, memory_id, person),
            ).rowcount
            _restate_references(db)
            row = db.execute(
                f"SELECT {COLUMNS} FROM memories WHERE id = ?", (memory_id,)
            ).fetchone()
        return _memory(row, person) if changed else None

    def forget(self, person: str, memory_id: int) -> Memory | None:
        """Deletes one memory `person` may see (theirs or the household's); no byte of its text
        stays in the files (`Store.erasing`), nor in the answers that used it («Recordé»). None
        when there is no such memory."""
        found = self.get(person, memory_id)
        if found is None:
            return None
        with self.store.erasing() as db:
            db.execute(f"DELETE FROM memories WHERE id = ? AND {VISIBLE}", (memory_id, person))
            _restate_references(db)
        return found

    def forget_all(self, person: str) -> int:
        """Deletes every personal memory of `person` (the household's stay); how many."""
        with self.store.erasing() as db:
            count = db.execute("DELETE FROM memories WHERE person = ?", (person,)).rowcount
            _restate_references(db)
        return count

    # ------------------------------------------------------------ export and import
    def export(self, person: str) -> list[dict[str, Any]]:
        """`person`'s memories and the household's, oldest first, one object each."""
        listed = sorted(self.list(person), key=lambda m: (m.created, m.id))
        return [{k: v for k, v in m.to_dict().items() if k != "id"} for m in listed]

    def check_import(self, person: str, lines: Sequence[str]) -> list[tuple[str, Scope]]:
        """The (text, scope) of each line of an export (JSON, one memory a line; blank lines
        skipped), or `ImportProblems` naming every bad line."""
        from enlace_agent.shared import as_object, loads_json

        good: list[tuple[str, Scope]] = []
        bad: list[str] = []
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                item = as_object(loads_json(line))
            except ValueError:
                item = None
            if item is None:
                bad.append(f"línea {number}: no es un objeto JSON")
                continue
            scope = item.get("scope", "personal")
            if scope not in SCOPES:
                bad.append(f"línea {number}: «scope» debe ser «personal» o «familia»")
                continue
            try:
                good.append((self.clean(item.get("text")), scope))
            except MemoryRefused as exc:
                bad.append(f"línea {number}: {exc}")
        if bad:
            raise ImportProblems(bad)
        return good

    def import_lines(self, person: str, lines: Sequence[str]) -> tuple[int, int]:
        """Adds every memory of an export, in one transaction (all or none: `ImportProblems`
        first); returns how many were new and how many were already there."""
        good = self.check_import(person, lines)
        with self.store.transaction() as db:
            self._writable(db, person)
            added = sum(_insert(db, person, text, scope, "import")[1] for text, scope in good)
        return added, len(good) - added


def _insert(
    db: sqlite3.Connection,
    person: str,
    line: str,
    scope: str,
    source: str,
    conversation_id: str | None = None,
) -> tuple[int, bool]:
    """The id of the memory `line` of `person` (scope `personal`) or of the household, written
    now unless the same text is already there (found by `memories_by_text`); and whether new."""
    owner = person if scope == "personal" else None
    same = db.execute(
        "SELECT id FROM memories WHERE text = ? AND person IS ?", (line, owner)
    ).fetchone()
    if same is not None:
        return same[0], False
    now = time.time()
    cursor = db.execute(
        "INSERT INTO memories (person, text, author, source, conversation_id, created, updated) "
        "VALUES (?, ?, ?, ?, ?, ?, ?)",
        (owner, line, person, source, conversation_id, now, now),
    )
    assert cursor.lastrowid is not None
    return cursor.lastrowid, True


def _restate_references(db: sqlite3.Connection) -> None:
    """The memories each answer used («Recordé», `messages.memories`) as they are now: a
    forgotten memory leaves them, a corrected one shows its new words (no old text stays)."""
    db.execute(
        """
        UPDATE messages SET memories = (
            SELECT json_group_array(json(used)) FROM (
                SELECT json_set(e.value, '$.text', m.text) AS used
                FROM json_each(messages.memories) e
                JOIN memories m ON m.id = json_extract(e.value, '$.id')
                ORDER BY e.key
            )
        )
        WHERE memories != '[]' AND EXISTS (
            SELECT 1 FROM json_each(messages.memories) e
            LEFT JOIN memories m ON m.id = json_extract(e.value, '$.id')
            WHERE m.text IS NOT json_extract(e.value, '$.text')
        )
        """
    )


class ImportProblems(ValueError):
    """An import with bad lines; `problems` names each one (Spanish)."""

    def __init__(self, problems: Sequence[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = list(problems)
