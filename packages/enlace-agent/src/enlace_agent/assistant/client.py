"""A client for OpenAI-style chat completions (`POST {base_url}/chat/completions`), streamed as
server-sent events or not, over httpx.

`chat()` yields the answer's text as it arrives, then one `Completion` (the whole text, the
structured tool calls, the finish reason). Every failure is a typed `ModelError` whose message
names the server and never holds the API key; a turn's deadline is enforced by a watchdog that
closes the socket, so a server that trickles its answer cannot outlast it.
"""

from __future__ import annotations

import codecs
import json
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx

from enlace_agent.search.models import Secret, as_array, as_object, loads_object, redact
from enlace_agent.search.transport import Watchdog


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


class ModelNotFound(ModelError):
    """The server does not serve the model asked for; `served` lists what it serves (if known)."""

    def __init__(self, message: str, served: tuple[str, ...]) -> None:
        super().__init__(message)
        self.served = served


class ModelRefused(ModelError):
    """The server refused the request's credentials (HTTP 401/403)."""


@dataclass(frozen=True)
class ToolCall:
    """A call the model asked for. `problem` (Spanish) is set when the call could not be read."""

    id: str
    name: str
    arguments: str
    problem: str | None = None

    def to_message(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "type": "function",
            "function": {"name": self.name, "arguments": self.arguments},
        }


@dataclass(frozen=True)
class Completion:
    text: str
    tool_calls: tuple[ToolCall, ...] = field(default=())
    finish_reason: str | None = None


class ChatClient:
    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key: Secret | None = None,
        connect_timeout_s: float,
        read_timeout_s: float,
        sampling: Mapping[str, Any],
    ) -> None:
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.base_url = base_url.rstrip("/")
        self.model = model
        self._key = api_key
        self.connect_timeout_s = connect_timeout_s
        self.read_timeout_s = read_timeout_s
        self.sampling = dict(sampling)

    def _headers(self) -> dict[str, str]:
        headers = {"Accept": "application/json, text/event-stream"}
        if self._key is not None:
            headers["Authorization"] = f"Bearer {self._key.reveal()}"
        return headers

    def _clean(self, text: str) -> str:
        return redact(text, [self._key.reveal()] if self._key is not None else [])

    def chat(
        self,
        messages: Sequence[Mapping[str, Any]],
        tools: Sequence[Mapping[str, Any]] | None,
        *,
        stream: bool,
        deadline: float,
    ) -> Iterator[str | Completion]:
        """The answer's text pieces, then its `Completion`; raises a `ModelError`."""
        payload: dict[str, Any] = {
            "model": self.model,
            "messages": list(messages),
            "stream": stream,
            **self.sampling,
        }
        if tools:
            payload["tools"] = list(tools)
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise BudgetExceeded("the time budget ran out before the model was asked")
        timeout = httpx.Timeout(
            connect=min(self.connect_timeout_s, remaining),
            read=min(self.read_timeout_s, remaining),
            write=min(self.read_timeout_s, remaining),
            pool=min(self.connect_timeout_s, remaining),
        )
        with Watchdog(deadline) as watchdog, httpx.Client(timeout=timeout) as http:
            try:
                with http.stream(
                    "POST",
                    self.url,
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
                        yield from self._read_whole(response, deadline)
            except ModelError:
                raise
            except (httpx.HTTPError, OSError) as exc:
                late = watchdog.fired or time.monotonic() >= deadline
                raise self._transport_error(exc, late) from None

    def _transport_error(self, exc: Exception, late: bool) -> ModelError:
        if late:  # the watchdog, or a read timeout cut to the time left
            return BudgetExceeded("the time budget ran out while the model was answering")
        if isinstance(exc, httpx.ConnectError):
            return ModelUnavailable(f"cannot connect to the model server at {self.base_url}")
        if isinstance(exc, httpx.TimeoutException):
            return ModelTimeout(
                f"the model server at {self.base_url} did not answer in time ({type(exc).__name__})"
            )
        return ModelResponseError(
            f"the connection to the model server at {self.base_url} broke before the answer "
            f"ended ({type(exc).__name__})"
        )

    def _status_error(self, response: httpx.Response, http: httpx.Client) -> ModelError:
        status = response.status_code
        said = self._clean(_error_message(response))
        where = f"the model server at {self.base_url} answered HTTP {status}: {said}"
        if status in (401, 403):
            return ModelRefused(where)
        if status == 404:
            served = self._served_models(http)
            return ModelNotFound(f"{where} (model {self.model!r})", served)
        return ModelResponseError(where)

    def _served_models(self, http: httpx.Client) -> tuple[str, ...]:
        """What GET /models lists (best effort: empty when the server does not say)."""
        try:
            data = as_object(http.get(self.base_url + "/models", headers=self._headers()).json())
        except (httpx.HTTPError, ValueError):
            return ()
        entries = as_array(data.get("data")) if data is not None else None
        ids = [as_object(e) for e in entries or []]
        return tuple(str(e["id"]) for e in ids if e is not None and "id" in e)

    def _read_whole(self, response: httpx.Response, deadline: float) -> Iterator[str | Completion]:
        body = b""
        for chunk in response.iter_bytes():
            body += chunk
            if time.monotonic() > deadline:
                raise BudgetExceeded("the time budget ran out while the model was answering")
        data = self._json(body.decode("utf-8", errors="replace"))
        choice = _first_choice(data)
        message = as_object(choice.get("message")) or {}
        text = message.get("content")
        text = text if isinstance(text, str) else ""
        calls = tuple(
            _tool_call(as_object(c) or {}, i)
            for i, c in enumerate(as_array(message.get("tool_calls")) or [])
        )
        if text:
            yield text
        yield Completion(text, calls, _finish(choice))

    def _read_stream(self, response: httpx.Response, deadline: float) -> Iterator[str | Completion]:
        parts: list[str] = []
        calls: dict[int, dict[str, str]] = {}
        finish: str | None = None
        done = False
        for data in _sse_data(response, deadline):
            if data == "[DONE]":
                done = True
                break
            chunk = self._json(data)
            if not chunk.get("choices"):
                continue  # a usage or keep-alive chunk
            choice = _first_choice(chunk)
            delta = as_object(choice.get("delta")) or {}
            content = delta.get("content")
            if isinstance(content, str) and content:
                parts.append(content)
                yield content
            for raw in as_array(delta.get("tool_calls")) or []:
                _merge_call_delta(calls, as_object(raw) or {})
            finish = _finish(choice) or finish
        if not done and finish is None:
            raise ModelResponseError(
                f"the model server at {self.base_url} ended the stream before the answer was "
                "complete"
            )
        tool_calls = tuple(
            _tool_call({"id": c["id"], "function": c}, i)
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
        error = data.get("error")
        if error is not None:
            detail = as_object(error)
            said = detail.get("message") if detail is not None else error
            raise ModelResponseError(
                f"the model server at {self.base_url} reported an error: {self._clean(str(said))}"
            )
        return data


def _sse_data(response: httpx.Response, deadline: float) -> Iterator[str]:
    """The `data:` payloads of a server-sent event stream (one event per payload line)."""
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    buffer = ""
    for chunk in response.iter_bytes():
        if time.monotonic() > deadline:
            raise BudgetExceeded("the time budget ran out while the model was answering")
        buffer += decoder.decode(chunk)
        *lines, buffer = buffer.split("\n")
        for line in lines:
            line = line.rstrip("\r")
            if line.startswith("data:"):
                yield line[5:].strip()
    if buffer.startswith("data:"):
        yield buffer[5:].strip()


def _first_choice(data: Mapping[str, Any]) -> dict[str, Any]:
    choices = as_array(data.get("choices"))
    choice = as_object(choices[0]) if choices else None
    if choice is None:
        raise ModelResponseError("the model server's answer has no `choices`")
    return choice


def _finish(choice: Mapping[str, Any]) -> str | None:
    reason = choice.get("finish_reason")
    return reason if isinstance(reason, str) else None


def _merge_call_delta(calls: dict[int, dict[str, str]], raw: Mapping[str, Any]) -> None:
    """Streamed tool calls arrive in pieces: the id and name once, the arguments in fragments."""
    index = raw.get("index")
    entry = calls.setdefault(
        index if isinstance(index, int) else len(calls), {"id": "", "name": "", "arguments": ""}
    )
    if isinstance(raw.get("id"), str) and raw["id"]:
        entry["id"] = raw["id"]
    function = as_object(raw.get("function")) or {}
    if isinstance(function.get("name"), str) and function["name"]:
        entry["name"] = function["name"]
    if isinstance(function.get("arguments"), str):
        entry["arguments"] += function["arguments"]


def _tool_call(raw: Mapping[str, Any], index: int) -> ToolCall:
    function = as_object(raw.get("function")) or {}
    name = function.get("name")
    arguments = function.get("arguments")
    if not isinstance(arguments, str):  # some servers send an object
        arguments = json.dumps(arguments if arguments is not None else {}, ensure_ascii=False)
    call_id = raw.get("id")
    return ToolCall(
        id=call_id if isinstance(call_id, str) and call_id else f"call_{index}",
        name=name if isinstance(name, str) else "",
        arguments=arguments,
        problem=None if isinstance(name, str) and name else "la llamada no indica la herramienta.",
    )


def _error_message(response: httpx.Response) -> str:
    try:
        data = as_object(response.json())
    except ValueError:
        return response.text[:200].strip() or "(empty body)"
    error = data.get("error") if data is not None else None
    detail = as_object(error)
    if detail is not None and isinstance(detail.get("message"), str):
        return str(detail["message"])[:300]
    return str(error if error is not None else data)[:300]
