"""The family web page: a Starlette app over the assistant's loop and the history store.

The security model is the README's («La página web», Seguridad): per-person tokens compared in
constant time, a random HttpOnly SameSite=Strict session cookie kept server-side only as a hash,
CSRF header + JSON on every POST, no HTML from the model or a search, bounded bodies, and every
conversation query naming the signed-in person (another's conversation is a 404). One middleware
around everything (`PageGuard`) answers only under the page's own names and origins (DNS
rebinding) and puts the security headers on every response, the framework's own errors included.
"""

from __future__ import annotations

import hmac
import ipaddress
import json
import logging
import math
import os
import time
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Iterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import InitVar, dataclass, field, replace
from importlib import resources
from typing import Any, ParamSpec, TypeVar

from enlace_config.schema.agent import LOOPBACK_HOSTS, WebConfig
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import Headers, MutableHeaders
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from enlace_agent.assistant import (
    Assistant,
    ContextExceeded,
    ModelError,
    ModelTimeout,
    ModelUnavailable,
    TurnEnd,
    TurnOptions,
)
from enlace_agent.household.database import Session, Store, StoreBusy
from enlace_agent.household.paths import HouseholdPaths
from enlace_agent.memory import MemoryRefused, MemoryStore, MemoryView, configured_secrets
from enlace_agent.model_versions import recently_switched, serving_label
from enlace_agent.shared import DiskFull, is_number, loads_json
from enlace_agent.tools.protocol import preview
from enlace_agent.tools.shopping import ItemRefused, ShoppingList
from enlace_agent.web.live import EventDict, LiveTurns

log = logging.getLogger("enlace_agent.web")
# One line per request (method, path, status, milliseconds): never a body, a query or a header.
access = logging.getLogger("enlace_agent.web.access")
P = ParamSpec("P")
T = TypeVar("T")

COOKIE = "enlace_session"
CSRF_HEADER = "x-enlace-csrf"
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; script-src 'self'; style-src 'self'; "
    "img-src 'self'; connect-src 'self'; object-src 'none'; base-uri 'none'; "
    "form-action 'self'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-store",
}
HOST_REFUSED = (
    "Esta página no responde a ese nombre. Ábrela con la dirección que muestra "
    "«enlace-assistant serve» (o añade el nombre a web.allowed_hosts en assistant.yaml)."
)
ORIGIN_REFUSED = "Petición rechazada: viene de otra página."
NOT_FOUND = "Esa dirección no existe en Enlace."
METHOD_REFUSED = "Esa dirección no admite esta operación."
BAD_REQUEST = "Petición no válida."
SERVER_FAULT = (
    "Enlace ha tenido un problema interno. Inténtalo de nuevo; si se repite, avisa a quien cuida "
    "el servidor."
)
WILDCARD_HOSTS = ("0.0.0.0", "::", "")
MODEL_DOWN = (
    "El asistente no está disponible ahora mismo: el servidor del modelo no responde. "
    "Inténtalo de nuevo dentro de un rato (si sigue igual, avisa a quien cuida el servidor)."
)
MODEL_CHANGING = (
    "El asistente está cambiando de modelo ahora mismo. Vuelve a preguntar dentro de un minuto."
)
MODEL_SLOW = (
    "El asistente está tardando demasiado en responder. Inténtalo de nuevo dentro de un rato."
)
MODEL_BROKEN = (
    "El asistente ha tenido un problema con el servidor del modelo. Inténtalo de nuevo; si se "
    "repite, avisa a quien cuida el servidor."
)
MODEL_CONTEXT = (
    "Esta pregunta no cabe en la memoria de trabajo del asistente, ni dejando fuera lo más "
    "antiguo de la conversación. Acórtala o empieza una conversación nueva; si pasa a menudo, "
    "avisa a quien cuida el servidor (puede darle más contexto: web.home.context_size)."
)
STORE_BUSY = (
    "El historial está ocupado ahora mismo (otra tarea lo está usando). Inténtalo de nuevo "
    "dentro de un momento."
)
NOT_SAVED = (
    "La respuesta no se ha podido guardar: el historial estaba ocupado. Si la necesitas, "
    "pregunta de nuevo dentro de un momento."
)
BAD_TEXT = (
    "El texto tiene caracteres que no se pueden guardar (quizá medio emoji). Escríbelo de nuevo."
)


def logged_path(scope: Scope) -> str:
    """The request's path as the access log writes it: the route's parameters by their names
    (`/api/conversations/{cid}/events`, `/api/memories/{mid}`), so the log says what was asked,
    never of which conversation or memory; of a path no route matched (or refused before
    routing), its first two parts."""
    params: Mapping[str, object] = scope.get("path_params") or {}
    parts: list[str] = scope["path"].split("/")
    if "endpoint" not in scope:
        return "/".join(parts[:3]) + ("/…" if len(parts) > 3 else "")
    names = {str(v): k for k, v in params.items() if k != "path"}  # a static file keeps its name
    return "/".join("{" + names[p] + "}" if p in names else p for p in parts)


def sentence(text: str) -> str:
    """`text` (a message that reads after «Error: » at the terminal) as the page shows it."""
    return text[:1].upper() + text[1:]


class HttpError(Exception):
    def __init__(self, status: int, message: str) -> None:
        self.status = status
        self.message = message


@dataclass(frozen=True)
class TurnSpec:
    """What a turn asked through the OpenAI-compatible endpoint brings beyond the page's
    question: the history the client sent (None: the conversation's saved one), its options,
    whether the person's memory is used (False: a household device's key), and what to do
    with the end once the answer is saved (in the turn's thread)."""

    history: tuple[Mapping[str, Any], ...] | None = None
    options: TurnOptions = field(default_factory=TurnOptions)
    personal: bool = True
    after: Callable[[str, TurnEnd], None] | None = None


@dataclass
class WebApp:
    """What the routes share (the store is called off the event loop: SQLite blocks)."""

    config: WebConfig
    assistant: Assistant
    store: Store
    tokens: Mapping[str, str | None]  # person -> their access token (None: name alone)
    live: LiveTurns
    env: Mapping[str, str] = field(default_factory=lambda: {})  # for the health checks
    paths: HouseholdPaths = field(init=False)  # where the household lives (default: from env)
    given_paths: InitVar[HouseholdPaths | None] = None
    # person -> the fingerprint of their token, which each of their sessions must carry
    fingerprints: dict[str, str] = field(init=False)
    memories: MemoryStore = field(init=False)  # in the history file; never another's
    shopping: ShoppingList = field(init=False)  # the household's, the same for everyone

    def __post_init__(self, given_paths: HouseholdPaths | None) -> None:
        found = given_paths or HouseholdPaths.of(self.assistant.config, self.env)
        self.paths = replace(found, database=self.store.path)  # the store it was given
        self.fingerprints = {n: self.store.fingerprint(t) for n, t in self.tokens.items()}
        secrets = configured_secrets(self.assistant.config, self.env)
        self.memories = MemoryStore(self.store, self.assistant.config.memory, secrets)
        self.shopping = ShoppingList(self.store)

    async def db(self, call: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        """A store call, in a thread (SQLite blocks: never on the event loop); a history file
        kept busy past `database_timeout_s` is a Spanish 503, a full disk a 507, not a 500."""
        try:
            return await run_in_threadpool(call, *args, **kwargs)
        except StoreBusy:
            raise HttpError(503, STORE_BUSY) from None
        except DiskFull as exc:  # 507 Insufficient Storage: nothing was written
            raise HttpError(507, sentence(str(exc))) from None

    # ------------------------------------------------------------ request checks
    async def session(self, request: Request) -> Session:
        cookie = request.cookies.get(COOKIE)
        found = await self.db(self.store.session, cookie) if cookie else None
        # A session made under another token (changed since, or another person's) is over.
        expected = self.fingerprints.get(found.person) if found else None
        if (
            found is None
            or expected is None
            or not hmac.compare_digest(found.fingerprint, expected)
        ):
            raise HttpError(401, "Tienes que entrar de nuevo.")
        return found

    def check_write(self, request: Request, session: Session | None) -> None:
        """A state-changing request: JSON, with the session's CSRF token (`PageGuard` checked
        where it comes from)."""
        if request.headers.get("content-type", "").split(";")[0].strip() != "application/json":
            raise HttpError(415, "Petición rechazada: se esperaba JSON.")
        if session is not None and not hmac.compare_digest(
            request.headers.get(CSRF_HEADER, "").encode(), session.csrf.encode()
        ):
            raise HttpError(403, "Petición rechazada: falta la comprobación de seguridad.")

    async def read_json(self, request: Request, limit: int | None = None) -> dict[str, Any]:
        """The body, a JSON object of at most `limit` bytes (None: `max_body_bytes`)."""
        limit = self.config.max_body_bytes if limit is None else limit
        declared = request.headers.get("content-length")
        if declared is not None and (not is_number(declared) or int(declared) > limit):
            raise HttpError(413, "El mensaje es demasiado grande.")
        body = bytearray()
        async for chunk in request.stream():
            body += chunk
            if len(body) > limit:
                raise HttpError(413, "El mensaje es demasiado grande.")
        try:
            data = loads_json(body)  # deep nesting too: an ordinary 400
        except ValueError:  # UnicodeDecodeError included
            raise HttpError(400, "Petición no válida.") from None
        if not isinstance(data, dict):
            raise HttpError(400, "Petición no válida.")
        try:  # a lone surrogate ("\ud800") decodes, but can be neither saved nor sent back
            json.dumps(data, ensure_ascii=False).encode()
        except UnicodeEncodeError:
            raise HttpError(400, BAD_TEXT) from None
        return data  # pyright: ignore[reportUnknownVariableType]

    def question(self, data: Mapping[str, Any]) -> str:
        text = data.get("text")
        if not isinstance(text, str) or not text.strip():
            raise HttpError(400, "Escribe una pregunta.")
        if len(text) > self.config.max_message_chars:
            raise HttpError(
                413, f"La pregunta es demasiado larga (máximo {self.config.max_message_chars})."
            )
        return text.strip()

    # ------------------------------------------------------------ one turn, as page events
    def run_turn(
        self,
        person: str,
        conversation_id: str,
        row: int,
        question: str,
        spec: TurnSpec = TurnSpec(),
    ) -> Iterator[EventDict]:
        """The loop's events for the page (in the turn's thread); the answer (or the Spanish
        error) is saved into `row` before the final event is sent, so a reload right after it
        finds it in the history."""
        try:
            yield from self._turn_events(person, conversation_id, row, question, spec)
        except StoreBusy:  # the text so far stays saved; the next start-up marks it
            log.warning("the history file stayed busy: an answer could not be saved")
            yield {"type": "error", "message": NOT_SAVED}
        except DiskFull as exc:
            log.warning("the disk is full: an answer could not be saved")
            yield {"type": "error", "message": sentence(str(exc))}

    def _turn_events(
        self, person: str, conversation_id: str, row: int, question: str, spec: TurnSpec
    ) -> Iterator[EventDict]:
        history = spec.history
        if history is None:
            history = tuple(self.store.history(person, conversation_id))
        model = serving_label(
            self.assistant.config, self.paths.models
        )  # which model wrote the answer
        memory = MemoryView(self.memories, person, conversation_id) if spec.personal else None
        try:
            for event in self.assistant.turn(
                history, question, memory=memory, household=self.store, options=spec.options
            ):
                if isinstance(event, TurnEnd):
                    sources = [s.to_dict() for s in event.sources]
                    answer = ("assistant", event.text, sources, event.messages)
                    used = [m.brief() for m in event.memories]
                    self.store.finish_answer(
                        person, conversation_id, row, *answer, model=model, memories=used
                    )
                    if spec.after is not None:
                        spec.after(conversation_id, event)
                    yield {**event.to_dict(), "model": model}
                    continue
                yield event.to_dict()
        except ModelError as exc:
            log.warning("model server failed: %s", type(exc).__name__)
            message = (
                MODEL_SLOW
                if isinstance(exc, ModelTimeout)
                else MODEL_CONTEXT
                if isinstance(exc, ContextExceeded)
                else MODEL_CHANGING
                if recently_switched(self.assistant.config, self.paths.models)
                else MODEL_DOWN
                if isinstance(exc, ModelUnavailable)
                else MODEL_BROKEN
            )
            self.store.finish_answer(person, conversation_id, row, "error", message)
            yield {"type": "error", "message": message}

    async def start_turn(
        self,
        person: str,
        conversation_id: str | None,
        question: str,
        spec: TurnSpec = TurnSpec(),
    ) -> str:
        """Saves the question (in a new conversation when `conversation_id` is None) and starts
        answering it; returns the conversation. Refused (409, 429) before anything is saved."""
        if conversation_id is not None and self.live.get(conversation_id) is not None:
            raise HttpError(409, "Espera a que termine la respuesta anterior.")
        cap = self.config.max_answers_per_person
        if self.live.count(person) >= cap:
            raise HttpError(
                429, f"Ya tienes {cap} respuestas en marcha: espera a que termine alguna."
            )
        # Reserved on the event loop right after the checks; the question is saved in a thread.
        live = self.live.reserve(person, conversation_id)
        try:
            conversation_id, row = await self.db(
                self.store.start_answer,
                person,
                conversation_id,
                question,
                resume=spec.options.resume,
            )
        except KeyError:  # deleted meanwhile
            self.live.release(live)
            raise HttpError(404, "Esa conversación no existe.") from None
        except BaseException:
            self.live.release(live)
            raise
        cid = conversation_id
        self.live.start(live, cid, row, lambda: self.run_turn(person, cid, row, question, spec))
        return cid


Handler = Callable[[WebApp, Request], Awaitable[Response]]


def route(web: WebApp, handler: Handler) -> Callable[[Request], Awaitable[Response]]:
    async def endpoint(request: Request) -> Response:
        try:
            return await handler(web, request)
        except HttpError as exc:
            return JSONResponse({"error": exc.message}, exc.status)

    return endpoint


# ---------------------------------------------------------------- the routes
async def index(web: WebApp, request: Request) -> Response:
    page = resources.files("enlace_agent.web").joinpath("static/index.html").read_bytes()
    return Response(page, media_type="text/html; charset=utf-8")


async def health(web: WebApp, request: Request) -> Response:
    """The home server's health (`enlace_agent.health`, the checks `doctor` prints), without a
    sign-in: no secret and no conversation text in it; 503 when something needs a person."""
    from enlace_agent.health import assistant_chain, needs_person, run_checks

    config = web.assistant.config
    checks = await run_in_threadpool(
        run_checks, config, web.env, web.paths, lambda: assistant_chain(web.assistant)
    )
    ok = not needs_person(checks)
    return JSONResponse({"ok": ok, "checks": [c.to_dict() for c in checks]}, 200 if ok else 503)


async def people(web: WebApp, request: Request) -> Response:
    listed = [{"name": n, "needs_token": t is not None} for n, t in web.tokens.items()]
    return JSONResponse({"people": listed})


async def login(web: WebApp, request: Request) -> Response:
    web.check_write(request, None)
    data = await web.read_json(request)
    name, given = data.get("name"), data.get("token", "")
    if not isinstance(name, str) or not isinstance(given, str):
        raise HttpError(400, "Petición no válida.")
    expected = web.tokens.get(name)
    # Compared in constant time, also for an unknown name or a person without a token.
    matches = hmac.compare_digest(given.encode(), (expected or "").encode())
    if name not in web.tokens or (expected is not None and not matches):
        raise HttpError(401, "Nombre o clave incorrectos.")
    lifetime_s = web.config.session_days * 86400
    token, _ = await web.db(web.store.create_session, name, lifetime_s, web.fingerprints[name])
    response = JSONResponse({"ok": True})
    response.set_cookie(COOKIE, token, max_age=int(lifetime_s), httponly=True, samesite="strict")
    return response


async def logout(web: WebApp, request: Request) -> Response:
    session = await web.session(request)
    web.check_write(request, session)
    await web.db(web.store.end_session, request.cookies.get(COOKIE, ""))
    response = JSONResponse({"ok": True})
    response.delete_cookie(COOKIE, path="/", httponly=True, samesite="strict")
    return response


async def me(web: WebApp, request: Request) -> Response:
    session = await web.session(request)
    return JSONResponse(
        {
            "name": session.person,
            "csrf": session.csrf,
            "max_message_chars": web.config.max_message_chars,
            "stall_timeout_s": web.config.stall_timeout_s,
            "memory": web.assistant.config.memory.enabled,
        }
    )


async def list_conversations(web: WebApp, request: Request) -> Response:
    session = await web.session(request)
    found = await web.db(
        web.store.conversations, session.person, web.config.max_conversations_listed
    )
    return JSONResponse({"conversations": found})


async def new_conversation(web: WebApp, request: Request) -> Response:
    """Creates a conversation with its first question and starts answering it."""
    session = await web.session(request)
    web.check_write(request, session)
    question = web.question(await web.read_json(request))
    conversation_id = await web.start_turn(session.person, None, question)
    return JSONResponse({"id": conversation_id}, 202)


async def ask(web: WebApp, request: Request) -> Response:
    session = await web.session(request)
    web.check_write(request, session)
    conversation_id = request.path_params["cid"]
    if not await web.db(web.store.owns, session.person, conversation_id):
        raise HttpError(404, "Esa conversación no existe.")
    question = web.question(await web.read_json(request))
    await web.start_turn(session.person, conversation_id, question)
    return JSONResponse({"id": conversation_id}, 202)


async def show_conversation(web: WebApp, request: Request) -> Response:
    session = await web.session(request)
    found = await web.db(web.store.conversation, session.person, request.path_params["cid"])
    if found is None:
        raise HttpError(404, "Esa conversación no existe.")
    found["answering"] = web.live.get(found["id"]) is not None
    return JSONResponse(found)


async def rename_conversation(web: WebApp, request: Request) -> Response:
    """PATCH {title}: the owner renames one conversation (another's is a 404)."""
    session = await web.session(request)
    web.check_write(request, session)
    title = (await web.read_json(request)).get("title")
    if not isinstance(title, str) or not title.strip():
        raise HttpError(400, "Escribe un nombre para la conversación.")
    cid = request.path_params["cid"]
    saved = await web.db(web.store.rename_conversation, session.person, cid, title)
    if saved is None:
        raise HttpError(404, "Esa conversación no existe.")
    return JSONResponse({"id": cid, "title": saved})


async def delete_conversation(web: WebApp, request: Request) -> Response:
    """DELETE: the owner deletes one conversation and its messages (another's is a 404); not
    while its answer is being written (409)."""
    session = await web.session(request)
    web.check_write(request, session)
    cid = request.path_params["cid"]
    if not await web.db(web.store.owns, session.person, cid):
        raise HttpError(404, "Esa conversación no existe.")
    if web.live.get(cid) is not None:
        raise HttpError(409, "Espera a que termine la respuesta para borrar la conversación.")
    if not await web.db(web.store.delete_conversation, session.person, cid):
        raise HttpError(404, "Esa conversación no existe.")
    return JSONResponse({"ok": True})


async def events(web: WebApp, request: Request) -> Response:
    """The answer being written, as server-sent events from its first event; `idle` when none."""
    session = await web.session(request)
    conversation_id = request.path_params["cid"]
    if not await web.db(web.store.owns, session.person, conversation_id):
        raise HttpError(404, "Esa conversación no existe.")
    live = web.live.get(conversation_id)

    async def stream() -> AsyncIterator[str]:
        if live is None:
            yield sse({"type": "idle"})
            return
        async for event in live.follow(web.config.keepalive_s):
            yield sse(event if event is not None else {"type": "ping"})

    return StreamingResponse(stream(), media_type="text/event-stream")


# ---------------------------------------------------------------- «Lo que Enlace recuerda»
FORGET_ALL_WORD = "BORRAR"  # typed by the person to confirm forgetting all their memories
NO_MEMORY = "Esa memoria no existe."
MEMORY_OFF = "La memoria de Enlace está desactivada en este servidor (memory.enabled)."


async def memory_session(web: WebApp, request: Request, *, write: bool) -> Session:
    session = await web.session(request)
    if write:
        web.check_write(request, session)
    if not web.assistant.config.memory.enabled:
        raise HttpError(404, MEMORY_OFF)
    return session


def row_id(request: Request, name: str, missing: str) -> int:
    """The row number in the path's `name`; `missing` (a 404) when it cannot be one."""
    raw = request.path_params[name]
    if not is_number(raw) or len(raw) > 18:
        raise HttpError(404, missing)
    return int(raw)


def memory_id(request: Request) -> int:
    return row_id(request, "mid", NO_MEMORY)


async def list_memories(web: WebApp, request: Request) -> Response:
    """The person's memories and the household's (never another's), with the pause state, a
    page at a time (`memory.page_memories`, the most recently changed first): `next`, when more
    follow, is what `?after=` takes for the next page."""
    person = (await memory_session(web, request, write=False)).person
    size = web.assistant.config.memory.page_memories
    after = page_after(request.query_params.get("after"))
    found = await web.db(web.memories.list, person, size + 1, after)
    more, found = len(found) > size, found[:size]
    titles = await web.db(web.memories.titles, person, found)
    listed = [
        {**m.to_dict(), "conversation_title": titles.get(m.conversation_id or "")} for m in found
    ]
    paused = await web.db(web.memories.paused, person)
    last = found[-1] if more else None
    following = f"{last.updated!r}_{last.id}" if last else None
    return JSONResponse({"paused": paused, "memories": listed, "next": following})


def page_after(raw: str | None) -> tuple[float, int] | None:
    """The `(updated, id)` of `?after=` (a list's `next`); 400 when it is not one."""
    if raw is None:
        return None
    updated, _, row = raw.partition("_")
    try:
        when = float(updated)
    except ValueError:
        when = math.nan
    if not math.isfinite(when) or not is_number(row) or len(row) > 18:
        raise HttpError(400, BAD_REQUEST)
    return when, int(row)


async def add_memory(web: WebApp, request: Request) -> Response:
    """POST {text, scope}: a memory written by the person (refused in Spanish: a secret, too
    long, empty, or while paused)."""
    person = (await memory_session(web, request, write=True)).person
    data = await web.read_json(request)
    scope = data.get("scope", "personal")
    try:
        memory, new = await web.db(
            web.memories.add, person, data.get("text"), str(scope), source="page"
        )
    except MemoryRefused as exc:
        raise HttpError(400, str(exc)) from None
    return JSONResponse({"memory": memory.to_dict(), "new": new}, 201 if new else 200)


async def edit_memory(web: WebApp, request: Request) -> Response:
    """PATCH {text}: the person corrects one memory they may see (another's is a 404)."""
    person = (await memory_session(web, request, write=True)).person
    data = await web.read_json(request)
    try:
        memory = await web.db(web.memories.update, person, memory_id(request), data.get("text"))
    except MemoryRefused as exc:
        raise HttpError(400, str(exc)) from None
    if memory is None:
        raise HttpError(404, NO_MEMORY)
    return JSONResponse({"memory": memory.to_dict()})


async def forget_memory(web: WebApp, request: Request) -> Response:
    """DELETE: one memory the person may see, gone from the file (another's is a 404)."""
    person = (await memory_session(web, request, write=True)).person
    if await web.db(web.memories.forget, person, memory_id(request)) is None:
        raise HttpError(404, NO_MEMORY)
    return JSONResponse({"ok": True})


async def forget_all_memories(web: WebApp, request: Request) -> Response:
    """POST {confirm: "BORRAR"}: every personal memory of the person (the household's stay)."""
    person = (await memory_session(web, request, write=True)).person
    if (await web.read_json(request)).get("confirm") != FORGET_ALL_WORD:
        raise HttpError(400, f"Para borrarlos todos, escribe {FORGET_ALL_WORD}.")
    return JSONResponse({"deleted": await web.db(web.memories.forget_all, person)})


async def pause_memory(web: WebApp, request: Request) -> Response:
    """POST {paused: true|false}: while paused nothing of the person's memory is read or written."""
    person = (await memory_session(web, request, write=True)).person
    paused = (await web.read_json(request)).get("paused")
    if not isinstance(paused, bool):
        raise HttpError(400, BAD_REQUEST)
    await web.db(web.memories.set_paused, person, paused)
    return JSONResponse({"paused": paused})


def sse(event: EventDict) -> str:
    return f"data: {json.dumps(event, ensure_ascii=False)}\n\n"


# ---------------------------------------------------------------- around every request
def own_hosts(config: WebConfig, server: tuple[str, int] | None) -> set[str]:
    """The Host values (lowercase) of this page, for a connection that arrived at `server`
    (address, port): that address, the one it listens on, the loopback names on loopback, and
    `allowed_hosts`; each with the port (and without it on port 80, or for a listed name)."""
    address, port = server or (config.host, config.port)
    with_port = {_plain_address(address)}
    if config.host not in WILDCARD_HOSTS:
        with_port.add(config.host.lower())
    if with_port & set(LOOPBACK_HOSTS) or _is_loopback(address):
        with_port |= set(LOOPBACK_HOSTS)
    names = {f"[{n}]" if ":" in n else n for n in with_port}
    hosts = {f"{n}:{port}" for n in names} | (names if port == 80 else set[str]())
    return hosts | _listed_hosts(config, port)


def own_origins(config: WebConfig, server: tuple[str, int] | None) -> set[str]:
    """The Origin values of this page: http:// and its hosts; https:// too for a listed name
    (a proxy may serve it with TLS)."""
    listed = _listed_hosts(config, server[1] if server else config.port)
    return {f"http://{h}" for h in own_hosts(config, server)} | {f"https://{h}" for h in listed}


def _listed_hosts(config: WebConfig, port: int) -> set[str]:
    listed = {h.lower() for h in config.allowed_hosts}
    return listed | {f"{h}:{port}" for h in listed if ":" not in h.rsplit("]", 1)[-1]}


def _plain_address(address: str) -> str:
    """An IPv4 client of a dual-stack socket arrives as ::ffff:a.b.c.d; the browser said a.b.c.d."""
    try:
        mapped = ipaddress.ip_address(address)
    except ValueError:
        return address.lower()
    plain = mapped.ipv4_mapped if isinstance(mapped, ipaddress.IPv6Address) else None
    return str(plain or mapped)


def _is_loopback(address: str) -> bool:
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return False


class PageGuard:
    """The outermost layer, so nothing leaves without it (static files and the framework's own
    404, 405 and 500 included): a request must name one of the page's own hosts (421 otherwise:
    a DNS-rebinding page names its own), an `Origin`, when sent, must be one of its origins (403),
    and every response gets `SECURITY_HEADERS`."""

    def __init__(self, app: ASGIApp, config: WebConfig) -> None:
        self.app = app
        self.config = config

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":  # lifespan
            await self.app(scope, receive, send)
            return

        started, status = time.perf_counter(), 0

        async def secured(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                MutableHeaders(scope=message).update(SECURITY_HEADERS)
            await send(message)

        try:
            await self.guarded(scope, receive, secured)
        finally:  # after the whole response (an answer's stream included)
            elapsed_ms = (time.perf_counter() - started) * 1000
            path = preview(logged_path(scope))
            access.info("%s %s %d %.0f ms", scope["method"], path, status, elapsed_ms)

    async def guarded(self, scope: Scope, receive: Receive, secured: Send) -> None:
        headers = Headers(scope=scope)
        server = scope.get("server")
        origin = headers.get("origin")
        if headers.get("host", "").lower() not in own_hosts(self.config, server):
            refused = JSONResponse({"error": HOST_REFUSED}, 421)
        elif origin is not None and origin.lower() not in own_origins(self.config, server):
            refused = JSONResponse({"error": ORIGIN_REFUSED}, 403)
        else:
            await self.app(scope, receive, secured)
            return
        await refused(scope, receive, secured)


async def framework_error(request: Request, exc: Exception) -> Response:
    """Starlette's own answers (no route, wrong method, a missing static file) in Spanish JSON."""
    status = exc.status_code if isinstance(exc, HTTPException) else 500
    headers = exc.headers if isinstance(exc, HTTPException) else None
    message = {404: NOT_FOUND, 405: METHOD_REFUSED}.get(status, BAD_REQUEST)
    return JSONResponse({"error": message if status < 500 else SERVER_FAULT}, status, headers)


async def server_fault(request: Request, exc: Exception) -> Response:
    """A bug or a broken history file: the family gets Spanish JSON, the log the traceback."""
    return JSONResponse({"error": SERVER_FAULT}, 500)


# ---------------------------------------------------------------- the shopping list
NO_ITEM = "Eso ya no está en la lista."


def item_id(request: Request) -> int:
    return row_id(request, "iid", NO_ITEM)


async def list_shopping(web: WebApp, request: Request) -> Response:
    """The household's list, the same for every person of the family."""
    await web.session(request)
    found = await web.db(web.shopping.items)
    return JSONResponse({"items": [i.to_dict() for i in found]})


async def add_shopping(web: WebApp, request: Request) -> Response:
    """POST {text}: one item added by the person (201; 200 when it was there: now unticked)."""
    session = await web.session(request)
    web.check_write(request, session)
    text = (await web.read_json(request)).get("text")
    if not isinstance(text, str):
        raise HttpError(400, "Escribe qué hay que comprar.")
    try:
        [(item, new)] = await web.db(web.shopping.add, session.person, [text])
    except ItemRefused as exc:
        raise HttpError(400, sentence(str(exc))) from None
    return JSONResponse({"item": item.to_dict(), "new": new}, 201 if new else 200)


async def tick_shopping(web: WebApp, request: Request) -> Response:
    """PATCH {done}: ticks or unticks one item."""
    session = await web.session(request)
    web.check_write(request, session)
    done = (await web.read_json(request)).get("done")
    if not isinstance(done, bool):
        raise HttpError(400, "Petición no válida.")
    item = await web.db(web.shopping.tick, item_id(request), done)
    if item is None:
        raise HttpError(404, NO_ITEM)
    return JSONResponse({"item": item.to_dict()})


async def clear_shopping(web: WebApp, request: Request) -> Response:
    """POST: the ticked items leave the list."""
    session = await web.session(request)
    web.check_write(request, session)
    return JSONResponse({"removed": await web.db(web.shopping.clear)})


def create_app(
    config: WebConfig,
    assistant: Assistant,
    store: Store,
    tokens: Mapping[str, str | None],
    env: Mapping[str, str] | None = None,
    paths: HouseholdPaths | None = None,
    more_routes: Callable[[WebApp], list[BaseRoute]] | None = None,
) -> ASGIApp:
    """The page; `env` (default: the process's environment) is what the health checks read;
    `paths`, where the household lives (default: as the settings and `env` place it);
    `more_routes`, routes served beside the page's, behind the same guard (the OpenAI-compatible
    endpoint, `web.openai_api`, which builds on this module)."""
    cut = store.mark_interrupted()  # answers a kill or a power cut left half-written
    if cut:
        log.info("%d answer(s) cut by the last stop marked as interrupted", cut)
    live = LiveTurns(store, config.answer_save_interval_s)
    web = WebApp(config, assistant, store, dict(tokens), live, dict(env or os.environ), paths)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncGenerator[None]:
        yield
        await live.stop()  # SIGTERM, Ctrl-C: the answers being written are saved and marked

    routes = [
        Route("/", route(web, index)),
        Route("/api/health", route(web, health)),
        Route("/api/people", route(web, people)),
        Route("/api/login", route(web, login), methods=["POST"]),
        Route("/api/logout", route(web, logout), methods=["POST"]),
        Route("/api/me", route(web, me)),
        Route("/api/conversations", route(web, list_conversations)),
        Route("/api/conversations", route(web, new_conversation), methods=["POST"]),
        Route("/api/conversations/{cid:str}", route(web, show_conversation)),
        Route("/api/conversations/{cid:str}", route(web, rename_conversation), methods=["PATCH"]),
        Route("/api/conversations/{cid:str}", route(web, delete_conversation), methods=["DELETE"]),
        Route("/api/conversations/{cid:str}/messages", route(web, ask), methods=["POST"]),
        Route("/api/conversations/{cid:str}/events", route(web, events)),
        Route("/api/memories", route(web, list_memories)),
        Route("/api/memories", route(web, add_memory), methods=["POST"]),
        Route("/api/memories/forget-all", route(web, forget_all_memories), methods=["POST"]),
        Route("/api/memories/pause", route(web, pause_memory), methods=["POST"]),
        Route("/api/memories/{mid:str}", route(web, edit_memory), methods=["PATCH"]),
        Route("/api/memories/{mid:str}", route(web, forget_memory), methods=["DELETE"]),
        Route("/api/shopping", route(web, list_shopping)),
        Route("/api/shopping", route(web, add_shopping), methods=["POST"]),
        Route("/api/shopping/clear", route(web, clear_shopping), methods=["POST"]),
        Route("/api/shopping/{iid:str}", route(web, tick_shopping), methods=["PATCH"]),
        *(more_routes(web) if more_routes is not None else []),
    ]
    static = StaticFiles(packages=[("enlace_agent.web", "static")])
    app = Starlette(
        routes=[*routes, Mount("/static", static)],
        exception_handlers={HTTPException: framework_error, Exception: server_fault},
        lifespan=lifespan,
    )
    return PageGuard(app, config)
