"""What every part of the agent shares (the search, the assistant, the page, the CLI, the
snapshots): a credential type that never prints itself, the redaction of secrets from text, the one
JSON reader, plain one-line text, the one way a full disk is told, and the watchdog that holds an
HTTP exchange to its deadline. Standard library and pydantic only."""

from __future__ import annotations

import contextlib
import errno
import json
import shutil
import socket
import sqlite3
import threading
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any, cast

from pydantic import SecretStr

Secret = SecretStr  # a credential that does not print itself (repr and str show only stars)


REDACTED = "[REDACTED]"


def redact(text: str, secrets: Iterable[str]) -> str:
    """Replace every secret in `text` (also its URL-encoded form) by a fixed marker."""
    from urllib.parse import quote, quote_plus

    for secret in secrets:
        if len(secret) < 4:  # too short to search for without mangling the text
            continue
        for form in {secret, quote(secret, safe=""), quote_plus(secret)}:
            text = text.replace(form, REDACTED)
    return text


def one_line(text: str) -> str:
    """`text` as plain text on one line: control and other unprintable characters (a terminal's
    escape sequences, bidirectional overrides) and runs of white space become one space."""
    return " ".join("".join(c if c.isprintable() else " " for c in text).split())


def is_number(text: str) -> bool:
    """`text` is ASCII digits only (a row id, a Content-Length, a memory's number):
    `str.isdigit()` alone also takes «²» or «١», which `int()` refuses or reads otherwise."""
    return text.isascii() and text.isdigit()


def as_object(value: object) -> dict[str, Any] | None:
    """`value` as a JSON object (str keys), or None when it is not one."""
    if isinstance(value, dict):
        return cast("dict[str, Any]", value)
    return None


def as_array(value: object) -> list[Any] | None:
    """`value` as a JSON array, or None when it is not one."""
    if isinstance(value, list):
        return cast("list[Any]", value)
    return None


def loads_json(text: str | bytes | bytearray) -> Any:
    """The JSON value `text` holds; ValueError when it is not JSON (UnicodeDecodeError included)
    or nested too deeply for Python's reader (RecursionError, which is no ValueError: ~1,000
    levels, 2,000 characters, fit in any answer, argument or request body). Every JSON reader of
    the agent reads through here."""
    try:
        return json.loads(text)
    except RecursionError:
        raise ValueError("JSON nested too deeply to read") from None


def loads_object(text: str | bytes | bytearray) -> dict[str, Any] | None:
    """The JSON object `text` holds, or None when it is not JSON or not an object."""
    try:
        return as_object(loads_json(text))
    except ValueError:  # UnicodeDecodeError included
        return None


class DiskFull(Exception):
    """No space left in `folder` for a write; what was being written was not, and the files are
    as they were. `detail` says what to free. The one wording of a full disk, wherever the agent
    writes (the household's database, the memory, the page, snapshots)."""

    def __init__(self, folder: Path, detail: str) -> None:
        self.folder = folder
        self.detail = detail
        super().__init__(f"no queda espacio en {folder}: {detail}")


SHM_CHUNK = 32 * 1024  # SQLite's WAL index (-shm) grows by this much: a write needs the room


def out_of_space(exc: BaseException, folder: Path | None = None) -> bool:
    """Whether `exc` means a full disk: ENOSPC or EDQUOT, SQLite's «database or disk is full»,
    or an SQLite I/O error while `folder` has not room enough for the WAL index to grow (that is
    how SQLite reports a full disk when the -shm file cannot grow: SQLITE_IOERR_SHMSIZE)."""
    if isinstance(exc, OSError):
        return exc.errno in (errno.ENOSPC, errno.EDQUOT)
    if not isinstance(exc, sqlite3.OperationalError):
        return False
    code: int | None = getattr(exc, "sqlite_errorcode", None)
    if "full" in str(exc) or (code is not None and code & 0xFF == sqlite3.SQLITE_FULL):
        return True
    if folder is None or code is None or code & 0xFF != sqlite3.SQLITE_IOERR:
        return False
    try:
        return shutil.disk_usage(folder).free < SHM_CHUNK
    except OSError:
        return False


class Watchdog:
    """Shuts the current connection's socket down when the deadline passes (httpx's read timeout
    never trips on a server that sends a byte now and then)."""

    def __init__(self, deadline: float) -> None:
        self.deadline = deadline
        self.fired = False
        self._lock = threading.Lock()
        self._stream: Any = None
        self._timer = threading.Timer(max(0.0, deadline - time.monotonic()), self._fire)
        self._timer.daemon = True

    def trace(self, event: str, info: dict[str, Any]) -> None:
        # httpcore reports the network stream it opened (and the TLS one that replaces it).
        if event in ("connection.connect_tcp.complete", "connection.start_tls.complete"):
            with self._lock:
                self._stream = info.get("return_value")
                if self.fired:
                    self._shutdown()

    def _shutdown(self) -> None:
        stream = self._stream
        if stream is None:
            return
        with contextlib.suppress(Exception):
            sock = stream.get_extra_info("socket")
            if isinstance(sock, socket.socket):
                sock.shutdown(socket.SHUT_RDWR)

    def _fire(self) -> None:
        with self._lock:
            self.fired = True
            self._shutdown()

    def __enter__(self) -> Watchdog:
        self._timer.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._timer.cancel()
