"""What a search returns (`SearchResponse.to_dict` is the stable JSON shape documented in the
package README), and the small value types and helpers the providers share."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from enlace_agent.search.errors import ProviderError

# The agent-wide helpers (enlace_agent.shared), still importable from here.
from enlace_agent.shared import REDACTED as REDACTED
from enlace_agent.shared import Secret as Secret
from enlace_agent.shared import as_array as as_array
from enlace_agent.shared import as_object as as_object
from enlace_agent.shared import loads_json as loads_json
from enlace_agent.shared import loads_object as loads_object
from enlace_agent.shared import one_line as one_line
from enlace_agent.shared import redact as redact


@dataclass(frozen=True)
class SearchRequest:
    """One query as every provider receives it (already validated by the chain)."""

    query: str
    max_results: int
    region: str
    safe_search: str
    time_filter: str | None = None


@dataclass(frozen=True)
class SearchResult:
    title: str
    url: str
    snippet: str
    rank: int
    provider: str

    def to_dict(self) -> dict[str, Any]:
        return {"title": self.title, "url": self.url, "snippet": self.snippet, "rank": self.rank}


@dataclass(frozen=True)
class SkippedProvider:
    """A provider the chain asked (or skipped in its cool-down) before the one that answered."""

    provider: str
    error: ProviderError

    def to_dict(self) -> dict[str, Any]:
        return {"provider": self.provider, "error": self.error.kind, "message": self.error.detail}


@dataclass(frozen=True)
class SearchResponse:
    """An answer: `provider` is who answered, `skipped` who failed before it and why."""

    query: str
    provider: str
    results: tuple[SearchResult, ...]
    skipped: tuple[SkippedProvider, ...] = field(default=())
    elapsed_s: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "query": self.query,
            "provider": self.provider,
            "results": [r.to_dict() for r in self.results],
            "skipped": [s.to_dict() for s in self.skipped],
            "elapsed_s": round(self.elapsed_s, 3),
        }


def is_http_url(url: str) -> bool:
    try:
        parts = urlsplit(url)
    except ValueError:
        return False
    return parts.scheme in ("http", "https") and bool(parts.hostname)


def finalize(
    raw: Iterable[tuple[str, str, str]], *, provider: str, max_results: int | None
) -> list[SearchResult]:
    """(title, url, snippet) triples → ranked results: titles and snippets as plain one-line
    text (`one_line`), non-HTTP(S) URLs dropped, URLs de-duplicated (first one wins), ranks 1..n
    after filtering, at most `max_results`."""
    results: list[SearchResult] = []
    seen: set[str] = set()
    for title, url, snippet in raw:
        url = url.strip()
        if not is_http_url(url) or url in seen:
            continue
        seen.add(url)
        title, snippet = one_line(title) or url, one_line(snippet)
        results.append(SearchResult(title, url, snippet, len(results) + 1, provider))
        if max_results is not None and len(results) >= max_results:
            break
    return results
