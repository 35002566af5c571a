"""Deduplication: exact (hash of the normalised text) and near-duplicate (MinHash + LSH).

A document's shingles are its runs of `shingle_words` case-folded words; their MinHash signature
(`num_perm` multiply-shift hashes) estimates Jaccard similarity as the fraction of equal values.
The signature is cut into b bands of r rows (chosen like datasketch's MinHashLSH, weighting false
negatives more); documents sharing a band are candidates, and a candidate whose estimated
similarity reaches the threshold is a duplicate (so the bands affect recall, never precision). The
first document seen is kept.

What grows with the corpus (exact keys, kept signatures, band tables) lives in one SQLite file, so
memory stays bounded by its page cache (`dedup.cache_mb`); about 0.7 KB of disk per kept document
at the defaults, and indexed lookups whose cost does not grow with the corpus.
"""

from __future__ import annotations

import hashlib
import re
import sqlite3
from pathlib import Path
from typing import Any

import numpy as np
from enlace_config.schema.corpus import DedupConfig

_WORD = re.compile(r"\w+")
_CHUNK = 4096


def optimal_bands(threshold: float, num_perm: int, fn_weight: float = 0.8) -> tuple[int, int]:
    """(bands, rows) minimising the weighted integrated false-positive and false-negative
    probabilities. False negatives weigh more than datasketch's 0.5: candidates are verified
    against the stored signatures, so a false positive only costs a comparison."""
    best: tuple[float, int, int] = (float("inf"), 1, num_perm)
    lo = np.linspace(0.0, threshold, 101)
    hi = np.linspace(threshold, 1.0, 101)
    for b in range(1, num_perm + 1):
        for r in range(1, num_perm // b + 1):
            fp = np.trapezoid(1 - (1 - lo**r) ** b, lo)
            fn = np.trapezoid((1 - hi**r) ** b, hi)
            err = float((1 - fn_weight) * fp + fn_weight * fn)
            if err < best[0]:
                best = (err, b, r)
    return best[1], best[2]


class MinHasher:
    """MinHash signatures of documents' word shingles (the same in every worker process)."""

    def __init__(self, cfg: DedupConfig) -> None:
        self.cfg = cfg
        rng = np.random.default_rng(cfg.seed)
        self._a = rng.integers(1, 2**63, size=cfg.num_perm, dtype=np.uint64) * np.uint64(
            2
        ) + np.uint64(1)
        self._b = rng.integers(0, 2**63, size=cfg.num_perm, dtype=np.uint64)
        self._mult = rng.integers(1, 2**63, size=cfg.shingle_words, dtype=np.uint64) | np.uint64(1)
        self._word_cache: dict[str, int] = {}

    def _word_hashes(self, words: list[str]) -> np.ndarray[Any, np.dtype[np.uint64]]:
        cache = self._word_cache
        if len(cache) > 2_000_000:
            cache.clear()
        hashes = [cache.get(w) for w in words]
        if None in hashes:
            for i, h in enumerate(hashes):
                if h is None:
                    w = words[i]
                    h = int.from_bytes(
                        hashlib.blake2b(w.encode(), digest_size=8).digest(), "little"
                    )
                    cache[w] = hashes[i] = h
        return np.array(hashes, dtype=np.uint64)

    def signature(self, text: str) -> np.ndarray[Any, np.dtype[np.uint32]]:
        words = _WORD.findall(text.casefold())
        if not words:
            words = [text]
        k = min(self.cfg.shingle_words, len(words))
        wh = self._word_hashes(words)
        n = len(words) - k + 1
        shingles = np.zeros(n, dtype=np.uint64)
        with np.errstate(over="ignore"):
            for j in range(k):
                shingles = shingles * self._mult[j] + wh[j : j + n]
            shingles = np.unique(shingles)
            sig = np.full(self.cfg.num_perm, np.iinfo(np.uint32).max, dtype=np.uint32)
            for s in range(0, len(shingles), _CHUNK):
                block = np.multiply.outer(shingles[s : s + _CHUNK], self._a)
                block += self._b
                # x >> 32 is monotonic in x: the min of the high halves is the high half of the min.
                low = (block.min(axis=0) >> np.uint64(32)).astype(np.uint32)
                sig = np.minimum(sig, low)
        return sig


class DedupIndex:
    """Exact and near-duplicate decisions in document order, remembered in SQLite.

    `check(key, sig)` says whether the document is a duplicate of an earlier one ("exact_duplicate",
    "near_duplicate") or new (None), and remembers it. `path` None keeps the tables in memory.
    """

    def __init__(self, cfg: DedupConfig, path: Path | None = None) -> None:
        self.cfg = cfg
        self.bands, self.rows = optimal_bands(cfg.threshold, cfg.num_perm)
        self.path = path
        if path is not None:
            path.unlink(missing_ok=True)  # a state of an interrupted run describes nothing now
        db = self.db = sqlite3.connect(":memory:" if path is None else path)
        # One writer, rebuilt from scratch when a stage reruns: no journal, no fsync.
        pragmas = ("journal_mode=OFF", "synchronous=OFF", "locking_mode=EXCLUSIVE")
        for pragma in (*pragmas, f"cache_size={-1024 * cfg.cache_mb}"):
            db.execute(f"PRAGMA {pragma}")
        db.execute("CREATE TABLE exact (key BLOB PRIMARY KEY) WITHOUT ROWID")
        db.execute("CREATE TABLE sigs (id INTEGER PRIMARY KEY, sig BLOB NOT NULL)")
        # key: the band's number (one byte) then its rows of the signature
        db.execute("CREATE TABLE bands (key BLOB PRIMARY KEY, id INTEGER) WITHOUT ROWID")
        marks = ", ".join("?" * self.bands)
        self._candidates = (
            "SELECT DISTINCT s.id, s.sig FROM bands AS b JOIN sigs AS s ON s.id = b.id "
            f"WHERE b.key IN ({marks})"
        )
        self._insert_bands = "INSERT OR IGNORE INTO bands VALUES " + ", ".join(
            ["(?, ?)"] * self.bands
        )
        self.kept = 0

    def check(self, key: bytes, sig: np.ndarray[Any, np.dtype[np.uint32]] | None) -> str | None:
        exact = "INSERT OR IGNORE INTO exact VALUES (?)"
        if self.cfg.exact and self.db.execute(exact, (key,)).rowcount == 0:
            return "exact_duplicate"
        if sig is not None and self.cfg.near and self.seen_similar_signature(sig):
            return "near_duplicate"
        return None

    def seen_similar_signature(self, sig: np.ndarray[Any, np.dtype[np.uint32]]) -> bool:
        """Whether a document with a similar signature came before; remembers `sig` if not."""
        r = self.rows
        keys = [bytes((i,)) + sig[i * r : (i + 1) * r].tobytes() for i in range(self.bands)]
        db = self.db
        # One indexed query for all bands (a statement per band cost 8x more per document).
        for _, stored in db.execute(self._candidates, keys):
            if float(np.mean(np.frombuffer(stored, dtype=np.uint32) == sig)) >= self.cfg.threshold:
                return True
        idx = db.execute("INSERT INTO sigs (sig) VALUES (?)", (sig.tobytes(),)).lastrowid
        db.execute(self._insert_bands, [x for k in keys for x in (k, idx)])
        self.kept += 1
        return False

    def close(self) -> None:
        """Close and delete the file: the decisions are in the stage's output now."""
        self.db.close()
        if self.path is not None:
            self.path.unlink(missing_ok=True)

    def __len__(self) -> int:
        return self.kept
