"""An order-keeping process pool with bounded work in flight, and the prepare stage's worker side.

`OrderedPool.map(fn, items)` yields `(item, fn(item))` in input order, in this process for one
worker, else in `spawn` processes. At most two items per worker are in flight, so a huge generator
is read only as fast as it is processed (`Pool.imap` would read it all ahead).
"""

from __future__ import annotations

import multiprocessing
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from multiprocessing.pool import AsyncResult, Pool
from typing import Any, TypeVar

import numpy as np

T = TypeVar("T")
R = TypeVar("R")


class OrderedPool:
    def __init__(
        self,
        workers: int,
        initializer: Callable[..., None],
        initargs: tuple[Any, ...] = (),
    ) -> None:
        self.workers = workers
        self.pool: Pool | None = None
        if workers > 1:
            ctx = multiprocessing.get_context("spawn")
            self.pool = ctx.Pool(workers, initializer=initializer, initargs=initargs)
        else:
            initializer(*initargs)

    def map(
        self,
        fn: Callable[[Any], R],
        items: Iterable[T],
        send: Callable[[T], Any] = lambda item: item,
    ) -> Iterator[tuple[T, R]]:
        """(item, fn(send(item))) for each item, in order; only send(item) goes to a worker."""
        if self.pool is None:
            for item in items:
                yield item, fn(send(item))
            return
        pending: deque[tuple[T, AsyncResult[R]]] = deque()
        for item in items:
            pending.append((item, self.pool.apply_async(fn, (send(item),))))
            if len(pending) >= 2 * self.workers:
                done, res = pending.popleft()
                yield done, res.get()
        while pending:
            done, res = pending.popleft()
            yield done, res.get()

    def close(self) -> None:
        if self.pool is not None:
            self.pool.terminate()
            self.pool.join()
            self.pool = None


# --- the prepare stage's per-document work ------------------------------------------------------
_prepare_state: dict[str, Any] = {}


def init_prepare_worker(cleaning: dict[str, Any], dedup: dict[str, Any] | None) -> None:
    from enlace_config.schema.corpus import CleaningConfig, DedupConfig

    from enlace_data.corpus.cleaning import LanguageId
    from enlace_data.corpus.dedup import MinHasher

    cfg = CleaningConfig.model_validate(cleaning)
    _prepare_state["cleaning"] = cfg
    _prepare_state["language_id"] = LanguageId(cfg.language_id) if cfg.language_id else None
    _prepare_state["minhash"] = (
        MinHasher(DedupConfig.model_validate(dedup)) if dedup is not None else None
    )


Prepared = tuple[str, int, str | None, bytes, "np.ndarray[Any, Any] | None", int]


def prepare_batch(texts: list[str]) -> tuple[list[Prepared], float]:
    """For each raw document: (cleaned text, its UTF-8 size, filter reason or None, dedup key,
    MinHash signature or None, boilerplate lines removed); and the CPU seconds it took. Deterministic:
    the main process makes the dedup decisions."""
    import hashlib
    import time

    t0 = time.thread_time()
    from enlace_data.corpus.cleaning import (
        clean_text,
        filter_reason,
        normalised_key_text,
        remove_boilerplate_lines,
    )

    cleaning = _prepare_state["cleaning"]
    minhash = _prepare_state["minhash"]
    out: list[Prepared] = []
    for raw in texts:
        text, removed = remove_boilerplate_lines(clean_text(raw), cleaning.boilerplate_lines)
        reason = filter_reason(text, cleaning, _prepare_state["language_id"])
        key = b""
        sig = None
        if reason is None:
            key = hashlib.blake2b(normalised_key_text(text).encode(), digest_size=16).digest()
            if minhash is not None:
                sig = minhash.signature(text)
        out.append((text, len(text.encode("utf-8")), reason, key, sig, removed))
    return out, time.thread_time() - t0
