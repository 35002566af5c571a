"""The family web page in a real browser: the system's Chromium, headless, driven by Playwright
(no browser download). Sends a question, sees the answer stream in with its source link, reloads
and finds the history; a search result and an answer made of markup stay text, an answer's
Markdown renders as DOM nodes (never HTML); screenshots at phone and desktop widths go to
artifacts/web/ (git-ignored; docs/web/ keeps the README's copy).

Marked `browser` (deselected by default): `scripts/test.sh browser` runs them, and CI with it.
Chromium comes from `scripts/install-system-deps.sh` (Debian's `chromium`)."""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.browser

FIXTURES = Path(__file__).parent / "fixtures"
ARTIFACTS = Path(
    os.environ.get("ENLACE_ARTIFACTS") or Path(__file__).resolve().parents[3] / "artifacts"
)
WIKI = "https://es.wikipedia.org/wiki/Tortilla_de_patatas"
XSS = "<img src=x onerror=alert(1)>"
ANSWER = (
    "La tortilla de patatas lleva huevos, patatas, aceite de oliva y sal; la cebolla es "
    f"opcional y cada familia tiene su opinión. Lo he buscado: {WIKI}"
)
SHOWN = ANSWER.replace(WIKI, "es.wikipedia.org/…")  # the address, as its link reads
PHONE = {"width": 390, "height": 844}
DESKTOP = {"width": 1280, "height": 800}


def chromium_path() -> str:
    found = os.environ.get("ENLACE_CHROMIUM") or shutil.which("chromium")
    found = found or shutil.which("chromium-browser")
    if not found:
        pytest.fail(
            "no Chromium on this machine: run scripts/install-system-deps.sh (Debian's chromium) "
            "or set ENLACE_CHROMIUM to its path"
        )
    return found


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        launched = p.chromium.launch(executable_path=chromium_path(), headless=True)
        yield launched
        launched.close()


@pytest.fixture
def tab(browser: Any) -> Iterator[Any]:
    context = browser.new_context(viewport=DESKTOP, locale="es-ES")
    page = context.new_page()
    page.set_default_timeout(15_000)
    page.dialogs = []  # any alert() would be an injected script running
    page.on("dialog", lambda d: (page.dialogs.append(d.message), d.dismiss()))
    yield page
    context.close()


def sign_in(tab: Any, base: str, name: str = "Ana") -> None:
    tab.goto(base + "/")
    tab.get_by_label(name).check()
    tab.get_by_role("button", name="Entrar").click()
    tab.locator("#who", has_text=name).wait_for()


def send(tab: Any, question: str) -> None:
    tab.locator("#text").fill(question)
    tab.locator("#text").press("Enter")


def test_a_question_streams_in_with_its_source_and_stays_after_a_reload(
    tab: Any, web_page: Callable[..., Any], model_server: Any
) -> None:
    model_server.script = [
        model_server.call("buscar_en_internet", {"consulta": "ingredientes tortilla"}),
        model_server.say(ANSWER, pieces=12, delay=0.15),
    ]
    page = web_page()
    sign_in(tab, page.base)
    send(tab, "¿Qué lleva la tortilla de patatas?")
    answer = tab.locator(".msg.assistant").last
    # Streamed: part of the answer is on the page while it is still being written.
    tab.wait_for_function(
        "() => { const a = document.querySelector('.msg.assistant .text');"
        " return a && a.textContent.length > 0 && document.querySelector('#send').disabled; }"
    )
    link = answer.locator(".sources a")
    link.wait_for()
    assert link.get_attribute("href") == WIKI
    assert link.inner_text() == "Tortilla de patatas - Wikipedia, la enciclopedia libre"
    assert answer.locator(".text").inner_text() == SHOWN
    assert answer.locator(".text a").get_attribute("href") == WIKI  # the raw address, a link
    assert tab.locator("#send").is_enabled()

    tab.reload()
    tab.locator(".msg.assistant .sources a").wait_for()
    roles = tab.locator("#messages > li").evaluate_all("items => items.map(i => i.className)")
    assert roles == ["msg user", "msg assistant"]
    assert tab.locator(".msg.user").inner_text() == "¿Qué lleva la tortilla de patatas?"
    assert tab.locator(".msg.assistant .text").inner_text() == SHOWN
    listed = tab.locator("#conversations .title")
    assert listed.all_inner_texts() == ["¿Qué lleva la tortilla de patatas?"]
    assert tab.dialogs == []


def test_markup_from_a_search_result_or_the_model_renders_as_text(
    tab: Any, web_page: Callable[..., Any], model_server: Any, http_server: Any
) -> None:
    html = (FIXTURES / "ddg_lite_results_es.html").read_text(encoding="utf-8")
    title = "Tortilla de patatas - Wikipedia, la enciclopedia libre"
    http_server.reply("/lite/", 200, html.replace(title, "&lt;img src=x onerror=alert(1)&gt;"))
    model_server.script = [
        model_server.call("buscar_en_internet", {"consulta": "tortilla"}),
        model_server.say(f"Mira esto: {XSS} <script>alert(2)</script> ({WIKI})"),
    ]
    page = web_page()
    sign_in(tab, page.base)
    send(tab, XSS)
    answer = tab.locator(".msg.assistant").last
    answer.locator(".sources a").wait_for()
    assert answer.locator(".sources a").inner_text() == XSS
    assert XSS in answer.locator(".text").inner_text()
    assert tab.locator(".msg.user").inner_text() == XSS
    assert tab.locator("#messages img, #messages script").count() == 0
    tab.reload()  # the same, read back from the history
    tab.locator(".msg.assistant .sources a").wait_for()
    assert tab.locator("#messages img, #messages script").count() == 0
    assert tab.locator("#conversations .title").inner_text() == XSS
    assert tab.dialogs == []


def test_model_down_shows_a_spanish_message_not_a_spinner(
    tab: Any, web_page: Callable[..., Any], refused_url: str
) -> None:
    page = web_page(assistant={"base_url": refused_url, "connect_timeout_s": 2})
    sign_in(tab, page.base)
    send(tab, "¿Estás ahí?")
    error = tab.locator(".msg.error")
    error.wait_for()
    assert "no está disponible ahora mismo" in error.inner_text()
    assert tab.locator("#send").is_enabled()
    assert tab.locator("#status").inner_text() == ""


def test_the_page_shows_the_question_box_only_once_it_has_loaded(
    tab: Any, web_page: Callable[..., Any], model_server: Any
) -> None:
    """A question typed while the page still loads the conversation list was wiped when the list
    arrived (the page then opened an empty conversation); the box now appears only after that."""
    model_server.script = [model_server.say("Aquí estoy.")]
    page = web_page()
    held: list[Any] = []

    def hold_the_list(route: Any) -> None:
        if route.request.method == "GET" and not held:
            held.append(route)  # answered below, once the test has looked at the page
        else:
            route.continue_()

    tab.route("**/api/conversations", hold_the_list)
    tab.goto(page.base + "/")
    tab.get_by_label("Ana").check()
    with tab.expect_request(lambda r: r.url.endswith("/api/conversations") and r.method == "GET"):
        tab.get_by_role("button", name="Entrar").click()
    assert tab.locator("#text").is_hidden()
    assert tab.locator("#who").inner_text() == ""
    held[0].continue_()
    tab.locator("#who", has_text="Ana").wait_for()
    send(tab, "¿Estás ahí?")
    tab.locator(".msg.assistant .text", has_text="Aquí estoy.").wait_for()
    assert tab.locator(".msg.user").inner_text() == "¿Estás ahí?"


@pytest.mark.parametrize("failing", ["/api/me", "/api/conversations"])
def test_a_server_error_while_the_page_loads_says_so_in_spanish(
    tab: Any, web_page: Callable[..., Any], failing: str
) -> None:
    page = web_page()
    sign_in(tab, page.base)
    tab.route("**" + failing, lambda route: route.fulfill(status=500, json={}))
    tab.reload()
    trouble = tab.locator("#trouble")
    trouble.wait_for()
    assert trouble.inner_text() == "No se puede conectar con Enlace. Recarga la página."
    assert tab.locator("#text").is_hidden()


def test_a_list_that_fails_while_opening_a_linked_conversation_says_so_too(
    tab: Any, web_page: Callable[..., Any], model_server: Any
) -> None:
    model_server.script = [model_server.say("Hola.")]
    page = web_page()
    sign_in(tab, page.base)
    send(tab, "Hola")
    tab.locator(".msg.assistant .text", has_text="Hola.").wait_for()
    lists: list[str] = []

    def second_list_fails(route: Any) -> None:
        lists.append(route.request.method)
        if lists.count("GET") == 2:  # the one openConversation asks for, after start()'s own
            route.fulfill(status=500, json={})
        else:
            route.continue_()

    tab.route("**/api/conversations", second_list_fails)
    tab.reload()  # the address holds the conversation's #id
    tab.locator("#trouble").wait_for()
    assert tab.locator("#text").is_hidden()


def test_an_expired_session_while_the_page_loads_shows_the_sign_in(
    tab: Any, web_page: Callable[..., Any]
) -> None:
    page = web_page()
    sign_in(tab, page.base)
    tab.route("**/api/conversations", lambda route: route.fulfill(status=401, json={}))
    tab.reload()
    tab.get_by_role("button", name="Entrar").wait_for()
    assert tab.locator("#trouble").is_hidden()


def test_each_person_sees_only_their_conversations(
    browser: Any, web_page: Callable[..., Any], model_server: Any
) -> None:
    model_server.script = [model_server.say("Respuesta para Ana.")]
    page = web_page()
    ana = browser.new_context(viewport=PHONE).new_page()
    sign_in(ana, page.base, "Ana")
    send(ana, "Mi pregunta privada")
    ana.locator(".msg.assistant .text", has_text="Respuesta para Ana.").wait_for()
    bruno = browser.new_context(viewport=PHONE).new_page()
    sign_in(bruno, page.base, "Bruno")
    bruno.goto(ana.url)  # even with the link to Ana's conversation
    bruno.reload()
    bruno.locator("#status", has_text="Esa conversación no existe.").wait_for()
    assert bruno.locator("#messages > li").count() == 0
    assert "Mi pregunta privada" not in bruno.content()


def test_a_reload_mid_answer_finds_the_conversation_and_the_answer_going_on(
    tab: Any, web_page: Callable[..., Any], model_server: Any
) -> None:
    model_server.script = [model_server.say(ANSWER, pieces=20, delay=0.2)]
    page = web_page(assistant={"max_tool_rounds": 0})
    sign_in(tab, page.base)
    send(tab, "Cuéntamelo despacio")
    tab.wait_for_function(
        "() => { const a = document.querySelector('.msg.assistant .text');"
        " return a && a.textContent.length > 0; }"
    )
    tab.reload()
    assert tab.locator(".msg.user").inner_text() == "Cuéntamelo despacio"
    tab.locator(".msg.assistant .text", has_text=SHOWN).wait_for()
    tab.wait_for_function("() => !document.querySelector('#send').disabled")  # the end came
    assert tab.locator(".msg.assistant").count() == 1
    assert tab.locator(".msg.assistant .text").inner_text() == SHOWN


# ------------------------------------------------------------------ what the family sees (issue 26)

MARKDOWN = (
    "He buscado en internet y esto es lo que lleva [1]:\n\n"
    "- **Huevos** y *patatas*\n"
    "- Aceite de _oliva_ virgen\n\n"
    "1. Pela las patatas.\n"
    "2. Fríelas despacio.\n\n"
    f"Más en [Wikipedia]({WIKI}) o en "
    "https://www.example.org/recetas/tortilla-de-patatas-con-cebolla-caramelizada-y-mucho-amor.html.\n"
    f"**{XSS}** [pulsa aquí](javascript:alert(1)) y [esto](data:text/html,<script>alert(3)</script>)"
    " y <b>negrita falsa</b>"
)
LONG = (
    "https://www.example.org/recetas/tortilla-de-patatas-con-cebolla-caramelizada-y-mucho-amor.html"
)


def test_each_radio_on_the_sign_in_sits_left_of_its_name(
    tab: Any, web_page: Callable[..., Any]
) -> None:
    page = web_page(
        people=[{"name": "Ana"}, {"name": "Bruno", "token_env": "TOKEN_BRUNO"}],
        env={"TOKEN_BRUNO": "bruno-token-0123456789-secret"},
    )
    for size in (PHONE, DESKTOP):
        tab.set_viewport_size(size)
        tab.goto(page.base + "/")
        tab.get_by_label("Bruno").check()
        boxes = tab.evaluate(
            """() => [...document.querySelectorAll('#people label')].map(label => {
                const radio = label.querySelector('input').getBoundingClientRect();
                const range = document.createRange();
                range.selectNodeContents(label.lastChild);  // the name
                const name = range.getBoundingClientRect();
                return {right: radio.right, width: radio.width, middle: (radio.top + radio.bottom) / 2,
                        left: name.left, top: name.top, bottom: name.bottom};
            })"""
        )
        assert len(boxes) == 2
        for box in boxes:
            assert box["width"] < 40, box  # a radio button, not a bar as wide as the form
            assert box["right"] <= box["left"], box  # left of its name
            assert box["top"] <= box["middle"] <= box["bottom"], box  # on the same line
        token = tab.locator("#token").bounding_box()
        form = tab.locator("#login-form").bounding_box()
        assert token is not None and form is not None
        assert token["width"] > 0.9 * form["width"]  # the key field keeps the whole width


def test_an_answer_in_markdown_renders_as_safe_text_links_and_lists(
    tab: Any, web_page: Callable[..., Any], model_server: Any
) -> None:
    model_server.script = [
        model_server.call("buscar_en_internet", {"consulta": "tortilla"}),
        model_server.say(MARKDOWN, pieces=15, delay=0.02),
    ]
    page = web_page()
    sign_in(tab, page.base)
    send(tab, "¿Qué lleva la tortilla?")
    answer = tab.locator(".msg.assistant").last
    answer.locator(".sources a").wait_for()

    def check() -> None:
        text = answer.locator(".text")
        assert text.locator("strong").all_inner_texts() == ["Huevos", XSS]
        assert text.locator("em").all_inner_texts() == ["patatas", "oliva"]
        assert text.locator("ul > li").count() == 2
        assert text.locator("ol > li").all_inner_texts() == [
            "Pela las patatas.",
            "Fríelas despacio.",
        ]
        links = text.locator("a")
        assert links.evaluate_all("as => as.map(a => a.href)") == [WIKI, LONG]
        assert links.first.inner_text() == "Wikipedia"
        shown = links.nth(1).inner_text()  # a raw address: a short link, not a wall of text
        assert shown.startswith("example.org") and len(shown) < 30
        assert links.nth(1).get_attribute("rel") == "noopener noreferrer"
        whole = text.inner_text()
        assert "pulsa aquí" in whole and "javascript" not in whole.lower()  # not a link
        assert "<b>negrita falsa</b>" in whole and "**" not in whole
        assert "[1]" in whole
        assert tab.locator("#messages img, #messages script, #messages b").count() == 0
        # «Fuentes» above the sources, and no provider's name.
        assert answer.locator(".sources h3").inner_text() == "Fuentes"
        sources = answer.locator(".sources").inner_text()
        assert "duckduckgo" not in sources and "vía" not in sources
        assert "es.wikipedia.org" in sources  # the site, in words a person knows

    check()
    tab.set_viewport_size(PHONE)
    assert tab.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
    tab.reload()  # the same, read back from the history
    answer = tab.locator(".msg.assistant").last
    answer.locator(".sources a").wait_for()
    check()
    assert tab.dialogs == []


def test_a_failed_search_is_said_in_spanish_on_the_page(
    tab: Any, web_page: Callable[..., Any], model_server: Any, http_server: Any
) -> None:
    http_server.reply("/lite/", 500, "<p>error</p>")
    model_server.script = [
        model_server.call("buscar_en_internet", {"consulta": "tortilla"}),
        model_server.say("No he podido buscar, pero la tortilla lleva huevo."),
    ]
    page = web_page()
    sign_in(tab, page.base)
    send(tab, "¿Qué lleva la tortilla?")
    answer = tab.locator(".msg.assistant").last
    answer.locator(".text", has_text="lleva huevo").wait_for()
    tab.wait_for_function("() => !document.querySelector('#send').disabled")
    note = answer.locator(".searching")
    assert (
        note.inner_text()
        == "La búsqueda en internet ha fallado: la respuesta puede no estar al día."
    )
    assert note.is_visible()


def test_the_question_box_has_a_label_and_each_conversation_its_date(
    tab: Any, web_page: Callable[..., Any], model_server: Any
) -> None:
    model_server.script = [model_server.say("Hola.")]
    page = web_page()
    sign_in(tab, page.base)
    tab.get_by_label("Tu pregunta").fill("Hola")
    tab.get_by_label("Tu pregunta").press("Enter")
    tab.locator(".msg.assistant .text", has_text="Hola.").wait_for()
    when = tab.locator("#conversations time")
    when.wait_for()
    stamp = when.get_attribute("datetime")
    assert stamp is not None and stamp.startswith(str(__import__("datetime").date.today().year))
    assert str(__import__("datetime").date.today().year) in when.inner_text()
    assert tab.locator("#conversations .title").all_inner_texts() == ["Hola"]


def test_a_person_renames_and_deletes_a_conversation_from_the_page(
    browser: Any, tab: Any, web_page: Callable[..., Any], model_server: Any
) -> None:
    model_server.script = [model_server.say("Uno."), model_server.say("Dos.")]
    page = web_page()
    sign_in(tab, page.base)
    send(tab, "Primera pregunta")
    tab.locator(".msg.assistant .text", has_text="Uno.").wait_for()
    tab.get_by_role("button", name="Nueva conversación").click()
    send(tab, "Segunda pregunta")
    tab.locator(".msg.assistant .text", has_text="Dos.").wait_for()
    titles = tab.locator("#conversations .title")
    tab.wait_for_function("() => document.querySelectorAll('#conversations .title').length == 2")

    tab.get_by_role("button", name="Cambiar el nombre de «Primera pregunta»").click()
    tab.get_by_label("Nuevo nombre").fill("Recetas de casa")
    tab.get_by_role("button", name="Guardar").click()
    tab.locator("#conversations .title", has_text="Recetas de casa").wait_for()
    tab.reload()
    tab.locator("#conversations .title", has_text="Recetas de casa").wait_for()
    assert sorted(titles.all_inner_texts()) == ["Recetas de casa", "Segunda pregunta"]

    # Deleting the open conversation asks first, then empties the page.
    assert tab.locator(".msg.assistant .text").inner_text() == "Dos."
    tab.get_by_role("button", name="Borrar «Segunda pregunta»").click()
    tab.get_by_role("button", name="No", exact=True).click()
    assert titles.count() == 2
    tab.get_by_role("button", name="Borrar «Segunda pregunta»").click()
    tab.get_by_role("button", name="Sí, borrar").click()
    tab.wait_for_function("() => document.querySelectorAll('#conversations li').length == 1")
    assert titles.all_inner_texts() == ["Recetas de casa"]
    assert tab.locator("#messages > li").count() == 0
    tab.reload()
    tab.locator("#conversations .title").first.wait_for()
    assert titles.all_inner_texts() == ["Recetas de casa"]

    # Another person cannot delete it, even with its address and their own CSRF token.
    kept = tab.locator("#conversations a").first.get_attribute("href")
    assert kept is not None
    bruno = browser.new_context(viewport=PHONE).new_page()
    sign_in(bruno, page.base, "Bruno")
    status = bruno.evaluate(
        """async (id) => {
            const me = await (await fetch('/api/me')).json();
            const answer = await fetch('/api/conversations/' + id, {method: 'DELETE',
                headers: {'Content-Type': 'application/json', 'X-Enlace-CSRF': me.csrf},
                body: '{}'});
            return answer.status;
        }""",
        kept.lstrip("#"),
    )
    assert status == 404
    tab.reload()
    tab.locator("#conversations .title", has_text="Recetas de casa").wait_for()
    assert tab.dialogs == []


def test_screenshots_at_phone_and_desktop_widths(
    tab: Any, web_page: Callable[..., Any], model_server: Any
) -> None:
    """The README's pictures (artifacts/web/; docs/web/ holds the copy the README shows)."""
    model_server.script = [
        model_server.call("buscar_en_internet", {"consulta": "ingredientes tortilla"}),
        model_server.say(
            "He buscado en internet. La tortilla de patatas lleva [1]:\n\n"
            "- **Huevos** y **patatas**\n- Aceite de oliva y sal\n- Cebolla, *si te gusta*\n\n"
            "Cada familia tiene su receta."
        ),
    ]
    page = web_page()
    out = ARTIFACTS / "web"
    out.mkdir(parents=True, exist_ok=True)
    tab.set_viewport_size(PHONE)
    tab.goto(page.base + "/")
    tab.get_by_label("Ana").wait_for()
    tab.screenshot(path=str(out / "login-phone.png"))
    tab.set_viewport_size(DESKTOP)
    sign_in(tab, page.base)
    send(tab, "¿Qué lleva la tortilla de patatas?")
    tab.locator(".msg.assistant .sources a").first.wait_for()
    tab.screenshot(path=str(out / "desktop.png"))
    tab.set_viewport_size(PHONE)
    tab.screenshot(path=str(out / "phone.png"))
    tab.get_by_role("button", name="Conversaciones").click()
    tab.screenshot(path=str(out / "list-phone.png"))


# ------------------------------------------------------------------ «Lo que Enlace recuerda»


def memory_items(tab: Any, which: str) -> list[str]:
    return tab.locator(f"#memory-{which} .memory-text").all_inner_texts()


def answer_the_first_list_late(tab: Any, pattern: str) -> list[tuple[Any, Any]]:
    """Routes `pattern`: the first GET is read from the server now and kept, (route, response),
    for the test to hand to the page later (`route.fulfill(response=...)`), after a newer one;
    every other request goes through."""
    late: list[tuple[Any, Any]] = []

    def handle(route: Any) -> None:
        if route.request.method == "GET" and not late:
            late.append((route, route.fetch()))
        else:
            route.continue_()

    tab.route(pattern, handle)
    return late


def test_two_memories_kept_in_a_row_stay_listed_when_their_lists_cross(
    tab: Any, web_page: Callable[..., Any]
) -> None:
    """Two memories saved in a row whose lists come back in the other order: the older list (read
    before the second was kept) arrives last and must not be drawn over the newer one."""
    page = web_page()
    sign_in(tab, page.base)
    tab.get_by_role("button", name="Lo que Enlace recuerda").click()
    tab.locator("#memory-mine .empty").wait_for()
    late = answer_the_first_list_late(tab, "**/api/memories")
    for text in ("Ana es alérgica a los frutos secos", "Ana juega al pádel los martes"):
        tab.get_by_label("Nuevo recuerdo").fill(text)
        tab.locator("#memory-add button[type=submit]").click()
        while not late:
            tab.wait_for_timeout(20)
    tab.locator("#memory-mine .memory-text", has_text="pádel").wait_for()
    route, stale = late[0]
    route.fulfill(response=stale)
    tab.wait_for_timeout(300)
    assert sorted(memory_items(tab, "mine")) == [
        "Ana es alérgica a los frutos secos",
        "Ana juega al pádel los martes",
    ]


def test_a_person_sees_edits_forgets_and_pauses_their_memory_on_the_page(
    tab: Any, web_page: Callable[..., Any]
) -> None:
    page = web_page()
    api = page.login("Ana")
    for text, scope in [
        ("Ana es alérgica a los frutos secos", "personal"),
        (XSS, "personal"),
        ("La abuela vive en Soria", "familia"),
    ]:
        assert api.post("/api/memories", json={"text": text, "scope": scope}).status_code == 201
    page.login("Bruno").post("/api/memories", json={"text": "Bruno toca la guitarra"})
    sign_in(tab, page.base)
    tab.get_by_role("button", name="Lo que Enlace recuerda").click()
    tab.locator("#memory-mine .memory-text").first.wait_for()
    assert memory_items(tab, "mine") == [XSS, "Ana es alérgica a los frutos secos"]
    assert memory_items(tab, "family") == ["La abuela vive en Soria"]  # never Bruno's
    assert tab.locator("#memory img").count() == 0 and tab.locator("#chat").is_hidden()

    # Edit in place.
    tab.get_by_role("button", name="Corregir «La abuela vive en Soria»").click()
    tab.get_by_label("Corregir el recuerdo").fill("La abuela vive en Burgos")
    tab.locator("#memory-family").get_by_role("button", name="Guardar").click()
    tab.locator("#memory-family .memory-text", has_text="Burgos").wait_for()
    assert tab.locator("#memory-status").inner_text() == "Recuerdo corregido."
    # Forget one, after saying yes.
    tab.get_by_role("button", name=f"Olvidar «{XSS}»").click()
    tab.get_by_role("button", name="Sí, olvidar").click()
    tab.locator("#memory-status", has_text="Recuerdo olvidado.").wait_for()
    assert memory_items(tab, "mine") == ["Ana es alérgica a los frutos secos"]
    # A secret typed on the page is refused in Spanish.
    tab.get_by_label("Nuevo recuerdo").fill("El PIN de la tarjeta es 4821")
    tab.locator("#memory-add button[type=submit]").click()
    tab.locator("#memory-status", has_text="nunca guarda secretos").wait_for()
    # Forget all: only once BORRAR is typed; the household's stay.
    tab.get_by_role("button", name="Borrar todos mis recuerdos").click()
    confirm = tab.get_by_role("button", name="Borrar todos", exact=True)
    tab.locator("#memory-forget-all-word").fill("borrar")
    assert confirm.is_disabled()
    tab.locator("#memory-forget-all-word").fill("BORRAR")
    confirm.click()
    tab.locator("#memory-status", has_text="Olvidados 1 recuerdos.").wait_for()
    assert memory_items(tab, "mine") == []
    assert memory_items(tab, "family") == ["La abuela vive en Burgos"]
    # The pause switch: the page says so, and it stays paused after a reload.
    tab.get_by_label("Pausar la memoria").check()
    tab.locator("#memory-paused").wait_for()
    assert "no lee ni guarda nada" in tab.locator("#memory-paused").inner_text()
    assert tab.get_by_label("Nuevo recuerdo").is_disabled()
    assert api.get("/api/memories").json()["paused"] is True
    tab.reload()
    tab.get_by_role("button", name="Lo que Enlace recuerda").click()
    tab.locator("#memory-paused").wait_for()
    tab.get_by_label("Pausar la memoria").uncheck()
    tab.locator("#memory-paused").wait_for(state="hidden")
    assert api.get("/api/memories").json()["paused"] is False
    tab.get_by_role("button", name="Volver a la conversación").click()
    assert tab.locator("#chat").is_visible() and tab.locator("#memory").is_hidden()
    assert tab.dialogs == []


def test_an_answer_shows_what_it_remembered_and_where_to_fix_it(
    tab: Any, web_page: Callable[..., Any], model_server: Any
) -> None:
    model_server.script = model_server.remember_then_use()
    page = web_page()
    sign_in(tab, page.base)
    send(tab, "Recuerda que mi hija se llama Lucía")
    first = tab.locator(".msg.assistant").last
    first.locator(".text", has_text="Lo recordaré.").wait_for()
    assert first.locator(".searching").inner_text() == "Recordaré: «Mi hija se llama Lucía»"
    tab.get_by_role("button", name="Nueva conversación").click()
    send(tab, "¿Cómo se llama mi hija?")
    note = tab.locator(".msg.assistant .remembered")
    note.wait_for()
    assert note.inner_text().startswith("Recordé: «Mi hija se llama Lucía»")
    tab.reload()  # read back from the history
    tab.locator(".msg.assistant .remembered").wait_for()
    tab.get_by_role("button", name="Corregir", exact=True).click()
    tab.locator("#memory-mine .memory-text", has_text="Mi hija se llama Lucía").wait_for()
    meta = tab.locator("#memory-mine .meta").inner_text()
    assert "en una conversación" in meta and "Recuerda que mi hija se llama Lucía" in meta


def test_a_long_conversation_says_under_the_answer_what_was_left_out(
    tab: Any, web_page: Callable[..., Any], model_server: Any
) -> None:
    """A model whose context (its /v1/models says n_ctx) holds only the prompt and a question:
    the second answer of the conversation says, under it, that the first turn was left out; and
    still does when the conversation is opened again (a reload, or an answer that ended before
    the page followed it, which shows it from the history)."""
    model_server.server.reply_json(
        "/v1/models", 200, {"data": [{"id": "enlace-chat", "meta": {"n_ctx": 256}}]}
    )
    model_server.script = [model_server.say("Vale."), model_server.say("Sí.")]
    page = web_page()
    sign_in(tab, page.base)
    send(tab, "Primera pregunta")
    tab.locator(".msg.assistant .text", has_text="Vale.").wait_for()
    tab.locator("#send:enabled").wait_for()
    send(tab, "Segunda pregunta")
    second = tab.locator(".msg.assistant").last
    second.locator(".text", has_text="Sí.").wait_for()
    notice = second.get_by_text("no he tenido en cuenta la primera pregunta")
    notice.wait_for()
    assert notice.is_visible() and tab.locator(".msg.assistant").count() == 2
    tab.reload()
    second = tab.locator(".msg.assistant").last
    second.locator(".text", has_text="Sí.").wait_for()
    second.get_by_text("no he tenido en cuenta la primera pregunta").wait_for()
    first = tab.locator(".msg.assistant").first
    assert "no he tenido en cuenta" not in first.inner_text()


def test_an_answer_that_ended_before_the_page_followed_it_shows_all_it_said(
    tab: Any, web_page: Callable[..., Any], model_server: Any
) -> None:
    """A busy browser opens the answer's event stream after the answer has ended (the project's
    CI saw it): the page still shows what the answer asks («¿Lo recuerdo?», kept only in its
    events), not just the text from the history."""
    invented = "Ana cumple años el 3 de mayo"
    model_server.script = [
        model_server.call("recordar", {"texto": invented}),
        model_server.say("Hecho."),
    ]
    page = web_page()
    api = page.login("Ana")
    sign_in(tab, page.base)
    held: list[Any] = []
    tab.route("**/events", lambda route: held.append(route))
    send(tab, "¿Qué tiempo hará mañana?")
    while not held:
        tab.wait_for_timeout(20)
    cid = held[0].request.url.split("/")[-2]
    deadline = time.monotonic() + 10
    while api.get(f"/api/conversations/{cid}").json()["answering"]:
        assert time.monotonic() < deadline, "the answer did not end"
        time.sleep(0.02)
    held[0].continue_()
    answer = tab.locator(".msg.assistant").last
    answer.locator(".text", has_text="Hecho.").wait_for()
    assert answer.locator(".proposal").inner_text().startswith(f"¿Lo recuerdo? «{invented}»")
    assert tab.locator(".msg.assistant").count() == 1


def test_the_shopping_list_says_what_changed_once_it_shows_it(
    tab: Any, web_page: Callable[..., Any]
) -> None:
    """On a slow answer the list of before stays on screen: «Añadido» and «Quitado» come only
    with the list that shows them (the project's CI read a cleared list still holding «leche»);
    and of two lists that come back in the other order, the newer stays drawn."""
    page = web_page()
    sign_in(tab, page.base, "Ana")
    tab.get_by_role("button", name="Lista de la compra").click()
    tab.locator("#shopping-title").wait_for()
    held: list[Any] = []

    def hold_the_list(route: Any) -> None:
        if route.request.method == "GET":
            held.append(route)
        else:
            route.continue_()

    tab.route("**/api/shopping", hold_the_list)
    tab.get_by_label("Añadir a la lista").fill("leche")
    tab.get_by_role("button", name="Añadir", exact=True).click()
    while not held:
        tab.wait_for_timeout(20)
    tab.wait_for_timeout(300)  # the POST has been answered: only the list is held
    assert tab.locator("#shopping-status").inner_text() == ""
    held.pop().continue_()
    tab.locator("#shopping-status", has_text="Añadido: leche.").wait_for()
    assert tab.locator("#shopping-items .memory-text").all_inner_texts() == ["leche"]
    tab.unroute("**/api/shopping")

    # Two changes in a row whose lists come back in the other order: the older list (read before
    # «pan» was added) arrives last and must not be drawn over the newer one.
    late = answer_the_first_list_late(tab, "**/api/shopping")
    for thing in ("pan", "sal"):
        tab.get_by_label("Añadir a la lista").fill(thing)
        tab.get_by_role("button", name="Añadir", exact=True).click()
        while thing == "pan" and not late:
            tab.wait_for_timeout(20)
    tab.locator("#shopping-status", has_text="Añadido: sal.").wait_for()
    route, stale = late[0]
    route.fulfill(response=stale)
    tab.wait_for_timeout(300)
    assert tab.locator("#shopping-items .memory-text").all_inner_texts() == ["leche", "pan", "sal"]
    assert tab.locator("#shopping-status").inner_text() == "Añadido: sal."  # not the older one's
    tab.unroute("**/api/shopping")


def test_two_people_add_tick_and_clear_the_shopping_list_on_the_page(
    browser: Any, tab: Any, web_page: Callable[..., Any]
) -> None:
    """«Lista de la compra»: Ana adds and sees it; Bruno, in his own browser, sees the same list,
    ticks what he bought and clears it; Ana's page shows what is left."""
    page = web_page()
    sign_in(tab, page.base, "Ana")
    tab.get_by_role("button", name="Lista de la compra").click()
    tab.locator("#shopping-title").wait_for()
    for thing in ("leche", "pan"):
        tab.get_by_label("Añadir a la lista").fill(thing)
        tab.get_by_role("button", name="Añadir", exact=True).click()
        tab.locator("#shopping-status", has_text=f"Añadido: {thing}.").wait_for()
    items = tab.locator("#shopping-items .memory-text")
    assert items.all_inner_texts() == ["leche", "pan"]

    other = browser.new_context(viewport=DESKTOP, locale="es-ES").new_page()
    other.set_default_timeout(15_000)
    sign_in(other, page.base, "Bruno")
    other.get_by_role("button", name="Lista de la compra").click()
    other.locator("#shopping-items .memory-text", has_text="pan").wait_for()
    assert other.locator("#shopping-items .memory-text").all_inner_texts() == ["leche", "pan"]
    other.locator(".shopping-item", has_text="leche").get_by_role("checkbox").check()
    other.locator(".shopping-item.done", has_text="leche").wait_for()
    other.get_by_role("button", name="Quitar lo ya comprado").click()
    other.locator("#shopping-status", has_text="Quitado 1 artículo comprado.").wait_for()
    assert other.locator("#shopping-items .memory-text").all_inner_texts() == ["pan"]
    other.context.close()

    tab.reload()
    tab.get_by_role("button", name="Lista de la compra").click()
    tab.locator("#shopping-items .memory-text", has_text="pan").wait_for()
    assert tab.locator("#shopping-items .memory-text").all_inner_texts() == ["pan"]
    assert tab.dialogs == []


def test_the_memory_list_loads_more_on_demand_and_says_who_changed_one(
    tab: Any, web_page: Callable[..., Any]
) -> None:
    page = web_page(assistant={"memory": {"page_memories": 3}})
    ana, bruno = page.login("Ana"), page.login("Bruno")
    for n in range(4):
        assert ana.post("/api/memories", json={"text": f"Nota {n}"}).status_code == 201
    family = {"text": "La abuela vive en Soria", "scope": "familia"}
    soria = ana.post("/api/memories", json=family).json()["memory"]
    bruno.patch(f"/api/memories/{soria['id']}", json={"text": "La abuela vive en Burgos"})
    sign_in(tab, page.base)
    tab.get_by_role("button", name="Lo que Enlace recuerda").click()
    tab.locator("#memory-family .memory-text").first.wait_for()
    assert memory_items(tab, "family") == ["La abuela vive en Burgos"]
    assert memory_items(tab, "mine") == ["Nota 3", "Nota 2"]  # a page of 3
    meta = tab.locator("#memory-family .meta").inner_text()
    assert meta.startswith("Ana · ") and "cambiado por Bruno" in meta
    more = tab.get_by_role("button", name="Ver más recuerdos")
    more.click()
    tab.locator("#memory-mine .memory-text", has_text="Nota 0").wait_for()
    assert memory_items(tab, "mine") == ["Nota 3", "Nota 2", "Nota 1", "Nota 0"]
    assert more.is_hidden() and tab.locator("#memory .empty").count() == 0


def test_a_memory_no_one_asked_for_is_a_question_on_the_page(
    tab: Any, web_page: Callable[..., Any], model_server: Any
) -> None:
    """Issue 37: asked the weather, the model calls `recordar` with an invented birthday; the
    answer asks «¿Lo recuerdo? «…»» and nothing is kept until «Sí»; «No» keeps nothing; an
    `olvidar` no one asked for is asked the same way («¿Lo olvido?»)."""
    invented = "Ana cumple años el 3 de mayo"
    model_server.script = [
        model_server.call("recordar", {"texto": invented}),
        model_server.say("Mañana hará sol."),
        model_server.call("recordar", {"texto": "Ana vive en Marte"}),
        model_server.say("Hará frío."),
        model_server.call("olvidar", {"recuerdo": invented}),
        model_server.say("Es el 3 de mayo."),
    ]
    page = web_page()
    api = page.login("Ana")
    sign_in(tab, page.base)

    def listed() -> list[str]:
        return [m["text"] for m in api.get("/api/memories").json()["memories"]]

    send(tab, "¿Qué tiempo hará mañana en Zaragoza?")
    answer = tab.locator(".msg.assistant").last
    answer.locator(".text", has_text="Mañana hará sol.").wait_for()
    tab.locator("#send:enabled").wait_for()
    proposal = answer.locator(".proposal")
    assert proposal.inner_text().startswith(f"¿Lo recuerdo? «{invented}»")
    assert listed() == []  # nothing kept while the person has not answered
    proposal.get_by_role("button", name="Sí", exact=True).click()
    proposal.get_by_text("Recuerdo guardado.").wait_for()
    assert listed() == [invented]

    send(tab, "¿Y pasado mañana?")
    answer = tab.locator(".msg.assistant").last
    answer.locator(".text", has_text="Hará frío.").wait_for()
    tab.locator("#send:enabled").wait_for()
    answer.locator(".proposal").get_by_role("button", name="No", exact=True).click()
    answer.locator(".proposal").wait_for(state="detached")
    assert listed() == [invented]

    send(tab, "¿Cuándo es mi cumpleaños?")
    answer = tab.locator(".msg.assistant").last
    answer.locator(".text", has_text="Es el 3 de mayo.").wait_for()
    proposal = answer.locator(".proposal")
    assert proposal.inner_text().startswith(f"¿Lo olvido? «{invented}»")
    assert listed() == [invented]
    proposal.get_by_role("button", name="Sí", exact=True).click()
    proposal.get_by_text("Recuerdo olvidado.").wait_for()
    assert listed() == []
    assert tab.dialogs == []


def test_after_a_household_memory_the_form_is_back_on_the_persons_own(
    tab: Any, web_page: Callable[..., Any]
) -> None:
    """Issue 37: after «Para toda la familia» is saved, the next memory is the person's own
    unless they choose again."""
    page = web_page()
    sign_in(tab, page.base)
    tab.get_by_role("button", name="Lo que Enlace recuerda").click()
    scope = tab.get_by_label("Para quién")
    assert scope.input_value() == "personal"
    tab.get_by_label("Nuevo recuerdo").fill("La abuela vive en Soria")
    scope.select_option("familia")
    tab.locator("#memory-add button[type=submit]").click()
    tab.locator("#memory-family .memory-text", has_text="Soria").wait_for()
    assert scope.input_value() == "personal"
    tab.get_by_label("Nuevo recuerdo").fill("Ana es alérgica a los frutos secos")
    tab.locator("#memory-add button[type=submit]").click()
    tab.locator("#memory-mine .memory-text", has_text="frutos secos").wait_for()
    assert memory_items(tab, "family") == ["La abuela vive en Soria"]


# ------------------------------------------------------------------ scrolling (issue 37)
RECIPE = "\n\n".join(
    f"Paso {i}: bate los huevos, pela las patatas y ten paciencia con el fuego." for i in range(30)
)
WHERE = """() => {
  const box = (s) => document.querySelector(s).getBoundingClientRect();
  const answers = document.querySelectorAll('.msg.assistant');
  const answer = answers[answers.length - 1].getBoundingClientRect();
  return {answer_bottom: answer.bottom, ask_top: box('#ask').top, bar: box('.bar').bottom,
          new_top: box('#new').top, side_bottom: box('#side').bottom, inner: innerHeight,
          scroll: scrollY, text: answers[answers.length - 1].textContent.length};
}"""


def where(tab: Any) -> dict[str, float]:
    return tab.evaluate(WHERE)


def in_view_above_the_question_box(found: dict[str, float]) -> bool:
    return found["bar"] < found["answer_bottom"] <= found["ask_top"] + 1


def a_long_answer_then_another(
    tab: Any, web_page: Callable[..., Any], model_server: Any, size: dict[str, int]
) -> dict[str, float]:
    """At `size`, a long answer to the end (where things are then), then a second question whose
    answer streams slowly (15 pieces, 0.15 s apart)."""
    model_server.script = [
        model_server.say(RECIPE),
        model_server.say(RECIPE, pieces=15, delay=0.15),
    ]
    tab.set_viewport_size(size)
    page = web_page()
    sign_in(tab, page.base)
    send(tab, "¿Cómo se hace la tortilla?")
    tab.locator(".msg.assistant .text", has_text="Paso 29").wait_for()
    tab.locator("#send:enabled").wait_for()
    first = where(tab)
    send(tab, "¿Y otra vez?")
    return first


@pytest.mark.parametrize("size", [PHONE, DESKTOP], ids=["phone", "desktop"])
def test_the_newest_turn_stays_in_view_while_it_streams_and_the_sidebar_stays_put(
    tab: Any, web_page: Callable[..., Any], model_server: Any, size: dict[str, int]
) -> None:
    """A long answer, then another streamed slowly: while it is written its newest lines stay
    in view above the question box (never under it, never below the fold), and at the end too;
    on the desktop the sidebar's buttons stay on screen however long the conversation."""
    first = a_long_answer_then_another(tab, web_page, model_server, size)
    tab.locator(".msg.assistant >> nth=1 >> .text", has_text="Paso 10").wait_for()
    streaming = where(tab)
    out = ARTIFACTS / "web"  # mid-answer, as docs/web/scroll-*.png show it
    out.mkdir(parents=True, exist_ok=True)
    tab.screenshot(path=str(out / f"scroll-{'desktop' if size == DESKTOP else 'phone'}.png"))
    tab.locator("#send:enabled").wait_for()
    ended = where(tab)
    assert streaming["text"] < ended["text"]  # it was read while still being written
    for found in (first, streaming, ended):
        assert in_view_above_the_question_box(found), found
    if size == DESKTOP:
        for found in (first, streaming, ended):
            assert found["scroll"] > 0 and found["bar"] - 1 <= found["new_top"], found
            assert found["side_bottom"] <= found["inner"] + 1, found


@pytest.mark.parametrize("size", [PHONE, DESKTOP], ids=["phone", "desktop"])
def test_a_person_who_scrolled_up_is_not_yanked_down_by_the_answer(
    tab: Any, web_page: Callable[..., Any], model_server: Any, size: dict[str, int]
) -> None:
    a_long_answer_then_another(tab, web_page, model_server, size)
    tab.locator(".msg.assistant >> nth=1 >> .text", has_text="Paso 2").wait_for()
    tab.mouse.move(size["width"] // 2, size["height"] // 2)
    tab.mouse.wheel(0, -600)  # the person goes back up to read the first answer
    tab.wait_for_timeout(400)
    read_at = where(tab)
    tab.locator("#send:enabled").wait_for()
    ended = where(tab)
    assert abs(ended["scroll"] - read_at["scroll"]) <= 2, (read_at, ended)
    assert ended["answer_bottom"] > ended["inner"]  # the rest of the answer waits below
    tab.mouse.wheel(0, 100_000)  # back down: the end of the answer is there
    tab.wait_for_timeout(400)
    assert in_view_above_the_question_box(where(tab))
