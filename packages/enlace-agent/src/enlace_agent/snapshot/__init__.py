"""Snapshots of the household: the histories (and memories) and the settings in one archive that
is proven restorable when it is made, and a restore that can always be undone.

One concern a module, each over the agent's file primitives (`enlace_agent.files`) and the
history's store (`enlace_agent.household.database`, which alone knows the tables):

    errors     what can go wrong, in Spanish
    household  where a household's files are; the lock, scratch folders, the kill hook
    archive    the format; reading an archive without trusting it
    seal       sealed (encrypted) archives
    catalog    the snapshots in a folder, the record of each one's check, `verify`, sweeping
    make       `create`: a snapshot proven restorable when it is made
    restoring  `restore`: the whole household or one person, never a mix
    schedule   before a migration, daily while `serve` runs, and pruning

Every name the CLI, the page, `doctor` and the tests use is importable from here.
"""

from __future__ import annotations

from enlace_agent.snapshot.archive import (
    DATABASE,
    FORMAT,
    FORMAT_VERSION,
    KINDS,
    MANIFEST,
    PARTIAL,
    PLAIN,
    PREFIX,
    SEALED,
    VERIFIED,
)
from enlace_agent.snapshot.catalog import Snapshot, snapshots, verify
from enlace_agent.snapshot.errors import ArchiveRefused, CannotDo, DiskFull, SnapshotError
from enlace_agent.snapshot.household import (
    KILL_ENV,
    LOCK,
    WORK,
    Household,
    checkpoint,
    household,
)
from enlace_agent.snapshot.make import create
from enlace_agent.snapshot.restoring import Restored, restore
from enlace_agent.snapshot.schedule import (
    before_migration,
    prune,
    run_daily,
    seconds_until,
    start_daily,
)
from enlace_agent.snapshot.seal import SEAL_MAGIC

__all__ = [
    "DATABASE",
    "FORMAT",
    "FORMAT_VERSION",
    "KILL_ENV",
    "KINDS",
    "LOCK",
    "MANIFEST",
    "PARTIAL",
    "PLAIN",
    "PREFIX",
    "SEALED",
    "SEAL_MAGIC",
    "VERIFIED",
    "WORK",
    "ArchiveRefused",
    "CannotDo",
    "DiskFull",
    "Household",
    "Restored",
    "Snapshot",
    "SnapshotError",
    "before_migration",
    "checkpoint",
    "create",
    "household",
    "prune",
    "restore",
    "run_daily",
    "seconds_until",
    "snapshots",
    "start_daily",
    "verify",
]
