"""`recordar` and `olvidar`: the model writes and erases one person's memories (or the
household's) through the person's `MemoryView`, never another's. Their lines in the registry
(`enlace_agent.tools`) are `REMEMBER` and `FORGET`; their paragraph closes the prompt's memory
block (`assistant.prompt.memory_block`).

The person decides (issue 37): a call is carried out only when the person's message of that turn
asks for it (`asks`, with the words of `memory.remember_words` and `memory.forget_words` in
assistant.yaml). Otherwise nothing is written or erased: the call becomes a `Proposal` the page
and the terminal put to the person («¿Lo recuerdo? Sí / No»), and `accept` does it on a yes. A
small model asked the weather may «remember» an invented birthday; it stays a question."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from enlace_config.contracts import FORGET_TOOL_NAME, MEMORY_TOOLS, REMEMBER_TOOL_NAME
from pydantic import BaseModel, ConfigDict, Field

from enlace_agent.memory.store import Memory, MemoryRefused, plain
from enlace_agent.memory.view import MemoryView
from enlace_agent.shared import is_number
from enlace_agent.tools.protocol import (
    BadArguments,
    Proposal,
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


REMEMBER_QUESTION = "¿Lo recuerdo?"
FORGET_QUESTION = "¿Lo olvido?"


def _words(text: str) -> str:
    return " ".join(re.findall(r"\w+", plain(text)))


def asks(message: str, phrases: Sequence[str]) -> bool:
    """Whether the person's `message` says one of `phrases` as whole words, capitals and accents
    aside («Apúntalo» says «apuntalo»; «¿Recuerdas…?» does not say «recuerda»)."""
    said = f" {_words(message)} "
    return any(f" {words} " in said for p in phrases if (words := _words(p)))


class RememberTool:
    spec = REMEMBER_SPEC

    def __init__(self, view: MemoryView, asked: bool = True) -> None:
        """`asked`: the person's message asked to remember (else a call is only proposed)."""
        self.view = view
        self.asked = asked

    def run(self, arguments: str | Mapping[str, Any]) -> ToolResult:
        try:
            args = parse_arguments(RememberArguments, arguments)
            if not self.asked:  # checked as if kept (a secret is refused, never proposed)
                text = self.view.memories.clean(args.texto)
                return ToolResult(
                    f"No guardado: {self.view.person} no te pidió recordarlo; se le pregunta si "
                    "quiere guardarlo.",
                    proposal=Proposal(REMEMBER_TOOL_NAME, REMEMBER_QUESTION, text, args.alcance),
                )
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

    def __init__(self, view: MemoryView, numbered: Sequence[Memory], asked: bool = True) -> None:
        """`asked`: the person's message asked to forget (else a call is only proposed)."""
        self.view = view
        self.numbered = list(numbered)
        self.asked = asked

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
        if not self.asked:  # nothing is erased, and a person who asked nothing hears no failure
            if chosen is None:
                return ToolResult(f"No borrado: no hay ningún recuerdo que diga «{wanted}».")
            return ToolResult(
                f"No borrado: {self.view.person} no te pidió olvidarlo; se le pregunta si quiere "
                "borrarlo.",
                proposal=Proposal(
                    FORGET_TOOL_NAME, FORGET_QUESTION, chosen.text, chosen.scope, chosen.id
                ),
            )
        forgotten = self.view.forget(chosen.id) if chosen is not None else None
        if forgotten is None:
            return ToolResult(
                f"Error: no hay ningún recuerdo que diga «{wanted}».",
                error=True,
                notice="No he encontrado ese recuerdo para olvidarlo.",
            )
        return ToolResult(f"Olvidado: «{forgotten.text}».", notice=f"Olvidé: «{forgotten.text}»")


def accept(view: MemoryView, proposal: Proposal, yes: bool) -> str:
    """Does what the person said to a `proposal` of `recordar` or `olvidar` (the terminal's; the
    page's «Sí» goes through its memories API); the line that says what became of it."""
    if proposal.action == FORGET_TOOL_NAME:
        if not yes:
            return "No lo olvido."
        if proposal.memory_id is None or view.forget(proposal.memory_id) is None:
            return "Ese recuerdo ya no estaba."
        return "Recuerdo olvidado."
    if not yes:
        return "No lo guardo."
    try:
        new = view.remember(proposal.text, proposal.scope or "personal")[1]
    except MemoryRefused as exc:
        return str(exc)
    return "Recuerdo guardado." if new else "Enlace ya lo recordaba."


def _memory_of(context: TurnContext) -> MemoryView:
    if context.memory is None:  # the registry makes these only with a person's active memory
        raise ValueError("a memory tool needs a person's memory")
    return context.memory


REMEMBER = ToolEntry(
    REMEMBER_TOOL_NAME,
    REMEMBER_SPEC,
    status="Guardando en la memoria…",
    failed="No se ha podido guardar el recuerdo.",
    make=lambda context: RememberTool(
        _memory_of(context),
        context.called_by_person or asks(context.question, context.config.memory.remember_words),
    ),
    prompt=MEMORY_TOOLS,  # for both: one paragraph speaks of recordar and olvidar
    needs="memory",
)
FORGET = ToolEntry(
    FORGET_TOOL_NAME,
    FORGET_SPEC,
    status="Borrando de la memoria…",
    failed="No se ha podido borrar el recuerdo.",
    make=lambda context: ForgetTool(
        _memory_of(context),
        context.numbered,
        context.called_by_person or asks(context.question, context.config.memory.forget_words),
    ),
    needs="memory",
)
