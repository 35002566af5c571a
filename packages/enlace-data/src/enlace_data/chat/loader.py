"""Conversations for supervised fine-tuning: reading, validation, rendering and an exactly
resumable loader of packed rows.

A chat data directory holds train.jsonl and val.jsonl (or .parquet), one OpenAI-shaped
conversation per line, each validated by chat.normalize_conversation. A conversation becomes inputs
ids[:-1] and targets ids[1:] (-1 where the assistant did not produce it), cut or left out when
longer than data.context_length (data.overflow). Rows are packed greedily with whole conversations;
each position carries its conversation's segment id and the model attends only within a segment;
the rest of a row is padding (input <|endoftext|>, target -1, a segment of its own). Order and
state as the token loader's (stream.StreamLoader), counting conversations.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Unpack

import numpy as np
from enlace_config.schema.data import DataConfig

from enlace_data.chat.format import ChatTokenizer, copied, normalize_conversation, render
from enlace_data.errors import DataError
from enlace_data.stream import FloatArray, IntArray, Split, StreamArgs, StreamLoader
from enlace_data.tokenizer import ByteTokenizer

# inputs, targets, segments (and the targets' loss weights, with data.copied_weight)
ChatBatch = tuple[IntArray, IntArray, IntArray] | tuple[IntArray, IntArray, IntArray, FloatArray]


def chat_tokenizer(cfg: DataConfig) -> Any:
    """The tokenizer a chat run renders with: data.tokenizer 'bytes' or a tokenizer directory."""
    if cfg.tokenizer == "bytes":
        return ByteTokenizer()
    from enlace_data.tokenizer import load_tokenizer

    return load_tokenizer(cfg.tokenizer)


# ----------------------------------------------------------------------------- reading
def iter_records(path: Path) -> Iterator[tuple[Any, str]]:
    """The raw records of a .jsonl or .parquet file, each with where it stands ("FILE: line N" or
    "FILE: row N"); a line that is not JSON comes as a DataError in the record's place, so that a
    converter can skip it and a loader can raise it."""
    if path.suffix == ".parquet":
        try:
            import pyarrow.parquet as pq  # type: ignore[import-not-found]
        except ImportError as e:
            raise DataError(
                "reading parquet needs pyarrow (`uv pip install pyarrow`), or convert the file "
                "to JSONL",
                path=path,
            ) from e
        for i, row in enumerate(pq.read_table(path).to_pylist()):
            yield row, f"{path}: row {i + 1}"
        return
    try:
        with open(path, encoding="utf-8") as f:
            for n, line in enumerate(f, start=1):
                if line.strip():
                    try:
                        yield json.loads(line), f"{path}: line {n}"
                    except ValueError as e:
                        yield DataError(f"{path}: line {n}: not JSON ({e})"), f"{path}: line {n}"
    except OSError as e:
        raise DataError(f"cannot read ({e.strerror})", path=path) from e
    except UnicodeDecodeError as e:
        raise DataError(f"not UTF-8 text ({e})", path=path) from e


def read_conversations(path: Path) -> list[dict[str, Any]]:
    """The validated conversations of a .jsonl (or .parquet) file; the first problem raises."""
    out: list[dict[str, Any]] = []
    for record, where in iter_records(path):
        if isinstance(record, DataError):
            raise record
        out.append(normalize_conversation(record, where))
    return out


def load_split(cfg: DataConfig, split: Split) -> tuple[list[dict[str, Any]], str]:
    """The conversations of a split and what they are (for the log)."""
    root = Path(cfg.path)
    if not root.exists() and cfg.fallback == "builtin":
        from enlace_data.chat.builtin import builtin_conversations

        n = (
            cfg.builtin_conversations
            if split == "train"
            else max(1, cfg.builtin_conversations // 10)
        )
        convs = [normalize_conversation(c, "built-in set") for c in builtin_conversations(split, n)]
        return convs, f"built-in conversation set ({split})"
    if not root.is_dir():
        raise DataError(
            "data.path is not a directory of conversations (train.jsonl, val.jsonl); write one "
            "with `enlace-data chat`, or set data.fallback=builtin for the built-in set",
            path=root,
        )
    f = next((f for f in (root / f"{split}.jsonl", root / f"{split}.parquet") if f.is_file()), None)
    if f is None:
        raise DataError(
            f"missing {split}.jsonl: a chat data directory holds train.jsonl and val.jsonl "
            "(`enlace-data chat` writes them)",
            path=root,
        )
    convs = read_conversations(f)
    if not convs:
        raise DataError("no conversations in this file", path=f)
    return convs, f"conversations {f}"


# ----------------------------------------------------------------------------- rendering
@dataclass
class ChatExamples:
    """Rendered examples of one split: inputs and targets (-1 where not trained) per conversation,
    and the targets' loss weights when the copies weigh more (data.copied_weight)."""

    inputs: list[IntArray]
    targets: list[IntArray]
    description: str
    fingerprint: str
    bytes_per_token: float
    weights: list[FloatArray] | None = None


def render_examples(
    convs: list[dict[str, Any]],
    tokenizer: ChatTokenizer,
    *,
    context_length: int,
    overflow: str,
    description: str,
    copied_weight: float = 1.0,
    copied_min_tokens: int = 4,
) -> ChatExamples:
    """`copied_weight` (above 1): each target the assistant copies from the conversation
    (`format.copied`, runs of `copied_min_tokens`) gets that loss weight, the others 1."""
    inputs: list[IntArray] = []
    targets: list[IntArray] = []
    weights: list[FloatArray] | None = [] if copied_weight != 1 else None
    truncated = dropped = text_bytes = tokens = 0
    h = hashlib.sha256(f"chat:{getattr(tokenizer, 'tokenizer_id', '?')}:{context_length}".encode())
    for conv in convs:
        r = render(conv["messages"], tokenizer, tools=conv.get("tools"))
        ids = np.asarray(r.ids, dtype=np.int64)
        x, tgt = ids[:-1], np.where(np.asarray(r.mask[1:], dtype=bool), ids[1:], -1)
        if len(x) > context_length:
            if overflow == "drop":
                dropped += 1
                continue
            truncated += 1
            x, tgt = x[:context_length], tgt[:context_length]
        if not (tgt >= 0).any():
            dropped += 1  # nothing left to learn (the assistant's turn was cut off)
            continue
        inputs.append(x)
        targets.append(tgt)
        h.update(ids.tobytes())
        h.update(np.asarray(r.mask, dtype=np.uint8).tobytes())
        if weights is not None:
            flags = np.asarray(copied(conv["messages"], r, tokenizer, copied_min_tokens)[1:])
            weight = np.where(flags, copied_weight, 1.0).astype(np.float32)[: len(x)]
            weights.append(weight)
            h.update(weight.tobytes())
        tokens += len(ids)
        text_bytes += len(tokenizer.decode(r.ids).encode("utf-8"))
    if not inputs:
        raise DataError(
            f"{description}: no conversation fits data.context_length={context_length} "
            f"({dropped} dropped); raise it or set data.overflow=truncate"
        )
    description = (
        f"{description}: {len(inputs)} conversations, {tokens} tokens"
        + (f", {truncated} truncated" if truncated else "")
        + (f", {dropped} dropped (overflow={overflow})" if dropped else "")
    )
    return ChatExamples(
        inputs, targets, description, h.hexdigest()[:32], text_bytes / tokens, weights
    )


# ----------------------------------------------------------------------------- the loader
class ChatLoader(StreamLoader):
    """Iterator of (inputs, targets, segments) int64 arrays of shape (micro_batch_size, T)."""

    _what = "chat loader"

    def __init__(
        self,
        examples: ChatExamples,
        *,
        pad_id: int,
        vocab_size: int,
        tokenizer_id: str,
        **stream: Unpack[StreamArgs],
    ) -> None:
        super().__init__(**stream)
        self._ex = examples
        self.pad_id = pad_id
        self.description = examples.description
        self.bytes_per_token = examples.bytes_per_token
        self.vocab_size = vocab_size
        self.tokenizer_id = tokenizer_id
        self._order: tuple[int, IntArray] | None = None

    @property
    def conversations(self) -> int:
        return len(self._ex.inputs)

    def _conversation(self, position: int) -> int:
        n = self.conversations
        if self.split == "val":
            return position % n
        epoch = position // n
        if self._order is None or self._order[0] != epoch:
            rng = np.random.default_rng([self.seed, epoch, 0x43686174])
            self._order = (epoch, rng.permutation(n).astype(np.int64))
        return int(self._order[1][position % n])

    def _rows(self, count: int, position: int) -> tuple[list[list[int]], int]:
        """`count` rows (each a list of conversation ids) packed from stream `position` on."""
        rows: list[list[int]] = []
        for _ in range(count):
            row: list[int] = []
            used = 0
            while self.split != "val" or position < self.conversations:
                c = self._conversation(position)
                used += len(self._ex.inputs[c])
                if used > self.context_length:
                    break
                row.append(c)
                position += 1
            rows.append(row)
        return rows, position

    def _assemble(self, rows: list[list[int]]) -> ChatBatch:
        B, T = len(rows), self.context_length
        x = np.full((B, T), self.pad_id, dtype=np.int64)
        y = np.full((B, T), -1, dtype=np.int64)
        seg = np.empty((B, T), dtype=np.int64)
        weights = self._ex.weights
        w = np.ones((B, T), dtype=np.float32)
        for i, row in enumerate(rows):
            at = 0
            for s, c in enumerate(row):
                n = len(self._ex.inputs[c])
                x[i, at : at + n] = self._ex.inputs[c]
                y[i, at : at + n] = self._ex.targets[c]
                seg[i, at : at + n] = s
                if weights is not None:
                    w[i, at : at + n] = weights[c]
                at += n
            seg[i, at:] = len(row)  # padding: a segment of its own
        return (x, y, seg) if weights is None else (x, y, seg, w)

    def __next__(self) -> ChatBatch:
        B, W = self.micro_batch_size, self.world_size
        if self.split == "val" and self.samples_consumed >= self.conversations:
            raise StopIteration
        rows, self.samples_consumed = self._rows(W * B, self.samples_consumed)
        return self._assemble(rows[self.rank * B : (self.rank + 1) * B])

    def _dataset(self) -> tuple[str, str, str]:
        return "chat", self._ex.fingerprint, self.description

    def close(self) -> None:
        """Nothing to release: the examples live in memory."""


def build_chat_loader(
    cfg: DataConfig, *, vocab_size: int | None = None, **stream: Unpack[StreamArgs]
) -> ChatLoader:
    tokenizer = chat_tokenizer(cfg)
    if vocab_size is not None and tokenizer.vocab_size > vocab_size:
        raise DataError(
            f"the chat tokenizer ({tokenizer!r}) has {tokenizer.vocab_size} ids but "
            f"model.vocab_size is {vocab_size}"
        )
    convs, what = load_split(cfg, stream["split"])
    examples = render_examples(
        convs,
        tokenizer,
        context_length=stream["context_length"],
        overflow=cfg.overflow,
        description=what,
        # the validation loss stays the plain mean, comparable across weights
        copied_weight=cfg.copied_weight if stream["split"] == "train" else 1.0,
        copied_min_tokens=cfg.copied_min_tokens,
    )
    return ChatLoader(
        examples,
        pad_id=tokenizer.eot_id,
        vocab_size=tokenizer.vocab_size,
        tokenizer_id=tokenizer.tokenizer_id,
        **stream,
    )
