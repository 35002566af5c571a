"""The chain's semantics with scripted providers: who answers, when it falls back, cool-downs."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from enlace_config.schema.agent import SearchConfig

from enlace_agent.search.chain import SearchChain, build_providers
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
    Unavailable,
)
from enlace_agent.search.models import SearchRequest, SearchResult
from enlace_agent.search.state import CooldownStore


class Scripted:
    """A provider that answers from a script: a list of results or an exception, per call."""

    def __init__(
        self, name: str, *outcomes: list[SearchResult] | ProviderError, max_query_chars: int = 499
    ) -> None:
        self.name = name
        self.max_query_chars = max_query_chars
        self.outcomes = list(outcomes)
        self.requests: list[SearchRequest] = []

    def search(self, request: SearchRequest) -> list[SearchResult]:
        self.requests.append(request)
        outcome = self.outcomes.pop(0) if len(self.outcomes) > 1 else self.outcomes[0]
        if isinstance(outcome, ProviderError):
            raise outcome
        return outcome


def result(provider: str, n: int = 1) -> list[SearchResult]:
    return [
        SearchResult(f"t{i}", f"https://{provider}.example/{i}", "s", i, provider)
        for i in range(1, n + 1)
    ]


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def chain(
    *providers: Scripted, tmp_path: Path, clock: Clock | None = None, **cfg: object
) -> SearchChain:
    config = SearchConfig.model_validate({"state_file": str(tmp_path / "state.json"), **cfg})
    return SearchChain(config, providers=providers, clock=clock or Clock())


def test_primary_answer_is_used_and_recorded(tmp_path: Path) -> None:
    ddg, brave = Scripted("duckduckgo", result("duckduckgo", 3)), Scripted("brave", result("brave"))
    response = chain(ddg, brave, tmp_path=tmp_path).search("  receta   de tortilla ")
    assert response.provider == "duckduckgo"
    assert response.query == "receta de tortilla"
    assert len(response.results) == 3 and response.skipped == ()
    assert brave.requests == []
    assert ddg.requests[0].region == "es-es" and ddg.requests[0].safe_search == "moderate"


def test_zero_results_do_not_fall_back(tmp_path: Path) -> None:
    ddg, brave = Scripted("duckduckgo", []), Scripted("brave", result("brave"))
    response = chain(ddg, brave, tmp_path=tmp_path).search("xyzzy")
    assert response.provider == "duckduckgo"
    assert response.results == ()
    assert brave.requests == []


@pytest.mark.parametrize(
    "error",
    [
        RateLimited("duckduckgo", "HTTP 429", status=429),
        Blocked("duckduckgo", "challenge", status=202),
        Unavailable("duckduckgo", "HTTP 503", status=503),
        ProviderTimeout("duckduckgo", "timed out"),
        ResponseTooLarge("duckduckgo", "too big"),
        LayoutChanged("duckduckgo", "no result links"),
        AuthenticationFailed("duckduckgo", "refused"),
        QuotaExhausted("duckduckgo", "monthly"),
    ],
    ids=lambda e: type(e).__name__,
)
def test_each_error_falls_back_with_its_cause_recorded(
    tmp_path: Path, error: ProviderError
) -> None:
    ddg, brave = Scripted("duckduckgo", error), Scripted("brave", result("brave", 2))
    response = chain(ddg, brave, tmp_path=tmp_path).search("q")
    assert response.provider == "brave"
    assert len(response.results) == 2
    assert [(s.provider, s.error) for s in response.skipped] == [("duckduckgo", error)]
    assert response.to_dict()["skipped"] == [
        {"provider": "duckduckgo", "error": error.kind, "message": error.detail}
    ]


def test_all_failing_lists_every_cause(tmp_path: Path) -> None:
    e1 = Blocked("duckduckgo", "challenge", status=202)
    e2 = Unavailable("brave", "server error HTTP 500", status=500)
    with pytest.raises(AllProvidersFailed) as info:
        chain(Scripted("duckduckgo", e1), Scripted("brave", e2), tmp_path=tmp_path).search("q")
    assert info.value.errors == (e1, e2)
    assert "duckduckgo: challenge" in str(info.value) and "brave: server error HTTP 500" in str(
        info.value
    )


def test_missing_brave_key_fails_at_construction() -> None:
    with pytest.raises(MissingCredential) as info:
        SearchChain(SearchConfig(), env={})
    assert info.value.env_var == "BRAVE_SEARCH_API_KEY"
    assert "BRAVE_SEARCH_API_KEY" in str(info.value)
    # blank counts as missing
    with pytest.raises(MissingCredential):
        SearchChain(SearchConfig(), env={"BRAVE_SEARCH_API_KEY": "  "})


def test_primary_alone_needs_no_key(tmp_path: Path) -> None:
    config = SearchConfig(providers=["duckduckgo"], state_file=str(tmp_path / "s.json"))
    providers = build_providers(config, {})
    assert [p.name for p in providers] == ["duckduckgo"]
    assert [p.name for p in build_providers(SearchConfig(), {"BRAVE_SEARCH_API_KEY": "k"})] == [
        "duckduckgo",
        "brave",
    ]


def test_the_key_is_not_in_the_providers_repr() -> None:
    providers = build_providers(SearchConfig(), {"BRAVE_SEARCH_API_KEY": "secret-value-123"})
    brave = providers[1]
    assert "secret-value-123" not in repr(vars(brave))


def test_query_checks(tmp_path: Path) -> None:
    c = chain(
        Scripted("duckduckgo", [], max_query_chars=499),
        Scripted("brave", [], max_query_chars=400),
        tmp_path=tmp_path,
    )
    assert c.max_query_chars == 400
    with pytest.raises(QueryError, match="empty"):
        c.search("   ")
    with pytest.raises(QueryError, match="401 characters; the longest brave accepts is 400"):
        c.search("a" * 401)
    assert c.search("a" * 400).provider == "duckduckgo"  # exactly the limit is fine, and not cut
    with pytest.raises(QueryError):
        c.search("q", max_results=21)


def test_cooldown_after_rate_limit_skips_the_primary_then_expires(tmp_path: Path) -> None:
    clock = Clock()
    ddg = Scripted(
        "duckduckgo", Blocked("duckduckgo", "challenge", status=202), result("duckduckgo")
    )
    brave = Scripted("brave", result("brave"))
    c = chain(ddg, brave, tmp_path=tmp_path, clock=clock, cooldown_s=600)
    assert c.search("q").provider == "brave"
    assert len(ddg.requests) == 1

    clock.now += 300  # still cooling down: DuckDuckGo is not asked at all
    response = c.search("q")
    assert response.provider == "brave"
    assert len(ddg.requests) == 1
    skipped = response.skipped[0]
    assert isinstance(skipped.error, CoolingDown)
    assert skipped.error.cause == "blocked"
    assert skipped.to_dict()["error"] == "cooling_down"
    assert "en pausa 5 min" in skipped.error.describe_es()

    clock.now += 301  # cool-down over
    assert c.search("q").provider == "duckduckgo"
    assert len(ddg.requests) == 2


def test_cooldown_survives_a_new_chain(tmp_path: Path) -> None:
    """The state file is what a second CLI run reads."""
    clock = Clock()
    first = chain(
        Scripted("duckduckgo", RateLimited("duckduckgo", "HTTP 429")),
        Scripted("brave", result("brave")),
        tmp_path=tmp_path,
        clock=clock,
    )
    first.search("q")
    data = json.loads((tmp_path / "state.json").read_text())
    assert data["cooldowns"]["duckduckgo"]["cause"] == "rate_limited"
    assert data["cooldowns"]["duckduckgo"]["until"] == clock.now + 600

    ddg2 = Scripted("duckduckgo", result("duckduckgo"))
    second = chain(ddg2, Scripted("brave", result("brave")), tmp_path=tmp_path, clock=clock)
    assert second.search("q").provider == "brave"
    assert ddg2.requests == []


def test_provider_retry_hint_sets_the_cooldown(tmp_path: Path) -> None:
    clock = Clock()
    brave = Scripted(
        "brave", RateLimited("brave", "per second", retry_after_s=1.0), result("brave")
    )
    c = chain(
        brave,
        Scripted("duckduckgo", result("duckduckgo")),
        tmp_path=tmp_path,
        clock=clock,
        providers=["brave", "duckduckgo"],
    )
    assert c.search("q").provider == "duckduckgo"
    clock.now += 1.5
    assert c.search("q").provider == "brave"


@pytest.mark.parametrize(
    "error",
    [
        Unavailable("duckduckgo", "x"),
        LayoutChanged("duckduckgo", "x"),
        ProviderTimeout("duckduckgo", "x"),
    ],
    ids=lambda e: type(e).__name__,
)
def test_other_errors_start_no_cooldown(tmp_path: Path, error: ProviderError) -> None:
    ddg = Scripted("duckduckgo", error, result("duckduckgo"))
    c = chain(ddg, Scripted("brave", result("brave")), tmp_path=tmp_path)
    assert c.search("q").provider == "brave"
    assert c.search("q").provider == "duckduckgo"


def test_cooldown_zero_disables_it(tmp_path: Path) -> None:
    ddg = Scripted("duckduckgo", Blocked("duckduckgo", "x"), result("duckduckgo"))
    c = chain(ddg, Scripted("brave", result("brave")), tmp_path=tmp_path, cooldown_s=0)
    assert c.search("q").provider == "brave"
    assert c.search("q").provider == "duckduckgo"


def test_only_provider_cooling_down_fails_with_the_reason(tmp_path: Path) -> None:
    ddg = Scripted("duckduckgo", Blocked("duckduckgo", "x"))
    c = chain(ddg, tmp_path=tmp_path, providers=["duckduckgo"])
    with pytest.raises(AllProvidersFailed):
        c.search("q")
    with pytest.raises(AllProvidersFailed) as info:
        c.search("q")
    assert isinstance(info.value.errors[0], CoolingDown)
    assert len(ddg.requests) == 1


@pytest.mark.parametrize(
    "content",
    [
        "{not json",
        "[]",
        '{"cooldowns": {"duckduckgo": {"until": "soon"}}}',
        '{"cooldowns": 3}',
        "\x00\xff",
        b"\x00\xff\xfe not UTF-8",  # bytes no UTF-8 decoder accepts
    ],
)
def test_corrupt_state_never_stops_a_search(tmp_path: Path, content: str | bytes) -> None:
    data = content if isinstance(content, bytes) else content.encode("utf-8")
    (tmp_path / "state.json").write_bytes(data)
    ddg = Scripted("duckduckgo", Blocked("duckduckgo", "x"), result("duckduckgo"))
    c = chain(ddg, Scripted("brave", result("brave")), tmp_path=tmp_path)
    assert c.search("q").provider == "brave"
    # ... and the file is rewritten in good shape
    assert "duckduckgo" in json.loads((tmp_path / "state.json").read_text())["cooldowns"]


@pytest.mark.skipif(os.geteuid() == 0, reason="root ignores file permissions")
def test_unwritable_state_never_stops_a_search(tmp_path: Path) -> None:
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        config = SearchConfig(state_file=str(locked / "sub" / "state.json"))
        ddg = Scripted("duckduckgo", Blocked("duckduckgo", "x"))
        c = SearchChain(config, providers=[ddg, Scripted("brave", result("brave"))])
        assert c.search("q").provider == "brave"
        assert c.search("q").provider == "brave"
    finally:
        locked.chmod(0o700)


def test_state_under_a_regular_file_never_stops_a_search(tmp_path: Path) -> None:
    """Unwritable even for root: the state's folder would have to be inside a file."""
    (tmp_path / "file").write_text("x")
    config = SearchConfig(state_file=str(tmp_path / "file" / "state.json"))
    ddg = Scripted("duckduckgo", Blocked("duckduckgo", "x"), result("duckduckgo"))
    c = SearchChain(config, providers=[ddg, Scripted("brave", result("brave"))])
    assert c.search("q").provider == "brave"
    assert c.search("q").provider == "duckduckgo"  # nothing remembered, nothing broken


def test_state_path_is_a_directory(tmp_path: Path) -> None:
    (tmp_path / "dir.json").mkdir()
    config = SearchConfig(state_file=str(tmp_path / "dir.json"))
    ddg = Scripted("duckduckgo", RateLimited("duckduckgo", "x"), result("duckduckgo"))
    c = SearchChain(config, providers=[ddg, Scripted("brave", result("brave"))])
    assert c.search("q").provider == "brave"


def test_default_state_file_is_under_xdg_cache_home(tmp_path: Path) -> None:
    env = {"XDG_CACHE_HOME": str(tmp_path / "cache"), "BRAVE_SEARCH_API_KEY": "k"}
    c = SearchChain(SearchConfig(), env=env)
    assert isinstance(c.state, CooldownStore)
    assert c.state.path == tmp_path / "cache" / "enlace" / "search-state.json"
