"""Small filesystem helpers for atomic writes."""

from __future__ import annotations

import os
from pathlib import Path


def default_file_mode() -> int:
    """The mode a plain open() would give a new file (mkstemp's files are 0600)."""
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


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
