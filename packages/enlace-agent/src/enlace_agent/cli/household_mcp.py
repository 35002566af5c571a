"""`enlace-assistant mcp`: what Enlace knows of a person (recall, remember, forget) and the
household's shopping list, as an MCP server for Home Assistant's own agent or any MCP client;
stdio (the key in ENLACE_API_KEY) or streamable HTTP (`--http`, on `web.api.mcp_port`, each
request with `Authorization: Bearer KEY`), with the endpoint's keys (`enlace-assistant token`).
The tools are the assistant's own (the registry's, made for the key's person, one home), plus
`recuerdos` to read what is remembered. Needs the `mcp` extra (and `web` for HTTP)."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from enlace_agent.cli.common import DEBUG_HELP, Parser, examples, fail, run_guarded

if TYPE_CHECKING:
    from enlace_config.schema.agent import AssistantConfig
    from mcp.server.lowlevel import Server

    from enlace_agent.household import Store
    from enlace_agent.household.tokens import ApiToken
    from enlace_agent.tools.protocol import Tool

KEY_ENV = "ENLACE_API_KEY"
RECALL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "recuerdos",
        "description": "Lo que Enlace recuerda de la persona y de la familia, lo más "
        "relacionado con «consulta» primero.",
        "parameters": {
            "type": "object",
            "properties": {"consulta": {"type": "string", "description": "de qué se trata"}},
        },
    },
}
BAD_KEY = "Clave no válida: crea una con «enlace-assistant token create»."


def key_tools(config: AssistantConfig, store: Store, key: ApiToken) -> dict[str, Tool]:
    """The registry's household and memory tools, made for the key's person (a household key:
    the list only)."""
    from enlace_agent.memory import MemoryStore, MemoryView
    from enlace_agent.tools import made
    from enlace_agent.tools.protocol import TurnContext, tool_name

    memory = None
    if key.holder is not None:
        view = MemoryView(MemoryStore(store, config.memory), key.holder)
        memory = view if view.active() else None
    context = TurnContext(
        config, person=key.holder, household=store, memory=memory, called_by_person=True
    )
    tools = [*made(context, "household"), *made(context, "memory")]
    return {tool_name(t): t for t in tools}


def recall(config: AssistantConfig, store: Store, key: ApiToken, query: str) -> str:
    from enlace_agent.memory import MemoryStore, MemoryView

    if key.holder is None:
        return "Una clave de la casa no tiene recuerdos de nadie."
    view = MemoryView(MemoryStore(store, config.memory), key.holder)
    if not view.active():
        return "La memoria de esta persona está desactivada o en pausa."
    found = view.recall(query)
    return "\n".join(f"{i}. {m.text}" for i, m in enumerate(found, 1)) or "No recuerdo nada."


def build_server(
    config: AssistantConfig, store: Store, key_of: Callable[[Any], ApiToken | None]
) -> Server[Any, Any]:
    """The MCP server; `key_of(request)` is the live key of a call (the HTTP request, or None
    on stdio), None when there is none."""
    import anyio
    from mcp import types
    from mcp.server.lowlevel import Server

    from enlace_agent.tools import REGISTRY

    server: Server[Any, Any] = Server("enlace")
    specs: list[dict[str, Any]] = [
        RECALL["function"],
        *(e.spec["function"] for e in REGISTRY if e.needs != "nothing"),
    ]

    def result(text: str, error: bool = False) -> types.CallToolResult:
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=text)], isError=error
        )

    @server.list_tools()
    async def list_tools() -> list[types.Tool]:  # pyright: ignore[reportUnusedFunction]
        return [
            types.Tool(name=s["name"], description=s["description"], inputSchema=s["parameters"])
            for s in specs
        ]

    @server.call_tool(validate_input=False)  # the tools' own models check the arguments
    async def call_tool(name: str, arguments: dict[str, Any]) -> types.CallToolResult:  # pyright: ignore[reportUnusedFunction]
        key = await anyio.to_thread.run_sync(key_of, server.request_context.request)
        if key is None:
            return result(BAD_KEY, True)
        if name == RECALL["function"]["name"]:
            query = str(arguments.get("consulta") or "")
            return result(await anyio.to_thread.run_sync(recall, config, store, key, query))
        tools = await anyio.to_thread.run_sync(key_tools, config, store, key)
        tool = tools.get(name)
        if tool is None:
            return result(
                f"Error: la herramienta «{name}» no está disponible con esta clave.", True
            )
        done = await anyio.to_thread.run_sync(tool.run, arguments)
        return result(done.content, done.error)

    return server


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="enlace-assistant mcp",
        description="Servidor MCP con la memoria de una persona (recuerdos, recordar, olvidar) "
        "y la lista de la compra de la casa. Por stdio usa la clave de "
        f"{KEY_ENV} (del entorno o de --env-file); con --http, la de cada petición "
        "(Authorization: Bearer CLAVE).",
        epilog=examples(
            "enlace-assistant mcp --env-file ~/.config/enlace/altavoz.env",
            "enlace-assistant mcp --http",
        ),
    )
    parser.add_argument("--http", action="store_true", help="HTTP en web.api.mcp_port")
    parser.add_argument("--config", type=Path, metavar="RUTA", help="fichero assistant.yaml")
    parser.add_argument("--env-file", type=Path, metavar="RUTA", help="fichero .env")
    parser.add_argument("--debug", action="store_true", help=DEBUG_HELP)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    return run_guarded("enlace-assistant mcp", build_parser().parse_args(argv), _serve)


def _serve(args: argparse.Namespace, secrets: list[str]) -> int:
    try:
        import anyio
        from mcp.server.stdio import stdio_server
    except ImportError:
        return fail('falta el SDK de MCP: instálalo con pip install "enlace-agent[mcp]".')
    from enlace_agent.cli.common import household_store
    from enlace_agent.household.tokens import ApiTokens

    opened = household_store(args)
    if isinstance(opened, str):
        return fail(opened)
    config, env, store = opened
    tokens = ApiTokens(store)
    people = {p.name for p in config.web.people}

    def live(given: str) -> ApiToken | None:
        return tokens.check(given, people) if given else None

    if args.http:
        return _serve_http(config, store, live)
    given = os.environ.get(KEY_ENV, env.get(KEY_ENV, "")).strip()
    secrets.append(given)
    if live(given) is None:
        return fail(
            f"{KEY_ENV} no tiene una clave válida (ni revocada ni de alguien que ya no está en "
            "web.people): crea una con «enlace-assistant token create» y ponla en "
            f"{KEY_ENV}, en el entorno o en el fichero de --env-file."
        )
    server = build_server(config, store, lambda _request: live(given))

    async def serve() -> None:
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())

    anyio.run(serve)
    return 0


def bearer(headers: Any) -> str:
    scheme, _, given = str(headers.get("authorization", "")).partition(" ")
    return given.strip() if scheme.lower() == "bearer" else ""


def http_app(config: AssistantConfig, store: Store, live: Callable[[str], ApiToken | None]) -> Any:
    """The streamable HTTP app at /mcp: a request without a live key gets 401 before MCP."""
    from collections.abc import AsyncGenerator
    from contextlib import asynccontextmanager

    from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
    from starlette.applications import Starlette
    from starlette.datastructures import Headers
    from starlette.responses import JSONResponse
    from starlette.routing import Mount
    from starlette.types import Receive, Scope, Send

    server = build_server(config, store, lambda request: live(bearer(request.headers)))
    manager = StreamableHTTPSessionManager(server, stateless=True, json_response=True)

    async def guarded(scope: Scope, receive: Receive, send: Send) -> None:
        if live(bearer(Headers(scope=scope))) is None:
            await JSONResponse({"error": BAD_KEY}, 401)(scope, receive, send)
            return
        await manager.handle_request(scope, receive, send)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncGenerator[None]:
        async with manager.run():
            yield

    return Starlette(routes=[Mount("/mcp", app=guarded)], lifespan=lifespan)


def _serve_http(
    config: AssistantConfig, store: Store, live: Callable[[str], ApiToken | None]
) -> int:
    try:
        import uvicorn
    except ImportError:
        return fail('falta el servidor web: instálalo con pip install "enlace-agent[web]".')
    app = http_app(config, store, live)
    sys.stderr.write(f"Servidor MCP en http://{config.web.host}:{config.web.api.mcp_port}/mcp\n")
    uvicorn.run(app, host=config.web.host, port=config.web.api.mcp_port, log_config=None)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
