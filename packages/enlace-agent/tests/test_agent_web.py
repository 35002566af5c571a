"""The family web page on 127.0.0.1 (real uvicorn, real SQLite) over the scripted model: answers
streamed as server-sent events, histories per person, sign-in, CSRF, bounds, the model down."""

from __future__ import annotations

import asyncio
import json
import logging
import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from enlace_config.schema.agent import AssistantConfig, WebConfig
from pydantic import ValidationError

from enlace_agent.household.schema import MIGRATIONS
from enlace_agent.web import SCHEMA_VERSION, Store, StoreError, WebSetupError, resolve_tokens
from enlace_agent.web.core import MODEL_CONTEXT, MODEL_DOWN
from enlace_agent.web.live import LiveTurn, LiveTurns

WIKI = "https://es.wikipedia.org/wiki/Tortilla_de_patatas"
XSS = "<img src=x onerror=alert(1)>"
TOKEN_ANA = "ana-token-0123456789-secret"


def events(client: httpx.Client, cid: str) -> list[dict[str, Any]]:
    """The answer's events, read from its stream until the final one."""
    found: list[dict[str, Any]] = []
    with client.stream("GET", f"/api/conversations/{cid}/events") as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        for line in response.iter_lines():
            if line.startswith("data: "):
                found.append(json.loads(line[6:]))
                if found[-1]["type"] in ("end", "error", "idle"):
                    break
    return found


def ask(client: httpx.Client, text: str, cid: str | None = None) -> str:
    path = f"/api/conversations/{cid}/messages" if cid else "/api/conversations"
    answer = client.post(path, json={"text": text})
    assert answer.status_code == 202, answer.text
    return answer.json()["id"]


def echo(model: Any, delay: float = 0.0) -> Any:
    """A model step that answers with the last question (to tell two people's streams apart)."""

    def step(h: Any, body: dict[str, Any]) -> None:
        question = [m for m in body["messages"] if m["role"] == "user"][-1]["content"]
        model.say(f"Eco de {question}", pieces=6, delay=delay)(h, body)

    return step


def test_answer_streams_with_sources_and_stays_after_a_restart(
    web_page: Callable[..., Any], model_server: Any
) -> None:
    model_server.script = [
        model_server.call("buscar_en_internet", {"consulta": "tortilla de patatas"}),
        model_server.say(f"Lleva huevo, patata y cebolla (según {WIKI})."),
    ]
    page = web_page()
    ana = page.login("Ana")
    cid = ask(ana, "¿Qué lleva la tortilla?")
    got = events(ana, cid)
    kinds = [e["type"] for e in got]
    assert kinds[0] == "tool_call" and "tool_result" in kinds and kinds[-1] == "end"
    assert "".join(e["text"] for e in got if e["type"] == "text").startswith("Lleva huevo")
    end = got[-1]
    assert [(s["url"], s["provider"]) for s in end["sources"]] == [(WIKI, "duckduckgo")]

    page.stop()
    again = web_page()  # same database file: a restart
    ana = again.login("Ana")
    listed = ana.get("/api/conversations").json()["conversations"]
    assert [c["title"] for c in listed] == ["¿Qué lleva la tortilla?"]
    shown = ana.get(f"/api/conversations/{cid}").json()
    assert [m["role"] for m in shown["messages"]] == ["user", "assistant"]
    assert shown["messages"][1]["sources"][0]["url"] == WIKI
    assert shown["answering"] is False
    # The next question carries the saved history (tool messages included) to the model.
    model_server.script = [model_server.say("De nada.")]
    assert events(ana, ask(ana, "Gracias", cid))[-1]["text"] == "De nada."
    roles = [m["role"] for m in model_server.bodies[-1]["messages"]]
    assert roles == ["system", "user", "assistant", "tool", "assistant", "user"]


def test_model_text_is_data_and_the_page_forbids_inline_script(
    web_page: Callable[..., Any], model_server: Any
) -> None:
    model_server.script = [model_server.say(f"Mira: {XSS}")]
    page = web_page()
    ana = page.login("Ana")
    cid = ask(ana, XSS)
    assert events(ana, cid)[-1]["text"] == f"Mira: {XSS}"
    index = ana.get("/")
    csp = index.headers["content-security-policy"]
    assert "script-src 'self'" in csp and "unsafe-inline" not in csp
    assert index.headers["x-content-type-options"] == "nosniff"
    script = ana.get("/static/app.js").text
    assert "innerHTML" not in script and "insertAdjacentHTML" not in script
    assert "<script>" not in index.text  # no inline script


def test_writes_need_the_csrf_token_json_and_this_origin(web_page: Callable[..., Any]) -> None:
    page = web_page()
    ana = page.login("Ana")
    csrf = ana.headers.pop("X-Enlace-CSRF")
    body = {"text": "hola"}
    assert ana.post("/api/conversations", json=body).status_code == 403
    ana.headers["X-Enlace-CSRF"] = "wrong"
    assert ana.post("/api/conversations", json=body).status_code == 403
    ana.headers["X-Enlace-CSRF"] = csrf
    evil = {"Origin": "http://evil.example"}
    assert ana.post("/api/conversations", json=body, headers=evil).status_code == 403
    form = ana.post("/api/conversations", data={"text": "hola"})
    assert form.status_code == 415  # what a cross-site form could send
    login = page.client().post("/api/login", json={"name": "Ana"}, headers=evil)
    assert login.status_code == 403
    assert ana.post("/api/logout", json={}).status_code == 200
    assert ana.get("/api/conversations").status_code == 401  # the session ended server-side
    assert ana.get("/api/conversations").json()["error"] == "Tienes que entrar de nuevo."


def test_the_session_cookie_is_httponly_and_samesite_strict(web_page: Callable[..., Any]) -> None:
    answer = web_page().client().post("/api/login", json={"name": "Ana"})
    cookie = answer.headers["set-cookie"].lower()
    assert "httponly" in cookie and "samesite=strict" in cookie and "path=/" in cookie


def test_one_person_never_reaches_another_persons_conversations(
    web_page: Callable[..., Any], model_server: Any
) -> None:
    model_server.script = [model_server.say("Secreto de Ana.")]
    page = web_page()
    ana, bruno = page.login("Ana"), page.login("Bruno")
    cid = ask(ana, "Lo mío")
    events(ana, cid)
    assert bruno.get("/api/conversations").json()["conversations"] == []
    assert bruno.get(f"/api/conversations/{cid}").status_code == 404
    assert bruno.get(f"/api/conversations/{cid}/events").status_code == 404
    assert bruno.post(f"/api/conversations/{cid}/messages", json={"text": "x"}).status_code == 404
    assert "Secreto" not in bruno.get(f"/api/conversations/{cid}").text
    assert len(model_server.bodies) == 1  # Bruno's attempt never reached the model
    assert page.client().get("/api/conversations").status_code == 401


def test_two_people_at_once_each_see_only_their_stream(
    web_page: Callable[..., Any], model_server: Any
) -> None:
    model_server.script = [echo(model_server, 0.05), echo(model_server, 0.05)]
    page = web_page()
    people = {"Ana": page.login("Ana"), "Bruno": page.login("Bruno")}
    results: dict[str, list[dict[str, Any]]] = {}

    def chat(name: str) -> None:
        client = people[name]
        results[name] = events(client, ask(client, f"pregunta de {name}"))

    threads = [threading.Thread(target=chat, args=(n,)) for n in people]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    for name, other in (("Ana", "Bruno"), ("Bruno", "Ana")):
        streamed = "".join(e["text"] for e in results[name] if e["type"] == "text")
        assert streamed == f"Eco de pregunta de {name}"
        assert other not in json.dumps(results[name])


def test_a_reload_mid_answer_follows_it_from_the_start(
    web_page: Callable[..., Any], model_server: Any
) -> None:
    model_server.script = [model_server.say("Una respuesta que se escribe despacio.", delay=0.15)]
    page = web_page()
    ana = page.login("Ana")
    cid = ask(ana, "Despacio")
    with ana.stream("GET", f"/api/conversations/{cid}/events") as first:
        for line in first.iter_lines():
            if line.startswith("data: ") and json.loads(line[6:])["type"] == "text":
                break  # the page goes away mid-answer
    shown = ana.get(f"/api/conversations/{cid}").json()
    assert shown["answering"] is True
    assert [m["role"] for m in shown["messages"]] == ["user"]
    got = events(ana, cid)  # the reloaded page
    assert "".join(e["text"] for e in got if e["type"] == "text") == got[-1]["text"]
    assert got[-1]["text"] == "Una respuesta que se escribe despacio."
    assert events(ana, cid) == [{"type": "idle"}]  # done: the history has it
    assert ana.get(f"/api/conversations/{cid}").json()["messages"][-1]["role"] == "assistant"


def test_one_answer_at_a_time_in_a_conversation(
    web_page: Callable[..., Any], model_server: Any
) -> None:
    model_server.script = [model_server.say("Despacio, despacio.", delay=0.2)]
    ana = web_page().login("Ana")
    cid = ask(ana, "Primera")
    second = ana.post(f"/api/conversations/{cid}/messages", json={"text": "Segunda"})
    assert second.status_code == 409
    assert second.json()["error"] == "Espera a que termine la respuesta anterior."
    events(ana, cid)


def test_model_down_is_a_clear_spanish_message_kept_in_the_history(
    web_page: Callable[..., Any], refused_url: str
) -> None:
    page = web_page(assistant={"base_url": refused_url, "connect_timeout_s": 2})
    ana = page.login("Ana")
    cid = ask(ana, "¿Hay alguien?")
    got = events(ana, cid)
    assert got == [{"type": "error", "message": MODEL_DOWN}]
    shown = ana.get(f"/api/conversations/{cid}").json()["messages"]
    assert [(m["role"], m["content"]) for m in shown] == [
        ("user", "¿Hay alguien?"),
        ("error", MODEL_DOWN),
    ]


def finished(client: httpx.Client, cid: str) -> None:
    """Waits, without following it, until the conversation's answer has ended."""
    deadline = time.monotonic() + 10
    while client.get(f"/api/conversations/{cid}").json()["answering"]:
        assert time.monotonic() < deadline, "the answer did not end"
        time.sleep(0.02)


def test_an_answer_that_ended_before_the_page_followed_it_is_replayed_once(
    web_page: Callable[..., Any], model_server: Any
) -> None:
    """A fast model and a busy browser: the answer ends before the page opens its event stream.
    The page still gets its events, those the history does not keep (what the model proposed to
    remember, asked of the person) included; once: the next follow is `idle`. A newer question
    and a deleted conversation leave nothing to replay."""
    invented = "Ana cumple años el 3 de mayo"
    model_server.script = [
        model_server.call("recordar", {"texto": invented}),
        model_server.say("Hecho."),
    ]
    page = web_page()
    ana = page.login("Ana")
    cid = ask(ana, "Hola")
    finished(ana, cid)
    got = events(ana, cid)
    assert got[-1]["type"] == "end" and got[-1]["text"] == "Hecho."
    proposals = [e["proposal"] for e in got if e["type"] == "tool_result"]
    assert [p["text"] for p in proposals] == [invented]
    assert events(ana, cid) == [{"type": "idle"}]

    model_server.script = [model_server.say("Uno."), model_server.say("Dos.")]
    ask(ana, "Otra", cid)
    finished(ana, cid)
    ask(ana, "Y otra", cid)
    finished(ana, cid)
    assert [e["text"] for e in events(ana, cid) if e["type"] == "end"] == ["Dos."]
    model_server.script = [model_server.say("Cuatro.", delay=0.3), model_server.say("Cinco.")]
    ask(ana, "Sin seguir", cid)
    finished(ana, cid)
    ask(ana, "Siguiendo", cid)
    assert events(ana, cid)[-1]["text"] == "Cinco."  # followed as it was written
    assert events(ana, cid) == [{"type": "idle"}]  # not the older, unread one
    model_server.script = [model_server.say("Seis.")]
    ask(ana, "La última", cid)
    finished(ana, cid)
    assert ana.request("DELETE", f"/api/conversations/{cid}", json={}).status_code == 200
    assert ana.get(f"/api/conversations/{cid}/events").status_code == 404


def test_a_deleted_conversation_leaves_no_unread_answer_in_memory(tmp_path: Path) -> None:
    """Erased means erased: an unread answer of a deleted conversation is not kept for replay."""
    store = Store(tmp_path / "web.sqlite3")

    async def unread_after(forget: bool) -> LiveTurn | None:
        turns = LiveTurns(store, 1.0, 60.0)
        cid, row = store.start_answer("Ana", None, "Hola")
        live = turns.reserve("Ana", None)
        turns.start(live, cid, row, lambda: iter([{"type": "end", "text": "Hecho."}]))
        while turns.get(cid) is not None or not live.done:
            await asyncio.sleep(0.01)
        if forget:
            turns.forget(cid)
        return turns.followable(cid)

    assert asyncio.run(unread_after(forget=False)) is not None
    assert asyncio.run(unread_after(forget=True)) is None


def test_an_unfollowed_answer_is_replayed_only_while_a_page_would_still_wait_for_it(
    web_page: Callable[..., Any], model_server: Any
) -> None:
    """After `stall_timeout_s` the page that asked has given up waiting: the history has it."""
    model_server.script = [model_server.say("Hecho.")]
    page = web_page(stall_timeout_s=0.5, keepalive_s=0.2)
    ana = page.login("Ana")
    cid = ask(ana, "Hola")
    finished(ana, cid)
    time.sleep(0.7)
    assert events(ana, cid) == [{"type": "idle"}]


def test_a_long_conversation_says_what_was_left_out_and_names_a_context_error(
    web_page: Callable[..., Any], model_server: Any, tmp_path: Path
) -> None:
    """The model's context holds the prompt and one long question: the next question of the
    conversation is answered without the first turn, and the page is told; a question that
    alone does not fit is named in Spanish (not «Inténtalo de nuevo»)."""
    page = web_page()
    ana = page.login("Ana")
    model_server.script = [model_server.say("Entendido.")]
    cid = ask(ana, "Te cuento: " + "palabra " * 300)
    assert events(ana, cid)[-1]["left_out"] == 0
    first = model_server.bodies[0]
    n_ctx = len(json.dumps([first["messages"], first["tools"]], ensure_ascii=False)) // 4 - 300
    model_server.script = [model_server.within_context(n_ctx, model_server.say("Sí."))]
    ana.post(f"/api/conversations/{cid}/messages", json={"text": "¿Y ahora?"})
    end = events(ana, cid)[-1]
    assert end["type"] == "end" and end["text"] == "Sí." and end["left_out"] == 1
    assert "no he tenido en cuenta la primera pregunta" in end["left_out_notice"]
    assert len(Store(tmp_path / "web.sqlite3").history("Ana", cid)) == 4  # whole, for later
    # Kept with the answer: a page that opens the conversation later (a reload, or an answer
    # that ended before the page followed it) shows the same line under it.
    shown = ana.get(f"/api/conversations/{cid}").json()["messages"]
    assert [m.get("left_out_notice") for m in shown] == [None, None, None, end["left_out_notice"]]
    model_server.script = [model_server.within_context(n_ctx, model_server.say("No."))]
    ana.post(f"/api/conversations/{cid}/messages", json={"text": "otra " * 700})
    error = events(ana, cid)[-1]
    assert error["type"] == "error" and error["message"] == MODEL_CONTEXT


def test_a_silent_model_ends_at_the_time_budget_not_a_spinner(
    web_page: Callable[..., Any], model_server: Any
) -> None:
    model_server.script = [model_server.say("x" * 50, pieces=50, delay=0.2)]
    page = web_page(
        assistant={"time_budget_s": 1.0, "read_timeout_s": 1.0, "connect_timeout_s": 1.0}
    )
    ana = page.login("Ana")
    started = time.monotonic()
    got = events(ana, ask(ana, "¿Tardas?"))
    assert time.monotonic() - started < 8
    assert got[-1]["type"] == "end" and got[-1]["stopped"] == "time_budget"


def test_bodies_and_questions_are_bounded(web_page: Callable[..., Any]) -> None:
    page = web_page(max_message_chars=100, max_body_bytes=2048)
    ana = page.login("Ana")
    long = ana.post("/api/conversations", json={"text": "a" * 101})
    assert long.status_code == 413 and "demasiado larga" in long.json()["error"]
    huge = ana.post("/api/conversations", json={"text": "a" * 5000})
    assert huge.status_code == 413
    chunked = ana.post(
        "/api/conversations",
        content=iter([b'{"text": "', b"a" * 4000, b'"}']),
        headers={"Content-Type": "application/json"},
    )
    assert chunked.status_code == 413
    assert ana.post("/api/conversations", json={"text": "  "}).status_code == 400
    assert ana.post("/api/conversations", json=["no"]).status_code == 400


def test_tokens_are_checked_and_never_shown(
    web_page: Callable[..., Any], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    people = [{"name": "Ana", "token_env": "TOKEN_ANA"}, {"name": "Bruno"}]
    page = web_page(people=people, env={"TOKEN_ANA": TOKEN_ANA})
    client = page.client()
    listed = client.get("/api/people").json()["people"]
    assert listed == [{"name": "Ana", "needs_token": True}, {"name": "Bruno", "needs_token": False}]
    for wrong in ("", "ana-token", TOKEN_ANA + "x"):
        refused = client.post("/api/login", json={"name": "Ana", "token": wrong})
        assert refused.status_code == 401
    assert client.post("/api/login", json={"name": "Nadie"}).status_code == 401
    ana = page.login("Ana", TOKEN_ANA)
    seen = [ana.get(p).text for p in ("/", "/api/me", "/api/people", "/static/app.js")]
    assert all(TOKEN_ANA not in text for text in seen)
    assert TOKEN_ANA not in str(ana.cookies.get("enlace_session"))
    assert TOKEN_ANA not in caplog.text


def test_start_up_refuses_missing_or_short_tokens() -> None:
    config = WebConfig.model_validate({"people": [{"name": "Ana", "token_env": "T"}]})
    with pytest.raises(WebSetupError, match="T\\) no está definida"):
        resolve_tokens(config, {})
    with pytest.raises(WebSetupError, match="demasiado corta"):
        resolve_tokens(config, {"T": "short"})
    assert resolve_tokens(config, {"T": TOKEN_ANA}) == {"Ana": TOKEN_ANA}
    with pytest.raises(WebSetupError, match=r"web\.people"):
        resolve_tokens(WebConfig(), {})


def test_the_page_refuses_a_config_that_skipped_validation_and_listens_without_tokens() -> None:
    # model_copy(update=...) never validates: the page's own start-up is the last gate.
    config = WebConfig.model_validate({"people": [{"name": "Ana"}]})
    with pytest.raises(WebSetupError, match="exige una clave para cada persona"):
        resolve_tokens(config.model_copy(update={"host": "0.0.0.0"}), {})


def test_listening_beyond_this_machine_requires_a_token_for_everyone() -> None:
    with pytest.raises(ValidationError, match=r"people\.1\.token_env: Luis has no token_env"):
        AssistantConfig.model_validate(
            {
                "web": {
                    "host": "0.0.0.0",
                    "people": [{"name": "Ana", "token_env": "T"}, {"name": "Luis"}],
                }
            }
        )
    with pytest.raises(ValidationError, match="names repeated"):
        WebConfig.model_validate({"people": [{"name": "Ana"}, {"name": "ana"}]})
    with pytest.raises(ValidationError, match="name"):
        WebConfig.model_validate({"people": [{"name": "<b>Ana</b>"}]})


# ------------------------------------------------------------------- the history file


def test_an_old_history_file_is_migrated_with_its_data(tmp_path: Path) -> None:
    path = tmp_path / "web.sqlite3"
    with sqlite3.connect(path) as db:  # a file as version 1 wrote it
        db.executescript(MIGRATIONS[0] + "PRAGMA user_version = 1;")
        db.execute("INSERT INTO conversations VALUES ('c1', 'Ana', 'Hola', 1, 1, '[]')")
        db.execute("INSERT INTO messages VALUES (NULL, 'c1', 'user', 'Hola', '[]', 1)")
    store = Store(path)
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    assert store.conversation("Ana", "c1")["messages"][0]["content"] == "Hola"  # type: ignore[index]
    token, session = store.create_session("Ana", 60, store.fingerprint(None))  # version 2
    assert store.session(token) == session
    Store(path)  # opening an up-to-date file changes nothing


def test_a_history_file_from_a_newer_enlace_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "web.sqlite3"
    with sqlite3.connect(path) as db:
        db.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    with pytest.raises(StoreError, match="más nueva que la que conoce este Enlace"):
        Store(path)
    path.write_bytes(b"not a database" * 100)
    with pytest.raises(StoreError, match="está dañado o no es un historial de Enlace"):
        Store(path)


def test_sessions_expire(tmp_path: Path) -> None:
    store = Store(tmp_path / "web.sqlite3")
    token, _ = store.create_session("Ana", -1, store.fingerprint(None))
    assert store.session(token) is None
    assert store.session("made-up") is None


def test_export_and_delete_history_commands(
    web_page: Callable[..., Any],
    model_server: Any,
    in_process: Callable[..., Any],
    tmp_path: Path,
) -> None:
    from enlace_agent.cli.assistant import main

    model_server.script = [model_server.say("Respuesta para Ana."), model_server.say("Para Bruno.")]
    page = web_page()
    for name in ("Ana", "Bruno"):
        client = page.login(name)
        events(client, ask(client, f"Pregunta de {name}"))
    config = tmp_path / "assistant.yaml"
    config.write_text(f"web:\n  database: {tmp_path / 'web.sqlite3'}\n", encoding="utf-8")

    out = in_process(main, "export-history", "Ana", "--config", str(config))
    assert out.returncode == 0, out.stderr
    exported = json.loads(out.stdout)
    assert exported["person"] == "Ana" and exported["schema_version"] == SCHEMA_VERSION
    [conversation] = exported["conversations"]
    assert [m["content"] for m in conversation["messages"]] == [
        "Pregunta de Ana",
        "Respuesta para Ana.",
    ]
    refused = in_process(main, "delete-history", "Ana", "--config", str(config))
    assert refused.returncode == 2 and "--yes" in refused.stderr
    done = in_process(main, "delete-history", "Ana", "--yes", "--config", str(config))
    assert done.returncode == 0 and "Borradas 1 conversaciones" in done.stderr
    again = json.loads(in_process(main, "export-history", "Ana", "--config", str(config)).stdout)
    assert again["conversations"] == []
    bruno = json.loads(in_process(main, "export-history", "Bruno", "--config", str(config)).stdout)
    assert len(bruno["conversations"]) == 1  # only Ana's history went


def test_serve_refuses_a_bad_setup_with_exit_2(
    in_process: Callable[..., Any], tmp_path: Path
) -> None:
    from enlace_agent.cli.assistant import main

    config = tmp_path / "assistant.yaml"
    config.write_text("max_tool_rounds: 0\n", encoding="utf-8")
    nobody = in_process(main, "serve", "--config", str(config))
    assert nobody.returncode == 2 and "web.people" in nobody.stderr
    config.write_text("max_tool_rounds: 0\nweb:\n  people: [{name: Ana}]\n", encoding="utf-8")
    open_lan = in_process(main, "serve", "--config", str(config), "--host", "0.0.0.0")
    assert open_lan.returncode == 2 and "token_env" in open_lan.stderr
    assert "Traceback" not in open_lan.stderr


def test_serve_runs_the_page_until_stopped(
    clean_env: dict[str, str], tmp_path: Path, model_server: Any, serve_process: Any
) -> None:
    import signal
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    config = tmp_path / "assistant.yaml"
    config.write_text(
        f"base_url: {model_server.base_url}\nmax_tool_rounds: 0\n"
        f"web:\n  port: {port}\n  people: [{{name: Ana, token_env: TOKEN_ANA}}]\n",
        encoding="utf-8",
    )
    process = serve_process(config, {**clean_env, "TOKEN_ANA": TOKEN_ANA}, port)
    try:
        page = httpx.get(f"http://127.0.0.1:{port}/", timeout=2)
        assert page.status_code == 200 and "<title>Enlace" in page.text
        with httpx.Client(base_url=f"http://127.0.0.1:{port}") as client:
            assert client.post("/api/login", json={"name": "Ana", "token": TOKEN_ANA}).is_success
    finally:
        process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=20)
    # uvicorn shuts down cleanly, then re-raises the signal it caught.
    assert process.returncode in (0, -signal.SIGTERM), err
    assert "Traceback" not in err
    assert f"http://127.0.0.1:{port}/" in err
    assert TOKEN_ANA not in err
    assert (tmp_path / "data" / "enlace" / "web.sqlite3").is_file()  # the XDG default
