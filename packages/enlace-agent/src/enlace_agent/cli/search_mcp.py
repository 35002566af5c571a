"""`enlace-search-mcp`: the search as an MCP server (stdio), for the assistants a family already
uses. Needs the `mcp` extra. It offers the assistant's own tool (`buscar_en_internet`, same schema,
same text); bad arguments and failed searches come back as an error result, never a crash. Settings
as `enlace-search`; logs go to stderr (stdout carries the protocol)."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from enlace_agent.cli.common import DEBUG_HELP, Parser, examples, fail, run_guarded

if TYPE_CHECKING:
    from mcp.server.lowlevel import Server

    from enlace_agent.tools.search import SearchTool


def build_server(tool: SearchTool) -> Server[Any, Any]:
    """An MCP server offering the search tool."""
    import anyio
    from mcp import types
    from mcp.server.lowlevel import Server

    function: dict[str, Any] = tool.spec["function"]
    server: Server[Any, Any] = Server("enlace-search")

    @server.list_tools()
    async def list_tools() -> list[types.Tool]:  # pyright: ignore[reportUnusedFunction]
        return [
            types.Tool(
                name=function["name"],
                description=function["description"],
                inputSchema=function["parameters"],
            )
        ]

    # The arguments are checked by the tool's own model (one validator), not by the SDK.
    @server.call_tool(validate_input=False)
    async def call_tool(name: str, arguments: dict[str, Any]) -> types.CallToolResult:  # pyright: ignore[reportUnusedFunction]
        if name != function["name"]:
            text = f"Error: la herramienta «{name}» no existe; la única es {function['name']}."
            return types.CallToolResult(
                content=[types.TextContent(type="text", text=text)], isError=True
            )
        result = await anyio.to_thread.run_sync(tool.run, arguments)
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=result.content)], isError=result.error
        )

    return server


def _parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="enlace-search-mcp",
        description="Servidor MCP (stdio) con la búsqueda privada de Enlace.",
        epilog=examples("enlace-search-mcp --config ~/.config/enlace/search.yaml"),
    )
    parser.add_argument("--config", type=Path, metavar="RUTA", help="fichero search.yaml")
    parser.add_argument("--env-file", type=Path, metavar="RUTA", help="fichero .env con claves")
    parser.add_argument("--debug", action="store_true", help=DEBUG_HELP)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    return run_guarded("enlace-search-mcp", _parser().parse_args(argv), _serve)


def _serve(args: argparse.Namespace, secrets: list[str]) -> int:
    try:
        import anyio
        from mcp.server.stdio import stdio_server
    except ImportError:
        return fail('falta el SDK de MCP: instálalo con pip install "enlace-agent[mcp]".')
    from enlace_agent.cli.search import KEY_ENV, missing_key_message, only_duckduckgo_in
    from enlace_agent.search.chain import SearchChain
    from enlace_agent.search.errors import MissingCredential
    from enlace_agent.search.settings import load_config, load_env
    from enlace_agent.settings import SettingsError, settings_file
    from enlace_agent.tools.search import SearchTool

    try:
        env = load_env(args.env_file)
        secrets.extend(k for k in (env.get(KEY_ENV, ""),) if k)
        config = load_config(args.config)
        try:
            chain = SearchChain(config, env=env)
        except MissingCredential as exc:
            way_out = only_duckduckgo_in(settings_file("search.yaml", args.config, env))
            return fail(missing_key_message(exc.provider, exc.env_var, env, way_out))
    except SettingsError as exc:
        return fail(f"configuración de búsqueda no válida.\n{exc}")
    server = build_server(SearchTool(chain))

    async def serve() -> None:
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())

    anyio.run(serve)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
