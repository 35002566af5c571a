"""What every tool of the assistant shares. A tool has `spec` (an OpenAI-style function spec whose
`parameters` is the JSON schema of its pydantic arguments model) and `run(arguments) -> ToolResult`;
it never raises for a model's mistake: bad arguments and failures come back with `error=True` and a
Spanish text the model can act on. Its `ToolEntry` says how it is made from a `TurnContext` (who
speaks, the household, the settings, the services the assistant shares), when it is offered, and
the paragraph of the system prompt that presents it."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol, TypeVar, cast

from pydantic import BaseModel, ValidationError

if TYPE_CHECKING:
    from enlace_config.schema.agent import AssistantConfig

    from enlace_agent.household import Store
    from enlace_agent.memory import Memory, MemoryView
    from enlace_agent.search.chain import SearchChain


@dataclass(frozen=True)
class Source:
    """A page a tool showed the model: where a fact may come from, and who found it."""

    title: str
    url: str
    provider: str

    def to_dict(self) -> dict[str, str]:
        return asdict(self)


@dataclass(frozen=True)
class Proposal:
    """What a tool did not do on the model's word alone and asks the person instead (the page's
    and the terminal's `question` with «Sí / No»): `action` is the tool's name, `text` what it is
    about, `scope` and `memory_id` what a yes does (`enlace_agent.tools.memory.accept`)."""

    action: str
    question: str
    text: str
    scope: str | None = None
    memory_id: int | None = None


@dataclass(frozen=True)
class ToolResult:
    """`content` goes to the model; `notice`, when set, is a line for the person (the page shows
    it under the answer, the terminal chat on stderr): without one, a failed call shows its
    registry line (`enlace_agent.tools`). `proposal`: what the person is asked before it is
    done."""

    content: str
    sources: tuple[Source, ...] = field(default=())
    error: bool = False
    provider: str | None = None
    notice: str | None = None
    proposal: Proposal | None = None


class Tool(Protocol):
    @property
    def spec(self) -> dict[str, Any]: ...

    def run(self, arguments: str | Mapping[str, Any]) -> ToolResult: ...


@dataclass(frozen=True)
class Services:
    """What the tools share across turns, built once with the assistant: the search chain (None:
    the user's, built on first use)."""

    chain: SearchChain | None = None


@dataclass(frozen=True)
class TurnContext:
    """What a tool may need to be made for one turn: the settings, the shared services, who speaks
    (None: nobody known, the terminal without --person), the household's database (None: not
    open), and that person's memory (when active) with the memories this turn's prompt numbered
    (`olvidar 3` means the third of them), and what the person said this turn."""

    config: AssistantConfig
    services: Services = field(default_factory=Services)
    person: str | None = None
    household: Store | None = None
    memory: MemoryView | None = None
    numbered: Sequence[Memory] = ()
    question: str = ""  # the person's message of this turn (what they asked for)
    # The person's own program calls the tools by name (MCP with their key), no model's guess in
    # between: a call is what they asked for, as `enlace-assistant memory add` is.
    called_by_person: bool = False


# What a tool needs to be offered: nothing (made once, with the assistant), the household's
# database, or a person's active memory (both made for each turn).
Needs = Literal["nothing", "household", "memory"]


@dataclass(frozen=True)
class ToolEntry:
    name: str
    spec: Mapping[str, Any]
    status: str  # shown while it runs («Buscando en internet…»)
    failed: str  # shown when it fails, unless its result says more
    make: Callable[[TurnContext], Tool]
    prompt: str = ""  # its paragraph of the system prompt ("": presented by another's)
    needs: Needs = "nothing"

    def enabled(self, config: AssistantConfig) -> bool:
        """Whether `config` lets the model be offered this tool at all (`--tools-json`)."""
        if config.max_tool_rounds == 0:
            return False
        return config.memory.enabled or self.needs != "memory"

    def offered(self, context: TurnContext) -> bool:
        """Whether this turn offers it: enabled, and what it needs is there."""
        if not self.enabled(context.config):
            return False
        if self.needs == "household":
            return context.household is not None
        if self.needs == "memory":
            return context.memory is not None
        return True


def tool_name(tool: Tool) -> str:
    return str(tool.spec["function"]["name"])


def function_spec(name: str, description: str, arguments: type[BaseModel]) -> dict[str, Any]:
    """The OpenAI-style spec of a tool whose arguments are `arguments` (the one home of the
    argument rules: the schema the model sees and the check of what it sends are the same)."""
    schema = arguments.model_json_schema()
    schema.pop("title", None)
    for prop in schema.get("properties", {}).values():
        cast("dict[str, Any]", prop).pop("title", None)
    return {
        "type": "function",
        "function": {"name": name, "description": description, "parameters": schema},
    }


PREVIEW_CHARS = 200  # characters of a model's text quoted in a message or a log line


def preview(text: str, limit: int = PREVIEW_CHARS) -> str:
    """`text` as one short line for a message or a log (a model may send megabytes, or a
    terminal's escape sequences): control characters and runs of white space become one space,
    and past `limit` characters it is cut, saying how long it was."""
    from enlace_agent.shared import one_line

    line = one_line(text[: limit + 1])
    return f"{line[:limit]}… ({len(text)} caracteres)" if len(text) > limit else line


class BadArguments(ValueError):
    """The arguments a model sent do not fit the tool; the message is Spanish, for the model."""


NOT_JSON = "los argumentos no son JSON válido."  # the model's arguments do not parse


_TYPES_ES = {"integer": "un entero", "number": "un número", "string": "un texto"}

M = TypeVar("M", bound=BaseModel)


def parse_arguments(model: type[M], arguments: str | Mapping[str, Any]) -> M:
    """`arguments` (the JSON text a model emits, or a mapping) checked by `model`, else
    `BadArguments` with one Spanish sentence per problem."""
    if isinstance(arguments, str):
        from enlace_agent.shared import loads_json

        try:
            arguments = loads_json(arguments or "{}")
        except ValueError:
            raise BadArguments(NOT_JSON) from None
    if not isinstance(arguments, Mapping):
        raise BadArguments("los argumentos deben ser un objeto JSON.")
    try:
        return model.model_validate(arguments)
    except ValidationError as exc:
        raise BadArguments(" ".join(_explain(model, exc))) from None


def _explain(model: type[BaseModel], exc: ValidationError) -> list[str]:
    props: dict[str, Any] = model.model_json_schema().get("properties", {})
    unknown = [str(e["loc"][0]) for e in exc.errors() if e["type"] == "extra_forbidden"]
    lines = [f"argumentos desconocidos: {', '.join(unknown)}."] if unknown else []
    for err in exc.errors():
        name = str(err["loc"][0]) if err["loc"] else "?"
        prop: dict[str, Any] = props.get(name, {})
        if err["type"] == "extra_forbidden":
            continue
        if err["type"] in ("missing", "string_too_short"):
            lines.append(f"falta «{name}».")
        elif err["type"] == "string_too_long":
            lines.append(
                f"«{name}» es demasiado larga (máximo {prop.get('maxLength')} caracteres)."
            )
        else:
            kind = _TYPES_ES.get(str(prop.get("type")), "otro tipo de valor")
            bounds = (
                f" entre {prop['minimum']} y {prop['maximum']}"
                if "minimum" in prop and "maximum" in prop
                else ""
            )
            lines.append(f"«{name}» debe ser {kind}{bounds}.")
    return lines
