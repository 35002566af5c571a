"""Enlace behind an OpenAI-compatible endpoint (issue 38): `POST /v1/chat/completions` (streamed
as OpenAI's chunks ending in `data: [DONE]`, or one JSON body) and `GET /v1/models`, for Home
Assistant's conversation integrations and chat apps.

Served by the page's process, as routes beside the page's (`create_app(more_routes=...)`), not as
a unit of its own: a turn asked here is the page's turn (one loop, `WebApp.start_turn`: the same
store, the same live answers, the same limits of one answer at a time per conversation and a few
per person, the same saving and interruption marks), it lands in the person's history on the page
as it is written, and the page's guard (host check against DNS rebinding, no foreign Origin, the
security headers) stands in front of it. A second unit would have needed a second store writer,
a second copy of those limits and its own guard.

Who asks is the bearer key (`enlace-assistant token`, `household.tokens`): a person's device gets
their memories, history and the household's list; a household device (`holder` None) the list
only, its conversations kept under `HOUSEHOLD`. A client resends the whole conversation each
time: a continued one is found by the digest of its earlier messages (`digest`), saved with the
conversation after each answer. Every refusal is OpenAI's error body, `{"error": {"message",
"type", "param", "code"}}`, with nothing of the household in it, and comes before anything is
saved.
"""

from __future__ import annotations

import hashlib
import json
import re
import secrets
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import BaseRoute, Route

from enlace_agent.assistant import TurnEnd, TurnOptions
from enlace_agent.household.tokens import ApiToken, ApiTokens
from enlace_agent.shared import as_array, as_object
from enlace_agent.tools import REGISTRY
from enlace_agent.tools.protocol import Source
from enlace_agent.web.core import HttpError, TurnSpec, WebApp
from enlace_agent.web.live import EventDict

HOUSEHOLD = "(casa)"  # whose history a household device's conversations are kept in
ROLES = ("system", "developer", "user", "assistant", "tool")
BAD_KEY = "Clave de API no válida: crea una con «enlace-assistant token create»."
STATUS_TYPES = {
    400: "invalid_request_error",
    401: "invalid_request_error",
    404: "invalid_request_error",
    409: "invalid_request_error",
    413: "invalid_request_error",
    415: "invalid_request_error",
    429: "rate_limit_error",
}


class ApiError(HttpError):
    """A refusal in OpenAI's error shape (`param` and `code` as OpenAI names them)."""

    def __init__(
        self, status: int, message: str, *, param: str | None = None, code: str | None = None
    ) -> None:
        super().__init__(status, message)
        self.param = param
        self.code = code


def error_body(exc: HttpError) -> dict[str, Any]:
    kind = STATUS_TYPES.get(exc.status, "server_error")
    param = exc.param if isinstance(exc, ApiError) else None
    code = exc.code if isinstance(exc, ApiError) else None
    return {"error": {"message": exc.message, "type": kind, "param": param, "code": code}}


# ---------------------------------------------------------------- reading a request
@dataclass(frozen=True)
class Asked:
    """A request's conversation: the client's instructions (its system messages), the messages
    before the question (OpenAI's shapes, checked), the question, and after it the calls of the
    client's tools with their results (a turn they continue); the client's tools."""

    instructions: str | None
    earlier: tuple[dict[str, Any], ...]
    question: str
    results: tuple[dict[str, Any], ...]
    stream: bool
    voice: bool
    tools: tuple[dict[str, Any], ...]


def text_of(content: object, where: str) -> str:
    """A message's text: a string, or OpenAI's list of parts (only text parts); None is ""."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if (parts := as_array(content)) is not None:
        texts: list[str] = []
        for item in parts:
            part = as_object(item)
            if part is None or part.get("type") != "text":
                raise ApiError(400, f"{where}: solo se admiten partes de texto.", param=where)
            text = part.get("text")
            if not isinstance(text, str):
                raise ApiError(400, f"{where}: una parte de texto sin «text».", param=where)
            texts.append(text)
        return "".join(texts)
    raise ApiError(400, f"{where}: «content» debe ser texto o una lista de partes.", param=where)


def calls_of(value: object, where: str) -> list[dict[str, Any]]:
    """An assistant message's `tool_calls`, checked and in OpenAI's shape."""
    calls: list[dict[str, Any]] = []
    for item in as_array(value) or []:
        call = as_object(item) or {}
        function = as_object(call.get("function")) or {}
        name, arguments, call_id = function.get("name"), function.get("arguments"), call.get("id")
        if not (isinstance(name, str) and isinstance(arguments, str) and isinstance(call_id, str)):
            raise ApiError(
                400,
                f"{where}: cada llamada necesita «id» y «function» con «name» y «arguments».",
                param=where,
            )
        calls.append(
            {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}
        )
    return calls


def message_of(item: object, where: str) -> dict[str, Any]:
    """One message, checked, as the loop keeps it."""
    message = as_object(item)
    role = message.get("role") if message is not None else None
    if message is None or not isinstance(role, str) or role not in ROLES:
        raise ApiError(
            400, f"{where}: cada mensaje necesita un «role» ({', '.join(ROLES)}).", param=where
        )
    text = text_of(message.get("content"), where)
    if role == "tool":
        call_id = message.get("tool_call_id")
        if not isinstance(call_id, str):
            raise ApiError(400, f"{where}: falta «tool_call_id».", param=where)
        return {"role": "tool", "tool_call_id": call_id, "content": text}
    if role == "assistant" and message.get("tool_calls"):
        calls = calls_of(message.get("tool_calls"), where)
        return {"role": "assistant", "content": text or None, "tool_calls": calls}
    return {"role": role, "content": text}


def said(messages: Sequence[Mapping[str, Any]]) -> list[dict[str, str]]:
    """What the people said in `messages`: the questions and the answers (not the calls of tools
    nor their results)."""
    return [
        {"role": m["role"], "content": m["content"] or ""}
        for m in messages
        if m["role"] in ("user", "assistant") and not m.get("tool_calls")
    ]


def read_asked(
    data: Mapping[str, Any], model_name: str, max_messages: int, max_chars: int, own: Sequence[str]
) -> Asked:
    """The request's conversation, or an `ApiError` naming what is wrong; `own`, the names of
    Enlace's tools (a client's tool may not take one)."""
    model = data.get("model")
    if not isinstance(model, str):
        raise ApiError(400, "Falta «model».", param="model")
    if model != model_name:
        raise ApiError(
            404,
            f"El modelo «{model[:64]}» no existe: este servidor sirve «{model_name}».",
            param="model",
            code="model_not_found",
        )
    stream = data.get("stream", False)
    if not isinstance(stream, bool):
        raise ApiError(400, "«stream» debe ser true o false.", param="stream")
    messages = as_array(data.get("messages"))
    if not messages:
        raise ApiError(400, "«messages» debe ser una lista no vacía.", param="messages")
    if len(messages) > max_messages:
        raise ApiError(400, f"Demasiados mensajes (máximo {max_messages}).", param="messages")
    checked = [message_of(m, f"messages[{i}]") for i, m in enumerate(messages)]
    instructions = [m["content"] for m in checked if m["role"] in ("system", "developer")]
    talk = [m for m in checked if m["role"] not in ("system", "developer")]
    users = [i for i, m in enumerate(talk) if m["role"] == "user"]
    after = talk[users[-1] + 1 :] if users else []
    pending = bool(after) and after[-1]["role"] == "tool"
    if not users or not talk[users[-1]]["content"].strip() or (after and not pending):
        raise ApiError(
            400,
            "El último mensaje debe ser una pregunta del usuario (o los resultados de las "
            "herramientas del cliente).",
            param="messages",
        )
    if any(m["role"] == "user" for m in after) or (pending and after[0]["role"] != "assistant"):
        raise ApiError(
            400, "Los resultados de herramientas deben seguir a sus llamadas.", param="messages"
        )
    question = talk[users[-1]]["content"].strip()
    if len(question) > max_chars:
        raise ApiError(
            413, f"La pregunta es demasiado larga (máximo {max_chars}).", param="messages"
        )
    voice = data.get("voice", False)  # Enlace's own: a request may ask for a spoken answer
    if not isinstance(voice, bool):
        raise ApiError(400, "«voice» debe ser true o false.", param="voice")
    tools = tools_of(data.get("tools"), own) if data.get("tool_choice") != "none" else ()
    joined = "\n\n".join(t for t in instructions if t.strip())
    earlier = tuple(talk[: users[-1]])
    return Asked(joined or None, earlier, question, tuple(after), stream, voice, tools)


# ---------------------------------------------------------------- the client's tools
TOOL_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
SCHEMA_TYPES = ("object", "array", "string", "number", "integer", "boolean", "null")


def schema_problem(schema: object, where: str) -> str | None:
    """Why `schema` is not a JSON Schema (the parts a model reads), or None."""
    node = as_object(schema)
    if node is None:
        return f"{where} no es un objeto"
    kind = node.get("type")
    kinds = as_array(kind) if not isinstance(kind, str) else [kind]
    if kind is not None and (not kinds or any(k not in SCHEMA_TYPES for k in kinds)):
        return f"{where}.type no es un tipo de JSON Schema"
    children: list[tuple[str, object]] = []
    if (properties := node.get("properties")) is not None:
        mapping = as_object(properties)
        if mapping is None:
            return f"{where}.properties no es un objeto"
        children += [(f"{where}.properties.{n}", sub) for n, sub in mapping.items()]
    if (required := node.get("required")) is not None:
        names = as_array(required)
        if names is None or not all(isinstance(r, str) for r in names):
            return f"{where}.required no es una lista de nombres"
    if (enum := node.get("enum")) is not None and as_array(enum) is None:
        return f"{where}.enum no es una lista"
    for word in ("items", "additionalProperties"):
        if (sub := node.get(word)) is not None and not isinstance(sub, bool):
            children.append((f"{where}.{word}", sub))
    for word in ("anyOf", "oneOf", "allOf"):
        if (subs := node.get(word)) is not None:
            listed = as_array(subs)
            if listed is None:
                return f"{where}.{word} no es una lista"
            children += [(f"{where}.{word}[{i}]", sub) for i, sub in enumerate(listed)]
    return next((p for path, sub in children if (p := schema_problem(sub, path))), None)


def tools_of(value: object, own: Sequence[str]) -> tuple[dict[str, Any], ...]:
    """The client's tools, checked: OpenAI function specs with a JSON Schema of their
    parameters, none named like one of Enlace's (`own`)."""
    if value is None:
        return ()
    listed = as_array(value)
    if listed is None:
        raise ApiError(400, "«tools» debe ser una lista.", param="tools")
    tools: list[dict[str, Any]] = []
    for i, item in enumerate(listed):
        where = f"tools[{i}]"
        tool = as_object(item) or {}
        function = as_object(tool.get("function"))
        name = function.get("name") if function is not None else None
        if tool.get("type") != "function" or function is None or not isinstance(name, str):
            raise ApiError(
                400,
                f'{where}: se espera {{"type": "function", "function": {{"name", ...}}}}.',
                param=where,
            )
        if not TOOL_NAME.match(name):
            raise ApiError(400, f"{where}: nombre de herramienta no válido.", param=where)
        if name in own:
            raise ApiError(
                400,
                f"{where}: la herramienta «{name}» se llama como una de Enlace; cámbiale el "
                "nombre en la aplicación.",
                param=where,
                code="tool_name_taken",
            )
        parameters = function.get("parameters", {"type": "object", "properties": {}})
        problem = schema_problem(parameters, f"{where}.function.parameters")
        if (
            problem is None
            and as_object(parameters)
            and parameters.get("type", "object") != "object"
        ):
            problem = f"{where}.function.parameters debe ser de tipo object"
        if problem is not None:
            raise ApiError(400, f"{problem}: no es un JSON Schema válido.", param=where)
        spec: dict[str, Any] = {"name": name, "parameters": parameters}
        if isinstance(description := function.get("description"), str):
            spec["description"] = description
        tools.append({"type": "function", "function": spec})
    return tuple(tools)


def digest(messages: Sequence[Mapping[str, Any]]) -> str:
    """What recognises a conversation a client continues: its questions and answers (`said`),
    white space collapsed (a client may trim or join the streamed pieces differently)."""
    kept = [[m["role"], " ".join(m["content"].split())] for m in said(messages)]
    return hashlib.sha256(json.dumps(kept, ensure_ascii=False).encode()).hexdigest()


# ---------------------------------------------------------------- the answer as a client reads it
MARKDOWN = re.compile(r"\*\*|__|`+|^#+\s*|^\s*(?:[-*+•]|\d+[.)])\s+", re.MULTILINE)
LINK = re.compile(r"\[([^\]]*)\]\([^)]*\)")
URL = re.compile(r"\(?(?:https?://|www\.)[^\s)]*[^\s).,;:!?]\)?")
LOOSE_MARK = re.compile(r"\s+([.,;:!?])")


def for_voice(text: str) -> str:
    """`text` to be spoken: no Markdown, links, URLs or list marks, one paragraph."""
    plain = MARKDOWN.sub("", URL.sub("", LINK.sub(r"\1", text)))
    return LOOSE_MARK.sub(r"\1", " ".join(plain.split()))


def spoken_name(source: Source) -> str:
    """A source as said aloud: its site's name from the title («Zaragoza - AEMET»: AEMET), else
    the site's address without www."""
    for mark in (" | ", " - ", " — "):
        if mark in source.title:
            name = source.title.rsplit(mark, 1)[1].split(",")[0].strip()
            if 0 < len(name) <= 40:
                return name
    host = urlsplit(source.url).hostname or source.url
    return host.removeprefix("www.")


def sources_said(sources: Sequence[Source], *, voice: int | None) -> str:
    """The end of an answer that names its sources: for voice (`voice`: how many sites to
    name at most), «Según AEMET y El País.»; else a «Fuentes:» list with each page's title and
    address."""
    if not sources:
        return ""
    if voice is not None:
        names = list(dict.fromkeys(spoken_name(s) for s in sources))[:voice]
        if not names:
            return ""
        joined = names[0] if len(names) == 1 else ", ".join(names[:-1]) + " y " + names[-1]
        return f" Según {joined}."
    lines = "".join(f"\n{i}. {s.title} — {s.url}" for i, s in enumerate(sources, 1))
    return f"\n\nFuentes:{lines}"


def reply_text(end: TurnEnd, *, voice: int | None) -> str:
    """The answer's text as the client gets it (what it will resend to continue); `voice`, for
    a spoken one, the most sites it names."""
    text = for_voice(end.text) if voice is not None else end.text
    return text + sources_said(end.sources, voice=voice)


# ---------------------------------------------------------------- the routes
class RateLimit:
    """At most `per_minute` requests of each key in any 60 seconds."""

    def __init__(self, per_minute: int) -> None:
        self.per_minute = per_minute
        self.seen: dict[int, deque[float]] = {}

    def allow(self, key: int) -> bool:
        now = time.monotonic()
        window = self.seen.setdefault(key, deque())
        while window and window[0] <= now - 60:
            window.popleft()
        if len(window) >= self.per_minute:
            return False
        window.append(now)
        return True


class Endpoint:
    def __init__(self, web: WebApp) -> None:
        self.web = web
        self.config = web.config.api
        self.tokens = ApiTokens(web.store)
        self.limit = RateLimit(self.config.requests_per_minute)

    def routes(self) -> list[BaseRoute]:
        return [
            Route("/v1/models", self.guarded(self.models)),
            Route("/v1/chat/completions", self.guarded(self.completions), methods=["POST"]),
        ]

    def guarded(
        self, handler: Callable[[Request, ApiToken], Awaitable[Response]]
    ) -> Callable[[Request], Awaitable[Response]]:
        async def endpoint(request: Request) -> Response:
            try:
                return await handler(request, await self.key(request))
            except HttpError as exc:  # the page's own refusals (busy, 409, 429) too
                return JSONResponse(error_body(exc), exc.status)

        return endpoint

    async def key(self, request: Request) -> ApiToken:
        """The live key the request bears, its holder still one of the family; 401 otherwise,
        429 past the key's rate."""
        scheme, _, given = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not given.strip():
            raise ApiError(401, BAD_KEY, code="invalid_api_key")
        found = await self.web.db(self.tokens.check, given.strip(), self.web.tokens)
        if found is None:
            raise ApiError(401, BAD_KEY, code="invalid_api_key")
        if not self.limit.allow(found.id):
            raise ApiError(
                429,
                f"Demasiadas peticiones con esta clave (máximo {self.config.requests_per_minute} "
                "por minuto): espera un poco.",
                code="rate_limit_exceeded",
            )
        return found

    async def models(self, request: Request, key: ApiToken) -> Response:
        model = {
            "id": self.config.model_name,
            "object": "model",
            "created": 0,
            "owned_by": "enlace",
        }
        return JSONResponse({"object": "list", "data": [model]})

    async def completions(self, request: Request, key: ApiToken) -> Response:
        data = await self.web.read_json(request, self.config.max_body_bytes)
        own = [e.name for e in REGISTRY]
        limits = (self.config.max_messages, self.web.config.max_message_chars)
        asked = read_asked(data, self.config.model_name, *limits, own)
        person = key.holder or HOUSEHOLD
        spoken = key.voice or asked.voice
        voice = self.config.voice_sources if spoken else None
        question = {"role": "user", "content": asked.question}
        resume = bool(asked.results)
        # A continued conversation: after an answer, what came before the question; after
        # calls of the client's tools, the question too (their results follow it).
        before = [*asked.earlier, question] if resume else [*asked.earlier]
        found = None
        if before:
            found = await self.web.db(self.web.store.api_conversation, person, digest(before))
        history: tuple[Mapping[str, Any], ...] | None = None
        if found is not None and resume:
            saved = await self.web.db(self.web.store.history, person, found)
            history = (*saved, *unanswered(saved, asked.results))
        elif found is None:
            history = (*before, *asked.results)

        def after(conversation_id: str, end: TurnEnd) -> None:
            asked_so_far = [*asked.earlier, question]
            if not end.client_calls:
                reply = reply_text(end, voice=voice)
                asked_so_far.append({"role": "assistant", "content": reply})
            self.web.store.mark_api(person, conversation_id, key.name, digest(asked_so_far))

        options = TurnOptions(asked.instructions, spoken, asked.tools, resume)
        spec = TurnSpec(history, options, personal=key.holder is not None, after=after)
        cid = await self.web.start_turn(person, found, asked.question, spec)
        live = self.web.live.get(cid)
        assert live is not None  # just started: its end is scheduled on this loop, not run yet
        completion_id = f"chatcmpl-{secrets.token_hex(12)}"
        shape = Shape(completion_id, int(time.time()), self.config.model_name)
        events = live.follow(self.web.config.keepalive_s)
        if asked.stream:
            return StreamingResponse(shape.chunks(events, voice), media_type="text/event-stream")
        async for event in events:
            if event is None:
                continue
            if event["type"] == "error":
                raise ApiError(503, event["message"], code="model_unavailable")
            if event["type"] == "end":
                return JSONResponse(shape.completion(event, voice))
        raise ApiError(503, "La respuesta se interrumpió.")


def unanswered(
    history: Sequence[Mapping[str, Any]], results: Sequence[Mapping[str, Any]]
) -> list[Mapping[str, Any]]:
    """The client's results (`tool` messages) of calls the saved history has not had answered."""
    answered = {m.get("tool_call_id") for m in history if m.get("role") == "tool"}
    return [m for m in results if m["role"] == "tool" and m["tool_call_id"] not in answered]


@dataclass(frozen=True)
class Shape:
    """One answer in OpenAI's shapes: a `chat.completion`, or its `chat.completion.chunk`s."""

    id: str
    created: int
    model: str

    def completion(self, end: EventDict, voice: int | None) -> dict[str, Any]:
        turn = end_of(end)
        message: dict[str, Any] = {"role": "assistant", "content": reply_text(turn, voice=voice)}
        if end["client_calls"]:
            message = {**message, "content": message["content"] or None}
            message["tool_calls"] = end["client_calls"]
        return {
            "id": self.id,
            "object": "chat.completion",
            "created": self.created,
            "model": self.model,
            "choices": [{"index": 0, "message": message, "finish_reason": finish(end)}],
            "sources": end["sources"],  # Enlace's: each page's title, URL and provider
        }

    def chunk(self, delta: dict[str, Any], reason: str | None = None, **more: Any) -> str:
        choice = {"index": 0, "delta": delta, "finish_reason": reason}
        body = {
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "choices": [choice],
            **more,
        }
        return f"data: {json.dumps(body, ensure_ascii=False)}\n\n"

    async def chunks(
        self, events: AsyncIterator[EventDict | None], voice: int | None
    ) -> AsyncIterator[str]:
        """The answer as it is written (a spoken one whole at the end: it is cleaned first);
        Enlace's own tool calls never appear; a failure is OpenAI's error object in the
        stream, which the `openai` client raises."""
        yield self.chunk({"role": "assistant", "content": ""})
        async for event in events:
            if event is None:
                yield ": ping\n\n"  # an SSE comment: a sign of life clients skip
            elif event["type"] == "text" and voice is None:
                yield self.chunk({"content": event["text"]})
            elif event["type"] == "end":
                turn = end_of(event)
                spoken = voice is not None
                tail = (
                    reply_text(turn, voice=voice)
                    if spoken
                    else sources_said(turn.sources, voice=None)
                )
                if tail:
                    yield self.chunk({"content": tail})
                calls = [{"index": i, **c} for i, c in enumerate(event["client_calls"])]
                if calls:
                    yield self.chunk({"tool_calls": calls})
                yield self.chunk({}, finish(event), sources=event["sources"])
            elif event["type"] == "error":
                error = ApiError(503, event["message"], code="model_unavailable")
                yield f"data: {json.dumps(error_body(error), ensure_ascii=False)}\n\n"
        yield "data: [DONE]\n\n"


def end_of(event: EventDict) -> TurnEnd:
    """The parts of a turn's end (as the page's event carries it) an answer's text is made of."""
    sources = tuple(Source(**s) for s in event["sources"])
    return TurnEnd(text=event["text"], sources=sources, messages=(), tool_rounds=0)


def finish(end: EventDict) -> str:
    if end["client_calls"]:
        return "tool_calls"
    return "length" if end.get("stopped") == "max_answer_chars" else "stop"


def api_routes(web: WebApp) -> list[BaseRoute]:
    """The endpoint's routes (none when `web.api.enabled` is false)."""
    return Endpoint(web).routes() if web.config.api.enabled else []
