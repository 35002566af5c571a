"""The assistant's tools, in one registry: each tool's name, its spec (what the model is offered),
how it is made (its runner), and the Spanish lines the family sees while it runs and when it fails.
The prompt, the loop, the page, the terminal chat and `enlace-assistant --tools-json` all read it
here. Adding a tool means one module (its arguments, spec and runner, as in `search/tool.py` or
`memory/tools.py`) and one line in `registry()`."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING, Any

from enlace_agent.toolkit import Tool

if TYPE_CHECKING:
    from enlace_config.schema.agent import AssistantConfig

    from enlace_agent.memory import Memory, MemoryView
    from enlace_agent.search.chain import SearchChain

USING = "Usando una herramienta…"  # a tool the registry does not know (the model made it up)
FAILED = "Una herramienta ha fallado: la respuesta puede estar incompleta."


@dataclass(frozen=True)
class ToolContext:
    """What a tool may need to be made: the search chain (None: the user's, built on first use),
    and for the personal tools, one person's memory with the memories this turn's prompt
    numbered (`olvidar 3` means the third of them)."""

    chain: SearchChain | None = None
    memory: MemoryView | None = None
    numbered: Sequence[Memory] = ()


@dataclass(frozen=True)
class ToolEntry:
    name: str
    spec: Mapping[str, Any]
    status: str  # shown while it runs («Buscando en internet…»)
    failed: str  # shown when it fails, unless its result says more
    make: Callable[[ToolContext], Tool]
    personal: bool = False  # needs a person's memory: made for each turn of that person

    def offered(self, config: AssistantConfig) -> bool:
        """Whether the model is offered this tool under `config`."""
        if config.max_tool_rounds == 0:
            return False
        return config.memory.enabled or not self.personal


@cache
def registry() -> tuple[ToolEntry, ...]:
    """Every tool, in the order the model is offered them."""
    from enlace_agent.memory.tools import FORGET, REMEMBER
    from enlace_agent.search.tool import SEARCH

    return (SEARCH, REMEMBER, FORGET)


def entry(name: str) -> ToolEntry | None:
    return next((e for e in registry() if e.name == name), None)


def status_line(name: str) -> str:
    found = entry(name)
    return found.status if found else USING


def failed_line(name: str) -> str:
    found = entry(name)
    return found.failed if found else FAILED


def offered_specs(config: AssistantConfig) -> list[dict[str, Any]]:
    """The specs of every tool the model is offered under `config` (`--tools-json`)."""
    return [dict(e.spec) for e in registry() if e.offered(config)]
