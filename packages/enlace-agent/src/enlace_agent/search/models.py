"""What a search returns, and the small value types the providers share.

The JSON shape (`SearchResponse.to_dict`) is a stable interface, documented in the package README:

    {"query": str, "provider": str,
     "results": [{"title": str, "url": str, "snippet": str, "rank": int}, ...],
     "skipped": [{"provider": str, "error": str, "message": str}, ...],
     "elapsed_s": float}
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, cast
from urllib.parse import urlsplit

from enlace_agent.search.errors import ProviderError


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


class Secret:
    """A credential that does not print itself: repr/str show only that it is set."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return "Secret('********')"

    __str__ = __repr__


REDACTED = "[REDACTED]"


def redact(text: str, secrets: Iterable[str]) -> str:
    """Replace every secret in `text` (also its URL-encoded form) by a fixed marker."""
    from urllib.parse import quote, quote_plus

    for secret in secrets:
        if len(secret) < 4:  # too short to search for without mangling the text
            continue
        for form in {secret, quote(secret, safe=""), quote_plus(secret)}:
            text = text.replace(form, REDACTED)
    return text


_WS = re.compile(r"\s+")


def clean_text(text: str) -> str:
    """Collapse runs of whitespace (non-breaking spaces included) into single spaces."""
    return _WS.sub(" ", text).strip()


def is_http_url(url: str) -> bool:
    try:
        parts = urlsplit(url)
    except ValueError:
        return False
    return parts.scheme in ("http", "https") and bool(parts.hostname)


def finalize(
    raw: Iterable[tuple[str, str, str]], *, provider: str, max_results: int | None
) -> list[SearchResult]:
    """(title, url, snippet) triples → ranked results: non-HTTP(S) URLs dropped, URLs de-duplicated
    (first one wins), ranks 1..n after filtering, at most `max_results`."""
    results: list[SearchResult] = []
    seen: set[str] = set()
    for title, url, snippet in raw:
        url = url.strip()
        if not is_http_url(url) or url in seen:
            continue
        seen.add(url)
        results.append(
            SearchResult(
                title=clean_text(title) or url,
                url=url,
                snippet=clean_text(snippet),
                rank=len(results) + 1,
                provider=provider,
            )
        )
        if max_results is not None and len(results) >= max_results:
            break
    return results


def as_object(value: object) -> dict[str, Any] | None:
    """`value` as a JSON object (str keys), or None when it is not one."""
    if isinstance(value, dict):
        return cast("dict[str, Any]", value)
    return None


def loads_object(text: str | bytes) -> dict[str, Any] | None:
    """The JSON object `text` holds, or None when it is not JSON or not an object."""
    try:
        return as_object(json.loads(text))
    except ValueError:  # UnicodeDecodeError included
        return None


def as_array(value: object) -> list[Any] | None:
    """`value` as a JSON array, or None when it is not one."""
    if isinstance(value, list):
        return cast("list[Any]", value)
    return None
