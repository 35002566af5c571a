"""Shared helpers for enlace-agent's tests: the captured pages, a real HTTP server on 127.0.0.1,
and an isolated environment (XDG folders in tmp, no key, no proxy)."""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import socket
import struct
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

FIXTURES = Path(__file__).parent / "fixtures"
FAKE_KEY = "BSA-fake-key-7f3a9c-DO-NOT-LEAK"


@pytest.fixture
def fixtures_dir() -> Path:
    """The pages written for these tests (following the real structures)."""
    return FIXTURES


@pytest.fixture
def fake_key() -> str:
    """A recognisable fake Brave key: the leak tests look for it in every output."""
    return FAKE_KEY


@pytest.fixture
def search_data() -> Path:
    """The real captured responses in $ENLACE_SHARED_DATA/search (skip when absent)."""
    root = os.environ.get("ENLACE_SHARED_DATA")
    if not root:
        pytest.skip(
            "ENLACE_SHARED_DATA is not set: the real captured search pages are not available"
        )
    path = Path(root) / "search"
    if not path.is_dir():
        pytest.skip(f"{path} does not exist: the real captured search pages are not available")
    return path


Handler = Callable[["RequestHandler"], None]


@dataclass
class Recorded:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes


@dataclass
class LocalServer:
    """A threaded HTTP server; `routes[path] = handler(request_handler)` decides each answer."""

    server: ThreadingHTTPServer
    routes: dict[str, Handler] = field(default_factory=lambda: {})
    requests: list[Recorded] = field(default_factory=lambda: [])
    stop: threading.Event = field(default_factory=threading.Event)

    @property
    def base(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host!s}:{port}"

    def url(self, path: str) -> str:
        return self.base + path

    # Routes (tests reach the helpers through the fixture: conftest is not importable).
    def reply(
        self,
        path: str,
        status: int,
        body: bytes | str,
        content_type: str = "text/html; charset=UTF-8",
        headers: dict[str, str] | None = None,
    ) -> str:
        self.routes[path] = reply(status, body, content_type, headers)
        return self.url(path)

    def reply_json(
        self, path: str, status: int, data: Any, headers: dict[str, str] | None = None
    ) -> str:
        self.routes[path] = reply_json(status, data, headers)
        return self.url(path)

    def endless(self, path: str, pause: float = 0.02) -> str:
        self.routes[path] = endless(pause=pause)
        return self.url(path)

    def silent(self, path: str, seconds: float = 30.0) -> str:
        self.routes[path] = silent(seconds)
        return self.url(path)

    def handle(self, path: str, handler: Handler) -> str:
        self.routes[path] = handler
        return self.url(path)


class RequestHandler(BaseHTTPRequestHandler):
    server_ref: LocalServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def handle(self) -> None:  # a client that hangs up (on purpose, in tests) is no news
        with contextlib.suppress(ConnectionResetError, BrokenPipeError):
            super().handle()

    def _handle(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        body = self.rfile.read(length) if length else b""
        path = self.path.split("?", 1)[0]
        owner: LocalServer = self.server.owner  # type: ignore[attr-defined]
        owner.requests.append(Recorded(self.command, self.path, dict(self.headers.items()), body))
        self.request_body = body
        handler = owner.routes.get(path)
        if handler is None:
            send(self, 404, b"not found", "text/plain")
            return
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            handler(self)

    do_GET = _handle
    do_POST = _handle


def send(
    h: BaseHTTPRequestHandler,
    status: int,
    body: bytes | str,
    content_type: str = "text/html; charset=UTF-8",
    headers: dict[str, str] | None = None,
) -> None:
    data = body.encode() if isinstance(body, str) else body
    h.send_response(status)
    h.send_header("Content-Type", content_type)
    h.send_header("Content-Length", str(len(data)))
    for k, v in (headers or {}).items():
        h.send_header(k, v)
    h.end_headers()
    h.wfile.write(data)


def reply(
    status: int,
    body: bytes | str,
    content_type: str = "text/html; charset=UTF-8",
    headers: dict[str, str] | None = None,
) -> Handler:
    return lambda h: send(h, status, body, content_type, headers)


def reply_json(status: int, data: Any, headers: dict[str, str] | None = None) -> Handler:
    return reply(status, json.dumps(data), "application/json", headers)


def endless(chunk: bytes = b"<p>" + b"x" * 100 + b"</p>\n", pause: float = 0.02) -> Handler:
    """A 200 whose chunked body never ends (until the client goes away or the test ends)."""

    def handler(h: BaseHTTPRequestHandler) -> None:
        h.send_response(200)
        h.send_header("Content-Type", "text/html; charset=UTF-8")
        h.send_header("Transfer-Encoding", "chunked")
        h.end_headers()
        owner: LocalServer = h.server.owner  # type: ignore[attr-defined]
        while not owner.stop.is_set():
            h.wfile.write(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
            h.wfile.flush()
            time.sleep(pause)

    return handler


def silent(seconds: float) -> Handler:
    """Accept the request, then say nothing for `seconds` (or until the test ends)."""

    def handler(h: BaseHTTPRequestHandler) -> None:
        owner: LocalServer = h.server.owner  # type: ignore[attr-defined]
        owner.stop.wait(seconds)

    return handler


def _start_server() -> LocalServer:
    server = ThreadingHTTPServer(("127.0.0.1", 0), RequestHandler)
    server.daemon_threads = True
    owner = LocalServer(server)
    server.owner = owner  # type: ignore[attr-defined]
    threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
    ).start()
    return owner


# One DuckDuckGo Lite result (Zaragoza's weather tomorrow), short enough for the smoke chat model's
# context beside the tool specs, the question and the call: what every search of the real-model
# tests and of benchmarks/bench_home_memory.py gets.
WEATHER_PAGE = """<html><body><table>
<tr><td valign="top">1.&nbsp;</td><td><a rel="nofollow" class='result-link'
 href="https://www.aemet.es/es/eltiempo/prediccion/municipios/zaragoza-id50297">Zaragoza - AEMET</a></td></tr>
<tr><td>&nbsp;</td><td class='result-snippet'>Mañana en Zaragoza: soleado, máxima de 24 grados.</td></tr>
<tr><td>&nbsp;</td><td><span class='link-text'>www.aemet.es</span></td></tr>
</table></body></html>"""


def weather_search(server: LocalServer, path: Path) -> Path:
    """A search config at `path` whose one provider, DuckDuckGo, is `server` serving WEATHER_PAGE."""
    url = server.reply("/lite/", 200, WEATHER_PAGE.encode())
    path.write_text(json.dumps({"providers": ["duckduckgo"], "duckduckgo": {"endpoint": url}}))
    return path


@pytest.fixture
def weather_search_config(http_server: LocalServer, tmp_path: Path) -> Path:
    """tmp_path/search.yaml: `weather_search` on this test's local server."""
    return weather_search(http_server, tmp_path / "search.yaml")


@pytest.fixture
def http_server() -> Iterator[LocalServer]:
    owner = _start_server()
    yield owner
    owner.stop.set()
    owner.server.shutdown()
    owner.server.server_close()


@pytest.fixture
def other_server() -> Iterator[LocalServer]:
    """A second server: another origin, for redirects."""
    owner = _start_server()
    yield owner
    owner.stop.set()
    owner.server.shutdown()
    owner.server.server_close()


@pytest.fixture
def refused_url() -> str:
    """A URL on 127.0.0.1 where nothing listens."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    return f"http://127.0.0.1:{port}/nothing"


@pytest.fixture
def clean_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """os.environ without the key or proxies, with XDG folders inside tmp_path."""
    for name in list(os.environ):
        if name.upper() in {
            "BRAVE_SEARCH_API_KEY",
            "HTTP_PROXY",
            "HTTPS_PROXY",
            "ALL_PROXY",
            "NO_PROXY",
        }:
            monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    return dict(os.environ)


# ------------------------------------------------------------------- a scripted model server

Step = Callable[[BaseHTTPRequestHandler, dict[str, Any]], None]


def _chunk(h: BaseHTTPRequestHandler, data: bytes) -> None:
    h.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
    h.wfile.flush()


def _delta(delta: dict[str, Any], finish: str | None = None) -> str:
    return json.dumps(
        {
            "id": "chatcmpl-test",
            "object": "chat.completion.chunk",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }
    )


@dataclass
class ScriptedModel:
    """An OpenAI-compatible server on 127.0.0.1 that plays a model: each POST to
    /v1/chat/completions takes the next step of `script` (and records the request's JSON body)."""

    server: LocalServer
    script: list[Step] = field(default_factory=lambda: [])
    bodies: list[dict[str, Any]] = field(default_factory=lambda: [])

    @property
    def base_url(self) -> str:
        return self.server.url("/v1")

    def _handle(self, h: BaseHTTPRequestHandler) -> None:
        body = json.loads(h.request_body)  # type: ignore[attr-defined]
        self.bodies.append(body)
        step = self.script.pop(0) if self.script else self.say("(fin del guion)")
        step(h, body)

    # --- steps
    def sse(self, payloads: list[str], *, delay: float = 0.0) -> Step:
        def step(h: BaseHTTPRequestHandler, body: dict[str, Any]) -> None:
            h.send_response(200)
            h.send_header("Content-Type", "text/event-stream")
            h.send_header("Transfer-Encoding", "chunked")
            h.end_headers()
            for payload in [*payloads, "[DONE]"]:
                _chunk(h, f"data: {payload}\n\n".encode())
                time.sleep(delay)
            h.wfile.write(b"0\r\n\r\n")

        return step

    def say(self, text: str, *, pieces: int = 3, delay: float = 0.0) -> Step:
        """Answer `text` (streamed in `pieces` when the request streams)."""
        size = max(1, -(-len(text) // pieces))
        parts = [text[i : i + size] for i in range(0, len(text), size)]
        streamed = self.sse(
            [
                _delta({"role": "assistant"}),
                *(_delta({"content": p}) for p in parts),
                _delta({}, "stop"),
            ],
            delay=delay,
        )

        def step(h: BaseHTTPRequestHandler, body: dict[str, Any]) -> None:
            if body.get("stream"):
                streamed(h, body)
                return
            message = {"role": "assistant", "content": text}
            send(h, 200, json.dumps(_completion(message, "stop")), "application/json")

        return step

    def call(self, name: str, arguments: dict[str, Any] | str, *, call_id: str = "c1") -> Step:
        """A structured tool call (arguments streamed in two fragments)."""
        args = arguments if isinstance(arguments, str) else json.dumps(arguments)
        half = len(args) // 2
        first = {"index": 0, "id": call_id, "type": "function"}
        streamed = self.sse(
            [
                _delta({"tool_calls": [{**first, "function": {"name": name, "arguments": ""}}]}),
                _delta({"tool_calls": [{"index": 0, "function": {"arguments": args[:half]}}]}),
                _delta({"tool_calls": [{"index": 0, "function": {"arguments": args[half:]}}]}),
                _delta({}, "tool_calls"),
            ]
        )

        def step(h: BaseHTTPRequestHandler, body: dict[str, Any]) -> None:
            if body.get("stream"):
                streamed(h, body)
                return
            call = {**first, "function": {"name": name, "arguments": args}}
            message = {"role": "assistant", "content": None, "tool_calls": [call]}
            send(h, 200, json.dumps(_completion(message, "tool_calls")), "application/json")

        return step

    def remember_then_use(self) -> list[Step]:
        """The memory's round trip (issue 27): the model calls `recordar` for «Mi hija se llama
        Lucía», says it will remember, and answers the next question with it."""
        return [
            self.call("recordar", {"texto": "Mi hija se llama Lucía"}),
            self.say("Lo recordaré."),
            self.say("Tu hija se llama Lucía."),
        ]

    def drop(self) -> Step:
        """Start streaming, then close the connection in the middle of a chunk."""

        def step(h: BaseHTTPRequestHandler, body: dict[str, Any]) -> None:
            h.send_response(200)
            h.send_header("Content-Type", "text/event-stream")
            h.send_header("Transfer-Encoding", "chunked")
            h.end_headers()
            _chunk(h, f"data: {_delta({'content': 'Empiezo a'})}\n\n".encode())
            h.wfile.write(b"40\r\ndata: {")
            h.wfile.flush()
            h.close_connection = True
            h.connection.shutdown(socket.SHUT_RDWR)

        return step

    def endless(
        self, piece: str, *, head: str = "", content_type: str = "text/event-stream"
    ) -> Step:
        """A model that never stops writing: `head`, then `piece` over and over (chunked) until the
        client hangs up or the test ends."""

        def step(h: BaseHTTPRequestHandler, body: dict[str, Any]) -> None:
            h.send_response(200)
            h.send_header("Content-Type", content_type)
            h.send_header("Transfer-Encoding", "chunked")
            h.end_headers()
            if head:
                _chunk(h, head.encode())
            data = piece.encode() * max(1, 16_384 // len(piece.encode()))
            while not self.server.stop.is_set():
                _chunk(h, data)

        return step

    def status(self, code: int, data: Any) -> Step:
        def step(h: BaseHTTPRequestHandler, body: dict[str, Any]) -> None:
            send(h, code, json.dumps(data), "application/json")

        return step

    def raw(self, text: str) -> Step:
        def step(h: BaseHTTPRequestHandler, body: dict[str, Any]) -> None:
            send(h, 200, text, "application/json")

        return step

    def within_context(self, n_ctx: int, step: Step, *, chars_per_token: int = 4) -> Step:
        """llama-server with a context of `n_ctx` tokens: a request whose messages and tools
        count more (one token per `chars_per_token` characters of their JSON) gets its HTTP 400
        `exceed_context_size_error`, with the counts, and the step stays for the next request;
        one that fits is answered by `step`."""

        def fits(h: BaseHTTPRequestHandler, body: dict[str, Any]) -> None:
            sent = json.dumps([body["messages"], body.get("tools")], ensure_ascii=False)
            tokens = len(sent) // chars_per_token
            if tokens < n_ctx:
                step(h, body)
                return
            self.script.insert(0, fits)
            said = f"request ({tokens} tokens) exceeds the available context size ({n_ctx} tokens)"
            error = {"code": 400, "message": said + ", try increasing it"}
            error |= {"type": "exceed_context_size_error", "n_prompt_tokens": tokens}
            send(h, 400, json.dumps({"error": error | {"n_ctx": n_ctx}}), "application/json")

        return fits


def _completion(message: dict[str, Any], finish: str) -> dict[str, Any]:
    return {
        "id": "chatcmpl-test",
        "object": "chat.completion",
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
    }


@pytest.fixture
def model_server() -> Iterator[ScriptedModel]:
    owner = _start_server()
    model = ScriptedModel(owner)
    owner.routes["/v1/chat/completions"] = model._handle  # pyright: ignore[reportPrivateUsage]
    owner.routes["/v1/models"] = reply_json(
        200, {"object": "list", "data": [{"id": "enlace-chat"}]}
    )
    yield model
    owner.stop.set()
    owner.server.shutdown()
    owner.server.server_close()


@dataclass
class Ran:
    returncode: int
    stdout: str
    stderr: str


# The loggers a CLI's set-up touches: the root's handler and level (cli/common.py), httpx's level,
# and those `serve` raises for the service's journal (cli/web.py).
LOGGERS_THE_CLIS_SET = (
    "",
    "httpx",
    "enlace_agent.web.access",
    "enlace_agent.assistant.tools",
    "enlace_agent.snapshot",
)


@pytest.fixture(autouse=True)
def logging_restored() -> Iterator[None]:
    """Every test leaves logging as it found it. A CLI's main run in this process puts a root
    handler on the test's sys.stderr, which pytest closes after the test: left there, a later
    test's server thread wrote its request line into the closed stream
    (test_agent_logging_left_behind.py)."""
    saved = [
        (lg, list(lg.handlers), lg.level) for lg in map(logging.getLogger, LOGGERS_THE_CLIS_SET)
    ]
    yield
    for logger, handlers, level in saved:
        logger.handlers[:] = handlers
        logger.setLevel(level)


@pytest.fixture
def in_process(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, clean_env: dict[str, str]
) -> Iterator[Callable[..., Ran]]:
    """`run(main, *argv, stdin="")`: a CLI's `main` in this process (cheap; a subprocess stays for
    what needs one), its logging set-up undone afterwards (`logging_restored`)."""

    def run(main: Callable[[list[str]], int], *args: str, stdin: str = "") -> Ran:
        monkeypatch.setattr("sys.stdin", io.StringIO(stdin))
        capsys.readouterr()
        try:
            code = main(list(args))
        except SystemExit as exc:  # argparse
            code = int(exc.code or 0)
        out, err = capsys.readouterr()
        return Ran(code, out, err)

    yield run


@pytest.fixture
def assistant_files(
    http_server: LocalServer, model_server: ScriptedModel, tmp_path: Path
) -> dict[str, Path]:
    """{"assistant": assistant.yaml at the scripted model, "search": its search.yaml, asking the
    local DuckDuckGo Lite page}: the files `enlace-assistant --config` runs with."""
    url = http_server.reply("/lite/", 200, (FIXTURES / "ddg_lite_results_es.html").read_bytes())
    search = tmp_path / "search.yaml"
    search.write_text(json.dumps({"providers": ["duckduckgo"], "duckduckgo": {"endpoint": url}}))
    assistant = tmp_path / "assistant.yaml"
    assistant.write_text(
        json.dumps({"base_url": model_server.base_url, "search_config": str(search)})
    )
    return {"assistant": assistant, "search": search}


@pytest.fixture
def search_tool(http_server: LocalServer, tmp_path: Path) -> Any:
    """The real search tool, its chain asking a local DuckDuckGo Lite page (results in Spanish)."""
    from enlace_config.schema.agent import SearchConfig

    from enlace_agent.search.chain import SearchChain
    from enlace_agent.tools.search import SearchTool

    url = http_server.reply("/lite/", 200, (FIXTURES / "ddg_lite_results_es.html").read_bytes())
    config = SearchConfig.model_validate(
        {
            "providers": ["duckduckgo"],
            "duckduckgo": {"endpoint": url},
            "state_file": str(tmp_path / "state.json"),
        }
    )
    return SearchTool(SearchChain(config, env={}))


# ------------------------------------------------------------------- the family web page

FAMILY = [{"name": "Ana"}, {"name": "Bruno"}]


@dataclass
class WebPage:
    """`enlace-assistant serve`'s app on 127.0.0.1 (uvicorn in a thread) over the scripted model."""

    base: str
    app: Any
    server: Any
    thread: threading.Thread

    def client(self) -> Any:
        import httpx

        return httpx.Client(base_url=self.base, timeout=30)

    def login(self, name: str, token: str = "") -> Any:
        """A signed-in client whose writes carry the session's CSRF header, as the page's do."""
        client = self.client()
        answer = client.post("/api/login", json={"name": name, "token": token})
        assert answer.status_code == 200, answer.text
        client.headers["X-Enlace-CSRF"] = client.get("/api/me").json()["csrf"]
        return client

    @staticmethod
    def ask(client: Any, text: str, cid: str | None = None) -> str:
        """Asks `text` as the page does (in conversation `cid`, else a new one); its id."""
        path = f"/api/conversations/{cid}/messages" if cid else "/api/conversations"
        answer = client.post(path, json={"text": text})
        assert answer.status_code == 202, answer.text
        return answer.json()["id"]

    @staticmethod
    def events(client: Any, cid: str) -> list[dict[str, Any]]:
        """The answer's events, read from its stream until the final one."""
        found: list[dict[str, Any]] = []
        with client.stream("GET", f"/api/conversations/{cid}/events") as response:
            assert response.status_code == 200
            for line in response.iter_lines():
                if line.startswith("data: "):
                    found.append(json.loads(line[6:]))
                    if found[-1]["type"] in ("end", "error", "idle"):
                        break
        return found

    def answered(self, client: Any, *questions: str) -> list[str]:
        """One new conversation per question, each answered to the end; their ids."""
        ids = [self.ask(client, q) for q in questions]
        for cid in ids:
            self.events(client, cid)
        return ids

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(10)


def serve_in_thread(app: Any) -> WebPage:
    """Serves `app` with uvicorn on a free port of 127.0.0.1, in a thread (also used by
    benchmarks/bench_web.py)."""
    import uvicorn

    server = uvicorn.Server(
        uvicorn.Config(
            app, host="127.0.0.1", port=0, log_config=None, access_log=False, lifespan="off"
        )
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        assert time.monotonic() < deadline, "the web page did not start"
        time.sleep(0.02)
    port = server.servers[0].sockets[0].getsockname()[1]
    return WebPage(f"http://127.0.0.1:{port}", app, server, thread)


def start_model_server() -> ScriptedModel:
    """A scripted model on 127.0.0.1 outside pytest (the benchmark's); stop it with
    `.server.server.shutdown()`."""
    owner = _start_server()
    model = ScriptedModel(owner)
    owner.routes["/v1/chat/completions"] = model._handle  # pyright: ignore[reportPrivateUsage]
    return model


@pytest.fixture
def web_page(
    model_server: ScriptedModel, search_tool: Any, tmp_path: Path
) -> Iterator[Callable[..., WebPage]]:
    """`start(people=..., env=..., assistant={...}, **web)` serves the page; stopped at the end."""
    from enlace_config.schema.agent import AssistantConfig

    from enlace_agent.assistant import Assistant, build_client
    from enlace_agent.tools.protocol import Services
    from enlace_agent.web import build_app

    started: list[WebPage] = []

    def start(
        people: list[dict[str, Any]] | None = None,
        env: dict[str, str] | None = None,
        assistant: dict[str, Any] | None = None,
        **web: Any,
    ) -> WebPage:
        web = {"people": FAMILY if people is None else people, **web}
        web.setdefault("database", str(tmp_path / "web.sqlite3"))
        config = AssistantConfig.model_validate(
            {"base_url": model_server.base_url, "web": web, **(assistant or {})}
        )
        services = Services(search_tool.chain)  # what health reads, as build_assistant sets it
        loop = Assistant(
            build_client(config, {}), tools=[search_tool], config=config, services=services
        )
        page = serve_in_thread(build_app(loop, env or {}))
        started.append(page)
        return page

    yield start
    for page in started:
        page.stop()


@pytest.fixture
def answer_events() -> Callable[[Any, str], list[dict[str, Any]]]:
    """`WebPage.events`, for a client of a page served by a real process (`serve_process`)."""
    return WebPage.events


@pytest.fixture
def serve_process() -> Iterator[Callable[[Path, dict[str, str], int], Any]]:
    """`start(config, env, port)`: `enlace-assistant serve --config CONFIG` as a real process
    (stderr piped), returned once its page answers on 127.0.0.1:PORT; killed at the end if it
    still runs."""
    import subprocess
    import sys

    import httpx

    started: list[subprocess.Popen[str]] = []

    def start(config: Path, env: dict[str, str], port: int) -> subprocess.Popen[str]:
        command = [sys.executable, "-m", "enlace_agent.cli.assistant", "serve", "--config"]
        process = subprocess.Popen(
            [*command, str(config)], env=env, stderr=subprocess.PIPE, text=True
        )
        started.append(process)
        deadline = time.monotonic() + 30
        while True:
            try:
                httpx.get(f"http://127.0.0.1:{port}/api/people", timeout=2)
                return process
            except httpx.TransportError:
                if process.poll() is not None or time.monotonic() > deadline:
                    process.kill()
                    err = process.communicate()[1]
                    raise AssertionError(f"serve did not start:\n{err}") from None
                time.sleep(0.1)

    yield start
    for process in started:
        if process.poll() is None:
            process.kill()
        if process.stderr is not None and not process.stderr.closed:
            process.stderr.close()
        process.wait(20)


# ------------------------------------------------------------------- model files (GGUF)


def _gguf_str(text: str) -> bytes:
    data = text.encode()
    return struct.pack("<Q", len(data)) + data


def write_gguf(path: Path, name: str = "enlace-chat", *, cut: int = 0, rows: int = 4) -> Path:
    """A small valid GGUF v3 (standard library): three general.* keys and one f32 tensor
    (rows x 4); `cut` bytes off its end."""
    s = _gguf_str
    kvs = [
        s("general.architecture") + struct.pack("<I", 8) + s("llama"),
        s("general.name") + struct.pack("<I", 8) + s(name),
        s("general.languages") + struct.pack("<IIQ", 9, 8, 1) + s("es"),
        s("llama.block_count") + struct.pack("<II", 4, 2),
    ]
    tensor = s("token_embd.weight") + struct.pack("<IQQ", 2, 4, rows) + struct.pack("<IQ", 0, 0)
    head = b"GGUF" + struct.pack("<IQQ", 3, 1, len(kvs)) + b"".join(kvs) + tensor
    head += b"\0" * (-len(head) % 32)
    data = head + struct.pack(f"<{4 * rows}f", *range(4 * rows))
    path.write_bytes(data[: len(data) - cut] if cut else data)
    return path


@pytest.fixture
def gguf() -> Callable[..., Path]:
    """`gguf(path, name="enlace-chat", cut=0, rows=4)`: writes a small valid GGUF model file."""
    return write_gguf
