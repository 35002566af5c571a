"""Reading sources as a stream of raw documents (never a whole file or corpus in memory).

- ``.jsonl`` / ``.jsonl.gz``: one document per line, the string under `text_field`; ``.parquet``:
  one per row of the `text_field` column, streamed a batch at a time (nulls skipped, counted).
- ``.txt``: documents of consecutive paragraphs of at least `cleaning.doc_chars` characters; a
  paragraph of mostly long lines (`unwrap_min_chars`) is hard-wrapped prose and its lines are
  joined, short lines (verse, lists) keep their breaks. With `cleaning.strip_gutenberg`, Project
  Gutenberg headers, footers and paragraphs naming it or its producers go (its licence asks that).
- Sources of kind hub are parquet files of a Hugging Face Hub dataset (`corpus.hub`).
- `max_bytes` / `max_docs` stop a source after about that much raw text or that many documents;
  bytes that are not UTF-8 follow `cleaning.bad_utf8` (error / replace / drop), counted.
"""

from __future__ import annotations

import gzip
import itertools
import json
import os
import re
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from enlace_config.schema.corpus import CleaningConfig, CorpusSource

from enlace_data.errors import DataError
from enlace_data.gutenberg import PG_END

SUFFIXES = (".txt", ".jsonl", ".jsonl.gz", ".parquet")
PARQUET_BATCH_ROWS = 512  # rows per pyarrow batch: a few MB of web text at a time
_PG_START = re.compile(r"^\s*\*{3}\s*START OF (THE|THIS) PROJECT GUTENBERG", re.IGNORECASE)
_PG_WORDS = ("gutenberg", "pgdp.net", "distributed proofread")
_PG_OPENINGS = ("produced by", "etext prepared by", "e-text prepared by")


def _names_gutenberg(paragraph: str) -> bool:
    """A paragraph naming Project Gutenberg or its producers (plain substring tests: a
    case-insensitive regex over every paragraph was the slowest part of reading books)."""
    low = paragraph.lower()
    return any(w in low for w in _PG_WORDS) or low.lstrip().startswith(_PG_OPENINGS)


_PG_HEADER_SEARCH_LINES = 1000


@dataclass
class ReadStats:
    """What reading one source saw (before cleaning)."""

    files: int = 0
    docs: int = 0
    bytes: int = 0
    bad_utf8_bytes: int = 0
    bad_utf8_dropped: int = 0  # jsonl documents (or txt lines) dropped under bad_utf8: drop
    gutenberg_files: int = 0
    null_docs: int = 0  # parquet rows whose text is null
    stopped_at_limit: bool = False  # max_bytes or max_docs ended the source early


@dataclass
class RawDoc:
    text: str


@dataclass
class SourceReader:
    """Iterates the documents of one configured source; `stats` fills in as it goes."""

    source: CorpusSource
    index: int
    cleaning: CleaningConfig
    config_file: str = "<config>"
    stats: ReadStats = field(default_factory=ReadStats)

    def __iter__(self) -> Iterator[RawDoc]:
        max_bytes, max_docs = self.source.max_bytes, self.source.max_docs
        for doc in self._documents():
            yield doc
            if (max_docs is not None and self.stats.docs >= max_docs) or (
                max_bytes is not None and self.stats.bytes >= max_bytes
            ):
                self.stats.stopped_at_limit = True
                return  # closes the file being read; a hub source downloads nothing more

    def _documents(self) -> Iterator[RawDoc]:
        if self.source.kind == "hub":
            from enlace_data.corpus.hub import hub_files

            where = f"sources[{self.index}] ({self.source.name!r}) in {self.config_file}"
            files: Iterable[Path] = hub_files(self.source, where)
        else:
            files = resolve_source_files(self.source, self.index, self.config_file)
        for path in files:
            self.stats.files += 1
            if path.name.endswith(".txt"):
                yield from self._txt(path)
            elif path.name.endswith(".parquet"):
                yield from self._parquet(path)
            else:
                yield from self._jsonl(path)

    # --- decoding ---------------------------------------------------------------------------
    def _decode(self, raw: bytes, path: Path, lineno: int) -> str | None:
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as e:
            policy = self.cleaning.bad_utf8
            bad = len(raw) - len(raw.decode("utf-8", "ignore").encode("utf-8"))
            self.stats.bad_utf8_bytes += bad
            if policy == "error":
                raise DataError(
                    f"{path}:{lineno}: not valid UTF-8 (byte {raw[e.start : e.start + 1]!r} at "
                    f"column {e.start}). Convert the file to UTF-8 (e.g. iconv -f latin1 -t utf-8), "
                    f"or set cleaning.bad_utf8 to 'replace' or 'drop' in {self.config_file}",
                    path=path,
                ) from None
            if policy == "replace":
                return raw.decode("utf-8", "replace")
            self.stats.bad_utf8_dropped += 1
            return None

    # --- .txt -------------------------------------------------------------------------------
    def _lines(self, path: Path) -> Iterator[str]:
        """The lines without their ends, read in blocks of about 1 MB: a block decodes in one
        call; only one with invalid UTF-8 goes line by line (to apply the policy and name the line)."""
        lineno = 0
        with open(path, "rb") as f:
            for block in iter(lambda: f.readlines(1 << 20), []):
                if lineno == 0 and block[0].startswith(b"\xef\xbb\xbf"):
                    block[0] = block[0][3:]
                    self.stats.bytes += 3
                raw = b"".join(block)
                self.stats.bytes += len(raw)
                try:
                    lines = raw.decode("utf-8").split("\n")
                    if lines[-1] == "":
                        lines.pop()  # the block ends with a newline
                except UnicodeDecodeError:
                    decoded = (self._decode(b, path, i) for i, b in enumerate(block, lineno + 1))
                    lines = (line.rstrip("\n") for line in decoded if line is not None)
                lineno += len(block)
                for line in lines:
                    yield line.rstrip("\r")

    def _txt(self, path: Path) -> Iterator[RawDoc]:
        lines = self._lines(path)
        if self.cleaning.strip_gutenberg:
            lines = self._strip_gutenberg(lines)
        parts: list[str] = []
        size = 0
        for para in _paragraphs(lines, self.cleaning.unwrap_min_chars):
            if self.cleaning.strip_gutenberg and _names_gutenberg(para):
                continue
            parts.append(para)
            size += len(para) + 2
            if size >= self.cleaning.doc_chars:
                self.stats.docs += 1
                yield RawDoc("\n\n".join(parts))
                parts, size = [], 0
        if parts:
            self.stats.docs += 1
            yield RawDoc("\n\n".join(parts))

    def _strip_gutenberg(self, lines: Iterator[str]) -> Iterator[str]:
        head: list[str] = []
        for item in lines:
            if _PG_START.match(item):
                self.stats.gutenberg_files += 1
                head = []
                break
            head.append(item)
            if len(head) >= _PG_HEADER_SEARCH_LINES:
                break
        # No START marker near the top: not a Gutenberg file, keep it all.
        for item in itertools.chain(head, lines):
            if PG_END.match(item):
                return
            yield item

    # --- .jsonl -----------------------------------------------------------------------------
    def _jsonl(self, path: Path) -> Iterator[RawDoc]:
        field_name = self.source.text_field
        opener = gzip.open if path.name.endswith(".gz") else open
        try:
            with opener(path, "rb") as f:
                for lineno, raw in enumerate(f, 1):
                    self.stats.bytes += len(raw)
                    if not raw.strip():
                        continue
                    line = self._decode(raw, path, lineno)
                    if line is None:
                        continue
                    try:
                        obj = json.loads(line)
                    except json.JSONDecodeError as e:
                        raise DataError(
                            f"{path}:{lineno}: not a JSON object ({e.msg} at column {e.colno}); "
                            "each line of a .jsonl file must be one JSON object",
                            path=path,
                        ) from None
                    text = obj.get(field_name) if isinstance(obj, dict) else None
                    if not isinstance(text, str):
                        keys = ", ".join(sorted(obj)[:10]) if isinstance(obj, dict) else "none"
                        raise DataError(
                            f"{path}:{lineno}: no string field {field_name!r} (keys: {keys}); "
                            f"set text_field of source {self.source.name!r} in {self.config_file}",
                            path=path,
                        )
                    self.stats.docs += 1
                    yield RawDoc(text)
        except (OSError, EOFError, zlib.error) as e:
            raise DataError(f"{path}: cannot read ({e})", path=path) from e

    # --- .parquet ---------------------------------------------------------------------------
    def _parquet(self, path: Path) -> Iterator[RawDoc]:
        try:
            import pyarrow.parquet as pq
        except ImportError:
            raise DataError(
                f"{path}: reading parquet needs pyarrow: install enlace-data's web extra "
                "(pip install 'enlace-data[web]', or uv sync --extra web)",
                path=path,
            ) from None
        column = self.source.text_field
        try:
            pf = pq.ParquetFile(path)
            names = pf.schema_arrow.names
            if column not in names:
                raise DataError(
                    f"{path}: no column {column!r} (columns: {', '.join(names[:20])}); set "
                    f"text_field of source {self.source.name!r} in {self.config_file}",
                    path=path,
                )
            row = 0
            # One thread: the workers need the other cores, and CPU time stays accountable.
            batches = pf.iter_batches(
                batch_size=PARQUET_BATCH_ROWS, columns=[column], use_threads=False
            )
            for batch in batches:
                for text in batch.column(0).to_pylist():
                    row += 1
                    if text is None:
                        self.stats.null_docs += 1
                        continue
                    if not isinstance(text, str):
                        raise DataError(
                            f"{path}: column {column!r} holds {type(text).__name__} values, not "
                            f"text (row {row}); set text_field of source {self.source.name!r} to "
                            f"a string column in {self.config_file}",
                            path=path,
                        )
                    self.stats.docs += 1
                    self.stats.bytes += len(text.encode("utf-8"))
                    yield RawDoc(text)
        except (OSError, ValueError) as e:  # pyarrow's ArrowInvalid is a ValueError
            if isinstance(e, DataError):
                raise
            raise DataError(f"{path}: cannot read as parquet ({e})", path=path) from e


def _paragraphs(lines: Iterator[str], unwrap_min: int) -> Iterator[str]:
    """The text of each run of non-blank lines."""
    block: list[str] = []
    for line in lines:
        if line.strip():
            block.append(line)
        elif block:
            yield _unwrap(block, unwrap_min)
            block = []
    if block:
        yield _unwrap(block, unwrap_min)


def _unwrap(block: list[str], unwrap_min: int) -> str:
    long = sum(1 for line in block[:-1] if len(line.rstrip()) >= unwrap_min)
    if len(block) > 1 and long >= 0.75 * (len(block) - 1):
        return " ".join(line.strip() for line in block)
    return "\n".join(line.rstrip() for line in block)


def resolve_source_files(source: CorpusSource, index: int, config_file: str) -> list[Path]:
    """The files of a source, sorted; a clear DataError when the path is missing or holds none."""
    raw = source.path
    assert raw is not None, "a source of kind files has a path (checked by the schema)"
    p = Path(os.path.expandvars(os.path.expanduser(raw)))
    where = f"sources[{index}].path ({source.name!r}) in {config_file}"
    if not p.exists():
        hint = f" (from {raw!r})" if str(p) != raw else ""
        raise DataError(
            f"{where}: {p}{hint} does not exist (relative paths are read from the working "
            f"directory {Path.cwd()}); fix the path or create the files",
            path=p,
        )
    if p.is_file():
        if not p.name.endswith(SUFFIXES):
            raise DataError(f"{where}: {p} is not one of {', '.join(SUFFIXES)}", path=p)
        return [p]
    files = sorted(f for f in p.rglob("*") if f.is_file() and f.name.endswith(SUFFIXES))
    if not files:
        raise DataError(f"{where}: folder {p} holds no {', '.join(SUFFIXES)} files", path=p)
    return files
