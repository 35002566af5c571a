"""Exactly resumable loaders over byte text or uint16 shards: `build_loader` and `eval_batches`
(data.kind chat is dispatched to chat/loader.py, whose batches add a segment array). The package
README says what they promise; the choices:

- A split is a list of segments (its text file, or one shard each) cut into windows of T + 1 tokens
  that never cross a segment boundary.
- Epoch e visits the windows in a keyed Feistel permutation of (seed, e) with cycle walking,
  computed on the fly (O(1) memory at any corpus size), and shifts the window grid by a phase
  drawn from (seed, e). All ranks walk one global stream (stream.py, shared with the chat
  loader), so the state is one number, `samples_consumed`, valid for any world size and
  micro-batch.
- Shards are opened lazily through a bounded LRU; reader="pread" reads each window with one
  `os.preadv` (no corpus page mapped, small RSS), reader="mmap" slices memory maps (the same
  speed here: benchmarks/bench_data.py).
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import json
import os
from collections import OrderedDict
from pathlib import Path
from typing import Any, Literal, Unpack

import numpy as np
from enlace_config.schema.data import DataConfig

from enlace_data.chat.loader import build_chat_loader
from enlace_data.errors import DataError
from enlace_data.sample import builtin_split
from enlace_data.shards import MANIFEST_FILE, Shard, list_shards, open_shards
from enlace_data.stream import Batch, IntArray, Split, StreamArgs, StreamLoader, check_rank
from enlace_data.tokenizer import BYTE_TOKENIZER_ID, load_tokenizer
from enlace_data.tokenizer.files import DESCRIPTION_FILE, MODEL_FILE

Reader = Literal["pread", "mmap"]
ORDER_BLOCK = 4096  # positions of an epoch whose order is computed (and cached) at once
_U64 = np.uint64
_M1 = _U64(0xBF58476D1CE4E5B9)
_M2 = _U64(0x94D049BB133111EB)

U64Array = np.ndarray[Any, np.dtype[np.uint64]]


# ----------------------------------------------------------------------------- order
def _mix64(x: U64Array) -> U64Array:
    """splitmix64's finaliser on a uint64 array (wrapping arithmetic)."""
    x = (x ^ (x >> _U64(30))) * _M1
    x = (x ^ (x >> _U64(27))) * _M2
    return x ^ (x >> _U64(31))


def _derive_key(*parts: object) -> int:
    digest = hashlib.blake2b(json.dumps(parts).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little")


class Permutation:
    """A keyed pseudo-random permutation of range(n), evaluated pointwise (no table)."""

    ROUNDS = 4

    def __init__(self, n: int, key: int) -> None:
        if n <= 0:  # the cycle walk below would never end
            raise ValueError("n must be positive")
        self.n = n
        bits = max(2, (n - 1).bit_length())
        bits += bits % 2
        self._half = _U64(bits // 2)
        self._mask = _U64((1 << (bits // 2)) - 1)
        self._keys = [_U64(_derive_key(key, r)) for r in range(self.ROUNDS)]

    def _feistel(self, x: U64Array) -> U64Array:
        left, right = x >> self._half, x & self._mask
        for k in self._keys:
            left, right = right, left ^ (_mix64(right ^ k) & self._mask)
        return (left << self._half) | right

    def __call__(self, i: np.ndarray[Any, Any]) -> IntArray:
        out = self._feistel(np.asarray(i, dtype=np.uint64))
        # Cycle walking: the network permutes [0, 2**bits); follow values outside [0, n) until they
        # land inside. The domain is < 4n, so this takes a couple of passes.
        bad = out >= _U64(self.n)
        while bad.any():
            out[bad] = self._feistel(out[bad])
            bad = out >= _U64(self.n)
        return out.astype(np.int64)


# ----------------------------------------------------------------------------- sources
class _BytesSource:
    """One segment of bytes: a split's text file or the built-in books."""

    kind = "bytes"
    dtype = np.dtype(np.uint8)  # of the tokens as stored
    vocab_size = 256
    tokenizer_id = BYTE_TOKENIZER_ID
    bytes_per_token = 1.0

    def __init__(
        self,
        data: np.ndarray[Any, np.dtype[np.uint8]],
        *,
        description: str,
        name: str,
        location: str,
    ) -> None:
        self._data = data
        self.description = description
        self.location = location  # what error messages name: a directory, a file, or the books
        self.lengths: IntArray = np.array([data.size], dtype=np.int64)
        sha = hashlib.sha256(np.ascontiguousarray(data).tobytes()).hexdigest()
        digest = hashlib.sha256(f"bytes:{name}:{data.size}:{sha}".encode()).hexdigest()
        self.fingerprint = digest[:32]
        self.summary = f"{description}: {name}, {data.size} bytes, sha256 {sha[:12]}"

    def read_into(self, out: np.ndarray[Any, Any], seg: int, start: int) -> None:
        """Fill `out` (contiguous, of `self.dtype`) with tokens [start, start + len(out)) of seg."""
        out[:] = self._data[start : start + out.shape[0]]

    def close(self) -> None:
        """Nothing to release (a map of one small file, kept)."""


class _ShardSource:
    """Shards read lazily through a bounded LRU of open handles: file descriptors for
    reader="pread", memory maps for reader="mmap"; closing drops them, reading reopens."""

    kind = "shards"
    dtype = np.dtype(np.uint16)

    def __init__(
        self, shards: list[Shard], *, root: Path, split: str, max_open: int, reader: Reader
    ) -> None:
        if reader not in ("pread", "mmap"):
            raise ValueError(f"reader must be 'pread' or 'mmap', got {reader!r}")
        self._shards = shards
        self._reader = reader
        self._open: OrderedDict[int, Any] = OrderedDict()  # seg -> fd (pread) or memmap (mmap)
        self._max_open = max(1, max_open)
        self.location = str(root)
        self.lengths: IntArray = np.array([len(s) for s in shards], dtype=np.int64)
        tokens = int(self.lengths.sum())
        text = sum(s.header.text_bytes for s in shards)
        self.bytes_per_token = text / tokens if tokens else 0.0
        self.vocab_size = max(s.header.vocab_size for s in shards)
        self.tokenizer_id = shards[0].header.tokenizer_id
        what = f"{len(shards)} files, {tokens} tokens, tokenizer {self.tokenizer_id}"
        self.description = f"shards {root} ({split}: {what})"
        self.summary = f"{split} shards under {root}: {what}"
        h = hashlib.sha256(f"shards:{self.tokenizer_id}".encode())
        for s in shards:
            h.update(f"\n{s.path.name}:{s.header.token_count}:{s.header.text_bytes}".encode())
        self.fingerprint = h.hexdigest()[:32]

    def _handle(self, seg: int) -> Any:
        if seg in self._open:
            self._open.move_to_end(seg)
            return self._open[seg]
        if len(self._open) >= self._max_open:
            self._release(self._open.popitem(last=False)[1])
        shard = self._shards[seg]
        try:
            handle = os.open(shard.path, os.O_RDONLY) if self._reader == "pread" else shard.tokens()
        except OSError as e:
            raise DataError(f"cannot open shard: {e}", path=shard.path) from e
        self._open[seg] = handle
        return handle

    @staticmethod
    def _release(handle: Any) -> None:
        if isinstance(handle, int):  # a memmap is unmapped when its last reference goes
            os.close(handle)

    def read_into(self, out: np.ndarray[Any, Any], seg: int, start: int) -> None:
        handle, header = self._handle(seg), self._shards[seg].header
        if self._reader == "mmap":
            out[:] = handle[start : start + out.shape[0]]
        else:
            offset = header.header_size + start * 2
            got = os.preadv(handle, [out.data], offset)
            if got != out.nbytes:
                raise DataError(
                    f"short read ({got} of {out.nbytes} bytes at offset {offset}); was the shard "
                    "changed or truncated while training?",
                    path=self._shards[seg].path,
                )
        # The header's CRC does not cover the tokens: an id the embedding cannot hold is caught
        # here, per window (a max over T + 1 values), instead of deep inside the model.
        vocab = header.vocab_size
        if int(out.max()) >= vocab:
            at = int(np.argmax(out >= vocab))
            raise DataError(
                f"token id {int(out[at])} at token {start + at} is outside the vocabulary of "
                f"{vocab} ids (0..{vocab - 1}) this shard's header declares; the shard is "
                "corrupt or was written by another tool: rebuild it with the corpus pipeline",
                path=self._shards[seg].path,
            )

    @property
    def open_handles(self) -> int:
        return len(self._open)

    def close(self) -> None:
        while self._open:
            self._release(self._open.popitem()[1])

    def __del__(self) -> None:
        with contextlib.suppress(Exception):  # interpreter shutdown
            self.close()


_Source = _BytesSource | _ShardSource


def _bytes_source(cfg: DataConfig, split: Split) -> _BytesSource:
    root = Path(cfg.path)
    if not root.exists() and cfg.fallback == "builtin":
        return _BytesSource(
            np.frombuffer(builtin_split(split), dtype=np.uint8),
            description="built-in books (the 14 public-domain books of `enlace-data smoke`)",
            name=f"builtin-{split}",
            location=f"built-in books ({split})",
        )
    if not root.exists():
        raise DataError(
            f"data.path {cfg.path!r} does not exist; prepare it with `enlace-data smoke` "
            "(or `enlace-data smoke --from DIR` without network), or set data.fallback=builtin "
            "to train on the public-domain books built into enlace-data",
            path=root,
        )
    if not root.is_dir():
        raise DataError("data.path must be a directory holding train.txt and val.txt", path=root)
    f = root / f"{split}.txt"
    if not f.is_file():
        raise DataError(
            f"missing {split}.txt: a bytes data directory holds train.txt and val.txt; "
            "rerun `enlace-data smoke` to prepare both",
            path=f,
        )
    if f.stat().st_size == 0:
        raise DataError(f"{split}.txt is empty; rerun `enlace-data smoke`", path=f)
    data = np.memmap(f, dtype=np.uint8, mode="r")
    return _BytesSource(
        data, description=f"prepared corpus {root}", name=f"{split}.txt", location=str(f)
    )


def check_corpus_tokenizer(root: Path, tokenizer_id: str) -> None:
    """Refuse a shard directory whose tokenizer files or manifest name another tokenizer than the
    shards' headers (`tokenizer_id`): the run would train on one tokenizer's ids and its
    checkpoints would carry another's, so every sample and export would decode garbage."""
    if (root / MODEL_FILE).is_file() or (root / DESCRIPTION_FILE).is_file():
        found = load_tokenizer(root).tokenizer_id
        if found != tokenizer_id:
            raise DataError(
                f"the shards were made by tokenizer {tokenizer_id!r} but the {MODEL_FILE} beside "
                f"them is tokenizer {found!r} (from another corpus?); copy the tokenizer files "
                "(tokenizer.model and the rest) that built these shards into the directory, or "
                "rebuild the shards with this tokenizer",
                path=root,
            )
    manifest = root / MANIFEST_FILE
    if manifest.is_file():
        try:
            recorded = json.loads(manifest.read_text(encoding="utf-8")).get("tokenizer_id")
        except (OSError, ValueError, AttributeError) as e:
            raise DataError(
                f"unreadable corpus manifest ({e}); rebuild the corpus", path=manifest
            ) from None
        if recorded != tokenizer_id:
            raise DataError(
                f"{MANIFEST_FILE} records tokenizer {recorded!r} but the shards were made by "
                f"{tokenizer_id!r}: shards of two builds are mixed here; rebuild the corpus",
                path=manifest,
            )


def _build_source(
    cfg: DataConfig, split: Split, *, vocab_size: int | None, max_open: int, reader: Reader
) -> _Source:
    if split not in ("train", "val"):
        raise ValueError(f"split must be 'train' or 'val', got {split!r}")
    if cfg.kind == "bytes":
        if vocab_size is not None and vocab_size < 256:
            raise DataError(
                f"byte data needs model.vocab_size >= 256, got {vocab_size}", path=Path(cfg.path)
            )
        return _bytes_source(cfg, split)
    root = Path(cfg.path)
    if not root.is_dir():
        raise DataError(
            "data.path is not a directory of shards; build one with the corpus pipeline", path=root
        )
    train, val = list_shards(root, "train"), list_shards(root, "val")
    if not (train if split == "train" else val):
        raise DataError(
            f"no {split} shards ({split}_NNNNNN.shard) in this directory; build the corpus first",
            path=root,
        )
    # Validate both splits' headers together: one tokenizer for the whole run, before training.
    shards = open_shards(train + val, max_vocab_size=vocab_size)
    check_corpus_tokenizer(root, shards[0].header.tokenizer_id)
    chosen = shards[: len(train)] if split == "train" else shards[len(train) :]
    return _ShardSource(chosen, root=root, split=split, max_open=max_open, reader=reader)


# ----------------------------------------------------------------------------- windows
class _Windows:
    """Numbering of the windows of T + 1 tokens over a source's segments: a segment of n tokens
    holds c windows, window j starting at phase + j*T. Any phase in 0..slack (n - 1 - c*T) keeps
    every window inside its segment, so an epoch can shift the grid without changing the count."""

    def __init__(self, source: _Source, context_length: int) -> None:
        T = self.T = context_length
        n = source.lengths
        self.per_segment = np.where(n >= T + 1, np.maximum((n - T) // T, 1), 0).astype(np.int64)
        self.slack = np.maximum(n - 1 - self.per_segment * T, 0).astype(np.int64)
        self.ends = np.cumsum(self.per_segment)
        self.count = int(self.ends[-1]) if self.ends.size else 0

    def locate(self, window: IntArray, phase: int = 0) -> tuple[IntArray, IntArray]:
        seg = np.searchsorted(self.ends, window, side="right").astype(np.int64)
        first = self.ends[seg] - self.per_segment[seg]
        shift = phase % (self.slack[seg] + 1)
        return seg, ((window - first) * self.T + shift).astype(np.int64)


def _assemble(
    source: _Source, segs: IntArray, starts: IntArray, T: int
) -> tuple[IntArray, IntArray]:
    buf = np.empty((len(segs), T + 1), dtype=source.dtype)
    for i, (seg, start) in enumerate(zip(segs.tolist(), starts.tolist(), strict=True)):
        source.read_into(buf[i], seg, start)
    # astype makes fresh C-contiguous int64 arrays, ready to index an embedding
    return buf[:, :-1].astype(np.int64), buf[:, 1:].astype(np.int64)


# ----------------------------------------------------------------------------- loaders
class Loader(StreamLoader):
    """Iterator of (inputs, targets) int64 arrays of shape (micro_batch_size, context_length):
    train is infinite, reshuffled each epoch; val is one pass in file order."""

    def __init__(self, source: _Source, **stream: Unpack[StreamArgs]) -> None:
        super().__init__(**stream)
        self._source = source
        self._location = source.location
        T = self.context_length
        self._windows = _Windows(source, T)
        if self._windows.count == 0:
            raise DataError(
                f"the {self.split} split has no window of context_length + 1 = {T + 1} "
                f"tokens ({int(source.lengths.sum())} tokens in all); add data or lower "
                "data.context_length",
                path=source.location,
            )
        self.description = source.description
        self.bytes_per_token = source.bytes_per_token
        self.vocab_size = source.vocab_size
        self.tokenizer_id = source.tokenizer_id
        self._perm: tuple[int, Permutation] | None = None
        self._blocks: dict[tuple[int, int], IntArray] = {}

    @property
    def samples_per_epoch(self) -> int:
        """Windows in one pass over the split (all ranks together)."""
        return self._windows.count

    def _permutation(self, epoch: int) -> Permutation:
        if self._perm is None or self._perm[0] != epoch:
            key = _derive_key("enlace-data-order", self.seed, epoch)
            self._perm = (epoch, Permutation(self._windows.count, key))
        return self._perm[1]

    def _order_block(self, epoch: int, block: int) -> IntArray:
        """Window ids of epoch positions [block*K, (block+1)*K), computed together and cached:
        vectorising the permutation over K positions costs about as much as over one batch."""
        ids = self._blocks.get((epoch, block))
        if ids is None:
            n, K = self._windows.count, ORDER_BLOCK
            ids = self._permutation(epoch)(np.arange(block * K, min((block + 1) * K, n)))
            if len(self._blocks) >= 2:  # the current block and the next are all a batch needs
                self._blocks.pop(next(iter(self._blocks)))
            self._blocks[(epoch, block)] = ids
        return ids

    def window_ids(self, positions: IntArray) -> IntArray:
        """The window number each global stream position reads (train: permuted per epoch; val: in
        order). Windows are numbered 0..N-1 in segment order; see `locations` for the tokens."""
        n = self._windows.count
        if self.split == "val":
            return positions % n
        epochs, offsets = np.divmod(positions, n)
        blocks = offsets // ORDER_BLOCK
        if epochs[0] == epochs[-1] and blocks[0] == blocks[-1]:  # the usual case
            return self._order_block(int(epochs[0]), int(blocks[0]))[
                offsets - blocks[0] * ORDER_BLOCK
            ]
        out = np.empty_like(positions)
        for e, b in sorted({(int(e), int(b)) for e, b in zip(epochs, blocks, strict=True)}):
            sel = (epochs == e) & (blocks == b)
            out[sel] = self._order_block(e, b)[offsets[sel] - b * ORDER_BLOCK]
        return out

    def locations(self, positions: IntArray) -> tuple[IntArray, IntArray]:
        """(segment, start token) read by each global stream position: train shifts epoch e's
        grid by a phase drawn from (seed, e); val reads the windows in file order, phase 0."""
        windows = self.window_ids(positions)
        if self.split == "val":
            return self._windows.locate(windows)
        epochs = positions // self._windows.count
        segs, starts = np.empty_like(positions), np.empty_like(positions)
        for e in np.unique(epochs).tolist():  # two when a batch straddles epochs
            sel = epochs == e
            phase = _derive_key("enlace-data-phase", self.seed, e) % self.context_length
            segs[sel], starts[sel] = self._windows.locate(windows[sel], phase)
        return segs, starts

    def __next__(self) -> tuple[IntArray, IntArray]:
        B, W = self.micro_batch_size, self.world_size
        if self.split == "val" and self.samples_consumed + W * B > self._windows.count:
            raise StopIteration
        first = self.samples_consumed + self.rank * B
        segs, starts = self.locations(np.arange(first, first + B, dtype=np.int64))
        batch = _assemble(self._source, segs, starts, self.context_length)
        self.samples_consumed += W * B
        return batch

    def _dataset(self) -> tuple[str, str, str]:
        return self._source.kind, self._source.fingerprint, self._source.summary

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "samples_per_epoch": self._windows.count}

    def close(self) -> None:
        self._source.close()


def build_loader(
    data_cfg: DataConfig,
    *,
    split: Split = "train",
    micro_batch_size: int,
    seed: int,
    rank: int = 0,
    world_size: int = 1,
    vocab_size: int | None = None,
    max_open: int = 16,
    reader: Reader = "pread",
) -> StreamLoader:
    """The loader of one split, validated before the first batch: a `Loader` of (inputs,
    targets), or for data.kind chat a `chat.loader.ChatLoader` of (inputs, targets, segments).

    `vocab_size`: the model's vocabulary (model.vocab_size); shards made for a larger one are
    refused. `max_open`: most shard files (descriptors or memory maps) open at once. `reader`:
    "pread" (default: positioned reads, small RSS) or "mmap" (slices of memory maps).
    """
    stream: StreamArgs = {
        "split": split,
        "context_length": data_cfg.context_length,
        "micro_batch_size": micro_batch_size,
        "seed": seed,
        "rank": rank,
        "world_size": world_size,
    }
    if data_cfg.kind == "chat":
        return build_chat_loader(data_cfg, vocab_size=vocab_size, **stream)
    source = _build_source(data_cfg, split, vocab_size=vocab_size, max_open=max_open, reader=reader)
    return Loader(source, **stream)


def split_bytes_per_token(
    data_cfg: DataConfig, split: Split = "val", *, vocab_size: int | None = None
) -> float:
    """Text bytes per token of one split (1.0 for bytes): what turns nats/token into bits/byte."""
    if data_cfg.kind == "chat":  # the chat examples know theirs
        return build_loader(data_cfg, split=split, micro_batch_size=1, seed=0).bytes_per_token
    source = _build_source(data_cfg, split, vocab_size=vocab_size, max_open=1, reader="pread")
    source.close()
    return source.bytes_per_token


def eval_batches(
    data_cfg: DataConfig,
    *,
    micro_batch_size: int,
    rank: int = 0,
    world_size: int = 1,
    vocab_size: int | None = None,
) -> list[Batch]:
    """data.eval_batches validation micro-batches for this rank, identical on every call.

    Window starts are spread evenly over every valid start position of the val split (all ranks
    together), so a small val split gives overlapping windows rather than repeats.
    """
    check_rank(rank, world_size)
    if data_cfg.kind == "chat":  # (inputs, targets, segments): the val split's first rows
        val = build_loader(
            data_cfg,
            split="val",
            micro_batch_size=micro_batch_size,
            seed=0,
            rank=rank,
            world_size=world_size,
            vocab_size=vocab_size,
        )
        return list(itertools.islice(val, data_cfg.eval_batches))
    source = _build_source(data_cfg, "val", vocab_size=vocab_size, max_open=16, reader="pread")
    T = data_cfg.context_length
    starts_per_seg = np.maximum(source.lengths - T, 0)  # valid starts: 0..n-T-1
    ends = np.cumsum(starts_per_seg)
    total = int(ends[-1]) if ends.size else 0
    if total == 0:
        raise DataError(
            f"the val split has no window of context_length + 1 = {T + 1} tokens; add data or "
            "lower data.context_length",
            path=source.location,
        )
    B, W = micro_batch_size, world_size
    needed = data_cfg.eval_batches * B * W
    positions = (np.arange(needed, dtype=np.int64) * total) // needed
    out: list[Batch] = []
    try:
        for k in range(data_cfg.eval_batches):
            first = k * W * B + rank * B
            pos = positions[first : first + B]
            seg = np.searchsorted(ends, pos, side="right").astype(np.int64)
            start = pos - (ends[seg] - starts_per_seg[seg])
            out.append(_assemble(source, seg, start, T))
    finally:
        source.close()
    return out
