"""The search's settings: `search.yaml` validated as `SearchConfig`, and the Brave key from the
environment (see `enlace_agent.settings` for the layers)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from enlace_config.schema.agent import SearchConfig

from enlace_agent.search.errors import SearchConfigError
from enlace_agent.settings import load_env as _load_env
from enlace_agent.settings import load_settings


def load_env(
    env_file: Path | None = None, environ: Mapping[str, str] | None = None
) -> dict[str, str]:
    return _load_env(env_file, environ, error=SearchConfigError)


def load_config(
    path: Path | None = None,
    *,
    overrides: Mapping[str, Any] | None = None,
    environ: Mapping[str, str] | None = None,
) -> SearchConfig:
    """Defaults, then the user's `search.yaml` (or `path`), then `overrides`."""
    return load_settings(
        SearchConfig,
        "search.yaml",
        path,
        overrides=overrides,
        environ=environ,
        error=SearchConfigError,
    )


def parse_providers(value: str | Sequence[str]) -> list[str]:
    """`"duckduckgo,brave"` or a list → a clean list of names (validated later by the schema)."""
    items = value.split(",") if isinstance(value, str) else list(value)
    return [p.strip().lower() for p in items if p.strip()]
