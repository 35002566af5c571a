"""The uint16 token shard: a small validated header, then the tokens. Written atomically, read lazily.

File layout (format version 1; all integers little-endian)::

    offset  size  type    field
    0       8     bytes   magic b"ENLSHARD"
    8       4     uint32  format version (1)
    12      4     uint32  header size in bytes (256): the tokens start here
    16      8     ascii   token dtype as a numpy string, NUL-padded ("<u2" = little-endian uint16)
    24      8     uint64  token count
    32      8     uint64  text bytes: UTF-8 bytes of source text these tokens cover (bits per byte)
    40      4     uint32  vocabulary size of the tokenizer (every id is < this)
    44      4     uint32  reserved (0)
    48      128   utf-8   tokenizer identifier, NUL-padded (e.g. a hash of the SentencePiece model)
    176     76    -       reserved (zeros)
    252     4     uint32  CRC-32 of bytes 0..251 (catches a damaged header)
    256     2*N   uint16  the N tokens

A file is valid when the magic, version, dtype and CRC are right and its size is exactly header size
+ token count x 2. `open_shard` checks all of it from the 256 header bytes and the file size, and
keeps nothing open; the tokens are memory-mapped or read only when asked for.

Directory convention for `data.kind: shards`: ``<data.path>/<split>_<index:06d>.shard`` for split
``train`` and ``val`` (`shard_name`, `list_shards`); the loader ignores other files there.
Writing is atomic (`_fs`): a shard is either complete or absent under its final name.
"""

from __future__ import annotations

import os
import struct
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from enlace_data._fs import fsync_dir, open_temp_beside
from enlace_data.errors import DataError

MAGIC = b"ENLSHARD"
FORMAT_VERSION = 1
HEADER_SIZE = 256
TOKEN_DTYPE = "<u2"
MAX_VOCAB_SIZE = 65536
TOKENIZER_ID_BYTES = 128
SHARD_SUFFIX = ".shard"
SPLITS = ("train", "val")
MANIFEST_FILE = "manifest.json"  # written last by the corpus pipeline beside the shards

# magic, version, header size, dtype, token count, text bytes, vocab size, reserved, tokenizer id
_FIELDS = struct.Struct("<8sII8sQQII128s")
_CRC_OFFSET = HEADER_SIZE - 4
assert _FIELDS.size <= _CRC_OFFSET


@dataclass(frozen=True)
class ShardHeader:
    version: int
    dtype: str
    token_count: int
    text_bytes: int
    vocab_size: int
    tokenizer_id: str
    header_size: int = HEADER_SIZE

    @property
    def bytes_per_token(self) -> float:
        return self.text_bytes / self.token_count if self.token_count else 0.0

    def pack(self) -> bytes:
        body = _FIELDS.pack(
            MAGIC,
            self.version,
            self.header_size,
            self.dtype.encode("ascii"),
            self.token_count,
            self.text_bytes,
            self.vocab_size,
            0,
            self.tokenizer_id.encode("utf-8"),
        )
        body = body.ljust(_CRC_OFFSET, b"\0")
        return body + struct.pack("<I", zlib.crc32(body))


def shard_name(split: str, index: int) -> str:
    """The file name of shard `index` of `split`, e.g. ``train_000003.shard``."""
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    return f"{split}_{index:06d}{SHARD_SUFFIX}"


def list_shards(root: str | Path, split: str) -> list[Path]:
    """The shard files of `split` under `root`, in name order (the loader's order before shuffling)."""
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    return sorted(p for p in Path(root).glob(f"{split}_*{SHARD_SUFFIX}") if p.is_file())


@dataclass(frozen=True, slots=True)
class Shard:
    """An opened (validated) shard. Holds no file descriptor: `tokens()` maps the file on demand."""

    path: Path
    header: ShardHeader

    def __len__(self) -> int:
        return self.header.token_count

    def __repr__(self) -> str:
        h = self.header
        return f"Shard({str(self.path)!r}, tokens={h.token_count}, vocab={h.vocab_size}, tokenizer={h.tokenizer_id!r})"

    def tokens(self) -> np.memmap[Any, np.dtype[np.uint16]]:
        """A read-only memory map of all tokens. It holds the file open until it is dropped."""
        return np.memmap(
            self.path,
            dtype=np.dtype(self.header.dtype),
            mode="r",
            offset=self.header.header_size,
            shape=(self.header.token_count,),
        )

    def read(self, start: int, count: int) -> np.ndarray[Any, np.dtype[np.uint16]]:
        """Tokens [start, start+count) copied into a new array, without keeping a mapping around."""
        if start < 0 or count < 0 or start + count > self.header.token_count:
            raise IndexError(
                f"tokens [{start}, {start + count}) outside 0..{self.header.token_count} of {self.path}"
            )
        dtype = np.dtype(self.header.dtype)
        return np.fromfile(
            self.path,
            dtype=dtype,
            count=count,
            offset=self.header.header_size + start * dtype.itemsize,
        )


def _parse_header(path: Path, raw: bytes, file_size: int) -> ShardHeader:
    n = min(len(raw), len(MAGIC))
    if raw[:n] != MAGIC[:n]:
        raise DataError(
            f"not an Enlace shard (wrong magic {raw[:8]!r}, expected {MAGIC!r}); the file is another "
            "format or corrupt: rebuild it with the corpus pipeline",
            path=path,
        )
    if len(raw) < HEADER_SIZE:
        raise DataError(
            f"truncated shard: {file_size} bytes, shorter than the {HEADER_SIZE}-byte header; "
            "an interrupted copy? copy or rebuild it",
            path=path,
        )
    _, version, header_size, dtype_raw, count, text_bytes, vocab, _, tok_raw = _FIELDS.unpack_from(
        raw
    )
    if version != FORMAT_VERSION:
        raise DataError(
            f"shard format version {version} is not supported (this enlace-data reads version "
            f"{FORMAT_VERSION}); rebuild the shards or upgrade enlace-data",
            path=path,
        )
    (crc,) = struct.unpack_from("<I", raw, _CRC_OFFSET)
    if zlib.crc32(raw[:_CRC_OFFSET]) != crc:
        raise DataError("damaged shard header (CRC mismatch); rebuild this shard", path=path)
    if header_size != HEADER_SIZE:
        raise DataError(
            f"header size {header_size} is not {HEADER_SIZE}; rebuild this shard", path=path
        )
    dtype = dtype_raw.rstrip(b"\0").decode("ascii", errors="replace")
    if dtype != TOKEN_DTYPE:
        raise DataError(
            f"token dtype {dtype!r} is not supported (expected {TOKEN_DTYPE!r})", path=path
        )
    if not 0 < vocab <= MAX_VOCAB_SIZE:
        raise DataError(f"vocabulary size {vocab} is outside 1..{MAX_VOCAB_SIZE}", path=path)
    expected = header_size + count * np.dtype(dtype).itemsize
    if file_size < expected:
        raise DataError(
            f"truncated shard: the header promises {count} tokens ({expected} bytes) but the file "
            f"has {file_size} bytes; an interrupted copy? copy or rebuild it",
            path=path,
        )
    if file_size > expected:
        raise DataError(
            f"shard has {file_size - expected} bytes after its {count} tokens (file {file_size} "
            f"bytes, expected {expected}); it is corrupt: rebuild it",
            path=path,
        )
    try:
        tokenizer_id = tok_raw.rstrip(b"\0").decode("utf-8")
    except UnicodeDecodeError:
        raise DataError(
            "tokenizer identifier is not UTF-8; the header is corrupt", path=path
        ) from None
    return ShardHeader(version, dtype, count, text_bytes, vocab, tokenizer_id, header_size)


def open_shard(
    path: str | Path, *, max_vocab_size: int | None = None, tokenizer_id: str | None = None
) -> Shard:
    """Read and validate a shard's header against its file size (and, if given, the run's needs).

    `max_vocab_size`: the model's vocabulary; a shard made for a larger vocabulary is refused.
    `tokenizer_id`: the tokenizer every shard of the run must come from.
    Raises `DataError` naming the file. Reads 256 bytes; keeps nothing open.
    """
    p = Path(path)
    try:
        with open(p, "rb") as f:
            raw = f.read(HEADER_SIZE)
            size = os.fstat(f.fileno()).st_size
    except FileNotFoundError:
        raise DataError("shard file does not exist", path=p) from None
    except IsADirectoryError:
        raise DataError("expected a shard file, found a directory", path=p) from None
    header = _parse_header(p, raw, size)
    if max_vocab_size is not None and header.vocab_size > max_vocab_size:
        raise DataError(
            f"shard was made with a vocabulary of {header.vocab_size} tokens (tokenizer "
            f"{header.tokenizer_id!r}) but the model has model.vocab_size={max_vocab_size}; set "
            "model.vocab_size to the tokenizer's size or use shards made by the model's tokenizer",
            path=p,
        )
    if tokenizer_id is not None and header.tokenizer_id != tokenizer_id:
        raise DataError(
            f"shard was made by tokenizer {header.tokenizer_id!r}, expected {tokenizer_id!r}; "
            "all shards of a run must come from one tokenizer: rebuild or remove the odd ones",
            path=p,
        )
    return Shard(p, header)


def open_shards(paths: Sequence[str | Path], *, max_vocab_size: int | None = None) -> list[Shard]:
    """Open and validate a set of shards: each as `open_shard`, and all from one tokenizer."""
    shards: list[Shard] = []
    for p in paths:
        s = open_shard(p, max_vocab_size=max_vocab_size)
        if shards and s.header.tokenizer_id != shards[0].header.tokenizer_id:
            first = shards[0]
            raise DataError(
                f"shards from two tokenizers: {first.path} was made by {first.header.tokenizer_id!r}, "
                f"{s.path} by {s.header.tokenizer_id!r}; a run trains on one tokenizer: rebuild or "
                "remove the odd shards",
                path=s.path,
            )
        shards.append(s)
    return shards


def _as_tokens(
    tokens: Iterable[int] | np.ndarray[Any, Any], vocab_size: int, path: Path
) -> np.ndarray[Any, np.dtype[np.uint16]]:
    arr = np.asarray(tokens if isinstance(tokens, np.ndarray) else list(tokens)).reshape(-1)
    if arr.size == 0:
        return np.empty(0, dtype=TOKEN_DTYPE)
    if not np.issubdtype(arr.dtype, np.integer):
        raise DataError(f"tokens must be integers, got dtype {arr.dtype}", path=path)
    lo, hi = int(arr.min()), int(arr.max())
    if lo < 0 or hi >= vocab_size:
        raise DataError(
            f"token ids must be in 0..{vocab_size - 1}, got range {lo}..{hi}", path=path
        )
    return arr.astype(TOKEN_DTYPE, copy=False)


class ShardWriter:
    """Stream tokens into a shard; it appears under its final name only on `close()`.

    Use as a context manager: an exception inside the block removes the temporary file::

        with ShardWriter(path, vocab_size=32000, tokenizer_id=tok.tokenizer_id) as w:
            w.write(ids, text_bytes=len(text.encode()))
    """

    def __init__(self, path: str | Path, *, vocab_size: int, tokenizer_id: str) -> None:
        self.path = Path(path)
        if not 0 < vocab_size <= MAX_VOCAB_SIZE:
            raise DataError(
                f"vocab_size must be in 1..{MAX_VOCAB_SIZE} for uint16 shards, got {vocab_size}",
                path=self.path,
            )
        if len(tokenizer_id.encode("utf-8")) > TOKENIZER_ID_BYTES:
            raise DataError(
                f"tokenizer_id longer than {TOKENIZER_ID_BYTES} bytes: {tokenizer_id!r}",
                path=self.path,
            )
        if "\0" in tokenizer_id or not tokenizer_id:
            raise DataError(
                f"tokenizer_id must be non-empty without NUL characters: {tokenizer_id!r}",
                path=self.path,
            )
        self.vocab_size = vocab_size
        self.tokenizer_id = tokenizer_id
        self.token_count = 0
        self.text_bytes = 0
        self._file, self.tmp_path = open_temp_beside(self.path)
        self._file.write(b"\0" * HEADER_SIZE)  # the real header is written on close
        self._closed = False
        self._header: ShardHeader | None = None

    def write(self, tokens: Iterable[int] | np.ndarray[Any, Any], *, text_bytes: int = 0) -> None:
        """Append tokens; `text_bytes` is how many UTF-8 bytes of text they encode."""
        if self._closed or self._header is not None:
            raise ValueError(f"ShardWriter for {self.path} is closed")
        arr = _as_tokens(tokens, self.vocab_size, self.path)
        self._file.write(arr.tobytes())
        self.token_count += int(arr.size)
        self.text_bytes += int(text_bytes)

    def close(self) -> Shard:
        """Write the header, fsync, and rename into place. Returns the opened shard."""
        self.seal()
        return self.commit()

    def seal(self) -> ShardHeader:
        """Write the header and fsync the temporary file (`tmp_path`), without renaming it, so a
        caller can record the shard as finished before `commit()` (renaming completes it)."""
        if self._closed:
            raise ValueError(f"ShardWriter for {self.path} is closed")
        header = ShardHeader(
            version=FORMAT_VERSION,
            dtype=TOKEN_DTYPE,
            token_count=self.token_count,
            text_bytes=self.text_bytes,
            vocab_size=self.vocab_size,
            tokenizer_id=self.tokenizer_id,
        )
        try:
            self._file.seek(0)
            self._file.write(header.pack())
            self._file.flush()
            os.fsync(self._file.fileno())
            self._file.close()
        except BaseException:
            self.abort()
            raise
        self._header = header
        return header

    def commit(self) -> Shard:
        """Rename the sealed temporary file into place and make the rename durable."""
        if self._closed or self._header is None:
            raise ValueError(f"ShardWriter for {self.path} is not sealed")
        try:
            os.replace(self.tmp_path, self.path)
        except BaseException:
            self.abort()
            raise
        self._closed = True
        fsync_dir(self.path.parent)
        return Shard(self.path, self._header)

    def abort(self) -> None:
        """Drop the temporary file; nothing appears under the final name."""
        self._closed = True
        try:
            self._file.close()
        finally:
            self.tmp_path.unlink(missing_ok=True)

    def __enter__(self) -> ShardWriter:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *_: object) -> None:
        if exc_type is not None:
            self.abort()
        elif not self._closed:
            self.close()


def write_shard(
    path: str | Path,
    tokens: Iterable[int] | np.ndarray[Any, Any],
    *,
    vocab_size: int,
    tokenizer_id: str,
    text_bytes: int,
) -> Shard:
    """Write a whole shard atomically (temporary file, fsync, rename). Returns the opened shard."""
    with ShardWriter(path, vocab_size=vocab_size, tokenizer_id=tokenizer_id) as w:
        w.write(tokens, text_bytes=text_bytes)
        return w.close()
