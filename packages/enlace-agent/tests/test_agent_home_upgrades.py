"""Each answer records which model wrote it (schema 4), an old history file is migrated after a
snapshot, and a history file from a newer Enlace is refused by `serve` without being touched."""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

from enlace_agent.cli.assistant import main
from enlace_agent.household.database import Store
from enlace_agent.household.schema import MIGRATIONS, SCHEMA_VERSION
from enlace_agent.model_versions import CURRENT


def test_each_answer_names_its_model(
    web_page: Callable[..., Any], model_server: Any, tmp_path: Path
) -> None:
    models = tmp_path / "data" / "enlace" / "models"
    models.mkdir(parents=True)
    os.symlink(Path("v7") / "model.gguf", models / CURRENT)  # the version the service serves
    page = web_page(env={"XDG_DATA_HOME": str(tmp_path / "data")})
    client = page.login("Ana")
    model_server.script.append(model_server.say("Hola, Ana."))
    cid = page.ask(client, "Hola")
    end = page.events(client, cid)[-1]
    assert end["type"] == "end" and end["model"] == "enlace-chat (v7)"
    shown = client.get(f"/api/conversations/{cid}").json()["messages"]
    assert [m["model"] for m in shown] == [None, "enlace-chat (v7)"]


def test_an_answer_without_installed_versions_names_the_configured_model(
    web_page: Callable[..., Any], model_server: Any, tmp_path: Path
) -> None:
    page = web_page(env={"XDG_DATA_HOME": str(tmp_path / "empty")})
    client = page.login("Ana")
    model_server.script.append(model_server.say("Hola."))
    [cid] = page.answered(client, "Hola")
    assert client.get(f"/api/conversations/{cid}").json()["messages"][1]["model"] == "enlace-chat"


def test_schema_3_is_migrated_after_the_hook_keeping_its_answers(tmp_path: Path) -> None:
    path = tmp_path / "web.sqlite3"
    with sqlite3.connect(path) as db:  # a file as version 3 wrote it
        db.executescript("".join(MIGRATIONS[:3]) + "PRAGMA user_version = 3;")
        db.execute("INSERT INTO conversations VALUES ('c1', 'Ana', 'Hola', 1, 1, '[]')")
        db.execute("INSERT INTO messages VALUES (NULL, 'c1', 'assistant', 'Hola', '[]', 1)")
    seen: list[tuple[int, int]] = []

    def hook(found_path: Path, found: int) -> None:  # the snapshot's place
        with sqlite3.connect(found_path) as db:
            seen.append((found, db.execute("PRAGMA user_version").fetchone()[0]))

    store = Store(path, hook)
    assert seen == [(3, 3)]  # called before anything changed
    message = store.conversation("Ana", "c1")["messages"][0]  # type: ignore[index]
    assert message["content"] == "Hola" and message["model"] is None
    assert SCHEMA_VERSION >= 4  # later migrations append after this one


def test_serve_refuses_a_newer_history_file_untouched(
    in_process: Callable[..., Any], tmp_path: Path, clean_env: dict[str, str]
) -> None:
    database = tmp_path / "web.sqlite3"
    with sqlite3.connect(database) as db:
        db.execute("CREATE TABLE future (x)")
        db.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    before = database.read_bytes()
    search = tmp_path / "search.yaml"
    search.write_text("providers: [duckduckgo]\n", encoding="utf-8")
    config = tmp_path / "assistant.yaml"
    web = {
        "people": [{"name": "Ana"}],
        "database": str(database),
        "snapshots": {"daily_hour": None},
    }
    config.write_text(json.dumps({"search_config": str(search), "web": web}), encoding="utf-8")
    ran = in_process(main, "serve", "--config", str(config))
    assert ran.returncode == 2
    assert "más nueva que la que conoce este Enlace" in ran.stderr
    assert "actualiza enlace-agent" in ran.stderr and "Traceback" not in ran.stderr
    assert database.read_bytes() == before
    assert not list(tmp_path.glob("snapshots/*"))  # no snapshot of a file it cannot read


def test_page_says_the_model_is_changing_then_answers_again(
    web_page: Callable[..., Any], model_server: Any, tmp_path: Path, gguf: Callable[..., Path]
) -> None:
    """`model use` restarts the model service: meanwhile the page says the model is changing
    (not that it is broken); when the server is back the next question is answered."""
    from enlace_agent import model_versions as mv

    data = tmp_path / "data"
    models = data / "enlace" / "models"
    for name in ("v1", "v2"):
        mv.install(models, gguf(tmp_path / f"{name}.gguf", name), name)
    mv.use(models, "v2")  # just now
    routes = model_server.server.routes
    completions = routes.pop("/v1/chat/completions")
    routes["/v1/chat/completions"] = lambda h: h.send_error(503)  # llama-server loading
    page = web_page(env={"XDG_DATA_HOME": str(data)})
    client = page.login("Ana")
    [cid] = page.answered(client, "Hola")
    said = client.get(f"/api/conversations/{cid}").json()["messages"][1]
    assert said["role"] == "error" and "cambiando de modelo" in said["content"]
    routes["/v1/chat/completions"] = completions  # back
    model_server.script.append(model_server.say("Hola de nuevo."))
    page.ask(client, "¿Sigues ahí?", cid)
    end = page.events(client, cid)[-1]
    assert end["type"] == "end" and end["model"] == "enlace-chat (v2)"
    shown = client.get(f"/api/conversations/{cid}").json()["messages"]
    assert [m["role"] for m in shown] == ["user", "error", "user", "assistant"]  # nothing lost


def test_model_server_dying_mid_answer_then_back(
    web_page: Callable[..., Any], model_server: Any
) -> None:
    """The model server dies while it writes an answer: the page says so in Spanish, the
    question stays, and the next question is answered once the server is back."""
    import socket

    from enlace_agent.web.core import MODEL_BROKEN, MODEL_DOWN

    def dies(h: Any, body: Any) -> None:
        h.send_response(200)
        h.send_header("Content-Type", "text/event-stream")
        h.send_header("Transfer-Encoding", "chunked")
        h.end_headers()
        data = b'data: {"choices":[{"index":0,"delta":{"content":"Empiezo a"}}]}\n\n'
        h.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        h.wfile.flush()
        h.close_connection = True
        h.connection.shutdown(socket.SHUT_RDWR)  # killed mid-answer

    page = web_page()
    client = page.login("Ana")
    model_server.script += [dies, model_server.say("Ya estoy aquí.")]
    cid = page.ask(client, "¿Estás?")
    end = page.events(client, cid)[-1]
    assert end["type"] == "error" and end["message"] in (MODEL_DOWN, MODEL_BROKEN)
    page.ask(client, "¿Y ahora?", cid)
    assert page.events(client, cid)[-1]["type"] == "end"
    shown = client.get(f"/api/conversations/{cid}").json()["messages"]
    assert [(m["role"], m["content"]) for m in shown] == [
        ("user", "¿Estás?"),
        ("error", end["message"]),
        ("user", "¿Y ahora?"),
        ("assistant", "Ya estoy aquí."),
    ]
