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
import json
import logging
import os
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from importlib import resources

from enlace_config.schema.agent import WebConfig
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp

from enlace_agent.assistant import Assistant
from enlace_agent.assistant.loop import left_out_line
from enlace_agent.household.database import Store
from enlace_agent.household.paths import HouseholdPaths
from enlace_agent.web.core import COOKIE, HttpError, WebApp
from enlace_agent.web.guard import PageGuard, framework_error, server_fault
from enlace_agent.web.live import EventDict, LiveTurns
from enlace_agent.web.memory_routes import (
    add_memory,
    edit_memory,
    forget_all_memories,
    forget_memory,
    list_memories,
    pause_memory,
)
from enlace_agent.web.shopping_routes import (
    add_shopping,
    clear_shopping,
    list_shopping,
    tick_shopping,
)

log = logging.getLogger("enlace_agent.web")


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
    for message in found["messages"]:  # the line the answer's `end` event had under it
        message["left_out_notice"] = (
            left_out_line(message["left_out"]) if message["left_out"] else None
        )
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
    web.live.forget(cid)
    return JSONResponse({"ok": True})


async def events(web: WebApp, request: Request) -> Response:
    """The answer being written (or one that ended before anyone followed it:
    `LiveTurns.followable`), as server-sent events from its first event; `idle` when none."""
    session = await web.session(request)
    conversation_id = request.path_params["cid"]
    if not await web.db(web.store.owns, session.person, conversation_id):
        raise HttpError(404, "Esa conversación no existe.")
    live = web.live.followable(conversation_id)

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
    live = LiveTurns(store, config.answer_save_interval_s, config.stall_timeout_s)
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
