"""The household's shopping list: one list for the whole family, in the household's database
(table `shopping_list`, migration 6), written by anyone (the page, `enlace-assistant lista`, the
model's `lista_de_la_compra`). It is the household's, not a person's: deleting a person's history
or restoring one person leaves it.

An item is its words on one line without a leading article («los huevos» is `huevos`); two items
are the same when their words are, without case or accents (`key`), so «Leche» added twice is one
item. Ticked items stay until someone clears them.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, Literal

from enlace_config.contracts import SHOPPING_LIST_PROMPT, SHOPPING_LIST_TOOL_NAME
from pydantic import BaseModel, ConfigDict, Field

from enlace_agent.memory.store import plain
from enlace_agent.shared import one_line
from enlace_agent.tools.protocol import (
    BadArguments,
    ToolEntry,
    ToolResult,
    TurnContext,
    function_spec,
    parse_arguments,
)

if TYPE_CHECKING:
    from enlace_agent.household import Store

ITEM_CHARS = 80  # an item is a few words («leche sin lactosa»), never a paragraph
ITEMS_PER_CALL = 20
ARTICLES = frozenset({"el", "la", "los", "las", "un", "una", "unos", "unas"})


class ItemRefused(ValueError):
    """An item that cannot be written; the message is Spanish, for the person."""


@dataclass(frozen=True)
class Item:
    id: int
    item: str
    added_by: str
    done: bool
    created: float
    updated: float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def cleaned(text: str) -> str:
    """`text` as an item: one line, no leading article, no final full stop."""
    words = one_line(text).strip(" .,;").split(" ")
    if len(words) > 1 and words[0].casefold() in ARTICLES:
        words = words[1:]
    return " ".join(words)


def _key(item: str) -> str:
    return " ".join(plain(item).split())


def _item(row: sqlite3.Row) -> Item:
    return Item(row["id"], row["item"], row["added_by"], bool(row["done"]), row["created"],
                row["updated"])  # fmt: skip


class ShoppingList:
    """The list in the household's database (`store`)."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def items(self) -> list[Item]:
        """Every item, the ones still to buy first, each group oldest first."""
        with self.store.transaction() as db:
            rows = db.execute("SELECT * FROM shopping_list ORDER BY done, id").fetchall()
        return [_item(r) for r in rows]

    def add(self, person: str, texts: Sequence[str]) -> list[tuple[Item, bool]]:
        """Each text as an item (True: new; False: it was there, now unticked)."""
        items = [cleaned(t) for t in texts]
        for item in items:
            if not item:
                raise ItemRefused("escribe qué hay que comprar.")
            if len(item) > ITEM_CHARS:
                raise ItemRefused(f"«{item[:20]}…» es demasiado largo (máximo {ITEM_CHARS}).")
        now, done = time.time(), list[tuple[Item, bool]]()
        with self.store.transaction() as db:
            for item in items:
                new = db.execute(
                    "INSERT INTO shopping_list (item, key, added_by, created, updated) "
                    "VALUES (?, ?, ?, ?, ?) ON CONFLICT(key) DO NOTHING",
                    (item, _key(item), person, now, now),
                ).rowcount
                if not new:
                    db.execute(
                        "UPDATE shopping_list SET done = 0, updated = ? WHERE key = ?",
                        (now, _key(item)),
                    )
                row = db.execute(
                    "SELECT * FROM shopping_list WHERE key = ?", (_key(item),)
                ).fetchone()
                done.append((_item(row), bool(new)))
        return done

    def remove(self, texts: Sequence[str]) -> tuple[list[Item], list[str]]:
        """The items named by `texts` leave the list; returns them and the texts not found."""
        removed: list[Item] = []
        missing: list[str] = []
        with self.store.transaction() as db:
            for text in texts:
                row = db.execute(
                    "SELECT * FROM shopping_list WHERE key = ?", (_key(cleaned(text)),)
                ).fetchone()
                if row is None:
                    missing.append(cleaned(text))
                    continue
                db.execute("DELETE FROM shopping_list WHERE id = ?", (row["id"],))
                removed.append(_item(row))
        return removed, missing

    def tick(self, item_id: int, done: bool) -> Item | None:
        """Ticks (or unticks) one item; None when there is no such item."""
        with self.store.transaction() as db:
            changed = db.execute(
                "UPDATE shopping_list SET done = ?, updated = ? WHERE id = ?",
                (int(done), time.time(), item_id),
            ).rowcount
            row = db.execute("SELECT * FROM shopping_list WHERE id = ?", (item_id,)).fetchone()
        return _item(row) if changed and row is not None else None

    def find(self, text: str) -> Item | None:
        with self.store.transaction() as db:
            row = db.execute(
                "SELECT * FROM shopping_list WHERE key = ?", (_key(cleaned(text)),)
            ).fetchone()
        return _item(row) if row is not None else None

    def clear(self) -> int:
        """Removes the ticked items; returns how many."""
        with self.store.transaction() as db:
            return db.execute("DELETE FROM shopping_list WHERE done = 1").rowcount


def listing(items: Sequence[Item]) -> str:
    """The list in one sentence or two, as the model reads it and the terminal prints it."""
    pending = [i.item for i in items if not i.done]
    bought = [i.item for i in items if i.done]
    if not items:
        return "La lista de la compra está vacía."
    parts = [f"En la lista: {', '.join(pending)}." if pending else "No queda nada por comprar."]
    if bought:
        parts.append(f"Ya comprado: {', '.join(bought)}.")
    return " ".join(parts)


# ---------------------------------------------------------------- the tool
Action = Literal["añadir", "quitar", "ver"]


# Short on purpose: every byte of the spec is in a small model's context with every question (an
# item's length is checked by `ShoppingList.add`, their number by the tool; a docstring here would
# become the schema's description).
class ShoppingArguments(BaseModel):
    model_config = ConfigDict(extra="forbid")

    accion: Action
    cosas: list[str] = Field(default=[], description="Qué añadir o quitar.")


SHOPPING_SPEC = function_spec(
    SHOPPING_LIST_TOOL_NAME, "La lista de la compra de la familia.", ShoppingArguments
)


class ShoppingListTool:
    spec = SHOPPING_SPEC

    def __init__(self, shopping: ShoppingList, person: str) -> None:
        self.shopping = shopping
        self.person = person

    def run(self, arguments: str | Mapping[str, Any]) -> ToolResult:
        try:
            args = parse_arguments(ShoppingArguments, arguments)
            if args.accion != "ver" and not args.cosas:
                raise BadArguments("falta «cosas».")
            if len(args.cosas) > ITEMS_PER_CALL:
                raise BadArguments(f"como mucho {ITEMS_PER_CALL} cosas de una vez.")
            if args.accion == "añadir":
                return self._added(self.shopping.add(self.person, args.cosas))
        except BadArguments as exc:
            return ToolResult(f"Error: {exc}", error=True)
        except ItemRefused as exc:
            return ToolResult(f"Error: {exc}", error=True, notice=str(exc))
        if args.accion == "quitar":
            removed, missing = self.shopping.remove(args.cosas)
            parts = (
                [f"Quitado de la lista: {', '.join(i.item for i in removed)}."] if removed else []
            )
            if missing:
                parts.append(f"No estaba en la lista: {', '.join(missing)}.")
            notice = f"Quitado de la lista de la compra: {', '.join(i.item for i in removed)}"
            return ToolResult(" ".join(parts), notice=notice if removed else None)
        return ToolResult(listing(self.shopping.items()))

    def _added(self, added: Sequence[tuple[Item, bool]]) -> ToolResult:
        new = [i.item for i, is_new in added if is_new]
        there = [i.item for i, is_new in added if not is_new]
        parts = [f"Añadido a la lista: {', '.join(new)}."] if new else []
        if there:
            parts.append(f"Ya estaba en la lista: {', '.join(there)}.")
        names = ", ".join(i.item for i, _ in added)
        return ToolResult(" ".join(parts), notice=f"En la lista de la compra: {names}")


def _list_of(context: TurnContext) -> ShoppingListTool:
    if context.household is None:  # the registry makes it only with the household's database
        raise ValueError("the shopping list needs the household's database")
    return ShoppingListTool(ShoppingList(context.household), context.person or "Enlace")


# Its line in the registry (`enlace_agent.tools`).
SHOPPING_LIST = ToolEntry(
    SHOPPING_LIST_TOOL_NAME,
    SHOPPING_SPEC,
    status="Mirando la lista de la compra…",
    failed="No se ha podido cambiar la lista de la compra.",
    make=_list_of,
    prompt=SHOPPING_LIST_PROMPT,
    needs="household",
)
