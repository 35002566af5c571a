"""What can go wrong with a snapshot, each as the family reads it (Spanish messages)."""

from __future__ import annotations

from pathlib import Path

from enlace_agent import shared


class SnapshotError(Exception):
    """A snapshot cannot be made, read or restored; the message says why (Spanish)."""

    usage = False  # True: the family asked for something that cannot be (exit code 2)


class ArchiveRefused(SnapshotError):
    """An archive that will not be trusted; `problem` names why (stable, English)."""

    usage = True

    def __init__(self, path: Path, problem: str, detail: str) -> None:
        self.path = path
        self.problem = problem
        super().__init__(f"la copia {path.name} no se puede usar: {detail}")


class CannotDo(SnapshotError):
    """A request that cannot be met as asked (no such archive, no such person, no passphrase)."""

    usage = True


class DiskFull(SnapshotError, shared.DiskFull):
    """No space left in `folder` (or not enough for what an archive declares); nothing partial
    is left behind and the history is as it was. The agent's one full-disk error and wording
    (`shared.DiskFull`), as a snapshot's error."""
