"""The agent's file primitives, written once: an atomic write (temporary file, fsync, rename,
the folder fsync'd), a new private file, a private folder, a lock and a file's sha256.

Snapshots, model versions, the services' units and the search state all write through here, so a
power cut leaves a file either old or new, never half-written, wherever it happens.

Modes are best effort where the filesystem has none: on a FAT or exFAT stick (the README's
`snapshot create --to /media/usb`) chmod fails with EPERM, and files and folders are made all the
same (such a filesystem has no owners to keep out).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import os
import tempfile
from collections.abc import Generator, Mapping
from pathlib import Path
from typing import IO

PRIVATE_DIR, PRIVATE_FILE = 0o700, 0o600
# chmod/fsync on a folder fail with these where the filesystem cannot do them (FAT, exFAT, some
# FUSE mounts); anything else (EACCES, ENOSPC, EIO...) is a real error and is raised.
_UNSUPPORTED = (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EINVAL)


def set_mode(target: Path | int, mode: int) -> bool:
    """chmod (a path) or fchmod (a file descriptor); False where the filesystem has no modes."""
    try:
        if isinstance(target, int):
            os.fchmod(target, mode)
        else:
            target.chmod(mode)
    except OSError as exc:
        if exc.errno not in _UNSUPPORTED:
            raise
        return False
    return True


def fsync_dir(folder: Path) -> None:
    """Makes a rename or a new file in `folder` durable (a no-op where the filesystem cannot)."""
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    except OSError as exc:
        if exc.errno not in _UNSUPPORTED:
            raise
    finally:
        os.close(fd)


def private_folder(path: Path) -> Path:
    """`path` as a folder: each folder it creates (parents included) is private (0700, whatever
    the umask); one that exists keeps its mode (a 1777 /tmp, a 2775 group folder)."""
    missing: list[Path] = []
    probe = path
    while not probe.is_dir():
        missing.append(probe)
        if probe.parent == probe:
            break
        probe = probe.parent
    for folder in reversed(missing):
        try:
            folder.mkdir(mode=PRIVATE_DIR)
        except FileExistsError:
            if not folder.is_dir():
                raise
            continue  # made by someone else meanwhile: theirs, left as it is
        set_mode(folder, PRIVATE_DIR)
    return path


def open_new(path: Path, mode: int = PRIVATE_FILE) -> IO[bytes]:
    """A new file (refused if it exists) with `mode` from its first byte, whatever the umask."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    try:
        set_mode(fd, mode)
    except BaseException:
        os.close(fd)
        raise
    return os.fdopen(fd, "wb")


@contextlib.contextmanager
def _temporary(path: Path, mode: int, temp: Path | None) -> Generator[tuple[IO[bytes], Path]]:
    """A new file beside `path` (`temp`, or a unique hidden name), fsync'd when the block ends;
    removed if the block fails."""
    if temp is None:
        fd, name = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
        temp, opened = Path(name), os.fdopen(fd, "wb")
    else:
        opened = open_new(temp, mode)
    try:
        with opened as out:
            set_mode(out.fileno(), mode)
            yield out, temp
            out.flush()
            os.fsync(out.fileno())
    except BaseException:
        temp.unlink(missing_ok=True)
        raise


@contextlib.contextmanager
def atomic_file(
    path: Path, *, mode: int = PRIVATE_FILE, temp: Path | None = None
) -> Generator[IO[bytes]]:
    """A file written under a temporary name beside `path` (or `temp`, a fixed name a sweeper
    can find), fsync'd and renamed onto `path` when the block ends, the folder fsync'd: `path` is
    the old file or the whole new one, never a part. On an error the temporary file goes."""
    with _temporary(path, mode, temp) as (out, written):
        yield out
    try:
        os.replace(written, path)
    except BaseException:
        written.unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)


def atomic_write(path: Path, data: bytes | str, *, mode: int = PRIVATE_FILE) -> None:
    """`data` (text as UTF-8) written to `path` atomically: the old file or the whole new one."""
    atomic_write_all({path: data}, mode=mode)


def atomic_write_all(wanted: Mapping[Path, bytes | str], *, mode: int = PRIVATE_FILE) -> None:
    """Each file of `wanted` (path -> data, text as UTF-8) written whole and fsync'd under a
    temporary name before the first is renamed into place: a failure while writing leaves every
    old file as it was."""
    written: list[tuple[Path, Path]] = []
    try:
        for path, body in wanted.items():
            with _temporary(path, mode, None) as (out, temp):
                out.write(body.encode() if isinstance(body, str) else body)
            written.append((path, temp))
        for path, temp in written:
            os.replace(temp, path)
    finally:
        for _, temp in written:
            temp.unlink(missing_ok=True)
    for folder in dict.fromkeys(path.parent for path in wanted):
        fsync_dir(folder)


@contextlib.contextmanager
def locked(lock_file: Path) -> Generator[None]:
    """An exclusive flock on `lock_file` (made 0600 when missing), across processes and threads
    (each holder opens its own descriptor)."""
    fd = os.open(lock_file, os.O_RDWR | os.O_CREAT, PRIVATE_FILE)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def sha256_file(path: Path) -> str:
    """The file's sha256 (hex), read in chunks."""
    with path.open("rb") as file:
        return hashlib.file_digest(file, "sha256").hexdigest()
