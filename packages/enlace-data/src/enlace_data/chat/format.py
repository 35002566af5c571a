"""Enlace's conversation format, written once: the renderer (Python) and its Jinja twin.

ChatML with Hermes/Qwen tool calls, so llama.cpp (`--jinja`), vLLM (`hermes` parser) and
transformers recognise it without custom code:

    <|im_start|>system
    {system}

    # Herramientas
    <tools>
    {tool as JSON}
    </tools><|im_end|>
    <|im_start|>user
    {text}<|im_end|>
    <|im_start|>assistant
    {text}
    <tool_call>
    {"name": "buscar_en_internet", "arguments": {"consulta": "..."}}
    </tool_call><|im_end|>
    <|im_start|>user
    <tool_response>
    {result}
    </tool_response><|im_end|>

Consecutive tool results share one user turn (as in Qwen3's template); JSON is written as
transformers' `tojson` writes it. The loss mask covers what the assistant produces: its text, tool
calls and `<|im_end|>`. `render` gives the same ids as `apply_chat_template` with `CHAT_TEMPLATE`
on an export (tests/test_chat_template.py); the template travels in the tokenizer description.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from enlace_data.errors import DataError
from enlace_data.tokenizer.chat_template import TOOLS_FOOTER, TOOLS_HEADER
from enlace_data.tokenizer.special_tokens import (
    IM_END,
    IM_START,
    NAMED_SPECIALS,
    TOOL_CALL,
    TOOL_CALL_END,
    TOOL_RESPONSE,
    TOOL_RESPONSE_END,
)

ROLES = ("system", "user", "assistant", "tool")


class ChatTokenizer(Protocol):
    """What rendering needs from a tokenizer (ByteTokenizer and the SentencePiece Tokenizer)."""

    special_ids: dict[str, int]

    def encode(self, text: str) -> list[int]: ...

    def decode(self, ids: Sequence[int]) -> str: ...


@dataclass
class Rendered:
    """Token ids of a conversation and, per id, whether training learns to predict it."""

    ids: list[int]
    mask: list[bool]


@dataclass
class ToolCall:
    name: str
    arguments: dict[str, Any]


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)  # transformers' `tojson`


# One part: (text, is_special, trained).
Part = tuple[str, bool, bool]
NEWLINE: Part = ("\n", False, False)


def _turn(body: str) -> Iterator[Part]:
    """An untrained turn: <|im_start|>{body}<|im_end|>\n."""
    yield from ((IM_START, True, False), (body, False, False), (IM_END, True, False), NEWLINE)


def _parts(
    messages: Sequence[Mapping[str, Any]],
    tools: Sequence[Mapping[str, Any]] | None,
    add_generation_prompt: bool,
) -> Iterator[Part]:
    system = messages[0]["content"] if messages and messages[0]["role"] == "system" else None
    if tools:
        specs = "".join("\n" + _dumps(tool) for tool in tools)
        prompt = system + "\n\n" if system is not None else ""
        yield from _turn("system\n" + prompt + TOOLS_HEADER + specs + TOOLS_FOOTER)
    elif system is not None:
        yield from _turn("system\n" + system)
    for i, m in enumerate(messages):
        role = m["role"]
        if role == "user":
            yield from _turn("user\n" + m["content"])
        elif role == "assistant":
            yield from ((IM_START, True, False), ("assistant\n", False, False))
            content = m.get("content") or ""
            if content:
                yield (content, False, True)
            for k, call in enumerate(m.get("tool_calls") or []):
                fn = call.get("function", call)
                if content or k:
                    yield ("\n", False, True)
                args = fn["arguments"]
                args_text = args if isinstance(args, str) else _dumps(args)
                yield (TOOL_CALL, True, True)
                yield (f'\n{{"name": "{fn["name"]}", "arguments": {args_text}}}\n', False, True)
                yield (TOOL_CALL_END, True, True)
            yield from ((IM_END, True, True), NEWLINE)
        elif role == "tool":
            if i == 0 or messages[i - 1]["role"] != "tool":
                yield from ((IM_START, True, False), ("user", False, False))
            yield from (NEWLINE, (TOOL_RESPONSE, True, False))
            yield from (
                ("\n" + m["content"] + "\n", False, False),
                (TOOL_RESPONSE_END, True, False),
            )
            if i == len(messages) - 1 or messages[i + 1]["role"] != "tool":
                yield from ((IM_END, True, False), NEWLINE)
    if add_generation_prompt:
        yield from ((IM_START, True, False), ("assistant\n", False, False))


def copied(
    messages: Sequence[Mapping[str, Any]],
    rendered: Rendered,
    tokenizer: ChatTokenizer,
    min_tokens: int,
) -> list[bool]:
    """Per id of `rendered` (the render of `messages`): whether the assistant copies it, that is,
    it lies in a run of at least `min_tokens` trained ids that stands, in that order, in a user
    message or tool result before its assistant message: the town of a search, the temperature of
    an answer. Each source is encoded alone (the bytes tokenizer gives the very ids; SentencePiece
    the same inside words). The trained ids of one assistant message are one run of the mask (from
    its text to its trained <|im_end|>), so the k-th run is the k-th assistant message's."""
    mask, ids = rendered.mask, rendered.ids
    answers = _runs(mask)
    flags = [False] * len(ids)
    seen: set[tuple[int, ...]] = set()
    k = min_tokens
    for message in messages:
        if message["role"] in ("user", "tool"):
            words = tokenizer.encode(message["content"])
            seen.update(tuple(words[j : j + k]) for j in range(len(words) - k + 1))
        elif message["role"] == "assistant":
            start, end = next(answers, (0, 0))
            for j in range(start, end - k + 1):
                if tuple(ids[j : j + k]) in seen:
                    flags[j : j + k] = [True] * k
    return flags


def _runs(mask: Sequence[bool]) -> Iterator[tuple[int, int]]:
    """The maximal runs of True in `mask`, as (start, end) spans."""
    start = None
    for i, trained in enumerate(mask):
        if trained and start is None:
            start = i
        elif not trained and start is not None:
            yield start, i
            start = None
    if start is not None:
        yield start, len(mask)


def render_text(
    messages: Sequence[Mapping[str, Any]],
    *,
    tools: Sequence[Mapping[str, Any]] | None = None,
    add_generation_prompt: bool = False,
) -> str:
    """The conversation as text, exactly as CHAT_TEMPLATE writes it."""
    return "".join(text for text, _, _ in _parts(messages, tools, add_generation_prompt))


def render(
    messages: Sequence[Mapping[str, Any]],
    tokenizer: ChatTokenizer,
    *,
    tools: Sequence[Mapping[str, Any]] | None = None,
    add_generation_prompt: bool = False,
) -> Rendered:
    """Token ids and loss mask of a (validated) conversation. Text between two special tokens is
    encoded run by run: a run changes only where training starts or stops, always right after a
    newline, which both tokenizers split on."""
    ids: list[int] = []
    mask: list[bool] = []
    run, run_trained = "", False

    def flush() -> None:
        nonlocal run
        if run:
            pieces = tokenizer.encode(run)
            ids.extend(pieces)
            mask.extend([run_trained] * len(pieces))
            run = ""

    for text, is_special, trained in _parts(messages, tools, add_generation_prompt):
        if is_special:
            flush()
            ids.append(tokenizer.special_ids[text])
            mask.append(trained)
            continue
        if trained != run_trained:
            flush()
            run_trained = trained
        run += text
    flush()
    return Rendered(ids, mask)


# ----------------------------------------------------------------------------- validation
def _problem(where: str, message: str) -> DataError:
    return DataError(f"{where}: {message}")


def _normalize_call(call: Any, where: str) -> dict[str, Any]:
    if not isinstance(call, Mapping):
        raise _problem(where, "a tool call must be an object with a name and arguments")
    fn = call.get("function", call)
    if not isinstance(fn, Mapping):
        raise _problem(where, "a tool call's 'function' must be an object")
    name, args = fn.get("name"), fn.get("arguments", {})
    if not isinstance(name, str) or not name or '"' in name:
        raise _problem(where, f"a tool call needs a non-empty 'name' without quotes, got {name!r}")
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except ValueError as e:
            raise _problem(where, f"tool call {name!r}: arguments are not JSON ({e})") from e
    if not isinstance(args, dict):
        raise _problem(where, f"tool call {name!r}: arguments must be a JSON object")
    return {"type": "function", "function": {"name": name, "arguments": args}}


def _check_text(value: Any, where: str, what: str) -> str:
    if not isinstance(value, str):
        raise _problem(where, f"{what} must be a string, got {type(value).__name__}")
    for name in NAMED_SPECIALS:
        if name in value:
            raise _problem(where, f"{what} contains the special token text {name!r}")
    return value


def normalize_conversation(record: Any, where: str) -> dict[str, Any]:
    """A validated conversation {"messages": [...], "tools": [...]} in the canonical shape
    (tool calls as OpenAI objects with parsed arguments), or a DataError naming `where` (file and
    line) and the problem."""
    if not isinstance(record, Mapping) or not isinstance(record.get("messages"), list):
        raise _problem(where, "each line must be a JSON object with a 'messages' list")
    tools = record.get("tools") or None
    if isinstance(tools, str):  # Hub datasets often store the schemas as one JSON string
        try:
            tools = json.loads(tools) or None
        except ValueError as e:
            raise _problem(where, f"'tools' is a string but not JSON ({e})") from e
    if tools is not None and not (
        isinstance(tools, list) and all(isinstance(t, Mapping) for t in tools)
    ):
        raise _problem(where, "'tools' must be a list of objects")
    messages: list[dict[str, Any]] = []
    pending_calls = 0
    for i, m in enumerate(record["messages"]):
        at = f"{where}: message {i + 1}"
        if not isinstance(m, Mapping):
            raise _problem(at, "a message must be an object with 'role' and 'content'")
        role = m.get("role")
        if role not in ROLES:
            raise _problem(at, f"missing or unknown role {role!r} (expected one of {ROLES})")
        if role == "system" and i != 0:
            raise _problem(at, "a system message may only come first")
        if role == "assistant":
            calls = [_normalize_call(c, at) for c in (m.get("tool_calls") or [])]
            content = _check_text(m.get("content") or "", at, "content")
            if not content.strip() and not calls:
                raise _problem(at, "empty assistant turn (no text and no tool calls)")
            messages.append({"role": role, "content": content, "tool_calls": calls})
            pending_calls = len(calls)
            continue
        content = _check_text(m.get("content"), at, "content")
        if role == "tool":
            if pending_calls == 0:
                raise _problem(at, "tool result without a tool call before it")
            pending_calls -= 1
        else:
            pending_calls = 0
            if role == "user" and not content.strip():
                raise _problem(at, "empty user message")
        messages.append({"role": role, "content": content})
    if not any(m["role"] == "assistant" for m in messages):
        raise _problem(where, "no assistant turn: nothing to learn from")
    out: dict[str, Any] = {"messages": messages}
    if tools:
        out["tools"] = [dict(t) for t in tools]
    expect = _normalize_expect(record.get("expect"), where)
    if expect:
        out["expect"] = expect
    return out


EXPECT_KEYS = ("query", "answer", "memory")


def _normalize_expect(expect: Any, where: str) -> dict[str, list[str]]:
    """A conversation's optional `expect` ({"query": [...], "answer": [...], "memory": [...]}):
    what the chat evaluation checks. `query`: the key entities (city, team, day...) the first
    assistant turn's tool call must carry in its arguments; `answer`: the facts (a number, a
    time, a name) the first assistant turn after a tool result must state; `memory`: the values
    of a fact (a name, a day, an allergy) the first assistant turn's `recordar` call must keep.
    Never rendered."""
    if expect is None:
        return {}
    if not isinstance(expect, Mapping) or set(expect) - set(EXPECT_KEYS):
        raise _problem(where, f"'expect' must be an object with keys among {EXPECT_KEYS}")
    out: dict[str, list[str]] = {}
    for key in EXPECT_KEYS:
        values = expect.get(key) or []
        if not isinstance(values, list) or not all(isinstance(v, str) and v for v in values):
            raise _problem(where, f"'expect.{key}' must be a list of non-empty strings")
        if values:
            out[key] = list(values)
    return out


# ----------------------------------------------------------------------------- reading replies
def parse_tool_calls(ids: Sequence[int], tokenizer: ChatTokenizer) -> list[ToolCall] | None:
    """The tool calls in a generated assistant reply (ids up to, not including, <|im_end|>):
    [] when it calls none, None when a call is malformed (unclosed, not JSON, no name, arguments
    not an object)."""
    start, end = tokenizer.special_ids[TOOL_CALL], tokenizer.special_ids[TOOL_CALL_END]
    calls: list[ToolCall] = []
    i = 0
    while i < len(ids):
        if ids[i] == end:
            return None
        if ids[i] != start:
            i += 1
            continue
        try:
            j = list(ids).index(end, i + 1)
            obj = json.loads(tokenizer.decode(ids[i + 1 : j]))
        except ValueError:  # unclosed, or not JSON
            return None
        if not isinstance(obj, dict) or set(obj) != {"name", "arguments"}:
            return None
        if not isinstance(obj["name"], str) or not isinstance(obj["arguments"], dict):
            return None
        calls.append(ToolCall(obj["name"], obj["arguments"]))
        i = j + 1
    return calls


# ----------------------------------------------------------------------------- sources
SHAREGPT_ROLES = {"human": "user", "user": "user", "gpt": "assistant", "assistant": "assistant",
                  "system": "system", "tool": "tool"}  # fmt: skip


def as_messages(record: Any) -> Any:
    """OpenAI `messages` as they are; ShareGPT `conversations` mapped to them."""
    turns = record.get("conversations") if isinstance(record, dict) else None
    if not isinstance(turns, list) or "messages" in record:
        return record
    messages = []
    for role, value in ((str(t.get("from")), t.get("value")) for t in turns if isinstance(t, dict)):
        messages.append({"role": SHAREGPT_ROLES.get(role, role), "content": value})
    return {"messages": messages}


def is_val(conv: dict[str, Any], fraction: float) -> bool:
    """Whether a (normalised) conversation belongs to the val split: a hash of its content below
    `fraction`, so a rerun, or another mix around it, puts it in the same split."""
    line = json.dumps(conv, ensure_ascii=False, sort_keys=True)
    h = int.from_bytes(hashlib.blake2b(line.encode(), digest_size=8).digest(), "little")
    return h / 2**64 < fraction
