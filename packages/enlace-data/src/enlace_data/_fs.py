"""Atomic file writes: enlace-data's one home for them (shards, smoke corpus, tokenizer, manifests).

A file is written to a temporary dot-file beside its final name (``.<name>.<random>.tmp``),
fsynced, renamed over the final name, and the directory is fsynced: under its final name a file is
either complete or absent (or the previous version), whatever kills the process.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any, BinaryIO


def fsync_dir(directory: Path) -> None:
    """Make a rename inside `directory` durable."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:  # pragma: no cover - platforms without directory fds
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def open_temp_beside(path: Path) -> tuple[BinaryIO, Path]:
    """A new temporary file (opened for binary writing) in `path`'s directory, created if needed."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    mask = os.umask(0)
    os.umask(mask)
    os.fchmod(fd, 0o666 & ~mask)  # the mode a plain open() gives (mkstemp's files are 0600)
    return os.fdopen(fd, "wb"), Path(tmp)


def json_bytes(obj: Any) -> bytes:
    """`obj` as the indented UTF-8 JSON every file of the package is written in."""
    return (json.dumps(obj, indent=2, ensure_ascii=False) + "\n").encode("utf-8")


def write_atomic(files: dict[Path, bytes]) -> None:
    """Write every file to a temporary sibling and fsync them all, then rename them all into
    place: a failure before the renames leaves every final name as it was."""
    tmps: list[tuple[Path, Path]] = []
    try:
        for final, data in files.items():
            f, tmp = open_temp_beside(final)
            tmps.append((tmp, final))
            with f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
        for tmp, final in tmps:
            os.replace(tmp, final)
    finally:
        for tmp, _ in tmps:
            tmp.unlink(missing_ok=True)
    for directory in {final.parent for final in files}:
        fsync_dir(directory)
