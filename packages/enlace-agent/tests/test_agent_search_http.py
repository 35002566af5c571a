"""The providers against a real HTTP server on 127.0.0.1: statuses, timeouts, size cap, redirects,
and the key never leaking into what an error says."""

from __future__ import annotations

import json
import logging
import time
import traceback
from pathlib import Path
from typing import Any

import pytest
from enlace_config.schema.agent import BraveConfig, HttpConfig, SearchConfig

from enlace_agent.search.brave import BraveSearch
from enlace_agent.search.chain import SearchChain
from enlace_agent.search.duckduckgo import DuckDuckGoLite
from enlace_agent.search.errors import (
    AllProvidersFailed,
    AuthenticationFailed,
    Blocked,
    LayoutChanged,
    ProviderError,
    ProviderTimeout,
    QuotaExhausted,
    RateLimited,
    ResponseTooLarge,
    Unavailable,
)
from enlace_agent.search.models import SearchRequest, Secret

FIXTURES = Path(__file__).parent / "fixtures"
# Generous limits where an answer is expected (a loaded CI machine must not turn them into
# timeouts); SHORT where the test is about a timeout.
HTTP = HttpConfig(
    connect_timeout_s=5.0, read_timeout_s=5.0, total_timeout_s=10.0, max_response_bytes=200_000
)
SHORT = HttpConfig(
    connect_timeout_s=1.0, read_timeout_s=0.5, total_timeout_s=1.0, max_response_bytes=200_000
)
UA = "enlace-agent-tests/0"
REQUEST = SearchRequest(
    query="receta de tortilla", max_results=10, region="es-es", safe_search="moderate"
)


def page(name: str) -> str:
    return (FIXTURES / name).read_text(encoding="utf-8")


def ddg(url: str, http: HttpConfig = HTTP) -> DuckDuckGoLite:
    return DuckDuckGoLite(url, http, UA)


def brave(url: str, key: str, http: HttpConfig = HTTP) -> BraveSearch:
    return BraveSearch(BraveConfig(endpoint=url), http, Secret(key), UA)


# --- DuckDuckGo over HTTP ----------------------------------------------------------------------


def test_ddg_posts_the_form_and_parses(http_server: Any) -> None:
    url = http_server.reply("/lite/", 200, page("ddg_lite_results_es.html"))
    results = ddg(url).search(
        SearchRequest(
            query="receta de tortilla",
            max_results=2,
            region="es-es",
            safe_search="moderate",
            time_filter="week",
        )
    )
    assert [r.rank for r in results] == [1, 2]
    sent = http_server.requests[0]
    assert sent.method == "POST"
    form = dict(pair.split("=", 1) for pair in sent.body.decode().split("&"))
    assert form == {"q": "receta+de+tortilla", "kl": "es-es", "kp": "-1", "df": "w"}
    assert sent.headers["User-Agent"] == UA


def test_ddg_safe_search_levels(http_server: Any) -> None:
    url = http_server.reply("/lite/", 200, page("ddg_lite_no_results.html"))
    for level, kp in (("strict", "1"), ("off", "-2")):
        ddg(url).search(SearchRequest(query="q", max_results=5, region="mx-es", safe_search=level))
        assert f"kp={kp}" in http_server.requests[-1].body.decode()
        assert "kl=mx-es" in http_server.requests[-1].body.decode()


def test_ddg_no_results_page_is_empty_answer(http_server: Any) -> None:
    url = http_server.reply("/lite/", 200, page("ddg_lite_no_results.html"))
    assert ddg(url).search(REQUEST) == []


@pytest.mark.parametrize("status", [202, 200])
def test_ddg_challenge_is_blocked_whatever_the_status(http_server: Any, status: int) -> None:
    url = http_server.reply("/lite/", status, page("ddg_lite_challenge.html"))
    with pytest.raises(Blocked) as info:
        ddg(url).search(REQUEST)
    assert info.value.status == status


@pytest.mark.parametrize("status", [202, 200])
def test_ddg_real_challenge_is_blocked_whatever_the_status(
    http_server: Any, search_data: Path, status: int
) -> None:
    body = (search_data / "ddg_html_anomaly_challenge_2026-06-19.html").read_bytes()
    url = http_server.reply("/lite/", status, body)
    with pytest.raises(Blocked):
        ddg(url).search(REQUEST)


def test_ddg_real_results_page_over_http(http_server: Any, search_data: Path) -> None:
    body = (search_data / "ddg_lite_get_rust-programming_2026-04-14.html").read_bytes()
    url = http_server.reply("/lite/", 200, body)
    assert len(ddg(url).search(REQUEST)) == 10


@pytest.mark.parametrize(
    ("status", "error"),
    [
        (202, RateLimited),
        (429, RateLimited),
        (403, Blocked),
        (500, Unavailable),
        (503, Unavailable),
        (404, Unavailable),
    ],
)
def test_ddg_statuses(http_server: Any, status: int, error: type[ProviderError]) -> None:
    url = http_server.reply("/lite/", status, "<html><body>nope</body></html>")
    with pytest.raises(error) as info:
        ddg(url).search(REQUEST)
    assert info.value.status == status
    assert type(info.value) is error


def test_ddg_unrelated_200_is_layout_changed(http_server: Any) -> None:
    url = http_server.reply("/lite/", 200, page("unrelated.html"))
    with pytest.raises(LayoutChanged):
        ddg(url).search(REQUEST)


# --- transport: timeouts, refused, endless, oversized, redirects ----------------------------------


def test_connection_refused_is_unavailable(refused_url: str) -> None:
    with pytest.raises(Unavailable) as info:
        ddg(refused_url).search(REQUEST)
    assert type(info.value) is Unavailable
    assert "ConnectError" in info.value.detail


def test_no_answer_hits_the_read_timeout(http_server: Any) -> None:
    url = http_server.silent("/lite/")
    started = time.monotonic()
    with pytest.raises(ProviderTimeout):
        ddg(url, SHORT).search(REQUEST)
    assert time.monotonic() - started < 10  # a hang would be caught by this, not a speed claim


def test_endless_body_is_cut_at_the_total_deadline(http_server: Any) -> None:
    # chunks arrive every 20 ms, so the read timeout never fires: only the deadline can stop it
    url = http_server.endless("/lite/")
    http = HttpConfig(
        connect_timeout_s=1.0,
        read_timeout_s=0.5,
        total_timeout_s=1.0,
        max_response_bytes=50_000_000,
    )
    started = time.monotonic()
    with pytest.raises(ProviderTimeout):
        ddg(url, http).search(REQUEST)
    assert time.monotonic() - started < 10


def test_slow_trickle_is_cut_by_the_watchdog(http_server: Any) -> None:
    # a chunk every 0.4 s: under the 0.5 s read timeout, each one later than the last
    url = http_server.endless("/lite/", pause=0.4)
    http = HttpConfig(
        connect_timeout_s=1.0,
        read_timeout_s=0.5,
        total_timeout_s=1.0,
        max_response_bytes=50_000_000,
    )
    with pytest.raises(ProviderTimeout):
        ddg(url, http).search(REQUEST)


def test_endless_body_is_cut_at_the_size_cap(http_server: Any) -> None:
    url = http_server.endless("/lite/", pause=0.0)
    http = HttpConfig(
        connect_timeout_s=1.0, read_timeout_s=1.0, total_timeout_s=5.0, max_response_bytes=20_000
    )
    with pytest.raises(ResponseTooLarge):
        ddg(url, http).search(REQUEST)


def test_oversized_body_with_content_length_is_refused(http_server: Any) -> None:
    url = http_server.reply("/lite/", 200, b"<html>" + b"x" * 300_000 + b"</html>")
    with pytest.raises(ResponseTooLarge):
        ddg(url).search(REQUEST)


def test_redirects_are_followed_up_to_the_limit(http_server: Any) -> None:
    target = http_server.reply("/lite/", 200, page("ddg_lite_no_results.html"))
    http_server.reply("/r1", 302, "", headers={"Location": "/lite/"})
    assert ddg(http_server.url("/r1")).search(REQUEST) == []
    assert target.endswith("/lite/")
    for i in range(5):
        http_server.reply(f"/loop{i}", 302, "", headers={"Location": f"/loop{i + 1}"})
    http_server.reply("/loop5", 200, page("ddg_lite_no_results.html"))
    with pytest.raises(Unavailable, match="more than 3 redirects"):
        ddg(http_server.url("/loop0")).search(REQUEST)
    no_redirects = HttpConfig(max_redirects=0)
    with pytest.raises(Unavailable, match="more than 0 redirects"):
        ddg(http_server.url("/r1"), no_redirects).search(REQUEST)


# --- Brave over HTTP -----------------------------------------------------------------------------

BRAVE_OK = {
    "type": "search",
    "web": {
        "type": "search",
        "results": [
            {
                "title": "<strong>Hola</strong>",
                "url": "https://hola.example/",
                "description": "a &amp; b",
            }
        ],
    },
}


def test_brave_request_shape_and_answer(http_server: Any, fake_key: str) -> None:
    url = http_server.reply_json("/brave", 200, BRAVE_OK)
    results = brave(url, fake_key).search(
        SearchRequest(
            query="hola mundo",
            max_results=50,
            region="es-es",
            safe_search="moderate",
            time_filter="month",
        )
    )
    assert [(r.title, r.url, r.snippet) for r in results] == [
        ("Hola", "https://hola.example/", "a & b")
    ]
    sent = http_server.requests[0]
    assert sent.method == "GET"
    assert sent.headers["X-Subscription-Token"] == fake_key
    assert sent.headers["Accept"] == "application/json"
    query = dict(p.split("=", 1) for p in sent.path.split("?", 1)[1].split("&"))
    assert query == {
        "q": "hola+mundo",
        "count": "20",
        "country": "ES",
        "safesearch": "moderate",
        "search_lang": "es",
        "freshness": "pm",
    }


def test_brave_without_web_is_zero_results(http_server: Any, fake_key: str) -> None:
    url = http_server.reply_json("/brave", 200, {"type": "search", "query": {"original": "x"}})
    assert brave(url, fake_key).search(REQUEST) == []


def brave_error(code: str, status: int, detail: str = "") -> dict[str, Any]:
    return {
        "type": "ErrorResponse",
        "error": {"id": "abc", "status": status, "code": code, "detail": detail, "meta": {}},
        "time": 1,
    }


def test_brave_422_invalid_token_is_authentication(http_server: Any, fake_key: str) -> None:
    url = http_server.reply_json(
        "/brave",
        422,
        brave_error(
            "SUBSCRIPTION_TOKEN_INVALID", 422, "The provided subscription token is invalid."
        ),
    )
    with pytest.raises(AuthenticationFailed) as info:
        brave(url, fake_key).search(REQUEST)
    assert info.value.status == 422 and "SUBSCRIPTION_TOKEN_INVALID" in info.value.detail


def test_brave_429_rate_limited_per_second(http_server: Any, fake_key: str) -> None:
    url = http_server.reply_json(
        "/brave",
        429,
        brave_error("RATE_LIMITED", 429, "Request rate limit exceeded for plan."),
        headers={
            "X-RateLimit-Limit": "1, 15000",
            "X-RateLimit-Remaining": "0, 14000",
            "X-RateLimit-Reset": "1, 1419704",
        },
    )
    with pytest.raises(RateLimited) as info:
        brave(url, fake_key).search(REQUEST)
    assert type(info.value) is RateLimited
    assert info.value.retry_after_s == 1.0


def test_brave_429_quota_limited_per_month(http_server: Any, fake_key: str) -> None:
    url = http_server.reply_json(
        "/brave",
        429,
        brave_error("QUOTA_LIMITED", 429, "Request quota limit exceeded for plan."),
        headers={
            "X-RateLimit-Limit": "1, 2000",
            "X-RateLimit-Remaining": "1, 0",
            "X-RateLimit-Reset": "1, 86400",
        },
    )
    with pytest.raises(QuotaExhausted) as info:
        brave(url, fake_key).search(REQUEST)
    assert info.value.retry_after_s == 86400.0


def test_brave_429_told_apart_by_headers_alone(http_server: Any, fake_key: str) -> None:
    url = http_server.reply(
        "/brave", 429, "Too Many Requests", "text/plain", headers={"X-RateLimit-Remaining": "1, 0"}
    )
    with pytest.raises(QuotaExhausted):
        brave(url, fake_key).search(REQUEST)
    url = http_server.reply(
        "/brave", 429, "Too Many Requests", "text/plain", headers={"X-RateLimit-Remaining": "0, 10"}
    )
    with pytest.raises(RateLimited):
        brave(url, fake_key).search(REQUEST)


@pytest.mark.parametrize(
    ("status", "error"),
    [(500, Unavailable), (502, Unavailable), (400, Unavailable), (401, AuthenticationFailed)],
)
def test_brave_other_statuses(
    http_server: Any, fake_key: str, status: int, error: type[ProviderError]
) -> None:
    url = http_server.reply("/brave", status, "oops", "text/plain")
    with pytest.raises(error):
        brave(url, fake_key).search(REQUEST)


def test_brave_200_garbage_is_layout_changed(http_server: Any, fake_key: str) -> None:
    url = http_server.reply("/brave", 200, "<html>maintenance</html>")
    with pytest.raises(LayoutChanged):
        brave(url, fake_key).search(REQUEST)


def test_brave_key_is_not_sent_across_origins_on_redirect(
    http_server: Any, other_server: Any, fake_key: str
) -> None:
    elsewhere = other_server.reply_json("/brave", 200, BRAVE_OK)
    http_server.reply("/brave", 302, "", headers={"Location": elsewhere})
    assert len(brave(http_server.url("/brave"), fake_key).search(REQUEST)) == 1
    assert http_server.requests[0].headers.get("X-Subscription-Token") == fake_key
    assert "X-Subscription-Token" not in other_server.requests[0].headers
    # same origin keeps it
    http_server.reply("/moved", 301, "", headers={"Location": "/brave2"})
    http_server.reply_json("/brave2", 200, BRAVE_OK)
    brave(http_server.url("/moved"), fake_key).search(REQUEST)
    assert http_server.requests[-1].headers.get("X-Subscription-Token") == fake_key


# --- the key never leaks ---------------------------------------------------------------------------


def echo_key_handler(status: int, code: str) -> Any:
    """A hostile/buggy server that repeats the token it received in its error body."""

    def handler(h: Any) -> None:
        token = h.headers.get("X-Subscription-Token", "")
        body = json.dumps(brave_error(code, status, f"token {token} rejected; see {token}"))
        h.send_response(status)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        h.wfile.write(body.encode())

    return handler


@pytest.mark.parametrize(
    "route",
    ["422", "429", "429q", "500", "garbage", "timeout", "endless", "refused"],
)
def test_the_key_never_appears_in_errors_or_logs(
    http_server: Any,
    refused_url: str,
    fake_key: str,
    route: str,
    caplog: pytest.LogCaptureFixture,
    tmp_path: Path,
) -> None:
    handlers = {
        "422": echo_key_handler(422, "SUBSCRIPTION_TOKEN_INVALID"),
        "429": echo_key_handler(429, "RATE_LIMITED"),
        "429q": echo_key_handler(429, "QUOTA_LIMITED"),
        "500": echo_key_handler(500, "INTERNAL"),
    }
    if route in handlers:
        url = http_server.handle("/brave", handlers[route])
    elif route == "garbage":
        url = http_server.handle("/brave", lambda h: _echo_plain(h, 200))
    elif route == "timeout":
        url = http_server.silent("/brave")
    elif route == "endless":
        url = http_server.endless("/brave")
    else:
        url = refused_url
    ddg_url = http_server.reply("/lite/", 202, page("ddg_lite_challenge.html"))
    config = SearchConfig.model_validate(
        {
            "duckduckgo": {"endpoint": ddg_url},
            "brave": {"endpoint": url},
            "http": (SHORT if route in ("timeout", "endless") else HTTP).model_dump(),
            "state_file": str(tmp_path / "state.json"),
        }
    )
    caplog.set_level(logging.DEBUG)
    chain = SearchChain(config, env={"BRAVE_SEARCH_API_KEY": fake_key})
    with pytest.raises(AllProvidersFailed) as info:
        chain.search("receta de tortilla")
    texts = [
        str(info.value),
        repr(info.value),
        caplog.text,
        "".join(traceback.format_exception(info.value)),
    ]
    for e in info.value.errors:
        texts += [str(e), repr(e), e.detail, e.describe_es(), repr(vars(e))]
    for text in texts:
        assert fake_key not in text
    assert route == "refused" or http_server.requests  # the server really was asked


def _echo_plain(h: Any, status: int) -> None:
    token = h.headers.get("X-Subscription-Token", "")
    body = f"<html>unexpected {token}</html>".encode()
    h.send_response(status)
    h.send_header("Content-Type", "text/html")
    h.send_header("Content-Length", str(len(body)))
    h.end_headers()
    h.wfile.write(body)
