"""The household's shopping list (issue 36): one list for the family, written through the page's
API, `enlace-assistant lista` and the model's `lista_de_la_compra`; snapshots carry it and
restore it; deleting a person's history or restoring one person leaves it (it is the
household's). The page in a real browser: test_agent_web_browser.py."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from contextlib import closing
from pathlib import Path
from typing import Any

import httpx
from enlace_config.schema.agent import AssistantConfig

from enlace_agent import snapshot as snap
from enlace_agent.assistant import Assistant, ToolCallFinished, ToolCallStarted, build_client
from enlace_agent.cli.assistant import main
from enlace_agent.household import Store
from enlace_agent.memory import MemoryStore, MemoryView
from enlace_agent.tools.shopping import ShoppingList, ShoppingListTool


def items_of(client: httpx.Client) -> list[tuple[str, bool, str]]:
    answer = client.get("/api/shopping")
    assert answer.status_code == 200, answer.text
    return [(i["item"], i["done"], i["added_by"]) for i in answer.json()["items"]]


def table(database: Path) -> list[tuple[str, int]]:
    with closing(sqlite3.connect(database)) as db:
        return db.execute("SELECT item, done FROM shopping_list ORDER BY id").fetchall()


# ---------------------------------------------------------------- the list itself
def test_the_same_item_however_written_and_articles_dropped(tmp_path: Path) -> None:
    shopping = ShoppingList(Store(tmp_path / "web.sqlite3"))
    [(milk, new)] = shopping.add("Ana", ["Leche"])
    assert new and milk.item == "Leche"
    [(again, new)] = shopping.add("Luis", ["  leche. "])
    assert not new and again.id == milk.id
    [(eggs, _)] = shopping.add("Ana", ["los huevos"])
    assert eggs.item == "huevos"
    removed, missing = shopping.remove(["Los Huevos", "pan"])
    assert [i.item for i in removed] == ["huevos"] and missing == ["pan"]


def test_the_tool_adds_reads_and_removes(tmp_path: Path) -> None:
    tool = ShoppingListTool(ShoppingList(Store(tmp_path / "web.sqlite3")), "Ana")
    added = tool.run('{"accion": "añadir", "cosas": ["leche", "huevos"]}')
    assert added.content == "Añadido a la lista: leche, huevos." and not added.error
    assert added.notice == "En la lista de la compra: leche, huevos"
    assert tool.run({"accion": "añadir", "cosas": ["Leche"]}).content == (
        "Ya estaba en la lista: leche."
    )
    assert tool.run({"accion": "ver"}).content == "En la lista: leche, huevos."
    removed = tool.run({"accion": "quitar", "cosas": ["los huevos", "pan"]})
    assert removed.content == "Quitado de la lista: huevos. No estaba en la lista: pan."
    bad = tool.run({"accion": "añadir"})
    assert bad.error and bad.content == "Error: falta «cosas»."
    assert tool.run({"accion": "comprar"}).error


# ---------------------------------------------------------------- through the model
def test_the_model_adds_through_the_tool_and_the_row_is_in_the_table(
    model_server: Any, search_tool: Any, tmp_path: Path
) -> None:
    """«Añade leche a la lista de la compra»: the scripted model calls the tool offered with a
    person's turn; the item is in the household's table, the prompt has the list's paragraph."""
    config = AssistantConfig.model_validate({"base_url": model_server.base_url})
    database = tmp_path / "web.sqlite3"
    memories = MemoryStore(Store(database), config.memory)
    assistant = Assistant(build_client(config, {}), tools=[search_tool], config=config)
    model_server.script = [
        model_server.call("lista_de_la_compra", {"accion": "añadir", "cosas": ["leche"]}),
        model_server.say("Hecho: he añadido leche a la lista."),
    ]
    view = MemoryView(memories, "Ana")
    events = list(assistant.turn([], "Añade leche a la lista de la compra", memory=view))
    started = next(e for e in events if isinstance(e, ToolCallStarted))
    assert started.to_dict()["status"] == "Mirando la lista de la compra…"
    finished = next(e for e in events if isinstance(e, ToolCallFinished))
    assert finished.ok and finished.notice == "En la lista de la compra: leche"
    assert table(database) == [("leche", 0)]
    system = model_server.bodies[0]["messages"][0]["content"]
    assert "Para la lista de la compra de la familia, usa lista_de_la_compra." in system
    # without a household (the terminal without --person) the list is not offered
    model_server.script = [model_server.say("Hola.")]
    list(assistant.turn([], "Hola"))
    assert [t["function"]["name"] for t in model_server.bodies[-1]["tools"]] == [
        "buscar_en_internet"
    ]


# ---------------------------------------------------------------- the page's API
def test_two_people_see_tick_and_clear_the_same_list(web_page: Callable[..., Any]) -> None:
    page = web_page()
    ana, bruno = page.login("Ana"), page.login("Bruno")
    assert ana.post("/api/shopping", json={"text": "leche"}).status_code == 201
    again = bruno.post("/api/shopping", json={"text": "Leche"})
    assert again.status_code == 200 and again.json()["new"] is False
    assert bruno.post("/api/shopping", json={"text": "pan"}).status_code == 201
    assert items_of(ana) == [("leche", False, "Ana"), ("pan", False, "Bruno")]
    milk = ana.get("/api/shopping").json()["items"][0]["id"]
    assert bruno.patch(f"/api/shopping/{milk}", json={"done": True}).status_code == 200
    assert items_of(ana) == [("pan", False, "Bruno"), ("leche", True, "Ana")]
    cleared = ana.post("/api/shopping/clear", json={})
    assert cleared.status_code == 200 and cleared.json() == {"removed": 1}
    assert items_of(bruno) == [("pan", False, "Bruno")]


def test_shopping_writes_are_checked_like_the_pages_others(web_page: Callable[..., Any]) -> None:
    page = web_page()
    ana = page.login("Ana")
    assert page.client().get("/api/shopping").status_code == 401  # signed in only
    blank = ana.post("/api/shopping", json={"text": "  "})
    assert blank.status_code == 400 and blank.json()["error"] == "Escribe qué hay que comprar."
    long = ana.post("/api/shopping", json={"text": "x" * 200})
    assert long.status_code == 400 and "demasiado largo" in long.json()["error"]
    no_csrf = page.login("Bruno")
    del no_csrf.headers["X-Enlace-CSRF"]
    assert no_csrf.post("/api/shopping", json={"text": "pan"}).status_code == 403
    for path in ("/api/shopping/99999", "/api/shopping/abc"):
        gone = ana.patch(path, json={"done": True})
        assert gone.status_code == 404 and gone.json()["error"] == "Eso ya no está en la lista."
    assert ana.patch("/api/shopping/1", json={"done": "sí"}).status_code == 400


# ---------------------------------------------------------------- the CLI
def test_lista_in_the_terminal(in_process: Callable[..., Any], tmp_path: Path) -> None:
    config = tmp_path / "assistant.yaml"
    database = tmp_path / "web.sqlite3"
    config.write_text(f"web:\n  database: {database}\n", encoding="utf-8")
    c = ("--config", str(config))
    added = in_process(main, "lista", "añadir", "leche", "los huevos", "pan", *c)
    assert added.returncode == 0 and "Añadido: huevos" in added.stderr
    assert in_process(main, "lista", "quitar", "huevos", *c).returncode == 0
    assert in_process(main, "lista", "tachar", "leche", *c).returncode == 0
    shown = in_process(main, "lista", *c)
    assert shown.returncode == 0 and shown.stdout == "[ ] pan\n[x] leche\n"
    assert "En la lista: pan. Ya comprado: leche." in shown.stderr
    as_json = json.loads(in_process(main, "lista", "ver", "--json", *c).stdout)
    assert [(i["item"], i["added_by"]) for i in as_json["items"]] == [
        ("pan", "terminal"),
        ("leche", "terminal"),
    ]
    missing = in_process(main, "lista", "quitar", "caviar", *c)
    assert missing.returncode == 2 and "no está en la lista: caviar" in missing.stderr
    assert "Traceback" not in missing.stderr
    assert in_process(main, "lista", "limpiar", *c).returncode == 0
    assert table(database) == [("pan", 0)]


def test_delete_history_leaves_the_households_list(
    in_process: Callable[..., Any], tmp_path: Path
) -> None:
    config = tmp_path / "assistant.yaml"
    database = tmp_path / "web.sqlite3"
    config.write_text(f"web:\n  database: {database}\n", encoding="utf-8")
    store = Store(database)
    store.create_conversation("Ana", "Hola")
    ShoppingList(store).add("Ana", ["leche"])
    done = in_process(main, "delete-history", "Ana", "--yes", "--config", str(config))
    assert done.returncode == 0, done.stderr
    assert store.conversations("Ana", 10) == [] and table(database) == [("leche", 0)]


# ---------------------------------------------------------------- snapshots
def test_snapshots_carry_the_list_and_restore_it(clean_env: dict[str, str], tmp_path: Path) -> None:
    env = {**clean_env, "XDG_DATA_HOME": str(tmp_path / "data")}
    config = AssistantConfig.model_validate({"web": {"people": [{"name": "Ana"}]}})
    h = snap.household(config, env)
    store = Store(h.database)
    shopping = ShoppingList(store)
    shopping.add("Ana", ["leche", "pan"])
    store.create_conversation("Ana", "Hola")
    made = snap.create(h)
    shopping.clear()
    shopping.remove(["leche", "pan"])
    shopping.add("Ana", ["arroz"])
    snap.restore(h, made.path, person="Ana")  # one person's restore leaves the household's list
    assert table(h.database) == [("arroz", 0)]
    snap.restore(h, made.path)  # the whole household: the list as it was
    assert table(h.database) == [("leche", 0), ("pan", 0)]
