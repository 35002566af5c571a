"""The library entry point: `search(query, ...) -> SearchResponse`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from enlace_config.schema.agent import SearchConfig

from enlace_agent.search.chain import SearchChain
from enlace_agent.search.models import SearchResponse
from enlace_agent.search.settings import load_config, load_env, parse_providers
from enlace_agent.settings import with_overrides


def search(
    query: str,
    *,
    max_results: int | None = None,
    region: str | None = None,
    providers: str | Sequence[str] | None = None,
    config: SearchConfig | str | Path | None = None,
    env: Mapping[str, str] | None = None,
    env_file: str | Path | None = None,
) -> SearchResponse:
    """Search the web with the configured chain (DuckDuckGo Lite, then Brave by default).

    `config`: a `SearchConfig`, a YAML path, or None for the user's file / the package defaults.
    `env`: the environment to read the Brave key from (default: `os.environ` plus the env file).
    Raises `QueryError`, `SearchConfigError` (`InvalidOptions`, `MissingCredential` included) or
    `AllProvidersFailed`; see `enlace_agent.search.errors`.
    """
    overrides: dict[str, Any] = {"region": region}
    if providers is not None:
        overrides["providers"] = parse_providers(providers)
    if max_results is not None:
        overrides["max_results"] = max_results
    if isinstance(config, SearchConfig):
        base = with_overrides(config, overrides)
    else:
        base = load_config(
            Path(config) if config is not None else None, overrides=overrides, environ=env
        )
    environment = (
        dict(env)
        if env is not None and env_file is None
        else load_env(Path(env_file) if env_file is not None else None, environ=env)
    )
    return SearchChain(base, env=environment).search(query)
