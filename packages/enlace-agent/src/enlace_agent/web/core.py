"""What every route of the page builds on: `WebApp` (what the routes share: the store, the
assistant, the turns being answered and the request checks), `TurnSpec`, `HttpError` and the
Spanish messages the routes answer with. The routes themselves are in `web.app`,
`web.memory_routes` and `web.shopping_routes`; the guard around every request in `web.guard`."""

from __future__ import annotations

import hmac
import json
import logging
from collections.abc import Callable, Iterator, Mapping
from dataclasses import InitVar, dataclass, field, replace
from typing import Any, ParamSpec, TypeVar

from enlace_config.schema.agent import WebConfig
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request

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
from enlace_agent.memory import MemoryStore, MemoryView, configured_secrets
from enlace_agent.model_versions import recently_switched, serving_label
from enlace_agent.shared import DiskFull, is_number, loads_json
from enlace_agent.tools.shopping import ShoppingList
from enlace_agent.web.live import EventDict, LiveTurns

log = logging.getLogger("enlace_agent.web")
P = ParamSpec("P")
T = TypeVar("T")

COOKIE = "enlace_session"
CSRF_HEADER = "x-enlace-csrf"
BAD_REQUEST = "Petición no válida."
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
                        person,
                        conversation_id,
                        row,
                        *answer,
                        model=model,
                        memories=used,
                        left_out=event.left_out,
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


def row_id(request: Request, name: str, missing: str) -> int:
    """The row number in the path's `name`; `missing` (a 404) when it cannot be one."""
    raw = request.path_params[name]
    if not is_number(raw) or len(raw) > 18:
        raise HttpError(404, missing)
    return int(raw)
