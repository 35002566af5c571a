"""The one exception type of enlace-data: something about the data a user can fix."""

from __future__ import annotations

from pathlib import Path


class DataError(ValueError):
    """Bad, missing or mismatched data. The message names the file and says what to do.

    `path` is the file or directory at fault (None where no single file is); a URL stays a string.
    """

    def __init__(self, message: str, *, path: str | Path | None = None) -> None:
        url = isinstance(path, str) and "://" in path
        self.path: Path | str | None = path if path is None or url else Path(path)
        if path is not None and str(path) not in message:
            message = f"{path}: {message}"
        super().__init__(message)
