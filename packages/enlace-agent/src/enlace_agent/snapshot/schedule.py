"""Automatic snapshots: one before the history's schema is migrated, one a day while `serve`
runs, and pruning to the newest of each recent day and week."""

from __future__ import annotations

import datetime as dt
import logging
import threading
from collections.abc import Callable
from pathlib import Path

from enlace_agent.household.database import StoreError
from enlace_agent.household.schema import SCHEMA_VERSION
from enlace_agent.snapshot.archive import VERIFIED
from enlace_agent.snapshot.catalog import snapshots
from enlace_agent.snapshot.errors import SnapshotError
from enlace_agent.snapshot.household import Household, locked
from enlace_agent.snapshot.make import create

log = logging.getLogger("enlace_agent.snapshot")


def before_migration(h: Household) -> Callable[[Path, int], None]:
    """The store's hook: a snapshot before the file at `path` leaves schema `found`."""

    def hook(path: Path, found: int) -> None:
        if h.config.before_migration:
            log.warning("schema %d -> %d: taking a snapshot first", found, SCHEMA_VERSION)
            try:
                create(h, "before-migration")
            except SnapshotError as exc:  # no migration without its snapshot
                raise StoreError(
                    f"la copia previa a la migración no se pudo hacer: {exc}"
                ) from None

    return hook


def seconds_until(hour: int, now: dt.datetime) -> float:
    """Seconds from `now` (local, aware) to the next `hour`:00 local time."""
    target = now.replace(hour=hour, minute=0, second=0, microsecond=0)
    if target <= now:
        target += dt.timedelta(days=1)
    return (target - now).total_seconds()


def run_daily(
    h: Household,
    stop: threading.Event,
    now: Callable[[], dt.datetime] = lambda: dt.datetime.now().astimezone(),
) -> None:
    """While `serve` runs: a snapshot every day at `daily_hour`, then pruning. A failure is
    logged and retried the next day; it never stops the page."""
    hour = h.config.daily_hour
    if hour is None:
        return
    while not stop.wait(seconds_until(hour, now())):
        try:
            made = create(h, "daily")
            log.warning("daily snapshot %s", made.path.name)
            prune(h)
        except Exception:
            log.exception("the daily snapshot failed")


def start_daily(h: Household) -> threading.Event:
    """Starts `run_daily` in a daemon thread; set the returned event to stop it."""
    stop = threading.Event()
    threading.Thread(target=run_daily, args=(h, stop), name="snapshots", daemon=True).start()
    return stop


def prune(h: Household) -> list[Path]:
    """Deletes verified snapshots beyond the newest of each of the last `keep_daily` days and
    `keep_weekly` ISO weeks; never an unverified one, never the newest verified one."""
    with locked(h):
        verified = [s for s in snapshots(h.directory) if s.verified is not None]
        keep: set[Path] = {verified[0].path} if verified else set()
        days: dict[dt.date, Path] = {}
        weeks: dict[tuple[int, int], Path] = {}
        for s in verified:  # newest first: the first of each day / week is its newest
            local = s.created.astimezone()
            days.setdefault(local.date(), s.path)
            weeks.setdefault(local.isocalendar()[:2], s.path)
        keep.update(list(days.values())[: h.config.keep_daily])
        keep.update(list(weeks.values())[: h.config.keep_weekly])
        removed = [s.path for s in verified if s.path not in keep]
        for path in removed:
            path.unlink(missing_ok=True)
            path.with_name(path.name + VERIFIED).unlink(missing_ok=True)
        return removed
