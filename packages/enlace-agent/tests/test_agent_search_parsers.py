"""The parsers on real captured pages ($ENLACE_SHARED_DATA/search) and on pages written to follow
the real structure (tests/fixtures)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from enlace_config.schema.agent import BraveConfig

from enlace_agent.search.brave import brave_locale, parse_brave_json, strip_markup
from enlace_agent.search.duckduckgo import parse_lite_page, unwrap_link
from enlace_agent.search.errors import Blocked, LayoutChanged

FIXTURES = Path(__file__).parent / "fixtures"
REAL_DDG = "ddg_lite_get_rust-programming_2026-04-14.html"
REAL_CHALLENGE = "ddg_html_anomaly_challenge_2026-06-19.html"
REAL_BRAVE = "brave_web_success_hello-world_en.json"


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text(encoding="utf-8")


# --- DuckDuckGo Lite, real pages ------------------------------------------------------------


def test_real_lite_page_gives_ten_unwrapped_results(search_data: Path) -> None:
    results = parse_lite_page((search_data / REAL_DDG).read_text(encoding="utf-8"))
    assert len(results) == 10
    assert [r.rank for r in results] == list(range(1, 11))
    first = results[0]
    assert first.title == "Rust Programming Language"
    assert first.url == "https://rust-lang.org/"
    assert first.snippet.startswith("Rust is a fast, reliable, and productive programming language")
    assert first.provider == "duckduckgo"
    assert results[1].url == "https://en.wikipedia.org/wiki/Rust_(programming_language)"
    assert results[5].url == "http://rust-lang.github.io/book/"
    # entities decoded, markup gone, no DuckDuckGo redirect left
    assert "you're getting into software development" in results[3].snippet
    assert "Montréal & online" in results[7].snippet
    assert all("duckduckgo.com" not in r.url for r in results)
    assert all("<" not in r.snippet for r in results)


def test_real_lite_page_respects_max_results(search_data: Path) -> None:
    results = parse_lite_page((search_data / REAL_DDG).read_text(encoding="utf-8"), max_results=3)
    assert [r.rank for r in results] == [1, 2, 3]


def test_real_challenge_page_is_blocked(search_data: Path) -> None:
    with pytest.raises(Blocked):
        parse_lite_page((search_data / REAL_CHALLENGE).read_text(encoding="utf-8"))


def test_real_lite_page_truncated_is_layout_changed(search_data: Path) -> None:
    html = (search_data / REAL_DDG).read_text(encoding="utf-8")
    with pytest.raises(LayoutChanged, match="truncated"):
        parse_lite_page(html[: len(html) // 2])


# --- DuckDuckGo Lite, written fixtures ---------------------------------------------------------


def test_fixture_results_filter_ads_unwrap_dedupe_and_keep_accents() -> None:
    results = parse_lite_page(fixture("ddg_lite_results_es.html"))
    assert [(r.rank, r.url) for r in results] == [
        (1, "https://es.wikipedia.org/wiki/Tortilla_de_patatas"),
        (2, "https://www.recetas.example/tortilla-española"),
        # uddg decoded exactly once: the target's own %-escapes survive
        (3, "https://foro.example/buscar?q=ma%C3%B1ana&p=2"),
        (4, "http://cocina.example/tortilla-de-patatas-sin-cebolla"),
    ]
    titles = [r.title for r in results]
    assert titles[1] == "🥔 Receta de tortilla española jugosa 🍳"
    assert titles[2] == "¿Tortilla para mañana? - Foro de cocina"
    assert results[0].snippet.startswith("La tortilla de patatas es una tortilla (huevo batido")
    assert "gastronomía española & un clásico." in results[0].snippet
    assert results[1].snippet.endswith("Te lo contamos 😋")
    assert results[3].snippet == "Año tras año, la receta de siempre: ñ, á, é, í, ó, ú, ü."
    joined = " ".join(titles + [r.url for r in results])
    assert "Sartenes" not in joined and "more info" not in joined and "Huevos" not in joined


def test_fixture_sponsored_rows_are_filtered_by_row_not_by_link_class() -> None:
    html = fixture("ddg_lite_results_es.html")
    # Without the row class the sponsored "more info" link would be taken for a result.
    unmarked = html.replace('class="result-sponsored"', "")
    urls = [r.url for r in parse_lite_page(unmarked)]
    assert any("duckduckgo-help-pages" in u for u in urls)
    assert not any("duckduckgo-help-pages" in r.url for r in parse_lite_page(html))


@pytest.mark.parametrize("marker", ["No results.", "No  more results."])
def test_explicit_no_results_page_is_an_empty_answer(marker: str) -> None:
    html = fixture("ddg_lite_no_results.html").replace(
        '<td class="no-results">No results.</td>', f"<td>{marker}</td>"
    )
    assert parse_lite_page(html) == []


def test_no_results_words_only_in_title_or_input_do_not_count() -> None:
    html = fixture("ddg_lite_no_results.html").replace(
        '<td class="no-results">No results.</td>', "<td>&nbsp;</td>"
    )
    with pytest.raises(LayoutChanged):
        parse_lite_page(html)


def test_fixture_challenge_is_blocked() -> None:
    with pytest.raises(Blocked):
        parse_lite_page(fixture("ddg_lite_challenge.html"))


def test_unrelated_page_is_layout_changed_not_empty() -> None:
    with pytest.raises(LayoutChanged, match="no result links"):
        parse_lite_page(fixture("unrelated.html"))


@pytest.mark.parametrize("cut", [0.1, 0.5, 0.9])
def test_truncated_fixture_page_is_layout_changed(cut: float) -> None:
    html = fixture("ddg_lite_results_es.html")
    with pytest.raises(LayoutChanged):
        parse_lite_page(html[: int(len(html) * cut)])


def test_result_rows_without_usable_links_are_layout_changed() -> None:
    html = fixture("ddg_lite_results_es.html")
    broken = html.replace('href="//duckduckgo.com/l/?uddg=', 'href="//duckduckgo.com/l/?target=')
    broken = broken.replace(
        'href="https://duckduckgo.com/l/?uddg=', 'href="//duckduckgo.com/l/?target='
    )
    broken = broken.replace('href="https://www.recetas', 'href="/relative/www.recetas')
    broken = broken.replace('href="http://cocina', 'href="mailto:cocina')
    with pytest.raises(LayoutChanged, match="none of them usable"):
        parse_lite_page(broken)


def test_empty_body_is_layout_changed() -> None:
    with pytest.raises(LayoutChanged):
        parse_lite_page("")


@pytest.mark.parametrize(
    ("href", "expected"),
    [
        ("//duckduckgo.com/l/?uddg=https%3A%2F%2Fa.example%2Fx&rut=1", "https://a.example/x"),
        (
            "https://duckduckgo.com/l/?uddg=https%3A%2F%2Fa.example%2F%3Fq%3D%2520&rut=1",
            "https://a.example/?q=%20",
        ),
        ("https://a.example/direct", "https://a.example/direct"),
        ("//duckduckgo.com/l/?rut=1", None),  # a wrapper without its target
        ("https://duckduckgo.com/y.js?ad_domain=x", None),  # an ad click
        ("https://www.bing.com/aclick?ld=1", None),
        ("", None),
        ("/lite/?q=next", None),  # relative: DuckDuckGo's own page
    ],
)
def test_unwrap_link(href: str, expected: str | None) -> None:
    assert unwrap_link(href) == expected


# --- Brave ------------------------------------------------------------------------------------


def test_real_brave_response(search_data: Path) -> None:
    results = parse_brave_json((search_data / REAL_BRAVE).read_bytes())
    assert len(results) == 20
    first = results[0]
    assert first.provider == "brave"
    assert first.title == '"Hello, World!" program - Wikipedia'
    assert first.url == "https://en.wikipedia.org/wiki/%22Hello,_World!%22_program"
    assert first.snippet.startswith(
        'A "Hello, World!" program is usually a simple computer program'
    )
    assert "language's basic syntax" in first.snippet
    assert all("<strong>" not in r.snippet and "&quot;" not in r.snippet for r in results)
    assert "K&R C book" in results[8].snippet
    assert len(parse_brave_json((search_data / REAL_BRAVE).read_bytes(), max_results=5)) == 5


def _brave(results: object) -> str:
    return json.dumps(
        {
            "type": "search",
            "query": {"original": "q"},
            "web": {"type": "search", "results": results},
        }
    )


def test_brave_fixture_strips_markup_drops_non_http_and_duplicates() -> None:
    body = _brave(
        [
            {
                "title": "Tortilla &amp; <strong>patatas</strong>",
                "url": "https://a.example/",
                "description": "La <strong>mejor</strong> receta &#x27;de verdad&#x27; 🥔",
            },
            {"title": "Duplicado", "url": "https://a.example/", "description": ""},
            {"title": "FTP", "url": "ftp://b.example/x", "description": ""},
            {"title": "JS", "url": "javascript:alert(1)", "description": ""},
            {"title": "Sin descripción", "url": "https://c.example/ñ"},
        ]
    )
    results = parse_brave_json(body)
    assert [(r.rank, r.title, r.url) for r in results] == [
        (1, "Tortilla & patatas", "https://a.example/"),
        (2, "Sin descripción", "https://c.example/ñ"),
    ]
    assert results[0].snippet == "La mejor receta 'de verdad' 🥔"
    assert results[1].snippet == ""


@pytest.mark.parametrize(
    "body",
    [
        json.dumps({"type": "search", "query": {"original": "q"}}),
        json.dumps({"type": "search", "web": None}),
        json.dumps({"type": "search", "web": {"type": "search", "results": []}}),
    ],
)
def test_brave_without_web_results_is_zero_results(body: str) -> None:
    assert parse_brave_json(body) == []


@pytest.mark.parametrize(
    "body",
    [
        "not json",
        "[1, 2]",
        json.dumps({"web": "text"}),
        json.dumps({"web": {"results": {"a": 1}}}),
        _brave([1, 2]),
    ],
)
def test_brave_unparseable_is_layout_changed(body: str) -> None:
    with pytest.raises(LayoutChanged):
        parse_brave_json(body)


def test_strip_markup_removes_tags_before_decoding_entities() -> None:
    assert strip_markup("<strong>a</strong> &lt;b&gt; &amp; ü") == "a <b> & ü"


@pytest.mark.parametrize(
    ("region", "expected"),
    [
        ("es-es", ("ES", "es")),
        ("mx-es", ("MX", "es")),
        ("es-ca", ("ES", "ca")),
        ("uk-en", ("GB", "en")),
        ("wt-wt", ("ALL", "")),
    ],
)
def test_brave_locale_from_region(region: str, expected: tuple[str, str]) -> None:
    assert brave_locale(region, BraveConfig()) == expected


def test_brave_locale_config_wins() -> None:
    assert brave_locale("es-es", BraveConfig(country="AR", search_lang="es")) == ("AR", "es")
