"""Encoding the cleaned documents into uint16 shards, in parallel, resumably.

Input: ``work/docs-<split>.jsonl`` (``{"s": source index, "t": text, "r": times to write it}``).
Output: ``<split>_<index:06d>.shard`` files, each ending at the first document boundary at or after
`encoding.shard_tokens` tokens; every document is preceded by <|endoftext|>.

The output never depends on the number of workers: the main process reads documents in order,
hands batches to the workers (at most 2 per worker in flight, so memory stays flat) and writes the
results in order. A document written r > 1 times is written once per pass over the file, so that
copies are far apart.

Resuming: a finished shard is sealed as a temporary dot-file, recorded in
``work/encode-state.json`` (with where the next shard starts and the counts so far), and only then
renamed into place. A killed build restarts from the last recorded shard (completing a rename the
kill interrupted, removing the half-written temporary) and writes the same bytes an uninterrupted
build writes.
"""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from enlace_data.corpus.parallel import OrderedPool
from enlace_data.errors import DataError
from enlace_data.shards import ShardWriter, shard_name
from enlace_data.tokenizer import Tokenizer

# Test hooks: kill the process (SIGKILL) in the middle of the shard after this many finished shards;
# or between recording that shard as finished and renaming it into place.
CRASH_ENV = "ENLACE_CORPUS_CRASH_AFTER_SHARDS"
CRASH_BEFORE_RENAME_ENV = "ENLACE_CORPUS_CRASH_BEFORE_RENAME"

COUNTS = ("documents", "tokens", "text_bytes")  # per source in the build state, in this order
_worker_tok: Tokenizer | None = None
_shards_finished_in_process = [0]  # for the CRASH_ENV hook


def _init_worker(tok: Tokenizer | str) -> None:
    """The tokenizer itself in this process, its model file in a spawned worker."""
    global _worker_tok
    _worker_tok = tok if isinstance(tok, Tokenizer) else Tokenizer.from_file(tok)


def _encode(texts: list[str]) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """All documents' tokens, each preceded by <|endoftext|>, flat; and each document's end."""
    tok = _worker_tok
    assert tok is not None
    ids = tok.encode_batch(texts)
    lengths = np.fromiter((len(x) + 1 for x in ids), dtype=np.int64, count=len(ids))
    ends = np.cumsum(lengths)
    flat = np.empty(int(ends[-1]) if len(ends) else 0, dtype=np.uint16)
    pos = 0
    for x in ids:
        flat[pos] = tok.eot_id
        flat[pos + 1 : pos + 1 + len(x)] = x
        pos += len(x) + 1
    return flat, ends


@dataclass
class Batch:
    texts: list[str]
    sources: list[int]
    ends: list[int]  # byte offset after each document's line
    nbytes: list[int]  # UTF-8 bytes of each document's text


@dataclass
class SplitProgress:
    """Where encoding of a split stands; JSON round-trips through the state file."""

    split: str
    pass_index: int = 0
    offset: int = 0
    shards: list[dict[str, Any]] = field(default_factory=list)
    sources: dict[str, dict[str, int]] = field(default_factory=dict)
    done: bool = False

    def to_json(self) -> dict[str, Any]:
        return {
            "split": self.split,
            "pass": self.pass_index,
            "offset": self.offset,
            "shards": self.shards,
            "sources": self.sources,
            "done": self.done,
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> SplitProgress:
        return cls(d["split"], d["pass"], d["offset"], d["shards"], d["sources"], d["done"])


def _batches(docs_file: Path, pass_index: int, offset: int, batch_chars: int) -> Iterator[Batch]:
    with open(docs_file, "rb") as f:
        f.seek(offset)
        pos = offset
        b, size = Batch([], [], [], []), 0
        for raw in f:
            pos += len(raw)
            d = json.loads(raw)
            if d["r"] <= pass_index:
                continue
            text: str = d["t"]
            b.texts.append(text)
            b.sources.append(d["s"])
            b.ends.append(pos)
            b.nbytes.append(len(text.encode("utf-8")))
            size += len(text)
            if size >= batch_chars:
                yield b
                b, size = Batch([], [], [], []), 0
        if b.texts:
            yield b


class Encoder:
    """Encodes batches in order, in this process (workers == 1) or in a spawn-safe pool of
    `workers` processes (started once, shared by both splits)."""

    def __init__(self, tok: Tokenizer, model_path: Path, workers: int) -> None:
        self.pool = OrderedPool(workers, _init_worker, (str(model_path) if workers > 1 else tok,))

    def map(self, batches: Iterator[Batch]) -> Iterator[tuple[Batch, tuple[Any, Any]]]:
        """(batch, (its tokens flat, each document's end)) in order."""
        return self.pool.map(_encode, batches, send=lambda b: b.texts)

    def close(self) -> None:
        self.pool.close()


def complete_recorded_shards(out_dir: Path, progress: SplitProgress) -> int:
    """Rename into place the recorded shards whose rename a kill interrupted; how many."""
    n = 0
    for entry in progress.shards:
        final = out_dir / entry["file"]
        if final.exists():
            continue
        tmp = out_dir / entry.get("tmp", "")
        if not entry.get("tmp") or not tmp.is_file():
            raise DataError(
                f"the build state records shard {entry['file']} but neither it nor its temporary "
                "file exists (were files deleted?); delete the folder to rebuild",
                path=out_dir,
            )
        os.replace(tmp, final)
        n += 1
    return n


def remove_stale_temporaries(out_dir: Path) -> int:
    stale = list(out_dir.glob(".*.tmp"))
    for p in stale:
        p.unlink(missing_ok=True)
    return len(stale)


def encode_split(
    *,
    out_dir: Path,
    docs_file: Path,
    progress: SplitProgress,
    passes: int,
    source_names: list[str],
    tok: Tokenizer,
    encoder: Encoder,
    shard_tokens: int,
    batch_chars: int,
    save_state: Callable[[SplitProgress], None],
    on_bytes: Callable[[int], object] = lambda n: None,
) -> SplitProgress:
    """Encode one split from where `progress` says, calling `save_state` after each shard."""
    crash_after = int(os.environ.get(CRASH_ENV, "0") or 0)
    crash_before_rename = int(os.environ.get(CRASH_BEFORE_RENAME_ENV, "0") or 0)
    split = progress.split
    writer: ShardWriter | None = None
    counts: dict[str, dict[str, int]] = {k: dict(v) for k, v in progress.sources.items()}
    shard_docs = 0

    def finish(w: ShardWriter) -> None:
        """Seal the shard, record it with where the next one starts, then rename it in."""
        header = w.seal()
        progress.shards.append(
            {
                "file": w.path.name,
                "tokens": header.token_count,
                "text_bytes": header.text_bytes,
                "documents": shard_docs,
                "tmp": w.tmp_path.name,
            }
        )
        progress.sources = {k: dict(v) for k, v in counts.items()}
        save_state(progress)
        if crash_before_rename and _shards_finished_in_process[0] + 1 >= crash_before_rename:
            os.kill(os.getpid(), signal.SIGKILL)
        w.commit()
        _shards_finished_in_process[0] += 1

    try:
        while progress.pass_index < passes:
            for batch, (flat, ends) in encoder.map(
                _batches(docs_file, progress.pass_index, progress.offset, batch_chars)
            ):
                starts = np.concatenate(([0], ends[:-1]))
                for i in range(len(batch.texts)):
                    if writer is None:
                        path = out_dir / shard_name(split, len(progress.shards))
                        writer = ShardWriter(
                            path, vocab_size=tok.vocab_size, tokenizer_id=tok.tokenizer_id
                        )
                        shard_docs = 0
                    doc, nbytes = flat[starts[i] : ends[i]], batch.nbytes[i]
                    writer.write(doc, text_bytes=nbytes)
                    shard_docs += 1
                    c = counts.setdefault(source_names[batch.sources[i]], dict.fromkeys(COUNTS, 0))
                    for key, n in zip(COUNTS, (1, len(doc), nbytes), strict=True):
                        c[key] += n
                    if crash_after and _shards_finished_in_process[0] >= crash_after:
                        os.kill(os.getpid(), signal.SIGKILL)
                    if writer.token_count >= shard_tokens:
                        progress.offset = batch.ends[i]
                        finish(writer)
                        writer = None
                on_bytes(sum(batch.nbytes))
            progress.pass_index += 1
            progress.offset = 0
        if writer is not None:
            finish(writer)
            writer = None
        progress.sources = counts
        progress.done = True
        if not progress.shards:
            raise DataError(f"split {split!r} has no documents to encode", path=docs_file)
        save_state(progress)
        return progress
    finally:
        if writer is not None:
            writer.abort()
