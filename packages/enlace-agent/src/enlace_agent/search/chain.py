"""The provider chain: ask in order, move on only on a `ProviderError` (kept in
`SearchResponse.skipped`), remember who answered. Zero results from a provider that answered is the
answer (a fallback would spend quota for worse results). After `Throttled` errors the provider is
skipped for a cool-down remembered between runs. A missing key fails when the chain is built."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Protocol

from enlace_config.schema.agent import SearchConfig

from enlace_agent.search.errors import (
    AllProvidersFailed,
    CoolingDown,
    MissingCredential,
    ProviderError,
    QueryError,
    SearchConfigError,
    Throttled,
)
from enlace_agent.search.models import (
    SearchRequest,
    SearchResponse,
    SearchResult,
    Secret,
    SkippedProvider,
)
from enlace_agent.search.state import CooldownStore, default_state_path
from enlace_agent.settings import InvalidOptions, with_overrides

log = logging.getLogger("enlace_agent.search")

MAX_HINTED_COOLDOWN_S = 24 * 3600.0  # a provider's own retry hint is trusted up to a day


class Provider(Protocol):
    name: str
    max_query_chars: int

    def search(self, request: SearchRequest) -> list[SearchResult]: ...


def user_agent() -> str:
    from importlib.metadata import version

    return (
        f"enlace-agent/{version('enlace-agent')} (family assistant web search; "
        f"python-httpx/{version('httpx')})"
    )


def build_providers(config: SearchConfig, env: Mapping[str, str]) -> list[Provider]:
    """One provider per configured name; raises `MissingCredential` for a key that is not set."""
    from enlace_agent.keys import SEARCH_KEYS
    from enlace_agent.search.brave import BraveSearch
    from enlace_agent.search.duckduckgo import DuckDuckGoLite

    agent = config.http.user_agent or user_agent()
    providers: list[Provider] = []
    for name in config.providers:
        if name == "duckduckgo":
            providers.append(DuckDuckGoLite(config.duckduckgo.endpoint, config.http, agent))
        else:
            key = env.get(SEARCH_KEYS[name], "").strip()
            if not key:
                raise MissingCredential(name, SEARCH_KEYS[name])
            providers.append(BraveSearch(config.brave, config.http, Secret(key), agent))
    return providers


class SearchChain:
    """Build once (checks keys), then `search()` as often as needed."""

    def __init__(
        self,
        config: SearchConfig | None = None,
        *,
        env: Mapping[str, str] | None = None,
        providers: Sequence[Provider] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.config = config if config is not None else SearchConfig()
        environ = dict(os.environ) if env is None else dict(env)
        self.providers: list[Provider] = (
            list(providers) if providers is not None else build_providers(self.config, environ)
        )
        if not self.providers:
            raise SearchConfigError("the search chain has no providers")
        state_file = self.config.state_file
        self.state = CooldownStore(Path(state_file) if state_file else default_state_path(environ))
        self.clock = clock

    @property
    def max_query_chars(self) -> int:
        """The longest query every provider of the chain accepts (so a fallback can always run)."""
        return min(p.max_query_chars for p in self.providers)

    def check_query(self, query: str) -> str:
        """The query as it will be sent, or `QueryError`: never silently cut."""
        text = " ".join(query.split())
        if not text:
            raise QueryError("the query is empty")
        if len(text) > self.max_query_chars:
            limiting = min(self.providers, key=lambda p: p.max_query_chars).name
            raise QueryError(
                f"the query has {len(text)} characters; the longest {limiting} accepts is "
                f"{self.max_query_chars}",
                length=len(text),
                limit=self.max_query_chars,
                provider=limiting,
            )
        return text

    def search(self, query: str, *, max_results: int | None = None) -> SearchResponse:
        """Ask the providers in order. `max_results` overrides the config's, validated by the
        schema (`QueryError` when out of range)."""
        text = self.check_query(query)
        try:
            config = with_overrides(self.config, {"max_results": max_results})
        except InvalidOptions as exc:
            raise QueryError(str(exc)) from None
        request = SearchRequest(
            text, config.max_results, config.region, config.safe_search, config.time_filter
        )
        log.debug("searching for %r", text)  # the query is logged at debug level only
        started = time.monotonic()
        skipped: list[SkippedProvider] = []
        for provider in self.providers:
            now = self.clock()
            cooling = self.state.active(provider.name, now) if self.config.cooldown_s > 0 else None
            if cooling is not None:
                error: ProviderError = CoolingDown(
                    provider.name,
                    until=cooling.until,
                    cause=cooling.cause,
                    remaining_s=cooling.until - now,
                )
                log.info("%s skipped: %s", provider.name, error.detail)
                skipped.append(SkippedProvider(provider.name, error))
                continue
            try:
                results = provider.search(request)
            except ProviderError as exc:
                # The detail may quote what a server said (and so the query): debug level only.
                status = f" (HTTP {exc.status})" if exc.status else ""
                log.warning("%s failed: %s%s", provider.name, exc.kind, status)
                log.debug("%s failure detail: %s", provider.name, exc.detail)
                self._maybe_cool_down(provider.name, exc)
                skipped.append(SkippedProvider(provider.name, exc))
                continue
            log.info("%s answered with %d results", provider.name, len(results))
            self.state.answered(provider.name, now)
            return SearchResponse(
                query=text,
                provider=provider.name,
                results=tuple(results),
                skipped=tuple(skipped),
                elapsed_s=time.monotonic() - started,
            )
        raise AllProvidersFailed([s.error for s in skipped])

    def _maybe_cool_down(self, name: str, exc: ProviderError) -> None:
        if self.config.cooldown_s <= 0 or not isinstance(exc, Throttled):
            return
        hint = exc.retry_after_s
        seconds = (
            min(max(hint, 1.0), MAX_HINTED_COOLDOWN_S)
            if hint is not None
            else self.config.cooldown_s
        )
        now = self.clock()
        self.state.start(name, now + seconds, exc.kind, now)
        log.info("%s cooling down for %.0f s after %s", name, seconds, exc.kind)
