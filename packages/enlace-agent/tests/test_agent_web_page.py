"""What the family sees, through the page's API and the command line (issue 26, points 16-19):
renaming and deleting one conversation (owner only, the same write checks as every other write),
the default prompt citing by number like the page's «Fuentes» list, configuration errors in one
language (Spanish), and a failed search said in Spanish. The page itself: test_agent_web_browser.py.
"""

from __future__ import annotations

import datetime as dt
import json
import re
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from enlace_agent.assistant.prompt import system_prompt
from enlace_agent.tools.search import TOOL_NAME

# Words of the English messages that used to follow the Spanish head line.
ENGLISH = re.compile(
    r"\b(problems?|expected|unknown key|does not exist|invalid option|got|cannot|Input should|"
    r"the keys here|did you mean|env file)\b"
)


def rename(client: httpx.Client, cid: str, title: Any, **kwargs: Any) -> httpx.Response:
    return client.patch(f"/api/conversations/{cid}", json={"title": title}, **kwargs)


def delete(client: httpx.Client, cid: str, **kwargs: Any) -> httpx.Response:
    return client.request("DELETE", f"/api/conversations/{cid}", json={}, **kwargs)


def titles(client: httpx.Client) -> list[str]:
    return [c["title"] for c in client.get("/api/conversations").json()["conversations"]]


# ---------------------------------------------------------------- renaming and deleting


def test_a_person_renames_one_conversation(web_page: Callable[..., Any], model_server: Any) -> None:
    model_server.script = [model_server.say("Uno."), model_server.say("Dos.")]
    page = web_page()
    ana = page.login("Ana")
    first, _ = page.answered(ana, "Primera pregunta", "Segunda pregunta")

    answer = rename(ana, first, "  Recetas\n de   casa ")
    assert answer.status_code == 200, answer.text
    assert answer.json() == {"id": first, "title": "Recetas de casa"}
    assert sorted(titles(ana)) == ["Recetas de casa", "Segunda pregunta"]
    assert ana.get(f"/api/conversations/{first}").json()["title"] == "Recetas de casa"
    long = rename(ana, first, "x" * 500)
    assert long.status_code == 200 and len(long.json()["title"]) == 60  # like a question's title
    for bad in ("", "   ", None, 7, ["a"]):
        refused = rename(ana, first, bad)
        assert refused.status_code == 400 and refused.json()["error"].startswith("Escribe")


def test_a_person_deletes_one_conversation_and_its_messages(
    web_page: Callable[..., Any], model_server: Any, tmp_path: Path
) -> None:
    model_server.script = [model_server.say("Respuesta uno."), model_server.say("Respuesta dos.")]
    page = web_page()
    gone, _ = page.answered(
        ana := page.login("Ana"), "Pregunta que se borra", "Pregunta que se queda"
    )

    answer = delete(ana, gone)
    assert answer.status_code == 200 and answer.json() == {"ok": True}
    assert titles(ana) == ["Pregunta que se queda"]
    assert ana.get(f"/api/conversations/{gone}").status_code == 404
    assert delete(ana, gone).status_code == 404  # twice: nothing left to delete
    with sqlite3.connect(tmp_path / "web.sqlite3") as db:
        left = db.execute("SELECT count(*) FROM messages WHERE conversation_id = ?", (gone,))
        assert left.fetchone()[0] == 0
        assert db.execute("SELECT count(*) FROM messages").fetchone()[0] == 2  # the other's


def test_another_person_can_neither_rename_nor_delete(
    web_page: Callable[..., Any], model_server: Any
) -> None:
    model_server.script = [model_server.say("Secreto de Ana.")]
    page = web_page()
    ana, bruno = page.login("Ana"), page.login("Bruno")
    (cid,) = page.answered(ana, "Lo mío")
    assert delete(bruno, cid).status_code == 404
    assert rename(bruno, cid, "De Bruno").status_code == 404
    assert delete(bruno, cid).json()["error"] == "Esa conversación no existe."
    assert titles(ana) == ["Lo mío"]
    assert len(ana.get(f"/api/conversations/{cid}").json()["messages"]) == 2
    anonymous = page.client()
    assert delete(anonymous, cid).status_code == 401
    assert rename(anonymous, cid, "x").status_code == 401


def test_rename_and_delete_need_the_csrf_token_json_and_this_origin(
    web_page: Callable[..., Any], model_server: Any
) -> None:
    model_server.script = [model_server.say("Hola.")]
    page = web_page()
    ana = page.login("Ana")
    (cid,) = page.answered(ana, "Hola")
    csrf = ana.headers.pop("X-Enlace-CSRF")
    assert delete(ana, cid).status_code == 403
    assert rename(ana, cid, "x").status_code == 403
    ana.headers["X-Enlace-CSRF"] = csrf
    evil = {"Origin": "http://evil.example"}
    assert delete(ana, cid, headers=evil).status_code == 403
    assert rename(ana, cid, "x", headers=evil).status_code == 403
    form = ana.request("DELETE", f"/api/conversations/{cid}", data={"a": "b"})
    assert form.status_code == 415
    assert ana.patch(f"/api/conversations/{cid}", content=b"title=x").status_code == 415
    assert titles(ana) == ["Hola"]  # nothing changed


def test_a_conversation_being_answered_is_not_deleted_under_the_answer(
    web_page: Callable[..., Any], model_server: Any
) -> None:
    model_server.script = [model_server.say("Despacio " * 10, pieces=10, delay=0.2)]
    page = web_page(assistant={"max_tool_rounds": 0})
    ana = page.login("Ana")
    cid = page.ask(ana, "Cuéntamelo despacio")
    refused = delete(ana, cid)
    assert refused.status_code == 409 and "Espera" in refused.json()["error"]
    assert page.events(ana, cid)[-1]["type"] == "end"
    assert delete(ana, cid).status_code == 200


def test_the_list_carries_each_conversations_date(
    web_page: Callable[..., Any], model_server: Any
) -> None:
    model_server.script = [model_server.say("Hola.")]
    page = web_page()
    page.answered(ana := page.login("Ana"), "Hola")
    (listed,) = ana.get("/api/conversations").json()["conversations"]
    when = dt.datetime.fromtimestamp(listed["created"], dt.UTC)
    assert abs((dt.datetime.now(dt.UTC) - when).total_seconds()) < 60
    assert listed["updated"] >= listed["created"]


# ---------------------------------------------------------------- citations by number


def test_the_default_prompt_cites_by_number_like_the_sources_list() -> None:
    prompt = system_prompt(None, dt.date(2026, 12, 3))
    assert "[1]" in prompt and "[2]" in prompt
    assert "URL" not in prompt  # addresses are the page's «Fuentes» list, not the answer's text


# ---------------------------------------------------------------- Spanish, one language a message


@pytest.fixture
def assistant_cli(in_process: Callable[..., Any]) -> Callable[..., Any]:
    from enlace_agent.cli.assistant import main

    return lambda *args: in_process(main, *args)


def spanish_only(text: str) -> None:
    assert text.startswith("Error: "), text
    assert not ENGLISH.search(text), text
    assert "Traceback" not in text


def test_a_bad_config_file_is_explained_in_spanish_only(
    assistant_cli: Callable[..., Any], tmp_path: Path
) -> None:
    config = tmp_path / "assistant.yaml"
    config.write_text(
        "max_tool_rounds: -3\nbogus: 1\ntemperatura: 0.5\nstream: quizas\nbase_url: ftp://x\n",
        encoding="utf-8",
    )
    for args in (["--once", "hola"], ["serve"]):
        ran = assistant_cli(*args, "--config", str(config))
        assert ran.returncode == 2
        spanish_only(ran.stderr)
        assert "línea 1" in ran.stderr and "max_tool_rounds" in ran.stderr
        assert "mayor o igual que 0" in ran.stderr
        assert "línea 2" in ran.stderr and "bogus: clave desconocida" in ran.stderr
        assert "¿querías decir «temperature»?" in ran.stderr
        assert "stream" in ran.stderr and "línea 5" in ran.stderr


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--max-tool-rounds", "-1"], "--max-tool-rounds"),
        (["--config", "/no/such/assistant.yaml"], "no existe"),
        (["--env-file", "/no/such/.env"], "no existe"),
        (["serve", "--port", "99999999"], "--port"),
    ],
)
def test_bad_options_and_missing_files_are_explained_in_spanish_only(
    assistant_cli: Callable[..., Any], args: list[str], needle: str, tmp_path: Path
) -> None:
    search = tmp_path / "search.yaml"
    search.write_text("providers: [duckduckgo]\n", encoding="utf-8")
    config = tmp_path / "assistant.yaml"
    config.write_text(f"search_config: {search}\nweb: {{people: [{{name: Ana}}]}}\n")
    if "--config" not in args:
        args = [*args, "--config", str(config)]
    ran = assistant_cli(*args, *([] if "serve" in args else ["--once", "hola"]))
    assert ran.returncode == 2 and needle in ran.stderr
    spanish_only(ran.stderr)


def test_a_bad_search_config_is_explained_in_spanish_only(
    in_process: Callable[..., Any], tmp_path: Path
) -> None:
    from enlace_agent.cli.search import main

    config = tmp_path / "search.yaml"
    config.write_text("providers: [duckduckgo, bing]\n", encoding="utf-8")
    ran = in_process(main, "tortilla", "--config", str(config))
    assert ran.returncode == 2 and "línea 1" in ran.stderr and "bing" in ran.stderr
    spanish_only(ran.stderr)


def test_a_failed_search_is_said_in_spanish_at_the_command_line(
    in_process: Callable[..., Any], http_server: Any, model_server: Any, tmp_path: Path
) -> None:
    from enlace_agent.cli.assistant import main

    url = http_server.reply("/lite/", 500, "<p>error</p>")
    search = tmp_path / "search.yaml"
    search.write_text(json.dumps({"providers": ["duckduckgo"], "duckduckgo": {"endpoint": url}}))
    config = tmp_path / "assistant.yaml"
    config.write_text(json.dumps({"base_url": model_server.base_url, "search_config": str(search)}))
    model_server.script = [
        model_server.call(TOOL_NAME, {"consulta": "tortilla"}),
        model_server.say("No he podido buscar, pero la tortilla lleva huevo."),
    ]
    ran = in_process(main, "--config", str(config), "--once", "¿Qué lleva la tortilla?")
    assert ran.returncode == 0, ran.stderr
    assert "(La búsqueda en internet ha fallado: la respuesta puede no estar al día.)" in ran.stderr


def test_a_port_in_use_is_explained_in_spanish_only(
    assistant_cli: Callable[..., Any], tmp_path: Path
) -> None:
    import socket

    config = tmp_path / "assistant.yaml"
    config.write_text(
        "max_tool_rounds: 0\nweb: {people: [{name: Ana}]}\n"
        f"search_config: {tmp_path / 'search.yaml'}\n",
        encoding="utf-8",
    )
    (tmp_path / "search.yaml").write_text("providers: [duckduckgo]\n", encoding="utf-8")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        ran = assistant_cli("serve", "--config", str(config), "--port", str(port))
    assert ran.returncode == 1
    error = ran.stderr[ran.stderr.index("Error: ") :]
    spanish_only(error)
    assert f"el puerto {port} ya está en uso" in error and "--port" in error


def test_a_broken_history_file_is_explained_in_spanish_only(
    assistant_cli: Callable[..., Any], tmp_path: Path
) -> None:
    history = tmp_path / "web.sqlite3"
    history.write_bytes(b"not a database at all " * 100)
    config = tmp_path / "assistant.yaml"
    config.write_text(f"web: {{people: [{{name: Ana}}], database: {history}}}\n")
    ran = assistant_cli("export-history", "Ana", "--config", str(config))
    assert ran.returncode == 2 and str(history) in ran.stderr
    spanish_only(ran.stderr)


def test_a_model_server_error_is_explained_in_spanish_only(
    assistant_cli: Callable[..., Any], model_server: Any, tmp_path: Path
) -> None:
    model_server.script = [model_server.status(500, {"error": {"message": "boom: CUDA OOM"}})]
    config = tmp_path / "assistant.yaml"
    config.write_text(f"base_url: {model_server.base_url}\nmax_tool_rounds: 0\n")
    ran = assistant_cli("--config", str(config), "--once", "hola")
    assert ran.returncode == 1
    spanish_only(ran.stderr)
    assert "CUDA" not in ran.stderr and "Detalle" not in ran.stderr
