"""The chat measures of a chat (SFT) run, on held-out conversations: taken at each evaluation and
by `enlace-train eval-chat MODEL DATA` for any checkpoint or exported folder.

From each of the first data.chat_eval_conversations held-out conversations come up to two prompts,
rendered with the generation prompt and answered greedily (at most data.chat_eval_max_tokens
tokens, stopping at <|im_end|>):
- the first reply: the messages before the first assistant turn;
- the reply after a tool result: the messages before the first assistant turn that follows a tool
  result and answers in text.
A conversation may carry `expect` (enlace_data.chat): `query`, the key entities (city, team,
day...) its search must name, and `answer`, the facts (a number, a time, a name) the result
states. Values are compared without accents or case, as whole words. The measures:
- turn_end: the share of all replies that end with <|im_end|> (not cut by the token limit);
- tool_call: among first replies whose reference calls a tool, the share holding a well-formed
  tool call (closed, JSON, a name and object arguments) naming the same tool, ending the turn,
  with the same `accion` when the reference's has one (the shopping list: add, remove or read);
- argument_fidelity: among those with `expect.query`, the share whose call is such a call and
  whose arguments name every entity: the search carries the question;
- spurious_calls: among first replies whose reference calls no tool, the share that call one;
  no_search_calls: the same among those offered the tools (greetings, sums, household questions:
  the no-search set, where a call is the model's choice, not a format slip);
- grounded: among replies after a tool result with `expect.answer`, the share that state every
  fact of the result and call no tool;
- invention: among replies after a tool result, the share stating a fact-shaped value (a number,
  or a name of enlace_data.chat.builtin.FACT_NAMES) that neither the result nor the question gave;
- memory_fidelity: among first replies whose reference calls `recordar` with `expect.memory`
  (the fact's values: a name, a day, an allergy), the share whose call is such a call and whose
  text names every value: the memory keeps what the person said, not a sentence of its shape;
- spurious_memory_writes: among first replies whose reference does not call `recordar` (a
  search, a greeting, a question a memory answers), the share that call it: a false fact written
  into the family's memory.
A model that learned the format but not the content scores tool_call 100 % and fidelity 0.
Each prompt that fails argument fidelity, memory fidelity or grounding is kept in `misses` (its
question, what was expected, the reply): `eval-chat --misses FILE` writes them, so a figure's
failures can be read by kind (a wrong query, a call never closed, an answer in words).
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cache
from typing import Any

import torch
from enlace_config.contracts import REMEMBER_TOOL_NAME
from enlace_config.schema.data import DataConfig
from enlace_config.schema.run import RunConfig

from enlace_train.metrics import log

# (prompts, max new tokens) -> each reply's ids, the stop token excluded: a reply as long as the
# limit did not end its turn.
Replier = Callable[[list[list[int]], int], list[list[int]]]
TALLIES = (
    "tool",
    "fidelity",
    "spurious",
    "no_search",
    "grounded",
    "invention",
    "memory",
    "memory_writes",
)
ACTION = "accion"  # the shopping list's argument that says what to do: añadir, quitar or ver
NUMBER = re.compile(r"\d+(?:[.,:]\d+)*")


@dataclass
class Case:
    """One prompt to answer and what its reply is checked against."""

    prompt: list[int]
    first: bool  # the first reply (else: the reply after a tool result)
    tool: str | None  # first reply: the tool the reference calls
    action: str | None  # first reply: the reference call's `accion` (the shopping list's), if any
    offered: bool  # the conversation offers tools
    entities: tuple[str, ...]  # first reply: what the call's arguments must name
    facts: tuple[str, ...]  # after a result: what the reply must state
    given: str  # after a result: the question and the result, whose values a reply may repeat
    question: str  # the last user message before the reply (for the misses)


@dataclass
class ChatEval:
    conversations: int
    replies: int
    turn_end: float
    tool_prompts: int
    tool_call: float | None
    fidelity_prompts: int
    argument_fidelity: float | None
    spurious_calls: float | None
    no_search_prompts: int
    no_search_calls: float | None
    grounded_prompts: int
    grounded: float | None
    result_prompts: int
    invention: float | None
    memory_prompts: int
    memory_fidelity: float | None
    spurious_memory_writes: float | None
    # the failed prompts of fidelity, memory and grounded (`score`): not a metric, not in row()
    misses: list[dict[str, Any]] = field(default_factory=list)

    def row(self) -> dict[str, Any]:
        """The metrics.jsonl fields (chat_*)."""
        return {
            "chat_turn_end": self.turn_end,
            "chat_tool_call": self.tool_call,
            "chat_argument_fidelity": self.argument_fidelity,
            "chat_spurious_calls": self.spurious_calls,
            "chat_no_search_calls": self.no_search_calls,
            "chat_grounded": self.grounded,
            "chat_invention": self.invention,
            "chat_memory_fidelity": self.memory_fidelity,
            "chat_spurious_memory_writes": self.spurious_memory_writes,
            "chat_eval_conversations": self.conversations,
            "chat_eval_replies": self.replies,
            "chat_tool_prompts": self.tool_prompts,
            "chat_fidelity_prompts": self.fidelity_prompts,
            "chat_no_search_prompts": self.no_search_prompts,
            "chat_grounded_prompts": self.grounded_prompts,
            "chat_result_prompts": self.result_prompts,
            "chat_memory_prompts": self.memory_prompts,
        }

    def line(self) -> str:
        """The terminal summary."""

        def pct(x: float | None) -> str:
            return "n/a" if x is None else f"{100 * x:.1f}%"

        return (
            f"turn endings {pct(self.turn_end)} of {self.replies} | tool calls "
            f"{pct(self.tool_call)} of {self.tool_prompts} | arguments "
            f"{pct(self.argument_fidelity)} of {self.fidelity_prompts} | grounded "
            f"{pct(self.grounded)} of {self.grounded_prompts} | invented {pct(self.invention)} | "
            f"spurious calls {pct(self.spurious_calls)} (no-search {pct(self.no_search_calls)} of "
            f"{self.no_search_prompts}) | memory {pct(self.memory_fidelity)} of "
            f"{self.memory_prompts} | spurious memory writes {pct(self.spurious_memory_writes)}"
        )


def fold(text: str) -> str:
    """Without accents, case-folded: «Málaga» and «malaga» compare equal."""
    decomposed = unicodedata.normalize("NFKD", text)
    return "".join(c for c in decomposed if not unicodedata.combining(c)).casefold()


def states(text: str, value: str) -> bool:
    """Whether `text` names `value` as whole words (accent- and case-insensitive)."""
    return _word(value).search(fold(text)) is not None


@cache
def _word(value: str) -> re.Pattern[str]:
    return re.compile(r"(?<!\w)" + re.escape(fold(value)) + r"(?!\w)")


@cache
def _names() -> tuple[re.Pattern[str], ...]:
    from enlace_data.chat.builtin import FACT_NAMES

    return tuple(_word(name) for name in FACT_NAMES)


def invented(reply: str, given: str) -> bool:
    """Whether `reply` states a number or a known name that `given` does not."""
    reply, given = fold(reply), fold(given)
    numbers = set(NUMBER.findall(given))
    if any(n not in numbers for n in NUMBER.findall(reply)):
        return True
    return any(name.search(reply) and not name.search(given) for name in _names())


def cases(
    convs: Sequence[dict[str, Any]], tokenizer: Any, *, room: int, conversations: int
) -> tuple[list[Case], int]:
    """The cases of the first `conversations` conversations that yield one whose prompt fits in
    `room` tokens, and how many conversations that was."""
    from enlace_data.chat import render

    out: list[Case] = []
    used = 0
    for conv in convs:
        if used >= conversations:
            break
        messages, tools = conv["messages"], conv.get("tools")
        expect = conv.get("expect") or {}
        found = False
        first = next(i for i, m in enumerate(messages) if m["role"] == "assistant")
        prompt = render(messages[:first], tokenizer, tools=tools, add_generation_prompt=True).ids
        if len(prompt) <= room:
            calls = messages[first]["tool_calls"]
            tool = calls[0]["function"]["name"] if calls else None
            action = calls[0]["function"]["arguments"].get(ACTION) if calls else None
            key = "memory" if tool == REMEMBER_TOOL_NAME else "query"
            entities = tuple(expect.get(key, ())) if tool else ()
            question = _question(messages, first)
            out.append(Case(prompt, True, tool, action, bool(tools), entities, (), "", question))
            found = True
        after = _after_result(messages)
        if after is not None:
            prompt = render(
                messages[:after], tokenizer, tools=tools, add_generation_prompt=True
            ).ids
            if len(prompt) <= room:
                given = "\n".join(
                    m["content"] for m in messages[:after] if m["role"] in ("user", "tool")
                )
                facts = tuple(expect.get("answer", ()))
                question = _question(messages, after)
                out.append(Case(prompt, False, None, None, bool(tools), (), facts, given, question))
                found = True
        used += found
    return out, used


def _question(messages: Sequence[dict[str, Any]], end: int) -> str:
    """The last user message before messages[end]."""
    return next((m["content"] for m in reversed(messages[:end]) if m["role"] == "user"), "")


def _after_result(messages: Sequence[dict[str, Any]]) -> int | None:
    """The index of the first assistant turn with text that follows a tool result, if any."""
    seen_result = False
    for i, m in enumerate(messages):
        seen_result |= m["role"] == "tool"
        if seen_result and m["role"] == "assistant" and m["content"].strip():
            return i
    return None


def score(
    case_list: Sequence[Case],
    replies: Sequence[Sequence[int]],
    limit: int,
    tokenizer: Any,
    conversations: int,
) -> ChatEval:
    """The measures of the module docstring, from each case's reply."""
    from enlace_data.chat import parse_tool_calls

    ended = [len(r) < limit for r in replies]  # the stop token is not returned
    tally: dict[str, list[bool]] = {k: [] for k in TALLIES}
    misses: list[dict[str, Any]] = []

    def miss(measure: str, case: Case, expected: Sequence[str], text: str) -> None:
        misses.append(
            {
                "measure": measure,
                "question": case.question,
                "expected": list(expected),
                "reply": text,
            }
        )

    for case, reply, end in zip(case_list, replies, ended, strict=True):
        calls = parse_tool_calls(reply, tokenizer)
        if case.first and case.tool != REMEMBER_TOOL_NAME:
            tally["memory_writes"].append(any(c.name == REMEMBER_TOOL_NAME for c in calls or ()))
        if case.first and case.tool is not None:
            ok = (
                end
                and calls
                and calls[0].name == case.tool
                and (case.action is None or calls[0].arguments.get(ACTION) == case.action)
            )
            call = calls[0] if ok and calls else None
            tally["tool"].append(call is not None)
            if case.entities:
                query = " ".join(str(v) for v in call.arguments.values()) if call else ""
                measure = "memory" if case.tool == REMEMBER_TOOL_NAME else "fidelity"
                named = call is not None and all(states(query, e) for e in case.entities)
                tally[measure].append(named)
                if not named:
                    miss(measure, case, case.entities, tokenizer.decode(list(reply)))
        elif case.first:
            tally["spurious"].append(bool(calls))
            if case.offered:
                tally["no_search"].append(bool(calls))
        else:
            text = tokenizer.decode(list(reply))
            if case.facts:
                grounded = calls == [] and all(states(text, f) for f in case.facts)
                tally["grounded"].append(grounded)
                if not grounded:
                    miss("grounded", case, case.facts, text)
            tally["invention"].append(invented(text, case.given))

    def share(key: str) -> float | None:
        v = tally[key]
        return sum(v) / len(v) if v else None

    return ChatEval(
        conversations=conversations,
        replies=len(case_list),
        turn_end=sum(ended) / max(len(ended), 1),
        tool_prompts=len(tally["tool"]),
        tool_call=share("tool"),
        fidelity_prompts=len(tally["fidelity"]),
        argument_fidelity=share("fidelity"),
        spurious_calls=share("spurious"),
        no_search_prompts=len(tally["no_search"]),
        no_search_calls=share("no_search"),
        grounded_prompts=len(tally["grounded"]),
        grounded=share("grounded"),
        result_prompts=len(tally["invention"]),
        invention=share("invention"),
        memory_prompts=len(tally["memory"]),
        memory_fidelity=share("memory"),
        spurious_memory_writes=share("memory_writes"),
        misses=misses,
    )


def evaluate_conversations(
    convs: Sequence[dict[str, Any]],
    tokenizer: Any,
    reply: Replier,
    *,
    context_length: int,
    conversations: int,
    max_tokens: int,
) -> ChatEval:
    """Answer the cases of `convs` with `reply` and score them (the module docstring)."""
    found, used = cases(
        convs, tokenizer, room=context_length - max_tokens, conversations=conversations
    )
    replies = reply([c.prompt for c in found], max_tokens) if found else []
    return score(found, replies, max_tokens, tokenizer, used)


# Prompts decoded together. Each is prefilled alone (enlace_model.generation), so a group's memory
# is mostly its KV cache, ~6.6 MB a prompt for the smoke model at 3,072 positions (the batched
# prefill's mask once took 12.5 GB for 184 prompts); decoding pads a group to its longest prompt,
# hence groups of similar lengths. Only memory and speed depend on it, not the replies.
REPLY_BATCH = 64


def model_replier(model: torch.nn.Module, tokenizer: Any) -> Replier:
    """Greedy replies of `model` that stop at <|im_end|>, REPLY_BATCH prompts at a time, the
    shortest first (a group pads to its longest prompt)."""
    import enlace_model
    from enlace_data.tokenizer.special_tokens import IM_END

    stop = [tokenizer.special_ids[IM_END]]

    @torch.no_grad()
    def reply(prompts: list[list[int]], max_tokens: int) -> list[list[int]]:
        was_training = model.training
        model.eval()
        order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))
        replies: list[list[int]] = [[] for _ in prompts]
        try:
            for start in range(0, len(order), REPLY_BATCH):
                group = order[start : start + REPLY_BATCH]
                outs = enlace_model.generate(
                    model,  # type: ignore[arg-type]
                    [prompts[i] for i in group],
                    max_tokens,
                    stop_tokens=stop,
                )
                for i, out in zip(group, outs, strict=True):
                    replies[i] = out
            return replies
        finally:
            model.train(was_training)

    return reply


def chat_eval(model: torch.nn.Module, cfg: RunConfig) -> ChatEval:
    """The measures of a training run's model on its held-out split (cfg.data)."""
    from enlace_data.chat.loader import chat_tokenizer, load_split

    tokenizer = chat_tokenizer(cfg.data)
    convs, _ = load_split(cfg.data, "val")
    return evaluate_conversations(
        convs,
        tokenizer,
        model_replier(model, tokenizer),
        context_length=cfg.model.context_length,
        conversations=cfg.data.chat_eval_conversations,
        max_tokens=cfg.data.chat_eval_max_tokens,
    )


def log_chat_eval(
    model: torch.nn.Module, cfg: RunConfig, backend: Any, step: int, metrics: Any
) -> None:
    """Run chat_eval, write its row to metrics.jsonl and log it."""
    r = chat_eval(model, cfg)
    metrics.write({"step": step, **r.row()})
    log.info(f"step {step} | chat: {r.line()}")


def eval_checkpoint(
    path: str,
    data: str,
    *,
    conversations: int | None = None,
    max_tokens: int | None = None,
    device: str = "cpu",
) -> tuple[ChatEval, Any]:
    """`enlace-train eval-chat`: the measures of a run's newest checkpoint (or a checkpoint, or an
    exported folder) on DATA's held-out conversations (a chat data directory's val split, a
    .jsonl/.parquet file, or `builtin`). Defaults: data.chat_eval_* of the config schema."""
    from pathlib import Path

    from enlace_data.chat.loader import load_split, read_conversations
    from enlace_data.tokenizer import load_tokenizer
    from enlace_model.checkpoint import load_model, resolve_checkpoint

    checkpoint = resolve_checkpoint(path)
    model = load_model(checkpoint, device=device, dtype=torch.float32)
    tokenizer = load_tokenizer(checkpoint)
    fields = DataConfig.model_fields
    if Path(data).is_file():
        convs = read_conversations(Path(data))
    else:
        source = DataConfig.model_validate(
            {
                "kind": "chat",
                "path": data,
                "fallback": "builtin" if data == "builtin" else "none",
                "context_length": model.cfg.context_length,
            }
        )
        convs, _ = load_split(source, "val")
    result = evaluate_conversations(
        convs,
        tokenizer,
        model_replier(model, tokenizer),
        context_length=model.cfg.context_length,
        conversations=conversations or fields["chat_eval_conversations"].default,
        max_tokens=max_tokens or fields["chat_eval_max_tokens"].default,
    )
    return result, checkpoint
