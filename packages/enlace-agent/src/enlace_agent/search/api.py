"""The library entry point: `search(query, ...) -> SearchResponse`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

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
    overrides = {
        "region": region,
        "max_results": max_results,
        "providers": parse_providers(providers) if providers is not None else None,
    }  # None: not overridden
    if isinstance(config, SearchConfig):
        base = with_overrides(config, overrides)
    else:
        path = Path(config) if config is not None else None
        base = load_config(path, overrides=overrides, environ=env)
    if env is None or env_file is not None:
        env = load_env(Path(env_file) if env_file is not None else None, environ=env)
    return SearchChain(base, env=env).search(query)
