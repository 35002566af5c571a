"""The tool loop: one turn of the conversation as a stream of events (`TextDelta`,
`ToolCallStarted`, `ToolCallFinished`, then one `TurnEnd`).

Tool calls (structured `tool_calls` or `<tool_call>` blocks in the text) run and their output goes
back to the model only as `tool` messages; a malformed call, an unknown tool or bad arguments go
back as an error message. Up to `max_tool_rounds` rounds (the last request offers no tools, so the
model must answer), `time_budget_s` seconds, and `max_answer_chars` per answer of the model (a
longer one is cut with a note). `TurnEnd.messages` is the next turn's `history`,
without the system prompt.

A long conversation is fitted to the model's context (`ChatClient.context_tokens`): the system
prompt (with the memories), the question and this turn's tool calls always go, then the newest
whole turns that fit, leaving `answer_room_tokens` for the answer; a request the server still
refuses as too long is sent again with fewer old turns. `TurnEnd.left_out` says how many older
turns the model did not see; the history kept is whole.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from enlace_config.schema.agent import AssistantConfig

from enlace_agent.assistant.client import (
    AnswerTooLong,
    BudgetExceeded,
    ChatClient,
    ContextExceeded,
    ToolCall,
)
from enlace_agent.assistant.prompt import client_block, memory_block, system_prompt
from enlace_agent.assistant.toolcalls import TextCallFilter
from enlace_agent.tools import REGISTRY, failed_line, made, prompt_paragraphs, status_line
from enlace_agent.tools.protocol import (
    Proposal,
    Services,
    Source,
    Tool,
    ToolResult,
    TurnContext,
    preview,
    tool_name,
)

if TYPE_CHECKING:
    from enlace_agent.household import Store
    from enlace_agent.memory import Memory, MemoryView

log = logging.getLogger("enlace_agent.assistant")
# One line per tool call (name, outcome, provider, milliseconds): never its arguments or result.
tools_log = logging.getLogger("enlace_agent.assistant.tools")

Message = dict[str, Any]

NOTE_ROUNDS = (
    "(He llegado al límite de herramientas para esta pregunta; respondo con lo que tengo.)"
)
NOTE_BUDGET = "(Se ha acabado el tiempo para esta pregunta; la respuesta puede estar incompleta.)"
NOTE_LENGTH = "(La respuesta era demasiado larga y se ha cortado.)"
NOTE_CONTEXT = (
    "(Lo que han devuelto las herramientas ya no cabe en la memoria de trabajo del modelo; no he "
    "podido terminar la respuesta. Prueba a preguntarlo de otra forma.)"
)


def left_out_line(turns: int) -> str:
    """The line for the person when the oldest `turns` of a conversation did not fit."""
    which = "la primera pregunta" if turns == 1 else f"las {turns} primeras preguntas"
    return (
        f"Esta conversación ya es larga: para responder no he tenido en cuenta {which} (con "
        "sus respuestas). Si hace falta, empieza una conversación nueva y cuéntame lo importante."
    )


@dataclass(frozen=True)
class TextDelta:
    text: str

    def to_dict(self) -> dict[str, Any]:
        return {"type": "text", "text": self.text}


@dataclass(frozen=True)
class ToolCallStarted:
    id: str
    name: str
    arguments: str

    def to_dict(self) -> dict[str, Any]:
        """With `status`, the registry's line for the person while it runs."""
        return {"type": "tool_call", **asdict(self), "status": status_line(self.name)}


@dataclass(frozen=True)
class ToolCallFinished:
    id: str
    name: str
    ok: bool
    provider: str | None
    sources: tuple[Source, ...]
    error: str | None = None
    notice: str | None = None  # the line for the person (a failed call always has one)
    proposal: Proposal | None = None  # what the person is asked before it is done

    def to_dict(self) -> dict[str, Any]:
        return {
            "type": "tool_result",
            **asdict(self),
            "sources": [s.to_dict() for s in self.sources],
        }


@dataclass(frozen=True)
class TurnEnd:
    """`sources`: the pages the answer names (by URL), else every page the tools showed it."""

    text: str
    sources: tuple[Source, ...]
    messages: tuple[Message, ...]
    tool_rounds: int
    # "max_tool_rounds" | "time_budget" | "max_answer_chars" | "context_full"
    stopped: str | None = None
    elapsed_s: float = field(default=0.0)
    memories: tuple[Memory, ...] = ()  # the memories the answer used («Recordé»)
    left_out: int = 0  # the oldest turns of the conversation the model did not see (no room)
    client_calls: tuple[ToolCall, ...] = ()  # calls of the client's tools, for it to run

    def to_dict(self) -> dict[str, Any]:
        return {
            "type": "end",
            "text": self.text,
            "sources": [s.to_dict() for s in self.sources],
            "memories": [m.brief() for m in self.memories],
            "tool_rounds": self.tool_rounds,
            "stopped": self.stopped,
            "elapsed_s": round(self.elapsed_s, 3),
            "left_out": self.left_out,
            "left_out_notice": left_out_line(self.left_out) if self.left_out else None,
            "client_calls": [c.to_message() for c in self.client_calls],
        }


Event = TextDelta | ToolCallStarted | ToolCallFinished | TurnEnd


@dataclass(frozen=True)
class TurnOptions:
    """What a turn asked through another application brings (the OpenAI-compatible endpoint):
    its own instructions (a client's system prompt: quoted inside Enlace's, never in place of
    it) and whether the answer will be spoken (`voice`: short, no Markdown, lists or URLs)."""

    instructions: str | None = None
    voice: bool = False
    # The client's own tools (OpenAI specs), offered beside Enlace's: a call to one ends the turn
    # with `TurnEnd.client_calls`, for the client to run.
    client_tools: tuple[Mapping[str, Any], ...] = ()
    # The history ends with the client's results of those calls: the turn goes on from there (no
    # new question; `user_text` is the question it answers).
    resume: bool = False


@dataclass
class _Turn:
    """What one turn has gathered so far."""

    messages: list[Message]
    started: float
    tools: dict[str, Tool]
    sources: list[Source] = field(default_factory=lambda: [])
    rounds: int = 0
    memory: MemoryView | None = None  # the person's, when active in this turn
    recalled: list[Memory] = field(default_factory=lambda: [])  # numbered in the prompt
    question: str = ""
    question_at: int = 0  # the question's index in `messages`
    skip: int = 0  # `messages` before this index (the oldest turns) are not sent: no room

    def left_out(self) -> int:
        return sum(m.get("role") == "user" for m in self.messages[: self.skip])


class Assistant:
    def __init__(
        self,
        client: ChatClient,
        *,
        tools: Sequence[Tool],
        config: AssistantConfig,
        today: Callable[[], dt.date] = dt.date.today,
        services: Services | None = None,
    ) -> None:
        """`tools`: those every turn offers; `services`: what the tools made for a turn share
        (the search chain), built once."""
        self.client = client
        self.tools = {tool_name(t): t for t in tools}
        self.config = config
        self.today = today
        # Characters of the request's JSON per token of the model: the configured guess, then
        # what a server that refused a request as too long counted.
        self.chars_per_token = config.memory.chars_per_token
        self.services = services or Services()

    def turn(
        self,
        history: Sequence[Mapping[str, Any]],
        user_text: str,
        *,
        memory: MemoryView | None = None,
        household: Store | None = None,
        options: TurnOptions = TurnOptions(),
    ) -> Iterator[Event]:
        """One turn. With `memory` (one person's) the household's tools are offered (the
        shopping list, in `household`, default the memory's database) and, when the memory is
        active (on, not paused), its memories enter the prompt, the memory's tools (`recordar`,
        `olvidar`) are offered, and `TurnEnd` says which memories the answer used. The prompt
        has the paragraph of each tool offered (the registry's)."""
        asked = [*map(dict, history)]
        if options.resume:  # the question is already in the history, the calls' results after it
            users = [i for i, m in enumerate(asked) if m.get("role") == "user"]
            question_at = users[-1] if users else 0
        else:
            question_at = len(asked)
            asked.append({"role": "user", "content": user_text})
        state = _Turn(
            asked, time.monotonic(), dict(self.tools), question=user_text, question_at=question_at
        )
        deadline = state.started + self.config.time_budget_s
        if memory is not None and memory.active():
            state.memory, state.recalled = memory, memory.recall(user_text)
        system = self._system(state, user_text, memory, household, options)
        specs = [t.spec for t in state.tools.values()] + [dict(t) for t in options.client_tools]
        theirs = {t["function"]["name"] for t in options.client_tools}
        while True:
            offer = specs if state.rounds < self.config.max_tool_rounds else None
            structured: tuple[ToolCall, ...] = ()
            shown = TextCallFilter()
            parts: list[str] = []
            sent = self._fit(state, system, offer)
            try:
                for item in self.client.chat(
                    sent, offer, stream=self.config.stream, deadline=deadline
                ):
                    if isinstance(item, str):
                        visible = shown.feed(item)
                    else:
                        structured = item.tool_calls
                        visible = shown.flush()
                    if visible:
                        parts.append(visible)
                        yield TextDelta(visible)
            except BudgetExceeded:
                yield from self._end(state, parts, "time_budget")
                return
            except AnswerTooLong:  # a model that never stops: what it wrote so far, cut
                yield from self._end(state, parts, "max_answer_chars")
                return
            except ContextExceeded as exc:  # fewer old turns, or the named error
                if not parts and self._shrink(state, exc, sent, offer):
                    continue
                if state.rounds:  # this turn's own calls and results fill it: end the turn
                    yield from self._end(state, parts, "context_full")
                    return
                raise
            calls = [*structured, *shown.calls(f"call_{state.rounds}")]
            if not calls:
                yield from self._end(state, parts, None)
                return
            if offer is None:  # no rounds left: the calls are not run
                yield from self._end(state, parts, "max_tool_rounds")
                return
            state.rounds += 1
            state.messages.append(
                {
                    "role": "assistant",
                    "content": "".join(parts).strip() or None,
                    "tool_calls": [c.to_message() for c in calls],
                }
            )
            handed = [c for c in calls if c.name in theirs and c.problem is None]
            yield from self._run_calls(state, [c for c in calls if c not in handed], deadline)
            if handed:  # the client runs these; its results continue the turn (`resume`)
                yield TurnEnd(
                    text="".join(parts).strip(),
                    sources=(),  # named when the answer is written, after the client's results
                    messages=tuple(state.messages),
                    tool_rounds=state.rounds,
                    elapsed_s=time.monotonic() - state.started,
                    left_out=state.left_out(),
                    client_calls=tuple(handed),
                )
                return
            if time.monotonic() > deadline:
                yield from self._end(state, [], "time_budget")
                return

    def _system(
        self,
        state: _Turn,
        user_text: str,
        memory: MemoryView | None,
        household: Store | None,
        options: TurnOptions,
    ) -> Message:
        """The turn's system message (the prompt, each offered tool's paragraph, the memories
        quoted as data, the client's instructions), and the turn's tools made into `state`."""
        if household is None and memory is not None:
            household = memory.memories.store
        context = TurnContext(
            self.config,
            self.services,
            person=memory.person if memory is not None else None,
            household=household,
            memory=state.memory,
            numbered=state.recalled,
            question=user_text,
        )
        offered = [e.prompt for e in REGISTRY if e.name in self.tools and e.prompt]
        content = system_prompt(
            self.config.system_prompt, self.today(), offered if self.config.max_tool_rounds else []
        )
        if paragraphs := prompt_paragraphs(context, "household"):
            content += "\n\n" + "\n".join(paragraphs)
        if state.memory is not None:
            tools = prompt_paragraphs(context, "memory")
            content += "\n\n" + memory_block(state.memory.person, state.recalled, tools)
        content += client_block(options.instructions, voice=options.voice)
        for needs in ("household", "memory"):
            state.tools.update({tool_name(t): t for t in made(context, needs)})
        return {"role": "system", "content": content}

    def _fit(
        self, state: _Turn, system: Message, offer: Sequence[Mapping[str, Any]] | None
    ) -> list[Message]:
        """The request's messages: the system prompt, then from the oldest whole turn from
        which they fit the model's context (when it is known), the question always."""
        window = self.client.context_tokens()
        if window is not None:
            room = min(self.config.answer_room_tokens, self.config.max_tokens)
            budget = (window - room) * self.chars_per_token - _chars(system) - _chars(offer)
            state.skip = max(state.skip, fit_start(state.messages, state.question_at, budget))
        return [system, *state.messages[state.skip :]]

    def _shrink(
        self,
        state: _Turn,
        exc: ContextExceeded,
        sent: Sequence[Message],
        offer: Sequence[Mapping[str, Any]] | None,
    ) -> bool:
        """After the server refused `sent` as too long: leave out more old turns (by its own
        counts when it gave them, else half of those left). False when none are left."""
        if state.skip >= state.question_at:
            return False
        before = state.skip
        self.client.learn_context(exc)
        if exc.prompt_tokens:
            self.chars_per_token = (_chars(sent) + _chars(offer)) / exc.prompt_tokens
        if exc.context_tokens:
            self._fit(state, sent[0], offer)
        starts = _turn_starts(state.messages, state.question_at)
        later = [i for i in starts if i > before]
        if state.skip <= before:  # no counts, or they freed nothing: half of the old turns
            state.skip = later[(len(later) - 1) // 2] if later else state.question_at
        log.info("context full: %d old turns left out", state.left_out())
        return True

    def _run_calls(self, state: _Turn, calls: list[ToolCall], deadline: float) -> Iterator[Event]:
        """Run the calls in order; each gets its tool message (one the budget left no time for
        says so, so the history stays well formed for the next turn)."""
        for call in calls:
            if time.monotonic() > deadline:
                result = ToolResult("Error: no se ejecutó: se acabó el tiempo.", error=True)
            else:
                yield ToolCallStarted(call.id, call.name, call.arguments)
                started = time.monotonic()
                result = self._run(state, call)
                tools_log.info(
                    "%s %s via %s in %.0f ms",
                    preview(call.name),
                    "error" if result.error else "ok",
                    result.provider or "-",
                    (time.monotonic() - started) * 1000,
                )
                state.sources.extend(result.sources)
                yield ToolCallFinished(
                    call.id,
                    call.name,
                    not result.error,
                    result.provider,
                    result.sources,
                    result.content if result.error else None,
                    result.notice or (failed_line(call.name) if result.error else None),
                    result.proposal,
                )
            state.messages.append(
                {
                    "role": "tool",
                    "tool_call_id": call.id,
                    "name": call.name,
                    "content": result.content,
                }
            )

    def _run(self, state: _Turn, call: ToolCall) -> ToolResult:
        """Run one call; every problem becomes an error result for the model, never a crash."""
        if call.problem is not None:
            return ToolResult(f"Error: {call.problem}", error=True)
        tool = state.tools.get(call.name)
        if tool is None:
            known = ", ".join(state.tools) or "ninguna"
            return ToolResult(
                f"Error: la herramienta «{preview(call.name)}» no existe. Herramientas "
                f"disponibles: {known}.",
                error=True,
            )
        try:
            return tool.run(call.arguments)
        except Exception:  # a bug in a tool: the model is told, the log keeps the trace
            log.exception("tool %s failed", call.name)
            return ToolResult(f"Error: la herramienta «{call.name}» ha fallado.", error=True)

    def _end(self, state: _Turn, parts: list[str], stopped: str | None) -> Iterator[Event]:
        notes = {
            "max_tool_rounds": NOTE_ROUNDS,
            "time_budget": NOTE_BUDGET,
            "max_answer_chars": NOTE_LENGTH,
            "context_full": NOTE_CONTEXT,
        }
        note = notes.get(stopped or "")
        if note:
            lead = "\n\n" if "".join(parts).strip() else ""
            parts.append(lead + note)
            yield TextDelta(lead + note)
        text = "".join(parts).strip()
        state.messages.append({"role": "assistant", "content": text})
        used: list[Memory] = []
        if state.memory is not None:
            used = state.memory.used(state.recalled, state.question, text)
        yield TurnEnd(
            text=text,
            sources=cited_sources(text, state.sources),
            messages=tuple(state.messages),
            tool_rounds=state.rounds,
            stopped=stopped,
            elapsed_s=time.monotonic() - state.started,
            memories=tuple(used),
            left_out=state.left_out(),
        )


def cited_sources(text: str, consulted: Sequence[Source]) -> tuple[Source, ...]:
    """The consulted pages whose URL the answer names; all of them when it names none."""
    unique = list({s.url: s for s in consulted}.values())
    cited = [s for s in unique if s.url in text or s.url.rstrip("/") in text]
    return tuple(cited or unique)


def _chars(value: object) -> int:
    """Characters of `value` as sent (JSON), which the model reads as tokens."""
    return len(json.dumps(value, ensure_ascii=False)) if value else 0


def _turn_starts(messages: Sequence[Mapping[str, Any]], question_at: int) -> list[int]:
    """Where each turn up to the question starts (its user message): the places a
    conversation can be cut without an answer or a tool result losing its question."""
    return sorted({0, *(i for i, m in enumerate(messages[:question_at]) if m["role"] == "user")})


def fit_start(messages: Sequence[Mapping[str, Any]], question_at: int, room: float) -> int:
    """The first message to send: the oldest turn start from which the messages take at most
    `room` characters; the question's own index when even the newest old turn does not fit."""
    sizes = [_chars(m) for m in messages]
    for start in _turn_starts(messages, question_at):
        if sum(sizes[start:]) <= room:
            return start
    return question_at
