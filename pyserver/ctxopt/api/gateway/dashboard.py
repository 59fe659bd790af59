"""The dashboard at `/ui/` and the metrics at `/metrics`, on the gateway's port.

The dashboard is three static files shipped in the package (`ui/`: no CDN,
nothing fetched at run time) over a small JSON API under `/ui/api/`: the usage
report (`usage`), a session's calls (`calls`), its last collection (`plan`),
stash search (`stash`) and restore (`restore`, POST). It answers loopback
clients addressing a loopback name only, as MCP over HTTP: a page that can
restore stashed text is for the machine's own user (and a foreign `Host`
header, DNS rebinding, is refused too).

With `CTXOPT_AUTH_TOKEN` set, every dashboard request needs the ctxopt token:
in `x-ctxopt-token`, or once as `/ui/?token=SECRET`, which answers with a
random cookie standing for the token's owner (the secret itself is never stored
or sent back) and a redirect to `/ui/`. A viewer sees its owner's calls,
sessions and stash only. A restore must be a same-origin JSON POST.

`/metrics` is Prometheus text (`usage.metrics`) for scrapers anywhere the
gateway listens; with auth on it needs the token in `x-ctxopt-token` or
`Authorization: Bearer`.
"""

from __future__ import annotations

import secrets
import threading
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from importlib import resources
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, RedirectResponse, Response
from starlette.routing import Route

from ctxopt.api.auth import Tokens, Unauthenticated
from ctxopt.engine import Engine
from ctxopt.errors import CtxoptError
from ctxopt.model import Action, StashFilter
from ctxopt.usage.log import UsageLog
from ctxopt.usage.metrics import CONTENT_TYPE
from ctxopt.usage.report import GroupBy

TOKEN_HEADER = "x-ctxopt-token"
COOKIE = "ctxopt_ui"
MAX_VIEWERS = 256  # browser sessions remembered; the oldest must give the token again
PLAN_TOP = 40  # decisions of the last collection shown, largest first
EVERY_CHUNK = 1 << 30  # a report's `top` that keeps every chunk (the decided ones are picked)
STASH_HITS = 10  # hits a search shows
LOOPBACK_CLIENTS = ("127.", "::1", "::ffff:127.")
LOOPBACK_NAMES = frozenset({"127.0.0.1", "localhost", "[::1]", "::1"})
STATIC = {
    "index.html": "text/html; charset=utf-8",
    "app.js": "text/javascript; charset=utf-8",
    "style.css": "text/css; charset=utf-8",
}
# Only the page's own files run and load: no inline script, no other origin.
SECURITY_HEADERS = {
    "content-security-policy": "default-src 'self'; frame-ancestors 'none'",
    "cache-control": "no-store",
    "x-content-type-options": "nosniff",
}
# An engine error's status as HTTP (the rest are the request's fault: 400)
HTTP_STATUS = {"NOT_FOUND": 404, "PERMISSION_DENIED": 403, "RESOURCE_EXHAUSTED": 429}
Handler = Callable[[Request, str], Awaitable[Response]]


class _Viewers:
    """Browser sessions: a random cookie value -> the owner whose token opened it."""

    def __init__(self) -> None:
        self._owners: OrderedDict[str, str] = OrderedDict()
        self._lock = threading.Lock()

    def open(self, owner: str) -> str:
        cookie = secrets.token_urlsafe(32)
        with self._lock:
            self._owners[cookie] = owner
            while len(self._owners) > MAX_VIEWERS:
                self._owners.popitem(last=False)
        return cookie

    def owner(self, cookie: str) -> str | None:
        with self._lock:
            return self._owners.get(cookie)


def dashboard_routes(engine: Engine, usage: UsageLog, tokens: Tokens) -> list[Route]:
    viewers = _Viewers()
    ui = resources.files("ctxopt.api.gateway") / "ui"
    files = {name: (ui / name).read_bytes() for name in STATIC}

    def token_owner(secret: str) -> str | None:
        try:
            return tokens.owner([("authorization", f"Bearer {secret}")])
        except Unauthenticated:
            return None

    def owner_of(request: Request) -> str | None:
        if not tokens.required:
            return ""
        secret = request.headers.get(TOKEN_HEADER)
        if secret is not None:
            return token_owner(secret)
        return viewers.owner(request.cookies.get(COOKIE, ""))

    def guarded(handler: Handler) -> Callable[[Request], Awaitable[Response]]:
        async def endpoint(request: Request) -> Response:
            if not _loopback(request):
                return _error(403, "the dashboard answers on loopback only")
            owner = owner_of(request)
            if owner is None:
                return _error(
                    401, f"give the ctxopt token: open /ui/?token=... or send {TOKEN_HEADER}"
                )
            try:
                return await handler(request, owner)
            except CtxoptError as e:
                return _error(HTTP_STATUS.get(e.status, 400), str(e))

        return endpoint

    async def page(request: Request) -> Response:
        if not _loopback(request):
            return _error(403, "the dashboard answers on loopback only")
        secret = request.query_params.get("token")
        if tokens.required and secret is not None:
            owner = token_owner(secret)
            if owner is None:
                return _error(401, "unknown ctxopt token")
            response = RedirectResponse("/ui/", status_code=303)
            response.set_cookie(
                COOKIE, viewers.open(owner), httponly=True, samesite="strict", path="/ui"
            )
            return response
        return await guarded(static)(request)

    async def static(request: Request, _owner: str) -> Response:
        name = request.path_params.get("name") or "index.html"
        if name not in files:
            return _error(404, f"no file {name!r} in the dashboard")
        return Response(files[name], media_type=STATIC[name], headers=SECURITY_HEADERS)

    async def usage_api(request: Request, owner: str) -> Response:
        query = request.query_params
        by = (
            GroupBy(query.get("by", "day"))
            if query.get("by") in {g.value for g in GroupBy}
            else GroupBy.DAY
        )
        report = await run_in_threadpool(
            usage.report,
            owner,
            by,
            since_ms=_int(query.get("since")),
            utc_offset_minutes=_int(query.get("tz")),
        )
        return JSONResponse(report.as_json())

    async def calls_api(request: Request, owner: str) -> Response:
        rows = await run_in_threadpool(usage.calls, owner, request.query_params.get("session", ""))
        calls = [
            {
                "at_ms": r.at_ms,
                "sent": r.tokens_sent,
                "forwarded": r.tokens_forwarded,
                "outcome": r.outcome,
                "model": r.model,
                "added_ms": round(r.added_ms, 2),
            }
            for r in rows
        ]
        return JSONResponse({"calls": calls})

    async def plan_api(request: Request, owner: str) -> Response:
        session = request.query_params.get("session", "")
        report = await run_in_threadpool(engine.last_plan, owner, session, EVERY_CHUNK)
        if report is None:
            return JSONResponse({"found": False})
        decided = [c for c in report.largest if c.action != Action.KEEP]
        chunks = [
            {
                "chunk_id": c.chunk_id,
                "kind": c.kind.name.lower(),
                "tokens": c.tokens,
                "tokens_after": c.tokens_after,
                "action": c.action.name,
                "reasons": list(c.reasons),
                "preview": c.preview,
            }
            for c in decided[:PLAN_TOP]
        ]
        return JSONResponse(
            {
                "found": True,
                "planned_ms": report.planned_ms,
                "tokens_before": report.tokens_before,
                "tokens_after": report.tokens_after,
                "target_tokens": report.target_tokens,
                "dry_run": report.dry_run,
                "decisions": len(decided),
                "chunks": chunks,
            }
        )

    async def stash_api(request: Request, owner: str) -> Response:
        query = request.query_params
        hits, _ = await run_in_threadpool(
            engine.search_stash,
            owner,
            query.get("session", ""),
            query.get("q", ""),
            StashFilter(),
            STASH_HITS,
            0,
        )
        return JSONResponse(
            {
                "hits": [
                    {
                        "chunk_id": h.chunk_id,
                        "session_id": h.session_id,
                        "kind": h.kind.name.lower(),
                        "tokens": h.tokens,
                        "action": h.action.name,
                        "snippet": h.snippet,
                        "stashed_at_ms": h.stashed_at_ms,
                    }
                    for h in hits
                ]
            }
        )

    async def restore_api(request: Request, owner: str) -> Response:
        origin = request.headers.get("origin")
        if origin is not None and origin != f"{request.url.scheme}://{request.url.netloc}":
            return _error(403, "a restore comes from the dashboard's own page")
        if request.headers.get("content-type", "").split(";")[0].strip() != "application/json":
            return _error(415, "a restore is a JSON POST")
        try:
            body: Any = await request.json()
        except ValueError:
            body = None
        if not isinstance(body, dict) or not isinstance(body.get("chunk_ids"), list):
            return _error(400, "expected {session: ..., chunk_ids: [...]}")
        ids = [str(i) for i in body["chunk_ids"]]
        session = str(body.get("session", ""))
        restored, tokens_now = await run_in_threadpool(
            lambda: engine.restore(owner, session, ids, budget=None, force=False)
        )
        return JSONResponse({"restored": restored, "session_tokens": tokens_now})

    async def metrics(request: Request) -> Response:
        if tokens.required:
            secret = request.headers.get(TOKEN_HEADER) or request.headers.get(
                "authorization", ""
            ).removeprefix("Bearer ")
            if token_owner(secret.strip()) is None:
                return _error(
                    401, f"give the ctxopt token in {TOKEN_HEADER} or Authorization: Bearer"
                )
        body = await run_in_threadpool(usage.metrics.exposition)
        return Response(body, media_type=CONTENT_TYPE)

    return [
        Route("/metrics", metrics, methods=["GET"]),
        Route("/ui", lambda _r: RedirectResponse("/ui/", status_code=308), methods=["GET"]),
        Route("/ui/", page, methods=["GET"]),
        Route("/ui/api/usage", guarded(usage_api), methods=["GET"]),
        Route("/ui/api/calls", guarded(calls_api), methods=["GET"]),
        Route("/ui/api/plan", guarded(plan_api), methods=["GET"]),
        Route("/ui/api/stash", guarded(stash_api), methods=["GET"]),
        Route("/ui/api/restore", guarded(restore_api), methods=["POST"]),
        Route("/ui/{name}", guarded(static), methods=["GET"]),
    ]


def _loopback(request: Request) -> bool:
    client = request.client.host if request.client is not None else ""
    name = request.url.hostname or ""
    host = f"[{name}]" if ":" in name else name
    return client.startswith(LOOPBACK_CLIENTS) and host in LOOPBACK_NAMES


def _int(text: str | None) -> int:
    try:
        return int(text or 0)
    except ValueError:
        return 0


def _error(status: int, message: str) -> Response:
    if status in (401, 403):
        return PlainTextResponse(f"ctxopt: {message}\n", status_code=status)
    return JSONResponse(
        {"error": {"type": "ctxopt_dashboard", "message": message}}, status_code=status
    )
