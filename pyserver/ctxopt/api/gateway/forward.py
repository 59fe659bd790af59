"""The pass-through: a request to its upstream, the response back unchanged.

Headers go both ways except hop-by-hop ones, `host` and `content-length` on
the way up and the gateway's own `x-ctxopt-*` headers (the ctxopt token stays
here). The response's bytes are relayed as they come (SSE events included, no
buffering), but for an answer of a small declared length (every unary one),
which goes in one piece once read: its client waits for all of it anyway, and
a streamed response costs a task and a cancel scope per call. A
`UsageSniffer` reads the provider's reported prompt size from a copy as the
bytes pass, for the pipeline's calibration.
"""

from __future__ import annotations

import json
import time
import zlib
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass
from urllib.parse import urlsplit

import httpcore
from starlette.requests import ClientDisconnect
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.types import Receive, Scope, Send

from ctxopt.api.gateway.formats.conversation import WireFormat
from ctxopt.api.gateway.stream_usage import UsageStripper
from ctxopt.api.gateway.upstream import ERRORS, Opened, Upstreams, Upward
from ctxopt.api.gateway.usage import Reported

HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "trailers",
        "transfer-encoding",
        "upgrade",
    }
)
NOT_FORWARDED = HOP_BY_HOP | {"host", "content-length"}
CTXOPT_PREFIX = "x-ctxopt-"
USAGE_MARKERS = (b"usage", b"input_tokens", b"prompt_tokens", b"promptTokenCount")
MAX_SNIFFED_BYTES = 16 * 1024 * 1024  # a unary body larger than this is not read for usage
# An answer of a declared length up to this size is relayed in one piece (see `relay`)
WHOLE_ANSWER_BYTES = 1024 * 1024


@dataclass(frozen=True, slots=True)
class Relayed:
    """How a relay went: the provider's status and reported usage, the ms from
    sending to the provider's response head (the upload and the provider's own
    time) and from that head to the last byte relayed."""

    status: int
    reported: Reported
    upstream_ms: float = 0.0
    relay_ms: float = 0.0


def upstream_headers(headers: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
    listed = {
        name.strip().lower()
        for key, value in headers
        if key.lower() == "connection"
        for name in value.split(",")
    }
    return [
        (k, v)
        for k, v in headers
        if k.lower() not in NOT_FORWARDED
        and k.lower() not in listed
        and not k.lower().startswith(CTXOPT_PREFIX)
    ]


class UsageSniffer:
    """The prompt size a response reports, read from its bytes as they pass:
    SSE `data:` lines that mention usage, or a JSON body (gzip or deflate
    decoded on the side; other encodings are not read)."""

    def __init__(self, fmt: WireFormat | None, content_type: str, encoding: str) -> None:
        self._fmt = fmt
        self._sse = "text/event-stream" in content_type
        self._json = "json" in content_type
        encoding = encoding.strip().lower()
        self._inflate = zlib.decompressobj(47) if encoding in ("gzip", "deflate") else None
        self._readable = fmt is not None and encoding in ("", "identity", "gzip", "deflate")
        self._pending = b""
        self._body = bytearray()
        self.reported = Reported()

    def feed(self, chunk: bytes) -> None:
        if not self._readable or not chunk:
            return
        try:
            data = self._inflate.decompress(chunk) if self._inflate is not None else chunk
        except zlib.error:
            self._readable = False
            return
        if self._sse:
            lines = (self._pending + data).split(b"\n")
            self._pending = lines.pop()
            for line in lines:
                self._line(line)
        elif self._json:
            if len(self._body) + len(data) > MAX_SNIFFED_BYTES:
                self._readable = False
                return
            self._body += data

    def finish(self) -> Reported:
        if self._readable and self._sse and self._pending:
            self._line(self._pending)
        if self._readable and self._json and self._body:
            self._payload(bytes(self._body))
        return self.reported

    def _line(self, line: bytes) -> None:
        if line.startswith(b"data:") and any(m in line for m in USAGE_MARKERS):
            self._payload(line[5:])

    def _payload(self, data: bytes) -> None:
        assert self._fmt is not None
        try:
            payload = json.loads(data)
        except ValueError:
            return
        # a Gemini stream without alt=sse is one JSON array of responses
        for item in payload if isinstance(payload, list) else [payload]:
            if isinstance(item, dict):
                found = self._fmt.prompt_tokens(item)
                if found is not None:
                    self.reported.prompt = found
                self.reported.update(self._fmt.name, item)


@dataclass(frozen=True, slots=True)
class Answer:
    """How the answer comes back: with `extra_headers`, read for usage in `fmt`'s
    terms, `done(...)` once its last byte has gone out; with `strip_usage`, an
    uncompressed event stream loses its usage-only chunks (the gateway asked for
    them; stream_usage.py)."""

    extra_headers: list[tuple[str, str]]
    fmt: WireFormat | None
    done: Callable[[Relayed], None]
    strip_usage: bool = False


async def relay(
    upstreams: Upstreams,
    upward: Upward,
    answer: Answer,
    scope: Scope,
    receive: Receive,
    send: Send,
) -> None:
    """Send `upward` and relay the answer back to the ASGI `send` unchanged (plus
    `answer.extra_headers`): streamed as it arrives, or in one piece when its
    declared length is at most WHOLE_ANSWER_BYTES; `answer.done(...)` runs once
    the last byte has gone out (not when the client leaves before its body is
    read: 400, nothing sent on, nothing recorded)."""
    sending = time.perf_counter()
    extra_headers, done = answer.extra_headers, answer.done
    try:
        upstream = await upstreams.open(upward)
    except ClientDisconnect:  # mid-body: the upstream connection is closed unfinished
        await Response(status_code=400)(scope, receive, send)
        return
    except ERRORS as e:
        done(Relayed(502, Reported()))
        parts = urlsplit(upward.url)
        where = f"{parts.scheme}://{parts.netloc}"
        message = f"ctxopt gateway: upstream {where} unreachable ({type(e).__name__})"
        unreachable = JSONResponse(
            {"error": {"type": "upstream_unreachable", "message": message}},
            status_code=502,
            headers=dict(extra_headers),
        )
        await unreachable(scope, receive, send)
        return
    answered = time.perf_counter()
    sniffer = UsageSniffer(
        answer.fmt,
        upstream.header(b"content-type"),
        upstream.header(b"content-encoding"),
    )

    plain = (upstream.header(b"content-encoding") or "identity").strip().lower() == "identity"
    sse = "text/event-stream" in upstream.header(b"content-type")
    stripper = UsageStripper() if answer.strip_usage and plain and sse else None

    def finished() -> None:
        upstream_ms = (answered - sending) * 1000
        relay_ms = (time.perf_counter() - answered) * 1000
        done(Relayed(upstream.status, sniffer.finish(), upstream_ms, relay_ms))

    length = upstream.header(b"content-length")
    if stripper is None and length.isdigit() and int(length) <= WHOLE_ANSWER_BYTES:
        # an answer of a known small length (every unary one): the client waits for all
        # of it anyway, so it goes in one piece, without a streamed response's machinery
        pieces: list[bytes] = []
        try:
            async for chunk in upstream.chunks():
                sniffer.feed(chunk)
                pieces.append(chunk)
        except ERRORS:  # cut short: the client gets a broken answer, as streamed
            broken = _broken(pieces, upstream, finished)
            await _answer(upstream, broken, extra_headers)(scope, receive, send)
            return
        await upstream.aclose()
        head = _headers(upstream, extra_headers, keep_length=True)
        await send({"type": "http.response.start", "status": upstream.status, "headers": head})
        await send({"type": "http.response.body", "body": b"".join(pieces)})
        finished()  # after the last byte: the log line and ledger row wait on nothing
        return

    async def body() -> AsyncIterator[bytes]:
        try:
            async for chunk in upstream.chunks():
                sniffer.feed(chunk)
                if stripper is None:
                    yield chunk
                elif relayed := stripper.feed(chunk):
                    yield relayed
            if stripper is not None and (rest := stripper.finish()):
                yield rest
        finally:
            await upstream.aclose()
            finished()

    # streamed: Starlette's response also listens for the client leaving, which
    # closes the upstream answer (a model may generate for minutes)
    response = StreamingResponse(body(), status_code=upstream.status)
    streamed = _answer(upstream, response, extra_headers, keep_length=stripper is None)
    await streamed(scope, receive, send)


def _headers(
    upstream: Opened, extra_headers: list[tuple[str, str]], *, keep_length: bool
) -> list[tuple[bytes, bytes]]:
    """The upstream's headers (less hop-by-hop ones, and its length when the relay
    changes the body) plus `extra_headers`."""
    dropped = HOP_BY_HOP if keep_length else HOP_BY_HOP | {"content-length"}
    return [(k, v) for k, v in upstream.headers if k.decode("latin-1").lower() not in dropped] + [
        (k.encode("latin-1"), v.encode("latin-1")) for k, v in extra_headers
    ]


def _answer(
    upstream: Opened,
    response: Response,
    extra_headers: list[tuple[str, str]],
    *,
    keep_length: bool = True,
) -> Response:
    """`response` under the upstream's headers (see `_headers`)."""
    response.raw_headers = _headers(upstream, extra_headers, keep_length=keep_length)
    return response


def _broken(
    pieces: list[bytes], upstream: Opened, finished: Callable[[], None]
) -> StreamingResponse:
    """The bytes an upstream sent before it cut its answer short, then the break."""

    async def body() -> AsyncIterator[bytes]:
        try:
            for piece in pieces:
                yield piece
            raise httpcore.RemoteProtocolError("upstream answer cut short")
        finally:
            await upstream.aclose()
            finished()

    return StreamingResponse(body(), status_code=upstream.status)
