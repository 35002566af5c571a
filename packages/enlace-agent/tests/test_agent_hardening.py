"""The assistant against a broken or hostile model server and careless configuration (issue 26):
deep JSON nesting on every path the agent reads JSON, an answer that never ends, a server that
never answers, half a character split across stream chunks, a 5 MB tool call echoed to the
terminal, a key pasted into the configuration; and every hint a message gives, followed as
written in a real process."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from enlace_config.schema.agent import AssistantConfig

from enlace_agent.assistant import (
    Assistant,
    Event,
    ModelResponseError,
    ToolCall,
    TurnEnd,
    build_client,
)
from enlace_agent.tools.search import TOOL_NAME, SearchTool

FIXTURES = Path(__file__).parent / "fixtures"
PASTED_KEY = "BSAkR3xQ9vLmN2pT7wY4zH8jF1cD6gE"  # shaped like a Brave Search API key
DEEP = 1_200  # levels: about 2,400 characters, well within one answer
MODEL_KEY = "sk-model-key-31b9e4-DO-NOT-LEAK"


def make(model_server: Any, search_tool: SearchTool, **overrides: Any) -> Assistant:
    config = AssistantConfig.model_validate({"base_url": model_server.base_url, **overrides})
    return Assistant(build_client(config, {}), tools=[search_tool], config=config)


def end_of(events: list[Event]) -> TurnEnd:
    last = events[-1]
    assert isinstance(last, TurnEnd)
    return last


def deep_array(levels: int = DEEP) -> str:
    return "[" * levels + "]" * levels


def sse(delta: dict[str, Any], finish: str | None = None) -> str:
    return json.dumps({"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})


def tool_contents(body: dict[str, Any]) -> list[str]:
    return [m["content"] for m in body["messages"] if m["role"] == "tool"]


# ------------------------------------------------------------------- 9: deep JSON nesting


def test_a_deep_tool_call_block_goes_back_to_the_model_as_a_broken_call(
    model_server: Any, search_tool: SearchTool
) -> None:
    block = f'<tool_call>{{"name": "{TOOL_NAME}", "arguments": {deep_array()}}}</tool_call>'
    model_server.script = [model_server.say(block, pieces=5), model_server.say("Sin búsqueda.")]
    end = end_of(list(make(model_server, search_tool).turn([], "hola")))
    assert end.text == "Sin búsqueda." and end.tool_rounds == 1
    (told,) = tool_contents(model_server.bodies[1])
    assert told.startswith("Error: la llamada no es JSON válido")


@pytest.mark.parametrize("levels", [DEEP, 800])
def test_deep_structured_arguments_are_bad_arguments(
    model_server: Any, search_tool: SearchTool, levels: int, caplog: pytest.LogCaptureFixture
) -> None:
    """As JSON text (streamed) and as an object inside a whole answer (not streamed)."""
    as_text = model_server.call(TOOL_NAME, deep_array(levels))
    model_server.script = [as_text, model_server.say("Vale.")]
    end = end_of(list(make(model_server, search_tool).turn([], "hola")))
    assert end.text == "Vale."
    (told,) = tool_contents(model_server.bodies[1])
    assert told.startswith("Error: los argumentos "), told[:200]  # not JSON, or not an object
    assert "Traceback" not in caplog.text and "RecursionError" not in caplog.text
    call = {"id": "c1", "type": "function", "function": {"name": TOOL_NAME, "arguments": "@"}}
    message = {"role": "assistant", "content": None, "tool_calls": [call]}
    whole = {"choices": [{"index": 0, "message": message, "finish_reason": "tool_calls"}]}
    nested = '{"a": ' * levels + "{}" + "}" * levels  # an object, not JSON text
    model_server.script = [
        model_server.raw(json.dumps(whole).replace('"@"', nested)),
        model_server.say("Vale."),
    ]
    try:
        end = end_of(list(make(model_server, search_tool, stream=False).turn([], "hola")))
    except ModelResponseError as exc:  # too deep to read at all: the ordinary error
        assert "malformed JSON" in str(exc) and levels == DEEP
    else:
        assert end.text == "Vale." and tool_contents(model_server.bodies[-1])[0].startswith(
            "Error: "
        )


@pytest.mark.parametrize("stream", [True, False])
def test_a_deep_answer_is_the_ordinary_malformed_answer_error(
    model_server: Any, search_tool: SearchTool, stream: bool
) -> None:
    deep = '{"choices": ' + deep_array() + "}"
    model_server.script = [model_server.sse([deep]) if stream else model_server.raw(deep)]
    with pytest.raises(ModelResponseError, match="malformed JSON"):
        list(make(model_server, search_tool, stream=stream).turn([], "hola"))


def test_deep_json_from_a_failing_server_is_still_read_as_an_error(
    http_server: Any, search_tool: SearchTool
) -> None:
    """The error body of a 404 (and the served-model list it asks for next) nested deep."""
    http_server.reply("/v1/chat/completions", 404, deep_array(), "application/json")
    http_server.reply("/v1/models", 200, '{"data": ' + deep_array() + "}", "application/json")
    config = AssistantConfig(base_url=http_server.url("/v1"))
    from enlace_agent.assistant import ModelNotFound

    with pytest.raises(ModelNotFound):
        list(Assistant(build_client(config, {}), tools=[], config=config).turn([], "hola"))


def test_the_json_helpers_and_the_tool_refuse_deep_nesting_as_ordinary_errors() -> None:
    from enlace_agent.search.models import loads_json, loads_object
    from enlace_agent.tools.protocol import BadArguments, parse_arguments
    from enlace_agent.tools.search import SearchArguments

    for levels in (DEEP, 15_000, 200_000):
        assert loads_object(deep_array(levels)) is None
        with pytest.raises(ValueError, match="nested"):
            loads_json('{"a": ' + deep_array(levels) + "}")
        with pytest.raises(BadArguments, match="no son JSON válido"):
            parse_arguments(SearchArguments, deep_array(levels))
    nested: Any = "x"
    for _ in range(5_000):
        nested = [nested]
    call = ToolCall.parse({"id": "c", "function": {"name": TOOL_NAME, "arguments": nested}}, "c")
    assert call.problem is not None and "anidad" in call.problem


def test_deep_files_of_the_agent_are_corrupt_files_not_crashes(tmp_path: Path) -> None:
    """The search's cool-down file and a snapshot's manifest and «verified» record: JSON the
    agent reads from disk (a snapshot may come from anywhere) is corrupt when too deep."""
    from enlace_agent import snapshot
    from enlace_agent.search.state import CooldownStore
    from enlace_agent.snapshot.archive import parse_manifest

    state = tmp_path / "search-state.json"
    state.write_text('{"cooldowns": ' + deep_array(15_000) + "}")
    assert CooldownStore(state).load() == {}  # ignored, as any corrupt state file
    archive = tmp_path / f"{snapshot.PREFIX}20261204T000000Z-manual.tar.gz"
    archive.write_bytes(b"not read here")
    archive.with_name(archive.name + snapshot.VERIFIED).write_text(deep_array(15_000))
    (listed,) = snapshot.snapshots(tmp_path)
    assert listed.verified is None
    with pytest.raises(snapshot.ArchiveRefused, match="manifiesto no se puede leer"):
        parse_manifest(archive, deep_array(15_000).encode())


def test_a_deep_request_body_is_an_ordinary_400(web_page: Callable[..., Any]) -> None:
    page = web_page()
    with page.client() as client:
        for levels in (DEEP, 15_000):
            body = '{"name": ' + deep_array(levels) + "}"
            answer = client.post(
                "/api/login", content=body, headers={"Content-Type": "application/json"}
            )
            assert answer.status_code == 400, answer.text
            assert answer.json()["error"] == "Petición no válida."


# ------------------------------------------------------------------- 11: an answer that never ends


ENDLESS = {
    "text": lambda m: m.endless(f"data: {sse({'content': 'bla '})}\n\n"),
    "tool_call_arguments": lambda m: m.endless(
        f"data: {sse({'tool_calls': [{'index': 0, 'function': {'arguments': 'xx'}}]})}\n\n",
        head=f"data: {sse({'tool_calls': [{'index': 0, 'id': 'c', 'function': {'name': TOOL_NAME}}]})}\n\n",
    ),
    "tool_call_block": lambda m: m.endless(
        "data: " + sse({"content": "{{{{"}) + "\n\n",
        head=f"data: {sse({'content': 'Busco. <tool_call>'})}\n\n",
    ),
    "one_endless_line": lambda m: m.endless("x", head='data: {"choices": [{"delta": {"content": "'),
    "whole_answer": lambda m: m.endless(
        "bla ",
        head='{"choices": [{"message": {"content": "',
        content_type="application/json",
    ),
    "keep_alive_only": lambda m: m.endless(": ping\n\n"),
}


@pytest.mark.parametrize("kind", list(ENDLESS))
def test_an_endless_answer_is_cut_with_a_spanish_note(
    model_server: Any, search_tool: SearchTool, kind: str
) -> None:
    model_server.script = [ENDLESS[kind](model_server)]
    assistant = make(
        model_server, search_tool, stream=kind != "whole_answer", max_answer_chars=50_000
    )
    started = time.monotonic()
    end = end_of(list(assistant.turn([], "hola")))
    assert time.monotonic() - started < 20  # the whole 180 s budget was the only bound
    assert end.stopped == "max_answer_chars", end
    assert end.text.endswith("(La respuesta era demasiado larga y se ha cortado.)")
    assert len(end.text) < 50_000 + 100 and end.tool_rounds == 0
    if kind == "text":
        assert end.text.startswith("bla bla") and len(end.text) > 49_000


def test_the_answer_limit_is_documented_in_the_shipped_yaml() -> None:
    shipped = Path(__file__).parents[3] / "configs" / "agent" / "assistant.yaml"
    text = shipped.read_text(encoding="utf-8")
    for key in ("max_answer_chars", "max_response_bytes"):
        default = AssistantConfig.model_fields[key].default
        assert re.search(rf"^{key}: {default}\b", text, re.M), key


# ------------------------------------------------------------------- surrogates from the model


@pytest.mark.parametrize("stream", [True, False])
def test_the_model_cannot_drive_the_terminal(
    model_server: Any, search_tool: SearchTool, stream: bool
) -> None:
    """The answer goes to a terminal: control characters (ESC, BEL, NUL) are dropped, the lines
    and tabs of the answer kept."""
    model_server.script = [model_server.say("Hola\x1b[2J\x1b]0;x\x07\x00.\n\t- uno", pieces=4)]
    end = end_of(list(make(model_server, search_tool, stream=stream).turn([], "hola")))
    assert end.text == "Hola[2J]0;x.\n\t- uno"


def test_half_an_emoji_per_chunk_is_joined_and_a_lone_half_replaced(
    model_server: Any, search_tool: SearchTool
) -> None:
    pieces = [
        '{"choices": [{"index": 0, "delta": {"content": "Hola \\ud83d"}}]}',
        '{"choices": [{"index": 0, "delta": {"content": "\\ude00 y \\ud800"}}]}',
        '{"choices": [{"index": 0, "delta": {"content": "."}, "finish_reason": "stop"}]}',
    ]
    model_server.script = [model_server.sse(pieces)]
    events = list(make(model_server, search_tool).turn([], "hola"))
    end = end_of(events)
    assert end.text == "Hola \U0001f600 y \ufffd."
    for event in events:  # every piece can be written out (UTF-8, a web page, a terminal)
        json.dumps(event.to_dict(), ensure_ascii=False).encode("utf-8")


# ------------------------------------------------------------------- the CLI, in real processes


def assistant_cli(*args: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    proc = subprocess.run(
        [sys.executable, "-m", "enlace_agent.cli.assistant", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **(env or {})},
        stdin=subprocess.DEVNULL,
    )
    return proc.returncode, proc.stdout, proc.stderr


@pytest.fixture
def files(assistant_files: dict[str, Path]) -> dict[str, Path]:
    """assistant.yaml at the scripted model, its search.yaml at the local DuckDuckGo page."""
    return assistant_files


def test_a_key_pasted_into_the_config_is_never_printed(
    model_server: Any, tmp_path: Path, clean_env: dict[str, str]
) -> None:
    cfg = tmp_path / "assistant.yaml"
    cfg.write_text(f"base_url: {model_server.base_url}\napi_key_env: {PASTED_KEY}\n")
    for args in (["--once", "hola"], ["--tools-json"], ["serve"]):
        code, out, err = assistant_cli(*args, "--config", str(cfg))
        assert code == 2, err
        assert PASTED_KEY not in out + err and "api_key_env" in err, err
    assert model_server.bodies == []


def test_a_deep_tool_call_never_reaches_the_family_as_a_traceback(
    model_server: Any, files: dict[str, Path], clean_env: dict[str, str]
) -> None:
    block = f'<tool_call>{{"name": "{TOOL_NAME}", "arguments": {deep_array()}}}</tool_call>'
    model_server.script = [
        model_server.say(block),
        model_server.call(TOOL_NAME, deep_array()),
        model_server.say("Listo."),
    ]
    code, out, err = assistant_cli("--config", str(files["assistant"]), "--once", "hola")
    assert code == 0 and out.startswith("Enlace: Listo."), err
    assert "Traceback" not in err and "inesperado" not in err and "Recursion" not in err


def test_a_huge_tool_call_is_echoed_as_a_short_preview(
    model_server: Any, files: dict[str, Path], clean_env: dict[str, str]
) -> None:
    huge = {"consulta": "tortilla " + "x" * 5_000_000, "otro": "\x1b[2J\x1b[31mrojo"}
    cfg = json.loads(files["assistant"].read_text())  # answers of 5 MB allowed
    limits = {"max_answer_chars": 10_000_000, "max_response_bytes": 100_000_000}
    files["assistant"].write_text(json.dumps({**cfg, **limits}))
    model_server.script = [
        model_server.call(TOOL_NAME, huge),
        model_server.call("herramienta_" + "y" * 1_000_000, {"consulta": "z" * 1_000_000}),
        model_server.say("Listo."),
    ]
    code, out, err = assistant_cli("--config", str(files["assistant"]), "--once", "hola")
    assert code == 0 and out.startswith("Enlace: Listo."), err[-2000:]
    lines = [line for line in err.splitlines() if line.startswith("(usando ")]
    assert len(lines) == 2 and all(len(line) <= 300 for line in lines), [len(x) for x in lines]
    assert lines[0].startswith(f'(usando {TOOL_NAME} {{"consulta": "tortilla xxx')
    assert "…" in lines[0] and "\x1b" not in err
    told = tool_contents(model_server.bodies[2])[1]  # the unknown tool, named to the model
    assert len(told) < 1_000 and "no existe" in told


def test_a_page_title_cannot_drive_the_terminal() -> None:
    """Search results go to the terminal (`Fuentes:`, `enlace-search`) and to the model: a hostile
    page's title or snippet with escape sequences (ESC, DEL, bidi overrides) arrives as plain
    text."""
    from enlace_agent.search.brave import parse_brave_json

    title = "Tortilla\x1b[2J\x1b]0;hola\x07\u202e\x7f receta"
    body = {
        "web": {"results": [{"title": title, "url": "https://a.example/", "description": title}]}
    }
    (result,) = parse_brave_json(json.dumps(body))
    for text in (result.title, result.snippet):
        assert all(c.isprintable() for c in text), repr(text)
        assert text.startswith("Tortilla") and text.endswith("receta")


def test_a_model_server_that_never_answers_exits_1(
    http_server: Any, files: dict[str, Path], tmp_path: Path, clean_env: dict[str, str]
) -> None:
    url = http_server.silent("/v1/chat/completions", 30).removesuffix("/chat/completions")
    cfg = tmp_path / "slow.yaml"
    config = {
        "base_url": url,
        "search_config": str(files["search"]),
        "connect_timeout_s": 1,
        "read_timeout_s": 1.5,  # the budget, not a read timeout, ends the wait
    }
    cfg.write_text(json.dumps(config))
    started = time.monotonic()
    code, out, err = assistant_cli("--config", str(cfg), "--once", "hola", "--time-budget", "1.5")
    assert time.monotonic() - started < 30
    assert code == 1, (code, out, err[-3000:])
    assert "Se ha acabado el tiempo" in out  # the note is still shown ...
    assert "no respondió dentro del tiempo máximo" in err and "Traceback" not in err  # ... and why
    code, out, _ = assistant_cli(
        "--config", str(cfg), "--once", "hola", "--time-budget", "1.5", "--json"
    )
    assert code == 1 and json.loads(out)["stopped"] == "time_budget"


def test_an_endless_answer_exits_1_with_the_reason(
    model_server: Any, files: dict[str, Path], clean_env: dict[str, str]
) -> None:
    model_server.script = [model_server.endless(f"data: {sse({'content': 'bla '})}\n\n")]
    code, out, err = assistant_cli("--config", str(files["assistant"]), "--once", "hola")
    assert code == 1 and "demasiado larga" in out and "max_answer_chars" in err, err


# ------------------------------------------------------------------- 13: every hint, as written


def hint(pattern: str, message: str) -> re.Match[str]:
    found = re.search(pattern, message, re.S)
    assert found is not None, f"no hint matching {pattern!r} in:\n{message}"
    return found


def test_the_missing_key_hints_of_enlace_assistant_work_as_written(
    model_server: Any, tmp_path: Path, clean_env: dict[str, str], fake_key: str
) -> None:
    cfg = tmp_path / "assistant.yaml"
    cfg.write_text(json.dumps({"base_url": model_server.base_url}))  # default search: ddg + brave
    ask = ("--config", str(cfg), "--once", "hola")
    code, _, err = assistant_cli(*ask)
    assert code == 2 and "BRAVE_SEARCH_API_KEY" in err and "--providers" not in err, err
    # 1. the key in the .env file the message names
    env_file = Path(hint(r"en el fichero (\S+\.env)\b", err)[1])
    env_file.parent.mkdir(parents=True, exist_ok=True)
    env_file.write_text(f"BRAVE_SEARCH_API_KEY={fake_key}\n")
    model_server.script = [model_server.say("Hola.")]
    assert assistant_cli(*ask)[0] == 0
    env_file.unlink()
    # 2. ... or in a file named with --env-file RUTA
    assert "--env-file RUTA" in err
    other = tmp_path / "claves.env"
    other.write_text(f"BRAVE_SEARCH_API_KEY={fake_key}\n")
    model_server.script = [model_server.say("Hola.")]
    assert assistant_cli(*ask, "--env-file", str(other))[0] == 0
    # 3. only DuckDuckGo: the line the message gives, in the file it names (absent so far)
    found = hint(r"crea (\S+search\.yaml) con la línea «([^»]+)»", err)
    search_file = Path(found[1])
    assert not search_file.exists()
    search_file.parent.mkdir(parents=True, exist_ok=True)
    search_file.write_text(found[2] + "\n")
    model_server.script = [model_server.say("Hola.")]
    assert assistant_cli(*ask)[0] == 0
    # ... and in a search file that exists, named by search_config
    named = tmp_path / "mi-busqueda.yaml"
    named.write_text("region: es-es\nproviders: [duckduckgo, brave]\n")
    cfg.write_text(json.dumps({"base_url": model_server.base_url, "search_config": str(named)}))
    code, _, err = assistant_cli(*ask)
    found = hint(r"en (\S+\.yaml), cambia «providers» a «([^»]+)»", err)
    assert Path(found[1]) == named
    text = named.read_text()
    named.write_text(re.sub(r"^providers:.*$", f"providers: {found[2]}", text, flags=re.M))
    model_server.script = [model_server.say("Hola.")]
    assert assistant_cli(*ask)[0] == 0


def test_the_missing_key_hint_of_enlace_search_works_as_written(
    http_server: Any, tmp_path: Path, clean_env: dict[str, str]
) -> None:
    url = http_server.reply("/lite/", 200, (FIXTURES / "ddg_lite_results_es.html").read_bytes())
    cfg = tmp_path / "search.yaml"
    cfg.write_text(json.dumps({"duckduckgo": {"endpoint": url}, "state_file": str(tmp_path / "s")}))
    search = [sys.executable, "-m", "enlace_agent.cli.search", "--config", str(cfg), "tortilla"]
    first = subprocess.run(search, capture_output=True, text=True, timeout=60)
    assert first.returncode == 2
    flag = hint(r"añade (--providers \w+) a la orden", first.stderr)[1].split()
    second = subprocess.run([*search, *flag], capture_output=True, text=True, timeout=60)
    assert second.returncode == 0 and "Tortilla" in second.stdout, second.stderr


def test_the_missing_key_hint_of_enlace_search_mcp_works_as_written(
    tmp_path: Path, clean_env: dict[str, str]
) -> None:
    mcp = [sys.executable, "-m", "enlace_agent.cli.search_mcp"]
    run = lambda: subprocess.run(  # noqa: E731
        mcp, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL
    )
    first = run()
    assert first.returncode == 2 and "--providers" not in first.stderr, first.stderr
    found = hint(r"crea (\S+search\.yaml) con la línea «([^»]+)»", first.stderr)
    Path(found[1]).parent.mkdir(parents=True, exist_ok=True)
    Path(found[1]).write_text(found[2] + "\n")
    second = run()  # serves (stdin at its end: the session is over at once)
    assert second.returncode == 0 and "Error" not in second.stderr, second.stderr


def test_the_model_error_hints_work_as_written(
    model_server: Any,
    refused_url: str,
    files: dict[str, Path],
    tmp_path: Path,
    clean_env: dict[str, str],
) -> None:
    ask = ("--config", str(files["assistant"]), "--once", "hola")
    # nothing listening: --base-url
    code, _, err = assistant_cli(*ask, "--base-url", refused_url)
    assert code == 1
    flag = hint(r"\(o (--base-url)\)", err)[1]
    model_server.script = [model_server.say("Hola.")]
    assert assistant_cli(*ask, flag, model_server.base_url)[0] == 0
    # an unknown model: --model NOMBRE, with a name the message lists
    model_server.script = [model_server.status(404, {"error": {"message": "no such model"}})]
    code, _, err = assistant_cli(*ask, "--model", "otro")
    found = hint(r"sirve: ([\w.-]+)\)\. .*usa (--model) NOMBRE", err)
    model_server.script = [model_server.say("Hola.")]
    assert assistant_cli(*ask, found[2], found[1])[0] == 0
    # a refused key: define the variable the message names
    served = model_server.script

    def guarded(h: Any, body: dict[str, Any]) -> None:
        if h.headers.get("Authorization") != f"Bearer {MODEL_KEY}":
            model_server.status(401, {"error": {"message": "bad key"}})(h, body)
        else:
            model_server.say("Hola.")(h, body)

    served[:] = [guarded]
    code, _, err = assistant_cli(*ask)
    variable = hint(r"Define (\w+) con la clave correcta", err)[1]
    served[:] = [guarded]
    assert assistant_cli(*ask, env={variable: MODEL_KEY})[0] == 0
    # a slow server: the setting the message names, in assistant.yaml
    slow = tmp_path / "slow.yaml"
    base = json.loads(files["assistant"].read_text())
    slow.write_text(json.dumps({**base, "read_timeout_s": 1}))

    def late(h: Any, body: dict[str, Any]) -> None:  # thinks 1.5 s before the first byte
        time.sleep(1.5)
        model_server.say("Hola.")(h, body)

    model_server.script = [late]
    code, _, err = assistant_cli("--config", str(slow), "--once", "hola")
    assert code == 1, err
    key = hint(r"sube (\w+) en assistant\.yaml", err)[1]
    slow.write_text(json.dumps({**base, key: 10}))
    model_server.script = [late]
    assert assistant_cli("--config", str(slow), "--once", "hola")[0] == 0


def test_the_time_and_length_hints_work_as_written(
    model_server: Any, files: dict[str, Path], tmp_path: Path, clean_env: dict[str, str]
) -> None:
    cfg = tmp_path / "tight.yaml"
    base = json.loads(files["assistant"].read_text())
    cfg.write_text(json.dumps({**base, "connect_timeout_s": 1, "read_timeout_s": 1}))
    ask = ("--config", str(cfg), "--once", "hola")
    model_server.script = [model_server.say("Hola despacio.", pieces=4, delay=0.6)]
    code, _, err = assistant_cli(*ask, "--time-budget", "1.2")
    assert code == 1, err
    flag = hint(r"usa (--time-budget) SEGUNDOS", err)[1]
    model_server.script = [model_server.say("Hola despacio.", pieces=4, delay=0.6)]
    assert assistant_cli(*ask, flag, "10")[0] == 0
    long = "palabra " * 2_000  # 16,000 characters: a long answer, and a finite one
    cfg.write_text(json.dumps({**base, "max_answer_chars": 1_000}))
    model_server.script = [model_server.say(long)]
    code, _, err = assistant_cli(*ask)
    assert code == 1, err
    key = hint(r"sube (\w+) \(o \w+\) en assistant\.yaml", err)[1]
    cfg.write_text(json.dumps({**base, key: 20_000}))
    model_server.script = [model_server.say(long)]
    assert assistant_cli(*ask)[0] == 0


def test_the_other_hints_name_what_exists(clean_env: dict[str, str]) -> None:
    """--debug (every command's «vuelve a ejecutar con --debug»), the mcp extra of «pip install
    "enlace-agent[mcp]"», and llama-server's --jinja in «Arráncalo» (the Enlace models' tool calls
    need it, README)."""
    from importlib.metadata import metadata

    from enlace_agent.cli.assistant import build_parser
    from enlace_agent.cli.search import build_parser as search_parser
    from enlace_agent.cli.search_mcp import _parser as mcp_parser  # pyright: ignore[reportPrivateUsage]

    for parser in (build_parser(), search_parser(), mcp_parser()):
        assert parser.parse_known_args(["--debug", "x"])[0].debug
    assert "mcp" in (metadata("enlace-agent").get_all("Provides-Extra") or [])
    from enlace_agent.cli.assistant import START_SERVER

    assert "--jinja" in START_SERVER and "--port 8080" in START_SERVER
    assert AssistantConfig().base_url == "http://127.0.0.1:8080/v1"
