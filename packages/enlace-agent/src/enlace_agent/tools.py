"""The assistant's tools, in one registry: each tool's name, its spec (what the model is offered),
how it is made (its runner), and the Spanish lines the family sees while it runs and when it fails.
The prompt, the loop, the page, the terminal chat and `enlace-assistant --tools-json` all read it
here. Adding a tool means one module (its arguments, spec and runner, as in `search/tool.py` or
`memory/tools.py`, with its `ToolEntry`) and one line in `REGISTRY`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from enlace_agent.memory.tools import FORGET, REMEMBER
from enlace_agent.search.tool import SEARCH
from enlace_agent.toolkit import ToolEntry

if TYPE_CHECKING:
    from enlace_config.schema.agent import AssistantConfig

USING = "Usando una herramienta…"  # a tool the registry does not know (the model made it up)
FAILED = "Una herramienta ha fallado: la respuesta puede estar incompleta."


# Every tool, in the order the model is offered them.
REGISTRY: tuple[ToolEntry, ...] = (SEARCH, REMEMBER, FORGET)


def entry(name: str) -> ToolEntry | None:
    return next((e for e in REGISTRY if e.name == name), None)


def status_line(name: str) -> str:
    found = entry(name)
    return found.status if found else USING


def failed_line(name: str) -> str:
    found = entry(name)
    return found.failed if found else FAILED


def offered_specs(config: AssistantConfig) -> list[dict[str, Any]]:
    """The specs of every tool the model is offered under `config` (`--tools-json`)."""
    return [dict(e.spec) for e in REGISTRY if e.offered(config)]
