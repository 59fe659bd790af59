"""The connections to the providers: httpcore's pool, without httpx's client layers.

httpx's `AsyncClient` wraps each request in auth, redirect, cookie and event
hook handling and re-wraps the answer's headers, none of which a relay uses:
about a tenth of a call's Python in the event loop at 1,000 messages. The pool
underneath is the same (HTTP/1.1 over h11, TCP_NODELAY, no proxy from the
environment; TLS trusts the system's CAs and certifi's, where httpx's client
trusted certifi's alone, so a CA installed on the host, a company proxy's,
is trusted too), and what goes up is what the client sent
(less what `forward.upstream_headers` drops) plus `Host` and `Content-Length`:
httpx's own defaults (its user agent, `accept-encoding: gzip, deflate`) are
not added, so a client that asked for no compression gets none.
"""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass
from types import TracebackType
from typing import Any

import httpcore

# Upstream reads wait this long between two bytes: a model may think a while.
READ_TIMEOUT_S = 600.0
TIMEOUTS = {"connect": 30.0, "read": READ_TIMEOUT_S, "write": 60.0, "pool": 30.0}
KEEPALIVE = 100  # idle upstream connections kept for the next requests
BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})
KEEPALIVE_EXPIRY_S = 5.0  # an idle connection older than this is not reused (httpx's default)
# What a failed exchange with a provider raises (httpcore's exceptions share no base).
ERRORS: tuple[type[Exception], ...] = (
    httpcore.NetworkError,
    httpcore.TimeoutException,
    httpcore.ProtocolError,
    httpcore.UnsupportedProtocol,
    httpcore.ProxyError,
    httpcore.ConnectionNotAvailable,
)


@dataclass(frozen=True, slots=True)
class Upward:
    """What goes up: `content` whole, or as it arrives (an iterator, under a
    `Content-Length` header already in `headers`)."""

    method: str
    url: str
    headers: list[tuple[str, str]]
    content: bytes | AsyncIterator[bytes]


class Opened:
    """A provider's answer whose head has arrived; `chunks()` reads the body."""

    def __init__(self, response: httpcore.Response) -> None:
        self._response = response
        self.status = response.status
        self.headers = response.headers  # (name, value) bytes pairs, as the provider wrote them

    def header(self, name: bytes) -> str:
        """The first value of header `name` (lower case), "" without one."""
        for key, value in self.headers:
            if key.lower() == name:
                return value.decode("latin-1")
        return ""

    async def chunks(self) -> AsyncIterator[bytes]:
        stream: Any = self._response.stream  # an async iterable for an async pool
        async for chunk in stream:
            yield chunk

    async def aclose(self) -> None:
        await self._response.aclose()


class Upstreams:
    """One pool for every provider: a connection per request in flight, however
    many (a pool of 100, httpx's default, stalled every other request when the
    provider sat on 100), idle ones kept for the next requests."""

    def __init__(self) -> None:
        self._pool = httpcore.AsyncConnectionPool(
            max_connections=None,
            max_keepalive_connections=KEEPALIVE,
            keepalive_expiry=KEEPALIVE_EXPIRY_S,
            # no Nagle delay between a request's head and body on the way up
            socket_options=[(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)],
        )

    async def open(self, upward: Upward) -> Opened:
        """Send `upward`; its answer once the head has arrived (ERRORS when the
        provider cannot be reached or breaks the exchange)."""
        url = httpcore.URL(upward.url)
        host = url.host.decode("ascii")
        host = f"[{host}]" if ":" in host else host  # an IPv6 address
        default = {b"http": 80, b"https": 443}.get(url.scheme)
        netloc = host if url.port in (None, default) else f"{host}:{url.port}"
        headers = [("Host", netloc), *upward.headers]
        content = upward.content
        # as httpx frames a body it holds: an empty one gets a length on the methods
        # that carry a body only
        if isinstance(content, bytes) and (content or upward.method in BODY_METHODS):
            headers.append(("Content-Length", str(len(content))))
        request = httpcore.Request(
            upward.method,
            url,
            headers=headers,
            content=content,
            extensions={"timeout": TIMEOUTS},
        )
        return Opened(await self._pool.handle_async_request(request))

    async def __aenter__(self) -> Upstreams:
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        await self._pool.aclose()
