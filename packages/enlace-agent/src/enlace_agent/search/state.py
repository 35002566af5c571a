"""Cool-downs that survive between runs: a small JSON file, never a reason for a search to fail.

    {"version": 1, "cooldowns": {"duckduckgo": {"until": 1780000000.0, "cause": "blocked"}}}

`until` is a Unix time. A missing, unreadable, corrupt or unwritable file is logged (at warning
level for a corrupt one, debug otherwise) and treated as "no cool-downs": the search goes on.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from enlace_agent.search.models import as_object

log = logging.getLogger("enlace_agent.search")

STATE_VERSION = 1


@dataclass(frozen=True)
class Cooldown:
    until: float
    cause: str


def default_state_path(environ: dict[str, str] | None = None) -> Path:
    env = os.environ if environ is None else environ
    base = (
        env.get("XDG_CACHE_HOME") or os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    )
    return Path(base) / "enlace" / "search-state.json"


class CooldownStore:
    """Reads and writes the cool-down file; `path=None` keeps them in memory only."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self._memory: dict[str, Cooldown] = {}

    def load(self) -> dict[str, Cooldown]:
        if self.path is None:
            return dict(self._memory)
        try:
            raw = self.path.read_bytes()  # decoded by json.loads: bad bytes are corruption too
        except FileNotFoundError:
            return {}
        except OSError as exc:
            log.debug("cool-down state %s unreadable (%s); ignoring it", self.path, exc)
            return {}
        try:
            data = as_object(json.loads(raw))
            entries = as_object(data.get("cooldowns")) if data is not None else None
            if entries is None:
                raise TypeError("no `cooldowns` object")
            out: dict[str, Cooldown] = {}
            for name, value in entries.items():
                entry = as_object(value)
                if entry is None:
                    raise TypeError(f"entry {name!r} is not an object")
                out[name] = Cooldown(
                    until=float(entry["until"]), cause=str(entry.get("cause", "rate_limited"))
                )
            return out
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            log.warning("cool-down state %s is corrupt (%s); ignoring it", self.path, exc)
            return {}

    def active(self, provider: str, now: float) -> Cooldown | None:
        entry = self.load().get(provider)
        return entry if entry is not None and entry.until > now else None

    def start(self, provider: str, until: float, cause: str, now: float) -> None:
        entries = {k: v for k, v in self.load().items() if v.until > now}
        entries[provider] = Cooldown(until=until, cause=cause)
        self._save(entries)

    def _save(self, entries: dict[str, Cooldown]) -> None:
        if self.path is None:
            self._memory = dict(entries)
            return
        data = {
            "version": STATE_VERSION,
            "cooldowns": {k: {"until": v.until, "cause": v.cause} for k, v in entries.items()},
        }
        tmp: str | None = None
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=".search-state.", dir=self.path.parent)
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump(data, f)
            os.replace(tmp, self.path)
            tmp = None
        except OSError as exc:
            log.warning(
                "cannot write the cool-down state %s (%s); going on without it", self.path, exc
            )
        finally:
            if tmp is not None:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
