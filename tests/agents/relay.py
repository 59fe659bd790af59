"""A relay mode for the recording fake provider: it stands between an agent CLI and the gateway.

With `RelayScript` as its script, the recording fake (tests/gateway/upstream.py)
forwards every request it records to the gateway and answers with the
gateway's response, so a test holds both sides of each call: the bytes the
CLI sent (the relay's records) and the bytes that reached the provider (the
scripted fake's records), plus the `x-ctxopt-*` headers the gateway answered.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import httpx
from starlette.responses import Response

from tests.gateway.upstream import FakeUpstream, Recorded, fake_upstream

# Not passed on: they describe one hop (and httpx sets its own)
HOP_HEADERS = {"host", "content-length", "connection", "transfer-encoding", "accept-encoding"}
RELAY_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class Answered:
    """One relayed call: what the CLI sent and the gateway's `x-ctxopt-*` headers."""

    request: Recorded
    status: int
    ctxopt_headers: dict[str, str]


@dataclass
class RelayScript:
    target: str  # the gateway's base URL
    answered: list[Answered] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __call__(self, request: Recorded) -> Response:
        # Blocking inside the fake's event loop is fine here: an agent CLI waits for each answer.
        url = f"{self.target}{request.path}" + (f"?{request.query}" if request.query else "")
        headers = {k: v for k, v in request.headers.items() if k not in HOP_HEADERS}
        with httpx.Client(timeout=RELAY_TIMEOUT_S, trust_env=False) as client:
            reply = client.request(request.method, url, headers=headers, content=request.raw)
        ctxopt = {k: v for k, v in reply.headers.items() if k.startswith("x-ctxopt-")}
        with self._lock:
            self.answered.append(Answered(request, reply.status_code, ctxopt))
        kept = {
            k: v
            for k, v in reply.headers.items()
            if k not in HOP_HEADERS and k != "content-encoding"
        }
        return Response(reply.content, status_code=reply.status_code, headers=kept)


@contextmanager
def relay_to(target: str) -> Iterator[tuple[FakeUpstream, RelayScript]]:
    """A recording relay on a free loopback port forwarding to `target`."""
    script = RelayScript(target)
    with fake_upstream(script=script) as relay:
        yield relay, script
