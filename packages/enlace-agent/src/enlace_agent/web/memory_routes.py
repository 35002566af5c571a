"""The routes of «Lo que Enlace recuerda»: the person's memories (and the household's) listed a
page at a time, added, corrected, forgotten one by one or all at once, and paused."""

from __future__ import annotations

import math

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from enlace_agent.household.database import Session
from enlace_agent.memory import MemoryRefused
from enlace_agent.shared import is_number
from enlace_agent.web.core import BAD_REQUEST, HttpError, WebApp, row_id

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
