"""A client for OpenAI-style chat completions (`POST {base_url}/chat/completions`), streamed as
server-sent events or not, over httpx.

`chat()` yields the answer's text as it arrives, then one `Completion`. Every failure is a typed
`ModelError` naming the server, never holding the API key; a watchdog closes the socket at the
turn's deadline, so a server that trickles its answer cannot outlast it, and an answer longer than
`max_answer_chars` (or `max_response_bytes` as sent) stops with `AnswerTooLong`, so one that never
ends cannot fill the memory. The text is whole characters: a UTF-16 surrogate pair split across
two stream chunks is joined, a lone half becomes U+FFFD; control characters other than line
breaks and tabs (a terminal's escape sequences) are dropped (`answer_text`).
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx
from enlace_config.schema.agent import AssistantConfig

from enlace_agent.shared import (
    Secret,
    Watchdog,
    as_array,
    as_object,
    loads_json,
    loads_object,
    redact,
)
from enlace_agent.tools.protocol import NOT_JSON

OUT_OF_TIME = "the time budget ran out while the model was answering"


class ModelError(Exception):
    """The model server could not give an answer."""


class ModelUnavailable(ModelError):
    """Nothing answers at the endpoint (refused, unknown host, reset)."""


class ModelTimeout(ModelError):
    """The server did not answer in time (connect or read timeout)."""


class BudgetExceeded(ModelTimeout):
    """The turn's total time budget ran out while the model was answering."""


class ModelResponseError(ModelError):
    """The server answered, but not with a usable answer: an HTTP error, malformed JSON, an
    unexpected shape, or a stream cut before its end."""


class ModelServerFailed(ModelResponseError):
    """The server failed inside (HTTP 5xx other than 503): out of memory, a crash, a bug."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


class StreamCut(ModelResponseError):
    """The connection broke, or the stream ended, before the answer was complete."""


class ContextExceeded(ModelResponseError):
    """The request does not fit the model's context (llama-server's HTTP 400
    `exceed_context_size_error`, an OpenAI-style `context_length_exceeded`). `prompt_tokens` and
    `context_tokens` are the server's own counts, when it gives them."""

    def __init__(
        self, message: str, prompt_tokens: int | None = None, context_tokens: int | None = None
    ) -> None:
        super().__init__(message)
        self.prompt_tokens = prompt_tokens
        self.context_tokens = context_tokens


class AnswerTooLong(ModelResponseError):
    """The answer passed `max_answer_chars` characters (or `max_response_bytes` bytes as sent):
    what came before the limit was already given; the rest is not read."""


class ModelNotFound(ModelError):
    """The server does not serve the model asked for; `served` lists what it serves (if known)."""

    def __init__(self, message: str, served: tuple[str, ...]) -> None:
        super().__init__(message)
        self.served = served


class ModelRefused(ModelError):
    """The server refused the request's credentials (HTTP 401/403)."""


class ModelLoading(ModelUnavailable):
    """The server answers 503: it is still loading the model (or cannot take a request now)."""


@dataclass(frozen=True)
class ToolCall:
    """A call the model asked for. `problem` (Spanish) is set when the call could not be read."""

    id: str
    name: str
    arguments: str
    problem: str | None = None

    @classmethod
    def parse(cls, raw: Mapping[str, Any], fallback_id: str) -> ToolCall:
        """An OpenAI-style call (`{"id", "function": {"name", "arguments"}}`), `fallback_id` when
        it has no id; arguments may come as an object or as JSON text."""
        function = as_object(raw.get("function")) or {}
        name, arguments, call_id = function.get("name"), function.get("arguments"), raw.get("id")
        name = name if isinstance(name, str) else ""
        call_id = call_id if isinstance(call_id, str) and call_id else fallback_id
        if not isinstance(arguments, str):  # some servers send an object
            try:
                arguments = json.dumps(
                    arguments if arguments is not None else {}, ensure_ascii=False
                )
            except RecursionError:
                return cls(call_id, name, "{}", "los argumentos están anidados demasiado.")
        problem = None if name else "la llamada no indica la herramienta (name)."
        if problem is None and arguments.strip():
            try:
                loads_json(arguments)
            except ValueError:  # a call cut mid-string: never run, nor handed to a client
                problem = NOT_JSON
        return cls(call_id, name, arguments, problem)

    def to_message(self) -> dict[str, Any]:
        """The call as the history's assistant message holds it. Arguments that are not a JSON
        object (a call cut mid-string) go as «{}»: a server that renders the history with its
        chat template parses them, and llama-server answers HTTP 500 to the whole next request
        otherwise; the call's tool message already tells the model what was wrong."""
        arguments = self.arguments if loads_object(self.arguments) is not None else "{}"
        return {
            "id": self.id,
            "type": "function",
            "function": {"name": self.name, "arguments": arguments},
        }


@dataclass(frozen=True)
class Completion:
    text: str
    tool_calls: tuple[ToolCall, ...] = field(default=())
    finish_reason: str | None = None


class ChatClient:
    def __init__(self, config: AssistantConfig, api_key: Secret | None = None) -> None:
        self.config = config
        self.base_url = config.base_url.rstrip("/")
        self._key = api_key
        self._context: int | None = config.context_tokens  # tokens; None: not known (yet)
        self._context_asked = config.context_tokens is not None

    def _headers(self) -> dict[str, str]:
        headers = {"Accept": "application/json, text/event-stream"}
        if self._key is not None:
            headers["Authorization"] = f"Bearer {self._key.get_secret_value()}"
        return headers

    def _clean(self, text: str) -> str:
        return redact(text, [self._key.get_secret_value()] if self._key is not None else [])

    def chat(
        self,
        messages: Sequence[Mapping[str, Any]],
        tools: Sequence[Mapping[str, Any]] | None,
        *,
        stream: bool,
        deadline: float,
    ) -> Iterator[str | Completion]:
        """The answer's text pieces, then its `Completion`; raises a `ModelError`."""
        config = self.config
        sampling = config.model_dump(include={"temperature", "top_p", "max_tokens"})
        payload = {"model": config.model, "messages": list(messages), "stream": stream, **sampling}
        if tools:
            payload["tools"] = list(tools)
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise BudgetExceeded("the time budget ran out before the model was asked")
        connect = min(config.connect_timeout_s, remaining)
        read = min(config.read_timeout_s, remaining)
        timeout = httpx.Timeout(read, connect=connect, pool=connect)  # and write
        with Watchdog(deadline) as watchdog, httpx.Client(timeout=timeout) as http:
            try:
                with http.stream(
                    "POST",
                    self.base_url + "/chat/completions",
                    json=payload,
                    headers=self._headers(),
                    extensions={"trace": watchdog.trace},
                ) as response:
                    if response.status_code != 200:
                        response.read()
                        raise self._status_error(response, http)
                    if stream:
                        yield from self._read_stream(response, deadline)
                    else:
                        yield from self._read_whole(response)
            except ModelError:
                raise
            except (httpx.HTTPError, OSError) as exc:
                # The watchdog (or a read timeout cut to the time left) ends a turn out of time.
                if watchdog.fired or time.monotonic() >= deadline:
                    raise BudgetExceeded(OUT_OF_TIME) from None
                raise self._transport_error(exc) from None

    def context_tokens(self) -> int | None:
        """Tokens of one conversation's context: `config.context_tokens`, else what the server
        says (llama-server: `meta.n_ctx` of the model in GET /models, its slot's context), asked
        once; None when it does not say or cannot be asked now."""
        if not self._context_asked:
            timeout = httpx.Timeout(self.config.connect_timeout_s)
            try:
                with httpx.Client(timeout=timeout) as http:
                    data = loads_object(
                        http.get(self.base_url + "/models", headers=self._headers()).content
                    )
            except httpx.HTTPError:
                return self._context  # not answering now: asked again next time
            entries = [as_object(e) or {} for e in as_array((data or {}).get("data")) or []]
            ours = [e for e in entries if e.get("id") == self.config.model] or entries[:1]
            n_ctx = (as_object(ours[0].get("meta")) or {}).get("n_ctx") if ours else None
            self._context = n_ctx if isinstance(n_ctx, int) and n_ctx > 0 else None
            self._context_asked = True
        return self._context

    def learn_context(self, exc: ContextExceeded) -> None:
        """A server that refused a request as too long said its context: believe it."""
        if exc.context_tokens is not None and self.config.context_tokens is None:
            self._context, self._context_asked = exc.context_tokens, True

    def _transport_error(self, exc: Exception) -> ModelError:
        if isinstance(exc, httpx.ConnectError):
            return ModelUnavailable(f"cannot connect to the model server at {self.base_url}")
        if isinstance(exc, httpx.TimeoutException):
            return ModelTimeout(
                f"the model server at {self.base_url} did not answer in time ({type(exc).__name__})"
            )
        return StreamCut(
            f"the connection to the model server at {self.base_url} broke before the answer "
            f"ended ({type(exc).__name__})"
        )

    def _status_error(self, response: httpx.Response, http: httpx.Client) -> ModelError:
        status = response.status_code
        data = loads_object(response.content)
        said = _said(data)[:300] if data is not None else response.text[:200].strip()
        where = f"the model server at {self.base_url} answered HTTP {status}: "
        where += self._clean(said or "(empty body)")
        if status in (401, 403):
            return ModelRefused(where)
        if status == 404:
            served = self._served_models(http)
            return ModelNotFound(f"{where} (model {self.config.model!r})", served)
        if status == 503:
            return ModelLoading(where)
        if status >= 500:
            return ModelServerFailed(where, status)
        return _context_error(data, where) or ModelResponseError(where)

    def _served_models(self, http: httpx.Client) -> tuple[str, ...]:
        """What GET /models lists (best effort: empty when the server does not say)."""
        try:
            data = loads_object(
                http.get(self.base_url + "/models", headers=self._headers()).content
            )
        except httpx.HTTPError:
            return ()
        entries = [as_object(e) or {} for e in as_array((data or {}).get("data")) or []]
        return tuple(str(e["id"]) for e in entries if "id" in e)

    def _too_long(self) -> AnswerTooLong:
        return AnswerTooLong(
            f"the model server at {self.base_url} sent an answer longer than "
            f"{self.config.max_answer_chars} characters or {self.config.max_response_bytes} bytes"
        )

    def _read_whole(self, response: httpx.Response) -> Iterator[str | Completion]:
        body = bytearray()
        for chunk in response.iter_bytes():
            body += chunk
            if len(body) > self.config.max_response_bytes:
                raise self._too_long()
        choice = _first_choice(self._json(body.decode("utf-8", errors="replace")))
        message = as_object(choice.get("message")) or {}
        text = message.get("content")
        text = answer_text(text) if isinstance(text, str) else ""
        raw_calls = enumerate(as_array(message.get("tool_calls")) or [])
        calls = tuple(ToolCall.parse(as_object(c) or {}, f"call_{i}") for i, c in raw_calls)
        room = self.config.max_answer_chars - sum(len(c.name) + len(c.arguments) for c in calls)
        if len(text) > room:
            if room > 0:
                yield text[:room]
            raise self._too_long()
        if text:
            yield text
        yield Completion(text, calls, _finish(choice))

    def _lines(self, response: httpx.Response) -> Iterator[str]:
        """The stream's lines, never holding more than `max_response_bytes` of it (httpx's
        `iter_lines` would gather a line that never ends whole)."""
        held: list[str] = []
        for text in response.iter_text():
            if response.num_bytes_downloaded > self.config.max_response_bytes:
                raise self._too_long()
            *ended, rest = _LINE_BREAK.split(text)
            if ended:
                yield "".join((*held, ended[0]))
                yield from ended[1:]
                held = []
            held.append(rest)
        if rest := "".join(held):
            yield rest

    def _read_stream(self, response: httpx.Response, deadline: float) -> Iterator[str | Completion]:
        parts: list[str] = []
        calls: dict[int, dict[str, str]] = {}
        finish: str | None = None
        room = self.config.max_answer_chars  # characters of text and tool calls still allowed
        pending = ""  # the first half of a surrogate pair, until the next piece brings the other
        for line in self._lines(response):
            if time.monotonic() > deadline:
                raise BudgetExceeded(OUT_OF_TIME)
            data = line[5:].strip() if line.startswith("data:") else None
            if data == "[DONE]":
                break
            chunk = self._json(data) if data is not None else {}
            if not chunk.get("choices"):
                continue  # not a data line, or a usage or keep-alive chunk
            choice = _first_choice(chunk)
            delta = as_object(choice.get("delta")) or {}
            content = delta.get("content")
            if isinstance(content, str) and content:
                content, pending = _hold_half(pending + content)
                if len(content) > room:
                    if room > 0:
                        yield content[:room]
                    raise self._too_long()
                room -= len(content)
                parts.append(content)
                if content:
                    yield content
            for raw in as_array(delta.get("tool_calls")) or []:
                room -= _merge_call_delta(calls, as_object(raw) or {})
            if room < 0:
                raise self._too_long()
            finish = _finish(choice) or finish
        else:
            if finish is None:
                raise StreamCut(
                    f"the model server at {self.base_url} ended the stream before the answer was "
                    "complete"
                )
        if pending:
            parts.append(answer_text(pending))
            yield parts[-1]
        tool_calls = tuple(
            ToolCall.parse(
                {"id": c["id"], "function": {k: whole_characters(v) for k, v in c.items()}},
                f"call_{i}",
            )
            for i, c in enumerate(calls[k] for k in sorted(calls))
        )
        yield Completion("".join(parts), tool_calls, finish)

    def _json(self, text: str) -> dict[str, Any]:
        data = loads_object(text)
        if data is None:
            raise ModelResponseError(
                f"the model server at {self.base_url} sent malformed JSON: "
                f"{self._clean(text[:200])!r}"
            )
        if data.get("error") is not None:
            where = f"the model server at {self.base_url} reported an error: "
            where += self._clean(_said(data))
            raise _context_error(data, where) or ModelResponseError(where)
        return data


_LINE_BREAK = re.compile(r"\r\n|\r|\n")  # a "\r\n" split across pieces gives one empty line more
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")  # all but \t and \n


def answer_text(text: str) -> str:
    """The model's text as it may be shown (a terminal, a web page, a UTF-8 file): whole
    characters, and no control characters but line breaks and tabs."""
    return _CONTROL.sub("", whole_characters(text))


def whole_characters(text: str) -> str:
    """`text` with its UTF-16 surrogate pairs joined into the characters they encode and every
    lone surrogate (which no UTF-8 output can hold) replaced by U+FFFD."""
    if not any("\ud800" <= c <= "\udfff" for c in text):
        return text
    return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")


def _hold_half(text: str) -> tuple[str, str]:
    """`text` made whole, and a trailing first half of a surrogate pair held back (the next
    piece of the stream may bring the other half)."""
    if text and "\ud800" <= text[-1] <= "\udbff":
        return answer_text(text[:-1]), text[-1]
    return answer_text(text), ""


def _said(data: Mapping[str, Any]) -> str:
    """What an error body says: `{"error": {"message": ...}}`, else the error (or body) as text."""
    error = data.get("error")
    detail = as_object(error) or {}
    if isinstance(detail.get("message"), str):
        return detail["message"]
    return str(error if error is not None else data)


# How servers say a request does not fit the model's context: llama-server's error type and
# message, OpenAI's (and vLLM's) code and message.
_CONTEXT_SAID = re.compile(
    r"exceed_context_size|exceeds the available context size|context_length_exceeded|"
    r"maximum context length",
    re.IGNORECASE,
)


def _context_error(data: Mapping[str, Any] | None, where: str) -> ContextExceeded | None:
    """A `ContextExceeded` when the error body says the request does not fit the context."""
    detail = as_object((data or {}).get("error")) or {}
    if not _CONTEXT_SAID.search(f"{detail.get('type', '')} {detail.get('code', '')} {where}"):
        return None
    counts = [detail.get(k) for k in ("n_prompt_tokens", "n_ctx")]
    prompt, context = (c if isinstance(c, int) and c > 0 else None for c in counts)
    return ContextExceeded(where, prompt, context)


def _first_choice(data: Mapping[str, Any]) -> dict[str, Any]:
    choices = as_array(data.get("choices"))
    choice = as_object(choices[0]) if choices else None
    if choice is None:
        raise ModelResponseError("the model server's answer has no `choices`")
    return choice


def _finish(choice: Mapping[str, Any]) -> str | None:
    reason = choice.get("finish_reason")
    return reason if isinstance(reason, str) else None


def _merge_call_delta(calls: dict[int, dict[str, str]], raw: Mapping[str, Any]) -> int:
    """Streamed tool calls arrive in pieces: the id and name once, the arguments in fragments.
    Returns how many characters of name and arguments the piece brought."""
    index = raw.get("index")
    entry = calls.setdefault(
        index if isinstance(index, int) else len(calls), {"id": "", "name": "", "arguments": ""}
    )
    if isinstance(raw.get("id"), str) and raw["id"]:
        entry["id"] = raw["id"]
    function = as_object(raw.get("function")) or {}
    brought = 0
    if isinstance(function.get("name"), str) and function["name"]:
        entry["name"] = function["name"]
        brought += len(entry["name"])
    if isinstance(function.get("arguments"), str):
        entry["arguments"] += function["arguments"]
        brought += len(function["arguments"])
    return brought
