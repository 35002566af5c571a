"""Answers being written: each turn runs the assistant's loop in its own thread, and its events
are kept in memory until the answer is saved, so any number of page loads (a reload mid-answer
included) can follow it from the start. One answer at a time in each conversation, a few at a
time per person (the caller checks both on the event loop, then reserves).

The text of every answer being written is saved every `save_interval_s` (all of them in one
write, only those that grew), and on the way out (`stop`), so a kill or a power cut loses at most
the last few seconds; at the next start-up `Store.mark_interrupted` marks what was cut.

An answer that ended before anyone followed it (a fast model, a busy browser that opens the event
stream late) is still followed once, for `unread_s` seconds: the page would otherwise read it from
the history, which keeps the answer but not what it asked of the person (a proposal) or said
under it while it was being written (a tool's notice).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

from starlette.concurrency import run_in_threadpool

from enlace_agent.household.database import Store, StoreError
from enlace_agent.shared import DiskFull

log = logging.getLogger("enlace_agent.web")

EventDict = dict[str, Any]
FINAL = {"end", "error"}


class LiveTurn:
    """The events of one answer. Written from the turn's thread, read on the event loop."""

    def __init__(
        self, loop: asyncio.AbstractEventLoop, person: str, conversation_id: str | None
    ) -> None:
        self.loop = loop
        self.person = person
        self.conversation_id = conversation_id  # None while a new conversation is being saved
        self.row: int | None = None  # the answer's row in the store, once the turn runs
        self.events: list[EventDict] = []
        self.text = ""  # the answer's text so far, as the page shows it
        self.saved = ""  # what of it the store has
        self.done = False
        self.delivered = False  # a follower has been handed the final event
        self.ended = 0.0  # when it ended (time.monotonic()), for an unread one's replay
        self._changed = asyncio.Event()

    def push(self, event: EventDict) -> None:
        """Thread-safe: hands the event to the loop (none left once the page has stopped)."""
        with contextlib.suppress(RuntimeError):  # the loop is closed
            self.loop.call_soon_threadsafe(self._append, event)

    def _append(self, event: EventDict) -> None:
        self.events.append(event)
        if event["type"] == "text":
            self.text += event["text"]
        self.done = self.done or event["type"] in FINAL
        self._changed.set()
        self._changed = asyncio.Event()

    def close(self) -> None:
        """No more events (a turn that never ran): its followers stop waiting."""
        self.done = True
        self._changed.set()

    async def follow(self, keepalive_s: float) -> AsyncIterator[EventDict | None]:
        """Every event from the first, then each new one until the final; None when
        `keepalive_s` passed without news (the caller sends a sign of life)."""
        sent = 0
        while True:
            changed = self._changed
            while sent < len(self.events):
                sent += 1
                # Marked before the final event leaves: a follow after it was read is `idle`.
                self.delivered = self.delivered or self.events[sent - 1]["type"] in FINAL
                yield self.events[sent - 1]
            if self.done:
                return
            try:
                await asyncio.wait_for(changed.wait(), keepalive_s)
            except TimeoutError:
                yield None


class LiveTurns:
    def __init__(self, store: Store, save_interval_s: float, unread_s: float) -> None:
        self.store = store
        self.save_interval_s = save_interval_s
        self.unread_s = unread_s
        self._live: list[LiveTurn] = []  # reserved or running
        self._unread: dict[str, LiveTurn] = {}  # ended, never followed to the end: by conversation
        self._saver: asyncio.Task[None] | None = None

    def get(self, conversation_id: str) -> LiveTurn | None:
        return next((t for t in self._live if t.conversation_id == conversation_id), None)

    def followable(self, conversation_id: str) -> LiveTurn | None:
        """The answer being written, else the last one if it ended in the last `unread_s`
        seconds and no one has followed it to the end: handed out once."""
        live = self.get(conversation_id)
        if live is not None:
            return live
        unread = self._unread.pop(conversation_id, None)
        if unread is None or unread.delivered:
            return None
        return unread if time.monotonic() - unread.ended < self.unread_s else None

    def forget(self, conversation_id: str) -> None:
        """A deleted conversation: nothing of it is replayed."""
        self._unread.pop(conversation_id, None)

    def count(self, person: str) -> int:
        return sum(t.person == person for t in self._live)

    def reserve(self, person: str, conversation_id: str | None) -> LiveTurn:
        """Counts a turn whose question is about to be saved (`start` or `release` follows).
        On the event loop, right after the caller's checks: nothing runs in between."""
        live = LiveTurn(asyncio.get_running_loop(), person, conversation_id)
        self._live.append(live)
        if conversation_id is not None:  # a newer question: the older answer is not replayed
            self._unread.pop(conversation_id, None)
        return live

    def release(self, live: LiveTurn) -> None:
        """A reserved turn that will not run (its question could not be saved)."""
        self._end(live)

    def start(
        self, live: LiveTurn, conversation_id: str, row: int, run: Callable[[], Iterator[EventDict]]
    ) -> None:
        """Runs `run()` in a thread, its events pushed to `live`, the answer's text saved as it
        grows into `row`. Called on the event loop."""
        live.conversation_id, live.row = conversation_id, row

        def work() -> None:
            try:
                for event in run():
                    if event["type"] in FINAL:  # shown and ended in one step of the loop: a
                        with contextlib.suppress(RuntimeError):  # next question sent on seeing
                            live.loop.call_soon_threadsafe(self._last, live, event)  # it is free
                    else:
                        live.push(event)
            except Exception:  # `run` turns expected failures into events; this is a bug
                log.exception("a turn failed")
                live.push({"type": "error", "message": UNEXPECTED})
            finally:
                with contextlib.suppress(RuntimeError):  # the page has stopped
                    live.loop.call_soon_threadsafe(self._end, live)

        threading.Thread(target=work, name=f"turn-{conversation_id[:8]}", daemon=True).start()
        if self._saver is None or self._saver.done():
            self._saver = asyncio.get_running_loop().create_task(self._keep_saving())

    def _last(self, live: LiveTurn, event: EventDict) -> None:
        """The final event and the turn's end, together on the loop: no request sees the answer
        finished while its conversation still counts as answering (a 409 for the next question)."""
        live._append(event)  # pyright: ignore[reportPrivateUsage]
        self._end(live)

    def _end(self, live: LiveTurn) -> None:
        if live in self._live:
            self._live.remove(live)
        if not live.done:
            live.close()
        now = time.monotonic()
        stale = [c for c, t in self._unread.items() if now - t.ended >= self.unread_s]
        for conversation_id in stale:
            del self._unread[conversation_id]
        if live.conversation_id is None:
            return
        self._unread.pop(live.conversation_id, None)
        if live.row is not None and not live.delivered:
            live.ended = now
            self._unread[live.conversation_id] = live

    async def _keep_saving(self) -> None:
        while any(t.row is not None for t in self._live):
            await asyncio.sleep(self.save_interval_s)
            await self.save()

    async def save(self) -> None:
        """Saves, in one write, the text of every answer being written that grew since."""
        grown = [
            (t, t.row, t.text)
            for t in self._live
            if t.row is not None and not t.done and t.text != t.saved
        ]
        if not grown:
            return
        try:
            await run_in_threadpool(self.store.save_partial, {row: text for _, row, text in grown})
        except (StoreError, DiskFull) as exc:  # busy or full: the next round tries again
            log.warning("could not save the answers being written: %s", exc)
            return
        for live, _, text in grown:
            live.saved = text

    async def stop(self) -> None:
        """The page is stopping: the answers still being written are saved as they are and
        marked as interrupted (their threads die with the process)."""
        if self._saver is not None:
            self._saver.cancel()
        await self.save()
        marked = await run_in_threadpool(self.store.mark_interrupted)
        if marked:
            log.info("stopping: %d answer(s) being written saved as interrupted", marked)


UNEXPECTED = "El asistente ha tenido un problema inesperado. Inténtalo de nuevo."
