"""The assistant's tools wing: the protocol (`protocol.py`), each tool in its own module
(`search.py`, `memory.py`, `shopping.py`, each with its `ToolEntry`) and, here, the registry: each
tool's name, its spec (what the model is offered), how it is made from a turn's context, the
paragraph of the system prompt that presents it, and the Spanish lines the family sees while it
runs and when it fails. The prompt, the loop, the page, the terminal chat and
`enlace-assistant --tools-json` all read it here. Adding a tool means one module and one line in
`REGISTRY`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from enlace_agent.tools.memory import FORGET, REMEMBER
from enlace_agent.tools.protocol import Needs, Tool, ToolEntry, TurnContext
from enlace_agent.tools.search import SEARCH
from enlace_agent.tools.shopping import SHOPPING_LIST

if TYPE_CHECKING:
    from enlace_config.schema.agent import AssistantConfig

USING = "Usando una herramienta…"  # a tool the registry does not know (the model made it up)
FAILED = "Una herramienta ha fallado: la respuesta puede estar incompleta."


# Every tool, in the order the model is offered them.
REGISTRY: tuple[ToolEntry, ...] = (SEARCH, SHOPPING_LIST, REMEMBER, FORGET)


def entry(name: str) -> ToolEntry | None:
    return next((e for e in REGISTRY if e.name == name), None)


def status_line(name: str) -> str:
    found = entry(name)
    return found.status if found else USING


def failed_line(name: str) -> str:
    found = entry(name)
    return found.failed if found else FAILED


def offered_specs(config: AssistantConfig) -> list[dict[str, Any]]:
    """The specs of every tool the model may be offered under `config` (`--tools-json`)."""
    return [dict(e.spec) for e in REGISTRY if e.enabled(config)]


def made(context: TurnContext, needs: Needs) -> list[Tool]:
    """The tools that need `needs` and are offered in `context`, made for it."""
    return [e.make(context) for e in REGISTRY if e.needs == needs and e.offered(context)]


def prompt_paragraphs(context: TurnContext, needs: Needs) -> list[str]:
    """The system prompt's paragraphs of those tools, in the registry's order."""
    return [e.prompt for e in REGISTRY if e.needs == needs and e.offered(context) and e.prompt]
