"""The family web page: a Starlette app over the assistant's loop and the history store.

The security model is the README's («La página web», Seguridad): per-person tokens compared in
constant time, a random HttpOnly SameSite=Strict session cookie kept server-side only as a hash,
CSRF header + JSON + same Origin on every POST, no HTML from the model or a search, bounded bodies,
and every conversation query naming the signed-in person (another's conversation is a 404).
"""

from __future__ import annotations

import hmac
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass
from importlib import resources
from typing import Any

from enlace_config.schema.agent import WebConfig
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from enlace_agent.assistant import Assistant, ModelError, ModelTimeout, ModelUnavailable, TurnEnd
from enlace_agent.web.live import EventDict, LiveTurns
from enlace_agent.web.store import Session, Store

log = logging.getLogger("enlace_agent.web")

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
MODEL_DOWN = (
    "El asistente no está disponible ahora mismo: el servidor del modelo no responde. "
    "Inténtalo de nuevo dentro de un rato (si sigue igual, avisa a quien cuida el servidor)."
)
MODEL_SLOW = (
    "El asistente está tardando demasiado en responder. Inténtalo de nuevo dentro de un rato."
)
MODEL_BROKEN = (
    "El asistente ha tenido un problema con el servidor del modelo. Inténtalo de nuevo; si se "
    "repite, avisa a quien cuida el servidor."
)


class HttpError(Exception):
    def __init__(self, status: int, message: str) -> None:
        self.status = status
        self.message = message


@dataclass
class WebApp:
    """What the routes share (the store is called off the event loop: SQLite blocks)."""

    config: WebConfig
    assistant: Assistant
    store: Store
    tokens: Mapping[str, str | None]  # person -> their access token (None: name alone)
    live: LiveTurns

    # ------------------------------------------------------------ request checks
    async def session(self, request: Request) -> Session:
        cookie = request.cookies.get(COOKIE)
        found = await run_in_threadpool(self.store.session, cookie) if cookie else None
        if found is None or found.person not in self.tokens:
            raise HttpError(401, "Tienes que entrar de nuevo.")
        return found

    def check_write(self, request: Request, session: Session | None) -> None:
        """A state-changing request: JSON, from this origin, with the session's CSRF token."""
        origin = request.headers.get("origin")
        host = request.headers.get("host", "")
        if origin is not None and origin.split("://", 1)[-1] != host:
            raise HttpError(403, "Petición rechazada: viene de otra página.")
        if request.headers.get("content-type", "").split(";")[0].strip() != "application/json":
            raise HttpError(415, "Petición rechazada: se esperaba JSON.")
        if session is not None and not hmac.compare_digest(
            request.headers.get(CSRF_HEADER, "").encode(), session.csrf.encode()
        ):
            raise HttpError(403, "Petición rechazada: falta la comprobación de seguridad.")

    async def read_json(self, request: Request) -> dict[str, Any]:
        limit = self.config.max_body_bytes
        declared = request.headers.get("content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > limit):
            raise HttpError(413, "El mensaje es demasiado grande.")
        body = bytearray()
        async for chunk in request.stream():
            body += chunk
            if len(body) > limit:
                raise HttpError(413, "El mensaje es demasiado grande.")
        try:
            data = json.loads(body)
        except (ValueError, UnicodeDecodeError):
            raise HttpError(400, "Petición no válida.") from None
        if not isinstance(data, dict):
            raise HttpError(400, "Petición no válida.")
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
    def run_turn(self, person: str, conversation_id: str, question: str) -> Iterator[EventDict]:
        """The loop's events for the page; the answer (or the Spanish error) is saved before
        the final event is sent, so a reload right after it finds it in the history."""
        history = self.store.history(person, conversation_id)
        try:
            for event in self.assistant.turn(history, question):
                if isinstance(event, TurnEnd):
                    sources = [s.to_dict() for s in event.sources]
                    self.store.add_message(
                        person, conversation_id, "assistant", event.text, sources, event.messages
                    )
                yield event.to_dict()
        except ModelError as exc:
            log.warning("model server failed: %s", type(exc).__name__)
            message = (
                MODEL_SLOW
                if isinstance(exc, ModelTimeout)
                else MODEL_DOWN
                if isinstance(exc, ModelUnavailable)
                else MODEL_BROKEN
            )
            self.store.add_message(person, conversation_id, "error", message)
            yield {"type": "error", "message": message}


Handler = Callable[[WebApp, Request], Awaitable[Response]]


def route(web: WebApp, handler: Handler) -> Callable[[Request], Awaitable[Response]]:
    async def endpoint(request: Request) -> Response:
        try:
            response = await handler(web, request)
        except HttpError as exc:
            response = JSONResponse({"error": exc.message}, exc.status)
        response.headers.update(SECURITY_HEADERS)
        return response

    return endpoint


# ---------------------------------------------------------------- the routes
async def index(web: WebApp, request: Request) -> Response:
    page = resources.files("enlace_agent.web").joinpath("static/index.html").read_bytes()
    return Response(page, media_type="text/html; charset=utf-8")


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
    token, _ = await run_in_threadpool(web.store.create_session, name, lifetime_s)
    response = JSONResponse({"ok": True})
    response.set_cookie(COOKIE, token, max_age=int(lifetime_s), httponly=True, samesite="strict")
    return response


async def logout(web: WebApp, request: Request) -> Response:
    session = await web.session(request)
    web.check_write(request, session)
    await run_in_threadpool(web.store.end_session, request.cookies.get(COOKIE, ""))
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
        }
    )


async def list_conversations(web: WebApp, request: Request) -> Response:
    session = await web.session(request)
    found = await run_in_threadpool(
        web.store.conversations, session.person, web.config.max_conversations_listed
    )
    return JSONResponse({"conversations": found})


async def new_conversation(web: WebApp, request: Request) -> Response:
    """Creates a conversation with its first question and starts answering it."""
    session = await web.session(request)
    web.check_write(request, session)
    question = web.question(await web.read_json(request))
    conversation_id = await run_in_threadpool(
        web.store.create_conversation, session.person, question
    )
    return start_turn(web, session.person, conversation_id, question)


async def ask(web: WebApp, request: Request) -> Response:
    session = await web.session(request)
    web.check_write(request, session)
    conversation_id = request.path_params["cid"]
    if not await run_in_threadpool(web.store.owns, session.person, conversation_id):
        raise HttpError(404, "Esa conversación no existe.")
    question = web.question(await web.read_json(request))
    if web.live.get(conversation_id) is not None:
        raise HttpError(409, "Espera a que termine la respuesta anterior.")
    return start_turn(web, session.person, conversation_id, question)


def start_turn(web: WebApp, person: str, conversation_id: str, question: str) -> Response:
    # On the event loop, not awaited: no other request can start a turn in this conversation
    # between the check in `live.start` and the question being saved.
    web.store.add_message(person, conversation_id, "user", question)
    started = web.live.start(
        conversation_id, lambda: web.run_turn(person, conversation_id, question)
    )
    if started is None:
        raise HttpError(409, "Espera a que termine la respuesta anterior.")
    return JSONResponse({"id": conversation_id}, 202)


async def show_conversation(web: WebApp, request: Request) -> Response:
    session = await web.session(request)
    found = await run_in_threadpool(
        web.store.conversation, session.person, request.path_params["cid"]
    )
    if found is None:
        raise HttpError(404, "Esa conversación no existe.")
    found["answering"] = web.live.get(found["id"]) is not None
    return JSONResponse(found)


async def events(web: WebApp, request: Request) -> Response:
    """The answer being written, as server-sent events from its first event; `idle` when none."""
    session = await web.session(request)
    conversation_id = request.path_params["cid"]
    if not await run_in_threadpool(web.store.owns, session.person, conversation_id):
        raise HttpError(404, "Esa conversación no existe.")
    live = web.live.get(conversation_id)

    async def stream() -> AsyncIterator[str]:
        if live is None:
            yield sse({"type": "idle"})
            return
        async for event in live.follow(web.config.keepalive_s):
            yield sse(event if event is not None else {"type": "ping"})

    return StreamingResponse(stream(), media_type="text/event-stream")


def sse(event: EventDict) -> str:
    return f"data: {json.dumps(event, ensure_ascii=False)}\n\n"


def create_app(
    config: WebConfig, assistant: Assistant, store: Store, tokens: Mapping[str, str | None]
) -> Starlette:
    web = WebApp(config, assistant, store, dict(tokens), LiveTurns())
    routes = [
        Route("/", route(web, index)),
        Route("/api/people", route(web, people)),
        Route("/api/login", route(web, login), methods=["POST"]),
        Route("/api/logout", route(web, logout), methods=["POST"]),
        Route("/api/me", route(web, me)),
        Route("/api/conversations", route(web, list_conversations)),
        Route("/api/conversations", route(web, new_conversation), methods=["POST"]),
        Route("/api/conversations/{cid:str}", route(web, show_conversation)),
        Route("/api/conversations/{cid:str}/messages", route(web, ask), methods=["POST"]),
        Route("/api/conversations/{cid:str}/events", route(web, events)),
    ]
    static = StaticFiles(packages=[("enlace_agent.web", "static")])
    return Starlette(routes=[*routes, Mount("/static", static)])
