"""«Lo que Enlace recuerda» through the page's API (issue 27): the memories an answer used are
saved with it and shown («Recordé»), each person lists, corrects and erases their memories and
the household's (another's is a 404 by any route), every write is checked like the page's other
writes, secrets are refused in Spanish, forgetting all needs the typed word, and the pause switch
stops the memory for that person. The page itself, in a browser: test_agent_web_browser.py."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
from enlace_config.schema.agent import AssistantConfig

from enlace_agent.household.database import Store
from enlace_agent.memory import MemoryStore


def memories_of(client: httpx.Client) -> dict[str, Any]:
    answer = client.get("/api/memories")
    assert answer.status_code == 200, answer.text
    return answer.json()


def add(client: httpx.Client, text: str, scope: str = "personal") -> httpx.Response:
    return client.post("/api/memories", json={"text": text, "scope": scope})


def test_an_answer_records_the_memories_it_used_and_the_page_shows_them(
    web_page: Callable[..., Any], model_server: Any
) -> None:
    model_server.script = model_server.remember_then_use()
    page = web_page()
    ana = page.login("Ana")
    first = page.ask(ana, "Recuerda que mi hija se llama Lucía")
    events = page.events(ana, first)
    started = next(e for e in events if e["type"] == "tool_call")
    assert started["name"] == "recordar" and started["status"] == "Guardando en la memoria…"
    result = next(e for e in events if e["type"] == "tool_result")
    assert result["ok"] and result["notice"] == "Recordaré: «Mi hija se llama Lucía»"
    [kept] = memories_of(ana)["memories"]
    assert (kept["source"], kept["conversation_id"]) == ("assistant", first)
    assert kept["conversation_title"] == "Recuerda que mi hija se llama Lucía"

    second = page.ask(ana, "¿Cómo se llama mi hija?")
    end = page.events(ana, second)[-1]
    used = [{"id": kept["id"], "text": "Mi hija se llama Lucía", "scope": "personal"}]
    assert end["type"] == "end" and end["memories"] == used
    assert "1. [Ana] «Mi hija se llama Lucía»" in model_server.bodies[2]["messages"][0]["content"]
    shown = ana.get(f"/api/conversations/{second}").json()["messages"]
    assert [m["memories"] for m in shown] == [[], used]  # after a reload too
    assert memories_of(ana)["memories"][0]["last_used"] is not None


def test_a_memory_no_one_asked_for_reaches_the_page_as_a_proposal_only(
    web_page: Callable[..., Any], model_server: Any
) -> None:
    """Issue 37: asked the weather, the model calls `recordar` with an invented birthday; the
    page's events carry the proposal («¿Lo recuerdo?») and nothing is kept until the person says
    yes (the page's «Sí» is the memories API: test_agent_web_browser.py)."""
    model_server.script = [
        model_server.call("recordar", {"texto": "Ana cumple años el 3 de mayo"}),
        model_server.say("Mañana hará sol."),
    ]
    page = web_page()
    ana = page.login("Ana")
    events = page.events(ana, page.ask(ana, "¿Qué tiempo hará mañana en Zaragoza?"))
    result = next(e for e in events if e["type"] == "tool_result")
    assert result["ok"] and result["notice"] is None
    assert result["proposal"] == {
        "action": "recordar",
        "question": "¿Lo recuerdo?",
        "text": "Ana cumple años el 3 de mayo",
        "scope": "personal",
        "memory_id": None,
    }
    assert events[-1]["type"] == "end" and memories_of(ana)["memories"] == []


def test_another_persons_memory_is_a_404_by_every_route(
    web_page: Callable[..., Any], model_server: Any
) -> None:
    model_server.script = [
        model_server.call("recordar", {"texto": "La abuela vive en Soria", "alcance": "familia"}),
        model_server.say("Hecho."),
    ]
    page = web_page()
    ana, bruno = page.login("Ana"), page.login("Bruno")
    mine = add(ana, "Ana es alérgica a los frutos secos").json()["memory"]
    page.answered(ana, "Recuerda que la abuela vive en Soria (para todos)")
    listed = memories_of(bruno)["memories"]
    assert [m["text"] for m in listed] == ["La abuela vive en Soria"]
    assert listed[0]["conversation_title"] is None  # Ana's conversation is not Bruno's to see
    assert listed[0]["conversation_id"] is None
    for answer in (
        bruno.patch(f"/api/memories/{mine['id']}", json={"text": "cambiado"}),
        bruno.request("DELETE", f"/api/memories/{mine['id']}", json={}),
        bruno.request("DELETE", "/api/memories/99999", json={}),
        bruno.request("DELETE", "/api/memories/abc", json={}),
    ):
        assert answer.status_code == 404 and answer.json()["error"] == "Esa memoria no existe."
    assert [m["text"] for m in memories_of(ana)["memories"]][1] == mine["text"]
    family = listed[0]["id"]  # the household's are everyone's
    fixed = bruno.patch(f"/api/memories/{family}", json={"text": "La abuela vive en Burgos"})
    assert fixed.status_code == 200 and fixed.json()["memory"]["text"].endswith("Burgos")
    changed = fixed.json()["memory"]
    assert (changed["author"], changed["changed_by"], changed["conversation_id"]) == (
        "Ana",
        "Bruno",
        None,
    )
    [shown_to_ana] = [m for m in memories_of(ana)["memories"] if m["scope"] == "familia"]
    assert shown_to_ana["changed_by"] == "Bruno" and shown_to_ana["conversation_id"] is not None
    assert bruno.request("DELETE", f"/api/memories/{family}", json={}).status_code == 200
    assert [m["text"] for m in memories_of(ana)["memories"]] == [mine["text"]]


def test_memory_writes_are_checked_and_secrets_refused_in_spanish(
    web_page: Callable[..., Any], model_server: Any
) -> None:
    page = web_page()
    ana = page.login("Ana")
    loose = page.client()  # signed in, without the CSRF header
    loose.post("/api/login", json={"name": "Ana", "token": ""})
    assert add(loose, "Sin comprobación").status_code == 403
    assert loose.post("/api/memories", content=b'{"text": "x"}').status_code == 415
    assert page.client().get("/api/memories").status_code == 401
    refused = add(ana, "La tarjeta del banco es 4111 1111 1111 1111")
    assert refused.status_code == 400 and "número de tarjeta" in refused.json()["error"]
    assert "4111" not in refused.text
    assert add(ana, "   ").status_code == 400
    assert add(ana, "algo", "todos").status_code == 400
    created = add(ana, "Bruno entra al colegio a las 8:30", "familia")
    assert created.status_code == 201 and created.json()["memory"]["scope"] == "familia"
    assert add(ana, "Bruno entra al colegio a las 8:30", "familia").status_code == 200  # known
    add(ana, "Ana es alérgica a los frutos secos")
    wrong = ana.post("/api/memories/forget-all", json={"confirm": "borrar"})
    assert wrong.status_code == 400 and "escribe BORRAR" in wrong.json()["error"]
    done = ana.post("/api/memories/forget-all", json={"confirm": "BORRAR"})
    assert done.status_code == 200 and done.json() == {"deleted": 1}
    assert [m["scope"] for m in memories_of(ana)["memories"]] == ["familia"]


def test_the_pause_switch_stops_the_memory_of_that_person_only(
    web_page: Callable[..., Any], model_server: Any
) -> None:
    model_server.script = [model_server.say("Vale."), model_server.say("Vale.")]
    page = web_page()
    ana, bruno = page.login("Ana"), page.login("Bruno")
    add(ana, "Bruno entra al colegio a las 8:30", "familia")
    assert ana.post("/api/memories/pause", json={"paused": "sí"}).status_code == 400
    assert ana.post("/api/memories/pause", json={"paused": True}).json() == {"paused": True}
    assert memories_of(ana)["paused"] and not memories_of(bruno)["paused"]
    refused = add(ana, "Otra cosa")
    assert refused.status_code == 400 and "en pausa" in refused.json()["error"]
    page.answered(ana, "¿A qué hora entra Bruno al colegio?")
    page.answered(bruno, "¿A qué hora entra Bruno al colegio?")
    ana_body, bruno_body = model_server.bodies
    # the household's shopping list stays offered to both: only the memory's tools pause
    memory_tools = {"recordar", "olvidar"}
    ana_tools = {t["function"]["name"] for t in ana_body["tools"]}
    bruno_tools = {t["function"]["name"] for t in bruno_body["tools"]}
    assert ana_tools == {"buscar_en_internet", "lista_de_la_compra"}
    assert bruno_tools == ana_tools | memory_tools
    assert "8:30" not in ana_body["messages"][0]["content"]
    assert "8:30" in bruno_body["messages"][0]["content"]
    ana.post("/api/memories/pause", json={"paused": False})
    assert add(ana, "Otra cosa").status_code == 201


def test_memory_switched_off_in_the_settings(
    web_page: Callable[..., Any], model_server: Any
) -> None:
    page = web_page(assistant={"memory": {"enabled": False}})
    ana = page.login("Ana")
    assert ana.get("/api/me").json()["memory"] is False
    off = ana.get("/api/memories")
    assert off.status_code == 404 and "desactivada" in off.json()["error"]


def test_a_numeric_path_id_that_is_no_number_is_a_404_never_a_500(
    web_page: Callable[..., Any], model_server: Any
) -> None:
    """Every numeric id of the page's API (a memory's, a shopping item's): a superscript or
    another script's digit passes `str.isdigit()` but not `int()`."""
    page = web_page()
    ana = page.login("Ana")
    for raw in ("²", "1²", "١", "٣٤", "①", "𝟙"):
        for method, path, body in (
            ("PATCH", f"/api/memories/{raw}", {"text": "otra cosa"}),
            ("DELETE", f"/api/memories/{raw}", {}),
            ("PATCH", f"/api/shopping/{raw}", {"done": True}),
        ):
            answer = ana.request(method, path, json=body)
            assert answer.status_code == 404, (method, path, answer.text)
            assert answer.json()["error"] in (
                "Esa memoria no existe.",
                "Eso ya no está en la lista.",
            )


def test_the_list_comes_a_page_at_a_time_and_a_small_one_whole(
    web_page: Callable[..., Any], model_server: Any, tmp_path: Path
) -> None:
    page = web_page(assistant={"memory": {"page_memories": 4}})
    ana, bruno = page.login("Ana"), page.login("Bruno")
    for n in range(3):
        add(ana, f"Recuerdo {n} de Ana", "familia" if n == 1 else "personal")
    few = memories_of(ana)  # fewer than a page: all of them, as before
    assert [m["text"] for m in few["memories"]] == [f"Recuerdo {n} de Ana" for n in (2, 1, 0)]
    assert few["next"] is None
    store = MemoryStore(Store(tmp_path / "web.sqlite3"), AssistantConfig().memory)
    lines = [json.dumps({"text": f"Nota {n}"}) for n in range(7)]
    store.import_lines("Ana", lines)
    add(bruno, "Bruno toca la guitarra")  # never in Ana's pages
    seen: list[str] = []
    after: str | None = None
    while True:
        answer = ana.get("/api/memories", params={"after": after} if after else None)
        assert answer.status_code == 200
        listed = answer.json()
        assert len(listed["memories"]) <= 4
        seen += [m["text"] for m in listed["memories"]]
        after = listed["next"]
        if after is None:
            break
    assert seen == [m.text for m in store.list("Ana")] and len(seen) == 10
    for bad in ("x", "nan_3", "1.5_²", "1.5", "inf_2"):
        assert ana.get("/api/memories", params={"after": bad}).status_code == 400
