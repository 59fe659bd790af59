"""Routes: one prefix per wire format, each request pruned then relayed.

`/anthropic/...`, `/openai/...` and `/gemini/...` go to their upstream plus
the path after the prefix; the message endpoints are pruned on the way, every
other path under a prefix (token counting, model lists, files) passes as is.
Anything else answers 404 naming the three prefixes; a body over the size
limit answers 413; with `CTXOPT_AUTH_TOKEN` set, the ctxopt token is required
in `x-ctxopt-token`. Nothing a client sends crashes the server.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

from starlette.applications import Starlette
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from ctxopt.api.auth import Tokens, Unauthenticated
from ctxopt.api.gateway import windows
from ctxopt.api.gateway.dashboard import dashboard_routes
from ctxopt.api.gateway.deadline import prepare_within
from ctxopt.api.gateway.formats.anthropic import AnthropicMessages
from ctxopt.api.gateway.formats.conversation import WireFormat
from ctxopt.api.gateway.formats.gemini import GeminiContents
from ctxopt.api.gateway.formats.openai_chat import OpenAIChat
from ctxopt.api.gateway.formats.openai_responses import OpenAIResponses
from ctxopt.api.gateway.forward import Answer, Relayed, relay, upstream_headers
from ctxopt.api.gateway.incoming import Incoming, TooLarge, body_stream, incoming, read_body
from ctxopt.api.gateway.observe import call_row
from ctxopt.api.gateway.pipeline import Pipeline
from ctxopt.api.gateway.prepared import Outcome, Prepared
from ctxopt.api.gateway.stream_usage import ask_for_usage
from ctxopt.api.gateway.upstream import Upstreams, Upward
from ctxopt.config import Config
from ctxopt.usage.log import UsageLog

log = logging.getLogger("ctxopt.gateway")

TOKEN_HEADER = "x-ctxopt-token"
PREFIXES = ("anthropic", "openai", "gemini")
_GEMINI_CALL = re.compile(
    r"^v1(beta|alpha)?/models/[^/:]+:(generateContent|streamGenerateContent)$"
)
# Relayed under a prefix; any other method is answered 405 (CONNECT, TRACE: never sent on)
METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS")
_FORMATS: dict[str, WireFormat] = {
    "anthropic": AnthropicMessages(),
    "chat": OpenAIChat(),
    "responses": OpenAIResponses(),
    "gemini": GeminiContents(),
}


def wire_format(prefix: str, path: str) -> WireFormat | None:
    """The format whose message list this POST carries, None for any other path."""
    path = path.strip("/")
    if prefix == "anthropic" and path == "v1/messages":
        return _FORMATS["anthropic"]
    if prefix == "openai" and path == "v1/chat/completions":
        return _FORMATS["chat"]
    if prefix == "openai" and path == "v1/responses":
        return _FORMATS["responses"]
    if prefix == "gemini" and _GEMINI_CALL.match(path):
        return _FORMATS["gemini"]
    return None


def build_app(
    pipeline: Pipeline, config: Config, tokens: Tokens, usage: UsageLog | None = None
) -> ASGIApp:
    """The gateway (an ASGI app); with `usage`, each model call is recorded in it, and the
    dashboard (`/ui/`) and `/metrics` are served beside the prefixes."""
    upstreams = {
        "anthropic": config.upstream_anthropic.rstrip("/"),
        "openai": config.upstream_openai.rstrip("/"),
        "gemini": config.upstream_gemini.rstrip("/"),
    }
    holder: dict[str, Upstreams] = {}
    too_large = f"request body over {config.max_message_bytes} bytes"

    @asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        async with Upstreams() as pool:
            holder["pool"] = pool
            yield

    async def gateway(scope: Scope, receive: Receive, send: Send) -> None:
        """The model routes and every other path under a prefix, on raw ASGI."""
        arrived = time.perf_counter()
        request = incoming(scope) if scope["type"] == "http" else None
        if request is None or request.prefix not in upstreams or request.method not in METHODS:
            await site(scope, receive, send)  # lifespan, the dashboard, 404, 405
            return
        prefix, path = request.prefix, request.path
        owner = ""  # the ctxopt identity, as gRPC and MCP have it ("" with auth off)
        if tokens.required:
            try:
                owner = tokens.owner(
                    [("authorization", f"Bearer {request.header(TOKEN_HEADER) or ''}")]
                )
            except Unauthenticated:
                await _error(401, f"missing or unknown {TOKEN_HEADER} header")(scope, receive, send)
                return
        header = request.header(windows.WINDOW_HEADER)
        if header is not None:
            try:
                windows.parse_window(header)
            except ValueError:
                message = f"{windows.WINDOW_HEADER}: not a positive whole number: {header[:40]!r}"
                await _error(400, message)(scope, receive, send)
                return
        fmt = wire_format(prefix, path) if request.method == "POST" else None
        headers = request.by_name()
        declared = request.header("content-length") or ""
        if declared.isdigit() and int(declared) > config.max_message_bytes:
            await _error(413, too_large)(scope, receive, send)
            return
        if (fmt is None or config.gateway_mode == "off") and declared.isdigit() and int(declared):
            going = streamed_up(request, receive, int(declared), fmt)
        else:
            try:
                body = await read_body(receive, config.max_message_bytes)
            except TooLarge:
                await _error(413, too_large)(scope, receive, send)
                return
            except ClientDisconnect:
                await Response(status_code=400)(scope, receive, send)
                return
            read_ms = (time.perf_counter() - arrived) * 1000
            going = await prepared_up(request, body, fmt, headers, owner, read_ms)
        prepared = going.prepared
        url = f"{upstreams[prefix]}/{request.raw_path}"  # as the client encoded it
        if request.query:
            url = f"{url}?{request.query}"
        extra = [
            ("x-ctxopt-outcome", prepared.outcome.value),
            ("x-ctxopt-tokens-before", str(prepared.tokens_before)),
            ("x-ctxopt-tokens-after", str(prepared.tokens_after)),
        ]

        def done(relayed: Relayed) -> None:
            status, reported = relayed.status, relayed.reported
            prompt_tokens = reported.prompt
            if prepared.state is not None and prompt_tokens is not None and status < 400:
                pipeline.report_usage(prepared.state, prompt_tokens)
            if fmt is not None:
                line = {
                    **prepared.log,
                    "status": status,
                    "provider_prompt_tokens": prompt_tokens,
                    # where a call's time went: `ms` is the pipeline's share
                    "read_ms": round(going.read_ms, 2),
                    "upstream_ms": round(relayed.upstream_ms, 2),
                    "relay_ms": round(relayed.relay_ms, 2),
                }
                log.info("gateway call", extra={"fields": {"gateway": line}})
            if fmt is not None and usage is not None:
                agent = headers.get("user-agent", "")
                usage.record(
                    call_row(
                        prepared,
                        owner=owner,
                        provider=prefix,
                        status=status,
                        reported=reported,
                        user_agent=agent,
                    )
                )

        upward = Upward(request.method, url, going.headers, going.content)
        answer = Answer(extra, fmt, done, strip_usage=going.strip_usage)
        await relay(holder["pool"], upward, answer, scope, receive, send)

    def streamed_up(
        request: Incoming, receive: Receive, length: int, fmt: WireFormat | None
    ) -> _Outgoing:
        """A body nothing reads or changes: it goes up as it arrives, framed as a body
        held whole is (h11 ends it at the declared length)."""
        forwarded = upstream_headers(request.headers)
        forwarded.append(("Content-Length", str(length)))
        prepared = Prepared(b"", Outcome.PASS_THROUGH)
        if fmt is not None:
            prepared = pipeline.passed_through(fmt)
        return _Outgoing(prepared, body_stream(receive), forwarded)

    async def prepared_up(
        request: Incoming,
        body: bytes,
        fmt: WireFormat | None,
        headers: dict[str, str],
        owner: str,
        read_ms: float,
    ) -> _Outgoing:
        """A body read whole: pruned when it is a message call (mode on or shadow)."""
        forwarded = upstream_headers(request.headers)
        prepared = Prepared(body, Outcome.PASS_THROUGH)
        if fmt is not None and config.gateway_mode == "off":
            prepared = pipeline.passed_through(fmt, body)  # no worker thread for nothing
        elif fmt is not None:
            try:
                prepared = await prepare_within(
                    pipeline, config, fmt, request.path, body, headers, owner
                )
            except Exception:  # never worse: a gateway bug still forwards the request
                log.exception("gateway: %s request forwarded unchanged after an error", fmt.name)
        strip_usage = False
        if fmt is _FORMATS["chat"] and config.gateway_mode == "on":
            asked = ask_for_usage(prepared.body, prepared.fields)  # for calibration
            if asked is not None:
                prepared.body, strip_usage = asked, True
                # the extra chunk is taken out of the bytes as they pass: no compression
                forwarded = [(k, v) for k, v in forwarded if k.lower() != "accept-encoding"]
                forwarded.append(("accept-encoding", "identity"))
        return _Outgoing(prepared, prepared.body, forwarded, strip_usage, read_ms)

    async def not_found(request: Request) -> Response:
        names = ", ".join(f"/{p}" for p in PREFIXES)
        return _error(404, f"no route {request.url.path!r}: the gateway serves {names}")

    routes = [
        *(dashboard_routes(pipeline.engine, usage, tokens) if usage is not None else []),
        Route("/{path:path}", not_found, methods=list(METHODS)),
    ]
    site = Starlette(routes=routes, lifespan=lifespan)
    return gateway


@dataclass(slots=True)
class _Outgoing:
    """What goes upstream for one request, and how long reading its body took."""

    prepared: Prepared
    content: bytes | AsyncIterator[bytes]  # an iterator: the body as it arrives
    headers: list[tuple[str, str]]
    strip_usage: bool = False  # the gateway asked a Chat stream for usage (stream_usage.py)
    read_ms: float = 0.0  # 0 for a body that streams up


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse(
        {"error": {"type": "ctxopt_gateway", "message": message}}, status_code=status
    )
