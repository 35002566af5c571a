"""The memory and the shopping list over MCP (issue 38), with the endpoint's keys: a real `mcp`
client over streamable HTTP (uvicorn in a thread) and over stdio (a subprocess); Ana's memory
reaches Ana's key on both, never Luis's; no key or a wrong one is refused."""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio
import httpx
import uvicorn
from enlace_config.schema.agent import AssistantConfig
from mcp import ClientSession, StdioServerParameters, types
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client

from enlace_agent.cli.household_mcp import http_app
from enlace_agent.household import Store
from enlace_agent.household.tokens import ApiTokens


def text_of(result: types.CallToolResult) -> str:
    return "".join(c.text for c in result.content if isinstance(c, types.TextContent))


async def calls(
    open_session: Any, steps: Sequence[tuple[str, dict[str, Any]]]
) -> tuple[list[str], list[types.CallToolResult]]:
    with anyio.fail_after(60):
        async with open_session() as (read, write, *_), ClientSession(read, write) as client:
            await client.initialize()
            names = [t.name for t in (await client.list_tools()).tools]
            return names, [await client.call_tool(n, a) for n, a in steps]


def test_memory_and_list_over_http_and_stdio_isolated_by_key(tmp_path: Path) -> None:
    database = tmp_path / "web.sqlite3"
    settings = {"web": {"database": str(database), "people": [{"name": "Ana"}, {"name": "Luis"}]}}
    config_file = tmp_path / "assistant.yaml"
    config_file.write_text(json.dumps(settings))
    config = AssistantConfig.model_validate(settings)
    store = Store(database)
    tokens = ApiTokens(store)
    ana, luis = tokens.create("Ana", "móvil")[0], tokens.create("Luis", "portátil")[0]
    family = ("Ana", "Luis")
    app = http_app(config, store, lambda given: tokens.check(given, family) if given else None)
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_config=None))
    threading.Thread(target=server.run, daemon=True).start()
    deadline = time.monotonic() + 20
    while not server.started:
        assert time.monotonic() < deadline
        time.sleep(0.02)
    url = f"http://127.0.0.1:{server.servers[0].sockets[0].getsockname()[1]}/mcp/"

    def over_http(key: str) -> Any:
        client = httpx.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=30)
        return lambda: streamable_http_client(url, http_client=client)

    try:
        remember = ("recordar", {"texto": "Mi hija se llama Lucía"})
        recall: tuple[str, dict[str, Any]] = ("recuerdos", {"consulta": "hija"})
        names, [kept, found] = anyio.run(calls, over_http(ana), [remember, recall])
        assert {"recuerdos", "recordar", "olvidar", "lista_de_la_compra"} <= set(names)
        assert not kept.isError and "Lucía" in text_of(found)
        add = ("lista_de_la_compra", {"accion": "añadir", "cosas": ["leche"]})
        _, [theirs, added] = anyio.run(calls, over_http(luis), [recall, add])
        assert "Lucía" not in text_of(theirs) and not added.isError
        for headers in ({}, {"Authorization": "Bearer enlace-nada"}):
            refused = httpx.post(url, json={}, headers=headers)
            assert refused.status_code == 401 and "Ana" not in refused.text
    finally:
        server.should_exit = True

    def over_stdio(key: str) -> Any:
        params = StdioServerParameters(
            command=sys.executable,
            args=["-m", "enlace_agent.cli.assistant", "mcp", "--config", str(config_file)],
            env={**os.environ, "ENLACE_API_KEY": key, "XDG_CONFIG_HOME": str(tmp_path)},
        )
        return lambda: stdio_client(params)

    see = ("lista_de_la_compra", {"accion": "ver"})
    _, [mine, listed] = anyio.run(calls, over_stdio(ana), [recall, see])
    assert "Lucía" in text_of(mine) and "leche" in text_of(listed)
    _, [not_mine] = anyio.run(calls, over_stdio(luis), [recall])
    assert "Lucía" not in text_of(not_mine)


def test_stdio_without_a_live_key_is_one_paragraph_exit_2(
    in_process: Any, tmp_path: Path, monkeypatch: Any
) -> None:
    from enlace_agent.cli.assistant import main

    config = tmp_path / "assistant.yaml"
    config.write_text(json.dumps({"web": {"database": str(tmp_path / "web.sqlite3")}}))
    for key in ("", "enlace-nada"):
        monkeypatch.setenv("ENLACE_API_KEY", key)
        ran = in_process(main, "mcp", "--config", str(config))
        assert ran.returncode == 2 and "ENLACE_API_KEY no tiene una clave válida" in ran.stderr
        assert "Traceback" not in ran.stderr and ran.stdout == ""
