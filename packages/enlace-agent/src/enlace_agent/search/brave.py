"""Brave Search API (`/res/v1/web/search`): JSON with a key in the `X-Subscription-Token` header.

Results are `web.results[]` (title, url, description); descriptions carry `<strong>` markup and
HTML entities, stripped here. No `web` block (or null) is an answer with zero results. Errors come as
`{"type": "ErrorResponse", "error": {"code": ..., "detail": ...}}`: 422 SUBSCRIPTION_TOKEN_INVALID
(a refused key), 429 RATE_LIMITED (per second) or QUOTA_LIMITED (per month). The rate-limit headers
hold one comma-separated value per window, shortest first: `X-RateLimit-Remaining: 0, 1000`,
`X-RateLimit-Reset: 1, 1419704` (seconds until each window resets).

The key is a `Secret`; every message this module puts in an exception is redacted.
"""

from __future__ import annotations

import html
import re

from enlace_config.schema.agent import BraveConfig, HttpConfig

from enlace_agent.keys import SEARCH_KEYS
from enlace_agent.search.errors import (
    AuthenticationFailed,
    LayoutChanged,
    ProviderError,
    QuotaExhausted,
    RateLimited,
    Unavailable,
)
from enlace_agent.search.models import (
    SearchRequest,
    SearchResult,
    Secret,
    as_array,
    as_object,
    finalize,
    loads_object,
    redact,
)
from enlace_agent.search.transport import HttpResponse, fetch

NAME = "brave"
API_KEY_ENV = SEARCH_KEYS[NAME]
MAX_QUERY_CHARS = 400  # Brave documents 400 characters (and 50 words) as the longest query
MAX_COUNT = 20
TOKEN_HEADER = "X-Subscription-Token"
FRESHNESS = {"day": "pd", "week": "pw", "month": "pm", "year": "py"}

_TAG = re.compile(r"<[^>]*>")
# DuckDuckGo `kl` regions whose parts are not Brave's country / language codes.
_COUNTRY_FIXES = {"uk": "GB", "xa": "SA", "ct": "ES", "wt": "ALL"}
_LANG_FIXES = {"tzh": "zh-hant", "kr": "ko", "el": "el", "wt": ""}


def strip_markup(text: str) -> str:
    """`<strong>Hola</strong> &amp; adiós` → `Hola & adiós` (tags removed first, then entities)."""
    return html.unescape(_TAG.sub("", text))


def brave_locale(region: str, cfg: BraveConfig) -> tuple[str, str]:
    """(country, search_lang) for a DuckDuckGo-style region, unless the config fixes them."""
    country_part, _, lang_part = region.partition("-")
    country = cfg.country or _COUNTRY_FIXES.get(country_part, country_part.upper())
    lang = cfg.search_lang if cfg.search_lang is not None else _LANG_FIXES.get(lang_part, lang_part)
    return country, lang


def parse_brave_json(body: str | bytes, *, max_results: int | None = None) -> list[SearchResult]:
    """Results of a Brave web-search response; [] when it has no `web` block."""
    data = loads_object(body)
    if data is None:
        raise LayoutChanged(NAME, "response is not a JSON object")
    web = as_object(data["web"]) if data.get("web") is not None else {}
    if web is None:
        raise LayoutChanged(NAME, "`web` is not an object")
    items = as_array(web["results"]) if web.get("results") is not None else []
    if items is None:
        raise LayoutChanged(NAME, "`web.results` is not a list")
    triples = [
        (_text(item.get("title")), url, _text(item.get("description")))
        for item in (as_object(entry) or {} for entry in items)
        if isinstance(url := item.get("url"), str)
    ]
    if items and not triples:
        raise LayoutChanged(NAME, "`web.results` holds no usable result objects")
    return finalize(triples, provider=NAME, max_results=max_results)


def _text(value: object) -> str:
    return strip_markup(value) if isinstance(value, str) else ""


def _windows(value: str | None) -> list[float]:
    try:
        return [float(part) for part in value.split(",")] if value else []
    except ValueError:
        return []


def _error_code_and_detail(body: bytes) -> tuple[str, str]:
    error = as_object((loads_object(body) or {}).get("error")) or {}
    code, detail = error.get("code"), error.get("detail")
    return (code if isinstance(code, str) else "", detail if isinstance(detail, str) else "")


def classify_error(response: HttpResponse, secrets: list[str]) -> ProviderError:
    """The typed error for a non-200 Brave answer."""
    status = response.status
    code, detail = _error_code_and_detail(response.body)
    said = redact(f" {code}: {detail}" if code else "", secrets)[:300]
    if (
        status in (401, 403)
        or code.startswith("SUBSCRIPTION_TOKEN")
        or (status == 422 and "TOKEN" in code)
    ):
        return AuthenticationFailed(NAME, f"key refused (HTTP {status}{said})", status=status)
    if status == 429 or code in ("RATE_LIMITED", "QUOTA_LIMITED"):
        remaining = _windows(response.headers.get("x-ratelimit-remaining"))
        reset = _windows(response.headers.get("x-ratelimit-reset"))
        quota = code == "QUOTA_LIMITED" or (
            code != "RATE_LIMITED" and len(remaining) > 1 and remaining[-1] <= 0
        )
        if quota:
            retry = reset[-1] if reset else None
            return QuotaExhausted(
                NAME,
                f"monthly quota exhausted (HTTP {status}{said})",
                status=status,
                retry_after_s=retry,
            )
        retry = reset[0] if reset else None
        return RateLimited(
            NAME, f"rate limited (HTTP {status}{said})", status=status, retry_after_s=retry
        )
    if status >= 500:
        return Unavailable(NAME, f"server error HTTP {status}{said}", status=status)
    return Unavailable(NAME, f"unexpected HTTP status {status}{said}", status=status)


class BraveSearch:
    """Provider: one GET to the web-search endpoint."""

    name = NAME
    max_query_chars = MAX_QUERY_CHARS

    def __init__(
        self, cfg: BraveConfig, http: HttpConfig, api_key: Secret, user_agent: str
    ) -> None:
        self.cfg = cfg
        self.http = http
        self.api_key = api_key
        self.user_agent = user_agent

    def params(self, request: SearchRequest) -> dict[str, str]:
        country, lang = brave_locale(request.region, self.cfg)
        params = {
            "q": request.query,
            "count": str(min(request.max_results, MAX_COUNT)),
            "country": country,
            "safesearch": request.safe_search,
        }
        if lang:
            params["search_lang"] = lang
        if request.time_filter:
            params["freshness"] = FRESHNESS[request.time_filter]
        return params

    def search(self, request: SearchRequest) -> list[SearchResult]:
        secrets = [self.api_key.get_secret_value()]
        response = fetch(
            "GET",
            self.cfg.endpoint,
            provider=NAME,
            http=self.http,
            headers={
                "User-Agent": self.user_agent,
                "Accept": "application/json",
                TOKEN_HEADER: self.api_key.get_secret_value(),
            },
            params=self.params(request),
            sensitive_headers=[TOKEN_HEADER],
            secrets=secrets,
        )
        if response.status != 200:
            raise classify_error(response, secrets)
        try:
            return parse_brave_json(response.body, max_results=request.max_results)
        except ProviderError as exc:
            exc.status = response.status
            raise
