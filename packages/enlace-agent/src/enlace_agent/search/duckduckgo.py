"""DuckDuckGo Lite: a POSTed form and an HTML page of table rows (no key, no contract).

Known structure of a results page (`lite.duckduckgo.com/lite/`): each result is a group of table
rows — the title link `a.result-link`, then a `td.result-snippet`, then a `span.link-text` with the
displayed URL, then a spacer row. Sponsored groups carry `tr.result-sponsored` on their rows (their
"more info" link is also an `a.result-link`, so ads are filtered by row, not by link class). Links
come wrapped as `//duckduckgo.com/l/?uddg=<url-encoded target>&rut=...`.

Three outcomes besides results, decided from the body whatever the HTTP status:
- the bot challenge (a form posting to `anomaly.js`), served with 202 and sometimes 200 → `Blocked`;
- the explicit "No results." / "No more results." marker → an empty answer;
- neither results nor marker (or a page cut short) → `LayoutChanged`, never a silent empty list.
"""

from __future__ import annotations

import re
from urllib.parse import parse_qs, urljoin, urlsplit

from bs4 import BeautifulSoup, Tag
from enlace_config.schema.agent import HttpConfig

from enlace_agent.search.errors import (
    Blocked,
    LayoutChanged,
    ProviderError,
    RateLimited,
    Unavailable,
)
from enlace_agent.search.models import SearchRequest, SearchResult, finalize
from enlace_agent.search.transport import fetch

NAME = "duckduckgo"
MAX_QUERY_CHARS = 499  # DuckDuckGo refuses queries of 500 characters and more

SAFE_SEARCH_KP = {"strict": "1", "moderate": "-1", "off": "-2"}
TIME_FILTER_DF = {"day": "d", "week": "w", "month": "m", "year": "y"}

_NO_RESULTS = re.compile(r"^\s*no\s+(more\s+)?results\.?\s*$", re.IGNORECASE)
_AD_HOSTS = ("duckduckgo.com", "bing.com")
_AD_PATHS = ("/y.js", "/aclick")


def is_challenge(soup: BeautifulSoup) -> bool:
    """DuckDuckGo's bot challenge: a form whose action points at anomaly.js."""
    anomaly = soup.find("form", action=re.compile(r"anomaly\.js"))
    return anomaly is not None or soup.find("form", id="challenge-form") is not None


def _has_no_results_marker(soup: BeautifulSoup) -> bool:
    body = soup.body if soup.body is not None else soup
    cells = body.find_all(["td", "div", "p", "span"])
    return any(_NO_RESULTS.match(cell.get_text(" ")) for cell in cells)


def unwrap_link(href: str) -> str | None:
    """The real target of a result link: `//duckduckgo.com/l/?uddg=...` decoded once; ad clicks
    (`duckduckgo.com/y.js`, `bing.com/aclick`) and unusable links give None."""
    href = href.strip()
    if not href or not (href.startswith("//") or urlsplit(href).scheme):
        return None  # empty, or relative: a link into DuckDuckGo's own pages, not a result
    url = urljoin("https://duckduckgo.com/", href)
    parts = urlsplit(url)
    host = (parts.hostname or "").lower()
    on_ddg = host == "duckduckgo.com" or host.endswith(".duckduckgo.com")
    if on_ddg and parts.path == "/l/":
        targets = parse_qs(parts.query).get("uddg")  # parse_qs percent-decodes exactly once
        if not targets or not targets[0]:
            return None
        url = targets[0]
        parts = urlsplit(url)
        host = (parts.hostname or "").lower()
    if any(host == h or host.endswith("." + h) for h in _AD_HOSTS) and any(
        parts.path.startswith(p) for p in _AD_PATHS
    ):
        return None
    return url


def parse_lite_page(html: str, *, max_results: int | None = None) -> list[SearchResult]:
    """Results of a DuckDuckGo Lite page, [] for its explicit no-results page.

    Raises `Blocked` for the bot challenge and `LayoutChanged` for anything else."""
    soup = BeautifulSoup(html, "html.parser")
    if is_challenge(soup):
        raise Blocked(NAME, "DuckDuckGo answered with its bot challenge (anomaly.js form)")
    if not re.search(r"</html\s*>\s*$", html.strip()[-200:], re.IGNORECASE):
        raise LayoutChanged(NAME, "the results page ends before </html> (truncated)")

    groups: list[list[str]] = []  # [title, href, snippet] of each result
    for row in soup.find_all("tr"):
        if "result-sponsored" in row.get_attribute_list("class"):
            continue
        link = row.find("a", class_="result-link")
        snippet = row.find("td", class_="result-snippet")
        if isinstance(link, Tag):
            href = link.get("href")
            groups.append([link.get_text(""), href if isinstance(href, str) else "", ""])
        elif groups and isinstance(snippet, Tag) and not groups[-1][2]:
            groups[-1][2] = snippet.get_text("")
    if not groups:
        if _has_no_results_marker(soup):
            return []
        raise LayoutChanged(
            NAME, "no result links (a.result-link) and no 'No results.' marker on the page"
        )

    links = ((title, unwrap_link(href), snippet) for title, href, snippet in groups)
    triples = [(title, url, snippet) for title, url, snippet in links if url is not None]
    results = finalize(triples, provider=NAME, max_results=max_results)
    if not results:
        # Result rows whose links all fail to resolve: the link format changed, not "no results".
        raise LayoutChanged(NAME, f"{len(groups)} result links, none of them usable")
    return results


class DuckDuckGoLite:
    """Provider: POSTs the Lite form and parses the page."""

    name = NAME
    max_query_chars = MAX_QUERY_CHARS

    def __init__(self, endpoint: str, http: HttpConfig, user_agent: str) -> None:
        self.endpoint = endpoint
        self.http = http
        self.user_agent = user_agent

    def form(self, request: SearchRequest) -> dict[str, str]:
        data = {
            "q": request.query,
            "kl": request.region,
            "kp": SAFE_SEARCH_KP[request.safe_search],
        }
        if request.time_filter:
            data["df"] = TIME_FILTER_DF[request.time_filter]
        return data

    def headers(self, request: SearchRequest) -> dict[str, str]:
        headers = {"User-Agent": self.user_agent, "Accept": "text/html"}
        lang = request.region.partition("-")[2]
        if len(lang) == 2 and lang != "wt":
            headers["Accept-Language"] = f"{lang},en;q=0.5"
        return headers

    def search(self, request: SearchRequest) -> list[SearchResult]:
        response = fetch(
            "POST",
            self.endpoint,
            provider=NAME,
            http=self.http,
            headers=self.headers(request),
            data=self.form(request),
        )
        status, html = response.status, response.text()
        if status == 200:
            try:
                return parse_lite_page(html, max_results=request.max_results)
            except ProviderError as exc:
                exc.status = status
                raise
        # The body decides first: the challenge comes with 202 and with 200 alike.
        if is_challenge(BeautifulSoup(html, "html.parser")):
            raise Blocked(NAME, "DuckDuckGo answered with its bot challenge", status=status)
        if status in (202, 429):
            raise RateLimited(NAME, f"HTTP {status} without a results page", status=status)
        if status == 403:
            raise Blocked(NAME, "HTTP 403 Forbidden", status=status)
        if status >= 500:
            raise Unavailable(NAME, f"server error HTTP {status}", status=status)
        raise Unavailable(NAME, f"unexpected HTTP status {status}", status=status)
