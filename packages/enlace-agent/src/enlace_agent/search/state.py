"""Cool-downs that survive between runs: a small JSON file, never a reason for a search to fail.

    {"version": 1, "cooldowns": {"duckduckgo": {"until": 1780000000.0, "cause": "blocked"}},
     "last": {"provider": "brave", "at": 1779999000.0}}

`until` and `at` are Unix times; `last` is the provider that answered last and since when it has
been the one answering (for `enlace-assistant doctor`; written only when it changes, never the
query). A missing, unreadable, corrupt or unwritable file is logged (at warning level for a corrupt
one, debug otherwise) and treated as "no cool-downs": the search goes on.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from enlace_agent.files import atomic_write
from enlace_agent.search.models import as_object, loads_json
from enlace_agent.settings import cache_dir

log = logging.getLogger("enlace_agent.search")

STATE_VERSION = 1


@dataclass(frozen=True)
class Cooldown:
    until: float
    cause: str


def default_state_path(environ: Mapping[str, str] | None = None) -> Path:
    return cache_dir(environ) / "search-state.json"


class CooldownStore:
    """Reads and writes the cool-down file."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def load(self) -> dict[str, Cooldown]:
        try:
            raw = self.path.read_bytes()  # decoded by loads_json: bad bytes are corruption too
        except FileNotFoundError:
            return {}
        except OSError as exc:
            log.debug("cool-down state %s unreadable (%s); ignoring it", self.path, exc)
            return {}
        try:
            entries = as_object((as_object(loads_json(raw)) or {}).get("cooldowns"))
            if entries is None:
                raise TypeError("no `cooldowns` object")
            return {
                name: Cooldown(float(entry["until"]), str(entry.get("cause", "rate_limited")))
                for name, entry in entries.items()
            }
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            log.warning("cool-down state %s is corrupt (%s); ignoring it", self.path, exc)
            return {}

    def active(self, provider: str, now: float) -> Cooldown | None:
        entry = self.load().get(provider)
        return entry if entry is not None and entry.until > now else None

    def last(self) -> tuple[str, float] | None:
        """The provider that answered last and when (None: none yet, or unreadable)."""
        with contextlib.suppress(OSError, ValueError, TypeError, KeyError, AttributeError):
            data = as_object(json.loads(self.path.read_bytes())) or {}
            last = as_object(data.get("last")) or {}
            return str(last["provider"]), float(last["at"])
        return None

    def answered(self, provider: str, now: float) -> None:
        """Records that `provider` answered (a write only when it was another provider)."""
        known = self.last()
        if known is None or known[0] != provider:
            self._write(self.load(), (provider, now), now)

    def start(self, provider: str, until: float, cause: str, now: float) -> None:
        entries = self.load()
        entries[provider] = Cooldown(until=until, cause=cause)
        self._write(entries, self.last(), now)

    def _write(
        self, entries: Mapping[str, Cooldown], last: tuple[str, float] | None, now: float
    ) -> None:
        data: dict[str, object] = {
            "version": STATE_VERSION,
            "cooldowns": {
                k: {"until": v.until, "cause": v.cause} for k, v in entries.items() if v.until > now
            },
        }
        if last is not None:
            data["last"] = {"provider": last[0], "at": last[1]}
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write(self.path, json.dumps(data))
        except OSError as exc:
            log.warning(
                "cannot write the cool-down state %s (%s); going on without it", self.path, exc
            )
