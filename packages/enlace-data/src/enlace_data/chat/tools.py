"""The tool specs a chat set offers: read from a file (what `enlace-assistant --tools-json` prints)
and checked to hold the search tool the built-in conversations call."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from enlace_config.contracts import SEARCH_TOOL_NAME

from enlace_data.errors import DataError

__all__ = ["check_tools", "read_tools", "tool_name"]


def tool_name(tool: dict[str, Any]) -> str:
    return str((tool.get("function") or {}).get("name", ""))


def read_tools(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except OSError as e:
        raise DataError(f"cannot read ({e.strerror})", path=path) from e
    except ValueError as e:
        raise DataError(f"not JSON ({e})", path=path) from e


def check_tools(tools: Any, where: str) -> list[dict[str, Any]]:
    """`tools` (OpenAI function specs, e.g. what `enlace-assistant --tools-json` prints) if they
    offer the search tool the templates call, with its `consulta` argument; else a DataError."""
    if not isinstance(tools, list) or not all(isinstance(t, dict) for t in tools):
        raise DataError(f"{where}: expected a JSON list of tool specs")
    for tool in tools:
        fn = tool.get("function") or {}
        properties = (fn.get("parameters") or {}).get("properties") or {}
        if fn.get("name") == SEARCH_TOOL_NAME and "consulta" in properties:
            return tools
    raise DataError(
        f"{where}: no tool named {SEARCH_TOOL_NAME!r} with a 'consulta' argument: the built-in "
        "conversations call that tool"
    )
