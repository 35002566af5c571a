"""One bounded HTTP exchange: timeouts, a hard total deadline, a size cap, bounded redirects.

httpx gives connect and read timeouts, but a server that keeps sending a byte now and then never
trips a read timeout. Here a watchdog timer shuts the socket down when the total deadline passes
(whatever phase the request is in: waiting for headers or reading the body), and the body is read
in a stream that stops at `max_response_bytes`. Redirects are followed by hand so that a header
carrying a secret is never sent to another origin.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

if "httpx" not in sys.modules:
    # httpx's __init__ imports its command-line client (click, rich, pygments) whenever those happen
    # to be installed, which costs more than everything else enlace-search loads. A None entry makes
    # that one optional import fail, as it does where they are absent; we never use httpx's CLI.
    sys.modules.setdefault("httpx._main", None)  # type: ignore[assignment]

import httpx
from enlace_config.schema.agent import HttpConfig

from enlace_agent.search.errors import ProviderTimeout, ResponseTooLarge, Unavailable
from enlace_agent.shared import Watchdog as Watchdog  # still importable from here
from enlace_agent.shared import is_number, redact

log = logging.getLogger("enlace_agent.search")


@dataclass(frozen=True)
class HttpResponse:
    status: int
    headers: httpx.Headers
    body: bytes
    encoding: str  # the charset the headers name, as httpx reads it (UTF-8 when none or unknown)

    def text(self) -> str:
        return self.body.decode(self.encoding, errors="replace")


def _origin(url: httpx.URL) -> tuple[str, str, int | None]:
    return (url.scheme, url.host, url.port)


def fetch(
    method: str,
    url: str,
    *,
    provider: str,
    http: HttpConfig,
    headers: Mapping[str, str],
    params: Mapping[str, str] | None = None,
    data: Mapping[str, str] | None = None,
    sensitive_headers: Sequence[str] = (),
    secrets: Sequence[str] = (),
) -> HttpResponse:
    """Send one request and read the whole (capped) body, or raise a typed `Unavailable`.

    `sensitive_headers` are dropped when a redirect leaves the original origin; `secrets` are
    redacted from every message this function puts in an exception.
    """
    deadline = time.monotonic() + http.total_timeout_s
    connect = http.connect_timeout_s
    timeout = httpx.Timeout(http.read_timeout_s, connect=connect, pool=connect)  # and write

    def fail(exc_type: type[Unavailable], detail: str) -> Unavailable:
        return exc_type(provider, redact(detail, secrets))

    with Watchdog(deadline) as watchdog, httpx.Client(timeout=timeout) as client:
        request = client.build_request(
            method,
            url,
            params=params,
            data=data,
            headers=dict(headers),
            extensions={"trace": watchdog.trace},
        )
        origin = _origin(request.url)
        try:
            for hop in range(http.max_redirects + 1):
                response = client.send(request, stream=True, follow_redirects=False)
                try:
                    next_request = response.next_request
                    if next_request is None or not response.is_redirect:
                        body = _read_capped(response, http.max_response_bytes, deadline, fail)
                        return HttpResponse(
                            response.status_code,
                            response.headers,
                            body,
                            response.encoding or "utf-8",
                        )
                finally:
                    response.close()
                if hop == http.max_redirects:
                    raise fail(
                        Unavailable,
                        f"more than {http.max_redirects} redirects (last HTTP {response.status_code})",
                    )
                if _origin(next_request.url) != origin:
                    for name in sensitive_headers:
                        next_request.headers.pop(name, None)
                log.debug("%s: following a redirect (HTTP %d)", provider, response.status_code)
                request = next_request
        except Unavailable:
            raise
        except httpx.TimeoutException as exc:
            raise fail(ProviderTimeout, f"timed out ({type(exc).__name__})") from None
        except (httpx.HTTPError, OSError) as exc:  # OSError: socket errors httpx did not wrap
            if watchdog.fired:
                raise fail(
                    ProviderTimeout, f"no complete answer within {http.total_timeout_s:g} s"
                ) from None
            raise fail(Unavailable, f"{type(exc).__name__}: {exc}") from None
    raise AssertionError("unreachable")  # pragma: no cover


def _read_capped(
    response: httpx.Response,
    cap: int,
    deadline: float,
    fail: Callable[[type[Unavailable], str], Unavailable],
) -> bytes:
    declared = response.headers.get("content-length")
    if declared is not None and is_number(declared) and int(declared) > cap:
        raise fail(ResponseTooLarge, f"response declares {declared} bytes, the cap is {cap}")
    body = bytearray()
    for chunk in response.iter_bytes():
        body += chunk
        if len(body) > cap:
            raise fail(ResponseTooLarge, f"response body exceeds the cap of {cap} bytes")
        if time.monotonic() > deadline:
            raise fail(ProviderTimeout, "the response body did not end before the deadline")
    return bytes(body)
