"""What a search returns (`SearchResponse.to_dict` is the stable JSON shape documented in the
package README), and the small value types and helpers the providers share."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, cast
from urllib.parse import urlsplit

from pydantic import SecretStr

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


Secret = SecretStr  # a credential that does not print itself (repr and str show only stars)


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


def one_line(text: str) -> str:
    """`text` as plain text on one line: control and other unprintable characters (a terminal's
    escape sequences, bidirectional overrides) and runs of white space become one space."""
    return " ".join("".join(c if c.isprintable() else " " for c in text).split())


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


def as_object(value: object) -> dict[str, Any] | None:
    """`value` as a JSON object (str keys), or None when it is not one."""
    if isinstance(value, dict):
        return cast("dict[str, Any]", value)
    return None


def loads_json(text: str | bytes | bytearray) -> Any:
    """The JSON value `text` holds; ValueError when it is not JSON (UnicodeDecodeError included)
    or nested too deeply for Python's reader (RecursionError, which is no ValueError: ~1,000
    levels, 2,000 characters, fit in any answer, argument or request body). Every JSON reader of
    the agent reads through here."""
    try:
        return json.loads(text)
    except RecursionError:
        raise ValueError("JSON nested too deeply to read") from None


def loads_object(text: str | bytes | bytearray) -> dict[str, Any] | None:
    """The JSON object `text` holds, or None when it is not JSON or not an object."""
    try:
        return as_object(loads_json(text))
    except ValueError:  # UnicodeDecodeError included
        return None


def as_array(value: object) -> list[Any] | None:
    """`value` as a JSON array, or None when it is not one."""
    if isinstance(value, list):
        return cast("list[Any]", value)
    return None
