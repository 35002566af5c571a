"""Against the real services: opt-in only (`pytest -m live packages/enlace-agent`).

DuckDuckGo needs no key; the Brave test needs BRAVE_SEARCH_API_KEY in the environment and is skipped
without it. These can fail for reasons outside our code (a rate limit, a block): read the error.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from enlace_config.schema.agent import SearchConfig

from enlace_agent.search.errors import Blocked, RateLimited

pytestmark = pytest.mark.live


def test_live_duckduckgo(tmp_path: Path) -> None:
    from enlace_agent.search.chain import SearchChain

    chain = SearchChain(
        SearchConfig(providers=["duckduckgo"], state_file=str(tmp_path / "s.json")), env={}
    )
    try:
        response = chain.search("receta de tortilla de patatas")
    except Exception as exc:  # a block is a fact about today, not a bug: say so
        errors = getattr(exc, "errors", ())
        if errors and isinstance(errors[0], RateLimited | Blocked):
            pytest.skip(f"DuckDuckGo is rate-limiting or blocking this address: {errors[0]}")
        raise
    assert response.provider == "duckduckgo"
    assert response.results, "DuckDuckGo answered with zero results for a common query"
    assert all(r.url.startswith(("http://", "https://")) for r in response.results)


def test_live_brave(tmp_path: Path) -> None:
    key = os.environ.get("BRAVE_SEARCH_API_KEY")
    if not key:
        pytest.skip("BRAVE_SEARCH_API_KEY is not set")
    from enlace_agent.search.chain import SearchChain

    chain = SearchChain(
        SearchConfig(providers=["brave"], state_file=str(tmp_path / "s.json")),
        env={"BRAVE_SEARCH_API_KEY": key},
    )
    response = chain.search("receta de tortilla de patatas")
    assert response.provider == "brave" and response.results
