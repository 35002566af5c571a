"""Around every request: `PageGuard`, the outermost layer (the page's own hosts and origins
only, the security headers on every response, the access log), the names and origins it
accepts, and the framework's own errors and faults answered in Spanish JSON."""

from __future__ import annotations

import ipaddress
import logging
import time
from collections.abc import Mapping

from enlace_config.schema.agent import LOOPBACK_HOSTS, WebConfig
from starlette.datastructures import Headers, MutableHeaders
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from enlace_agent.tools.protocol import preview
from enlace_agent.web.core import BAD_REQUEST

# One line per request (method, path, status, milliseconds): never a body, a query or a header.
access = logging.getLogger("enlace_agent.web.access")

SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; script-src 'self'; style-src 'self'; "
    "img-src 'self'; connect-src 'self'; object-src 'none'; base-uri 'none'; "
    "form-action 'self'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-store",
}
HOST_REFUSED = (
    "Esta página no responde a ese nombre. Ábrela con la dirección que muestra "
    "«enlace-assistant serve» (o añade el nombre a web.allowed_hosts en assistant.yaml)."
)
ORIGIN_REFUSED = "Petición rechazada: viene de otra página."
NOT_FOUND = "Esa dirección no existe en Enlace."
METHOD_REFUSED = "Esa dirección no admite esta operación."
SERVER_FAULT = (
    "Enlace ha tenido un problema interno. Inténtalo de nuevo; si se repite, avisa a quien cuida "
    "el servidor."
)
WILDCARD_HOSTS = ("0.0.0.0", "::", "")


def logged_path(scope: Scope) -> str:
    """The request's path as the access log writes it: the route's parameters by their names
    (`/api/conversations/{cid}/events`, `/api/memories/{mid}`), so the log says what was asked,
    never of which conversation or memory; of a path no route matched (or refused before
    routing), its first two parts."""
    params: Mapping[str, object] = scope.get("path_params") or {}
    parts: list[str] = scope["path"].split("/")
    if "endpoint" not in scope:
        return "/".join(parts[:3]) + ("/…" if len(parts) > 3 else "")
    names = {str(v): k for k, v in params.items() if k != "path"}  # a static file keeps its name
    return "/".join("{" + names[p] + "}" if p in names else p for p in parts)


# ---------------------------------------------------------------- around every request
def own_hosts(config: WebConfig, server: tuple[str, int] | None) -> set[str]:
    """The Host values (lowercase) of this page, for a connection that arrived at `server`
    (address, port): that address, the one it listens on, the loopback names on loopback, and
    `allowed_hosts`; each with the port (and without it on port 80, or for a listed name)."""
    address, port = server or (config.host, config.port)
    with_port = {_plain_address(address)}
    if config.host not in WILDCARD_HOSTS:
        with_port.add(config.host.lower())
    if with_port & set(LOOPBACK_HOSTS) or _is_loopback(address):
        with_port |= set(LOOPBACK_HOSTS)
    names = {f"[{n}]" if ":" in n else n for n in with_port}
    hosts = {f"{n}:{port}" for n in names} | (names if port == 80 else set[str]())
    return hosts | _listed_hosts(config, port)


def own_origins(config: WebConfig, server: tuple[str, int] | None) -> set[str]:
    """The Origin values of this page: http:// and its hosts; https:// too for a listed name
    (a proxy may serve it with TLS)."""
    listed = _listed_hosts(config, server[1] if server else config.port)
    return {f"http://{h}" for h in own_hosts(config, server)} | {f"https://{h}" for h in listed}


def _listed_hosts(config: WebConfig, port: int) -> set[str]:
    listed = {h.lower() for h in config.allowed_hosts}
    return listed | {f"{h}:{port}" for h in listed if ":" not in h.rsplit("]", 1)[-1]}


def _plain_address(address: str) -> str:
    """An IPv4 client of a dual-stack socket arrives as ::ffff:a.b.c.d; the browser said a.b.c.d."""
    try:
        mapped = ipaddress.ip_address(address)
    except ValueError:
        return address.lower()
    plain = mapped.ipv4_mapped if isinstance(mapped, ipaddress.IPv6Address) else None
    return str(plain or mapped)


def _is_loopback(address: str) -> bool:
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return False


class PageGuard:
    """The outermost layer, so nothing leaves without it (static files and the framework's own
    404, 405 and 500 included): a request must name one of the page's own hosts (421 otherwise:
    a DNS-rebinding page names its own), an `Origin`, when sent, must be one of its origins (403),
    and every response gets `SECURITY_HEADERS`."""

    def __init__(self, app: ASGIApp, config: WebConfig) -> None:
        self.app = app
        self.config = config

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":  # lifespan
            await self.app(scope, receive, send)
            return

        started, status = time.perf_counter(), 0

        async def secured(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                MutableHeaders(scope=message).update(SECURITY_HEADERS)
            await send(message)

        try:
            await self.guarded(scope, receive, secured)
        finally:  # after the whole response (an answer's stream included)
            elapsed_ms = (time.perf_counter() - started) * 1000
            path = preview(logged_path(scope))
            access.info("%s %s %d %.0f ms", scope["method"], path, status, elapsed_ms)

    async def guarded(self, scope: Scope, receive: Receive, secured: Send) -> None:
        headers = Headers(scope=scope)
        server = scope.get("server")
        origin = headers.get("origin")
        if headers.get("host", "").lower() not in own_hosts(self.config, server):
            refused = JSONResponse({"error": HOST_REFUSED}, 421)
        elif origin is not None and origin.lower() not in own_origins(self.config, server):
            refused = JSONResponse({"error": ORIGIN_REFUSED}, 403)
        else:
            await self.app(scope, receive, secured)
            return
        await refused(scope, receive, secured)


async def framework_error(request: Request, exc: Exception) -> Response:
    """Starlette's own answers (no route, wrong method, a missing static file) in Spanish JSON."""
    status = exc.status_code if isinstance(exc, HTTPException) else 500
    headers = exc.headers if isinstance(exc, HTTPException) else None
    message = {404: NOT_FOUND, 405: METHOD_REFUSED}.get(status, BAD_REQUEST)
    return JSONResponse({"error": message if status < 500 else SERVER_FAULT}, status, headers)


async def server_fault(request: Request, exc: Exception) -> Response:
    """A bug or a broken history file: the family gets Spanish JSON, the log the traceback."""
    return JSONResponse({"error": SERVER_FAULT}, 500)
