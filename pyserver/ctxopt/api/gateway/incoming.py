"""A request under a gateway prefix, read straight from its ASGI scope and messages.

The model routes skip Starlette's router, `Request` and middleware stack: at
1,000 messages a call's own Python in the event loop (not the pipeline) was
most of what the gateway added, and these layers were a share of it. The
dashboard, `/metrics` and the 404 answer still go through Starlette.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from starlette.requests import ClientDisconnect
from starlette.types import Receive, Scope

# What a path keeps as is when it is encoded again (RFC 3986's pchar and "/")
PATH_SAFE = "/:@!$&'()*+,;=-._~"


class TooLarge(Exception):
    """A body over the gateway's size limit."""


@dataclass(frozen=True, slots=True)
class Incoming:
    """One HTTP request under a prefix: `path` is what follows the prefix (no
    leading slash; percent-decoded, for routing), `raw_path` the same as the
    client wrote it (what goes upstream), header names are lower case (as the
    ASGI server gives them)."""

    method: str
    prefix: str
    path: str
    raw_path: str
    query: str
    headers: list[tuple[str, str]]

    def header(self, name: str) -> str | None:
        """The first value of header `name` (lower case), as Starlette's `get`."""
        for key, value in self.headers:
            if key == name:
                return value
        return None

    def by_name(self) -> dict[str, str]:
        """Every header by name (the last value of a repeated one)."""
        return dict(self.headers)


def incoming(scope: Scope) -> Incoming | None:
    """The request when its path is `/{prefix}/{path}` with a non-empty prefix."""
    prefix, slash, path = scope["path"].lstrip("/").partition("/")
    if not prefix or not slash:
        return None
    headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in scope["headers"]]
    query = scope.get("query_string", b"").decode("latin-1")
    raw = scope.get("raw_path")
    lead = f"/{prefix}/".encode("latin-1")
    if isinstance(raw, bytes) and raw.startswith(lead):
        raw_path = raw[len(lead) :].decode("latin-1")
    else:  # no raw path, or the prefix itself encoded: the decoded path encoded again
        raw_path = quote(path, safe=PATH_SAFE)
    return Incoming(scope["method"], prefix, path, raw_path, query, headers)


async def read_body(receive: Receive, limit: int) -> bytes:
    """The whole body (TooLarge past `limit` bytes, ClientDisconnect when the
    client leaves first), its chunks joined once: growing a buffer would copy
    the body at every step (1 MB at 1,000 messages)."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientDisconnect
        chunk = message.get("body", b"")
        if chunk:
            chunks.append(chunk)
            size += len(chunk)
            if size > limit:
                raise TooLarge
        if not message.get("more_body", False):
            return b"".join(chunks)


async def body_stream(receive: Receive) -> AsyncIterator[bytes]:
    """The body as it arrives (ClientDisconnect when the client leaves mid-body)."""
    while True:
        message: Any = await receive()
        if message["type"] == "http.disconnect":
            raise ClientDisconnect
        chunk = message.get("body", b"")
        if chunk:
            yield chunk
        if not message.get("more_body", False):
            return
