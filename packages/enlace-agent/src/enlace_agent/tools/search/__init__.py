"""Web search for the family assistant: DuckDuckGo Lite first, Brave Search as fallback.

    from enlace_agent.tools.search import search
    response = search("receta de tortilla")
    response.provider, [r.url for r in response.results]

The names below are imported lazily, so that `enlace-search` starts without importing httpx,
BeautifulSoup or pydantic before it needs them.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from enlace_agent.tools.search.api import search
    from enlace_agent.tools.search.chain import Provider, SearchChain
    from enlace_agent.tools.search.errors import (
        AllProvidersFailed,
        AuthenticationFailed,
        Blocked,
        CoolingDown,
        LayoutChanged,
        MissingCredential,
        ProviderError,
        ProviderTimeout,
        QueryError,
        QuotaExhausted,
        RateLimited,
        ResponseTooLarge,
        SearchConfigError,
        SearchError,
        Unavailable,
    )
    from enlace_agent.tools.search.models import SearchRequest, SearchResponse, SearchResult
    from enlace_agent.tools.search.tool import SEARCH_TOOL, format_for_model, run_search_tool

_LAZY = {
    "search": "api",
    "Provider": "chain",
    "SearchChain": "chain",
    "SearchRequest": "models",
    "SearchResponse": "models",
    "SearchResult": "models",
    "SEARCH_TOOL": "tool",
    "format_for_model": "tool",
    "run_search_tool": "tool",
    **{
        name: "errors"
        for name in (
            "AllProvidersFailed",
            "AuthenticationFailed",
            "Blocked",
            "CoolingDown",
            "LayoutChanged",
            "MissingCredential",
            "ProviderError",
            "ProviderTimeout",
            "QueryError",
            "QuotaExhausted",
            "RateLimited",
            "ResponseTooLarge",
            "SearchConfigError",
            "SearchError",
            "Unavailable",
        )
    },
}

__all__ = [
    "SEARCH_TOOL",
    "AllProvidersFailed",
    "AuthenticationFailed",
    "Blocked",
    "CoolingDown",
    "LayoutChanged",
    "MissingCredential",
    "Provider",
    "ProviderError",
    "ProviderTimeout",
    "QueryError",
    "QuotaExhausted",
    "RateLimited",
    "ResponseTooLarge",
    "SearchChain",
    "SearchConfigError",
    "SearchError",
    "SearchRequest",
    "SearchResponse",
    "SearchResult",
    "Unavailable",
    "format_for_model",
    "run_search_tool",
    "search",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value
