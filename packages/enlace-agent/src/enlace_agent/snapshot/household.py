"""The household a snapshot is of: where its history lives, where its snapshots go, what else
goes in them; and what every snapshot operation shares: one at a time per household (a lock
beside the history file), private scratch folders there, and the kill -9 test hook.

Tests may set ENLACE_SNAPSHOT_TEST_KILL_AT to one of the names passed to `checkpoint` to make the
process SIGKILL itself there (the "kill -9 at this moment" tests); nothing else reads it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import tempfile
from collections.abc import Generator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from enlace_config.schema.agent import AssistantConfig, SnapshotConfig

from enlace_agent import files
from enlace_agent.household.paths import HouseholdPaths

KILL_ENV = "ENLACE_SNAPSHOT_TEST_KILL_AT"
LOCK = ".snapshot.lock"  # beside the history file
WORK = ".snapshot-work-"  # private scratch folders beside the history file


@dataclass(frozen=True)
class Household:
    """Where the histories live, where snapshots go, and what goes in them besides the database."""

    database: Path
    directory: Path
    config: SnapshotConfig
    timeout_s: float  # a write waits this long for a busy history file (web.database_timeout_s)
    settings: Mapping[str, Path] = field(default_factory=lambda: {})  # member name -> file
    people: tuple[Mapping[str, str | None], ...] = ()
    model: str | None = None
    passphrase: str | None = None

    @property
    def work_root(self) -> Path:
        """Private scratch space, always inside the data directory (same disk as the database)."""
        return self.database.parent


def household(
    config: AssistantConfig,
    env: Mapping[str, str],
    config_path: Path | None = None,
    paths: HouseholdPaths | None = None,
) -> Household:
    """The household as the assistant's configuration describes it (`paths`: where it lives, when
    the caller has it already)."""
    paths = paths or HouseholdPaths.of(config, env, config_path)
    web, snap = config.web, config.web.snapshots
    settings: dict[str, Path] = {}
    if paths.config_file.is_file():
        settings["settings/assistant.yaml"] = paths.config_file
    if paths.search_file.is_file():
        settings["settings/search.yaml"] = paths.search_file
    passphrase = None
    if snap.passphrase_env is not None:
        passphrase = env.get(snap.passphrase_env, "") or None
    people = tuple({"name": p.name, "token_env": p.token_env} for p in web.people)
    return Household(
        paths.database,
        paths.snapshots,
        snap,
        web.database_timeout_s,
        settings=settings,
        people=people,
        model=config.model,
        passphrase=passphrase,
    )


def checkpoint(name: str) -> None:
    if os.environ.get(KILL_ENV) == name:
        os.kill(os.getpid(), signal.SIGKILL)


@contextlib.contextmanager
def locked(h: Household) -> Generator[None]:
    """One snapshot, check, restore or pruning at a time per household (across processes and
    threads): the lock file lives beside the history file."""
    with files.locked(files.private_folder(h.work_root) / LOCK):
        yield


def work_dir(h: Household) -> Path:
    return Path(tempfile.mkdtemp(prefix=WORK, dir=h.work_root))
