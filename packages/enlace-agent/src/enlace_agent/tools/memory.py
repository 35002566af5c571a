"""`recordar` and `olvidar`: the model writes and erases one person's memories (or the
household's) through the person's `MemoryView`, never another's. Their lines in the registry
(`enlace_agent.tools`) are `REMEMBER` and `FORGET`; their paragraph closes the prompt's memory
block (`assistant.prompt.memory_block`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal

from enlace_config.contracts import FORGET_TOOL_NAME, MEMORY_TOOLS, REMEMBER_TOOL_NAME
from pydantic import BaseModel, ConfigDict, Field

from enlace_agent.memory.store import Memory, MemoryRefused
from enlace_agent.memory.view import MemoryView
from enlace_agent.shared import is_number
from enlace_agent.tools.protocol import (
    BadArguments,
    ToolEntry,
    ToolResult,
    TurnContext,
    function_spec,
    parse_arguments,
)


class RememberArguments(BaseModel):
    model_config = ConfigDict(extra="forbid")

    texto: str = Field(min_length=1, description="Lo que hay que recordar, en una frase.")
    alcance: Literal["personal", "familia"] = Field(
        default="personal", description="personal: de quien habla; familia: de todos."
    )


class ForgetArguments(BaseModel):
    model_config = ConfigDict(extra="forbid")

    recuerdo: str = Field(min_length=1, description="Su número en la lista, o sus palabras.")


REMEMBER_SPEC = function_spec(
    REMEMBER_TOOL_NAME, "Guarda un recuerdo de la familia.", RememberArguments
)
FORGET_SPEC = function_spec(FORGET_TOOL_NAME, "Borra un recuerdo.", ForgetArguments)


class RememberTool:
    spec = REMEMBER_SPEC

    def __init__(self, view: MemoryView) -> None:
        self.view = view

    def run(self, arguments: str | Mapping[str, Any]) -> ToolResult:
        try:
            args = parse_arguments(RememberArguments, arguments)
            memory, new = self.view.remember(args.texto, args.alcance)
        except BadArguments as exc:
            return ToolResult(f"Error: {exc}", error=True)
        except MemoryRefused as exc:
            return ToolResult(f"Error: {exc}", error=True, notice=str(exc))
        said = "Guardado" if new else "Ya estaba guardado"
        whose = "de la familia" if memory.scope == "familia" else f"de {self.view.person}"
        return ToolResult(
            f"{said} (recuerdo {whose}): «{memory.text}».",
            notice=f"{'Recordaré' if new else 'Ya lo recordaba'}: «{memory.text}»",
        )


class ForgetTool:
    spec = FORGET_SPEC

    def __init__(self, view: MemoryView, numbered: Sequence[Memory]) -> None:
        self.view = view
        self.numbered = list(numbered)

    def run(self, arguments: str | Mapping[str, Any]) -> ToolResult:
        try:
            args = parse_arguments(ForgetArguments, arguments)
        except BadArguments as exc:
            return ToolResult(f"Error: {exc}", error=True)
        wanted = args.recuerdo.strip().strip("«»\"'.")
        if is_number(wanted) and 1 <= int(wanted) <= len(self.numbered):
            chosen: Memory | None = self.numbered[int(wanted) - 1]
        else:
            chosen = self.view.find(wanted)
        forgotten = self.view.forget(chosen.id) if chosen is not None else None
        if forgotten is None:
            return ToolResult(
                f"Error: no hay ningún recuerdo que diga «{wanted}».",
                error=True,
                notice="No he encontrado ese recuerdo para olvidarlo.",
            )
        return ToolResult(f"Olvidado: «{forgotten.text}».", notice=f"Olvidé: «{forgotten.text}»")


def _memory_of(context: TurnContext) -> MemoryView:
    if context.memory is None:  # the registry makes these only with a person's active memory
        raise ValueError("a memory tool needs a person's memory")
    return context.memory


REMEMBER = ToolEntry(
    REMEMBER_TOOL_NAME,
    REMEMBER_SPEC,
    status="Guardando en la memoria…",
    failed="No se ha podido guardar el recuerdo.",
    make=lambda context: RememberTool(_memory_of(context)),
    prompt=MEMORY_TOOLS,  # for both: one paragraph speaks of recordar and olvidar
    needs="memory",
)
FORGET = ToolEntry(
    FORGET_TOOL_NAME,
    FORGET_SPEC,
    status="Borrando de la memoria…",
    failed="No se ha podido borrar el recuerdo.",
    make=lambda context: ForgetTool(_memory_of(context), context.numbered),
    needs="memory",
)
