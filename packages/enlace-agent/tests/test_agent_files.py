"""The agent's file primitives (enlace_agent.files): atomic writes that leave the old file or the
new one, private folders that leave existing ones alone (and work where chmod fails, as on a FAT
stick), the lock and the hash."""

from __future__ import annotations

import errno
import hashlib
import os
import stat
import threading
from pathlib import Path

import pytest

from enlace_agent import files


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_atomic_write_writes_whole_private_files_and_leaves_no_temporary(tmp_path: Path) -> None:
    target = tmp_path / "state.json"
    files.atomic_write(target, "¿qué tal?")
    assert target.read_text("utf-8") == "¿qué tal?" and mode(target) == 0o600
    files.atomic_write(target, b"\x00\x01", mode=0o644)
    assert target.read_bytes() == b"\x00\x01" and mode(target) == 0o644
    assert sorted(p.name for p in tmp_path.iterdir()) == ["state.json"]


def test_atomic_write_fsyncs_the_file_and_then_its_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    synced: list[str] = []
    real = os.fsync

    def fsync(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    files.atomic_write(tmp_path / "a.txt", "x")
    assert len(synced) == 2
    assert Path(synced[0]).parent == tmp_path and Path(synced[0]).name.startswith(".a.txt.")
    assert synced[1] == str(tmp_path)


def test_a_failed_write_keeps_the_old_file_and_removes_the_temporary(tmp_path: Path) -> None:
    target = tmp_path / "units.service"
    target.write_text("old")
    with pytest.raises(RuntimeError), files.atomic_file(target) as out:
        out.write(b"half of the new")
        raise RuntimeError("power cut")
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["units.service"]
    temp = tmp_path / ".units.service.partial"
    with pytest.raises(OSError, match="No space"), files.atomic_file(target, temp=temp):
        raise OSError(errno.ENOSPC, "No space left on device")
    assert target.read_text() == "old" and not temp.exists()


def test_open_new_refuses_an_existing_file(tmp_path: Path) -> None:
    (tmp_path / "x").write_text("mine")
    with pytest.raises(FileExistsError):
        files.open_new(tmp_path / "x")
    assert (tmp_path / "x").read_text() == "mine"


@pytest.mark.parametrize("umask", [0o022, 0o077, 0o002])
def test_private_folder_makes_every_folder_it_creates_private(tmp_path: Path, umask: int) -> None:
    old = os.umask(umask)
    try:
        made = files.private_folder(tmp_path / "a" / "b" / "c")
    finally:
        os.umask(old)
    for folder in (tmp_path / "a", tmp_path / "a" / "b", made):
        assert folder.is_dir() and mode(folder) == 0o700, folder


@pytest.mark.parametrize("existing", [0o1777, 0o2775, 0o755])
def test_private_folder_leaves_an_existing_folder_as_it_is(tmp_path: Path, existing: int) -> None:
    folder = tmp_path / "shared"
    folder.mkdir()
    folder.chmod(existing)
    files.private_folder(folder)
    files.private_folder(folder / "new")
    assert mode(folder) == existing and mode(folder / "new") == 0o700


def no_chmod(*_: object, **__: object) -> None:
    """chmod as a FAT or exFAT filesystem answers it."""
    raise PermissionError(errno.EPERM, "Operation not permitted")


def test_where_chmod_fails_files_and_folders_are_made_all_the_same(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Simulated (no vfat in this kernel to mount): os.chmod and os.fchmod fail with EPERM."""
    monkeypatch.setattr(os, "chmod", no_chmod)
    monkeypatch.setattr(os, "fchmod", no_chmod)
    folder = files.private_folder(tmp_path / "usb" / "copias")
    files.atomic_write(folder / "a.json", "{}")
    with files.open_new(folder / "b") as out:
        out.write(b"b")
    assert (folder / "a.json").read_text() == "{}" and (folder / "b").read_bytes() == b"b"


def test_a_real_chmod_error_is_not_hidden(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def io_error(*_: object, **__: object) -> None:
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(os, "chmod", io_error)
    with pytest.raises(OSError, match="Input/output"):
        files.private_folder(tmp_path / "x")


def test_the_lock_keeps_a_second_holder_waiting(tmp_path: Path) -> None:
    lock = tmp_path / ".lock"
    got = threading.Event()

    def second() -> None:
        with files.locked(lock):
            got.set()

    with files.locked(lock):
        thread = threading.Thread(target=second)
        thread.start()
        assert not got.wait(0.3)
    assert got.wait(5)
    thread.join(5)
    assert mode(lock) == 0o600


def test_sha256_file(tmp_path: Path) -> None:
    data = os.urandom(3 << 20)
    (tmp_path / "f").write_bytes(data)
    assert files.sha256_file(tmp_path / "f") == hashlib.sha256(data).hexdigest()


def test_atomic_write_all_renames_nothing_until_every_file_is_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    old = {tmp_path / "a": "old a", tmp_path / "b": "old b"}
    for path, text in old.items():
        path.write_text(text)
    real = os.fsync
    calls: list[int] = []

    def full_on_second(fd: int) -> None:
        calls.append(fd)
        if len(calls) == 2:
            raise OSError(errno.ENOSPC, "No space left on device")
        real(fd)

    monkeypatch.setattr(os, "fsync", full_on_second)
    with pytest.raises(OSError):
        files.atomic_write_all({path: "new" for path in old})
    assert {p: p.read_text() for p in tmp_path.iterdir()} == old
    monkeypatch.setattr(os, "fsync", real)
    files.atomic_write_all({path: f"new {path.name}" for path in old}, mode=0o644)
    assert {p.name: (p.read_text(), mode(p)) for p in tmp_path.iterdir()} == {
        "a": ("new a", 0o644),
        "b": ("new b", 0o644),
    }
