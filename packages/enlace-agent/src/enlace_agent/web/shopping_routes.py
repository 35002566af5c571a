"""The routes of the shopping list: the household's, the same for every person of the family
(listed, an item added, ticked or unticked, the ticked ones cleared)."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from enlace_agent.tools.shopping import ItemRefused
from enlace_agent.web.core import HttpError, WebApp, row_id, sentence

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
