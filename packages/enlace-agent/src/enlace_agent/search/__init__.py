"""Web search for the family assistant: DuckDuckGo Lite first, Brave Search as fallback
(`search("receta de tortilla")`). `enlace-search` lives in `enlace_agent.cli.search`, so that its
`--help` starts without importing httpx, BeautifulSoup or pydantic. The search as the assistant's
tool (`SEARCH_TOOL`, `run_search_tool`) is in `enlace_agent.tools.search`."""

from enlace_agent.search.api import search
from enlace_agent.search.chain import Provider, SearchChain
from enlace_agent.search.errors import (
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
from enlace_agent.search.models import SearchRequest, SearchResponse, SearchResult

__all__ = [
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
    "search",
]
