"""Answers being written: each turn runs the assistant's loop in its own thread, and its events
are kept in memory until the answer is saved, so any number of page loads (a reload mid-answer
included) can follow it from the start. Keyed by conversation: one answer at a time in each."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

log = logging.getLogger("enlace_agent.web")

EventDict = dict[str, Any]
FINAL = {"end", "error"}


class LiveTurn:
    """The events of one answer. Written from the turn's thread, read on the event loop."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.events: list[EventDict] = []
        self.done = False
        self._changed = asyncio.Event()

    def push(self, event: EventDict) -> None:
        """Thread-safe: hands the event to the loop."""
        self.loop.call_soon_threadsafe(self._append, event)

    def _append(self, event: EventDict) -> None:
        self.events.append(event)
        self.done = self.done or event["type"] in FINAL
        self._changed.set()
        self._changed = asyncio.Event()

    async def follow(self, keepalive_s: float) -> AsyncIterator[EventDict | None]:
        """Every event from the first, then each new one until the final; None when
        `keepalive_s` passed without news (the caller sends a sign of life)."""
        sent = 0
        while True:
            changed = self._changed
            while sent < len(self.events):
                sent += 1
                yield self.events[sent - 1]
            if self.done:
                return
            try:
                await asyncio.wait_for(changed.wait(), keepalive_s)
            except TimeoutError:
                yield None


class LiveTurns:
    def __init__(self) -> None:
        self._turns: dict[str, LiveTurn] = {}

    def get(self, conversation_id: str) -> LiveTurn | None:
        return self._turns.get(conversation_id)

    def start(
        self,
        conversation_id: str,
        run: Callable[[], Iterator[EventDict]],
    ) -> LiveTurn | None:
        """Runs `run()` in a thread, its events pushed to a new live turn; None when this
        conversation already has an answer being written. Called on the event loop."""
        if conversation_id in self._turns:
            return None
        live = LiveTurn(asyncio.get_running_loop())
        self._turns[conversation_id] = live

        def work() -> None:
            try:
                for event in run():
                    live.push(event)
            except Exception:  # `run` turns expected failures into events; this is a bug
                log.exception("a turn failed")
                live.push({"type": "error", "message": UNEXPECTED})
            finally:
                live.loop.call_soon_threadsafe(self._turns.pop, conversation_id, None)

        threading.Thread(target=work, name=f"turn-{conversation_id[:8]}", daemon=True).start()
        return live


UNEXPECTED = "El asistente ha tenido un problema inesperado. Inténtalo de nuevo."
