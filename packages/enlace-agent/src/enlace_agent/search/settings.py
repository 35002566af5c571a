"""The search's settings: `search.yaml` validated as `SearchConfig`, and the Brave key from the
environment (see `enlace_agent.settings` for the layers)."""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial

from enlace_config.schema.agent import SearchConfig

from enlace_agent import settings
from enlace_agent.search.errors import SearchConfigError
from enlace_agent.settings import load_settings

# The agent's settings layers, with the search's own error type.
load_env = partial(settings.load_env, error=SearchConfigError)
load_config = partial(load_settings, SearchConfig, "search.yaml", error=SearchConfigError)


def parse_providers(value: str | Sequence[str]) -> list[str]:
    """`"duckduckgo,brave"` or a list → a clean list of names (validated later by the schema)."""
    items = value.split(",") if isinstance(value, str) else list(value)
    return [p.strip().lower() for p in items if p.strip()]
