"""A real `ctxopt serve --gateway-addr` process and a fake provider, per test module."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.gateway.upstream import FakeUpstream, fake_upstream
from tests.serverproc import ServerProcess, serving


@pytest.fixture(scope="module")
def upstream() -> Iterator[FakeUpstream]:
    with fake_upstream() as fake:
        yield fake


def upstream_env(upstream: FakeUpstream) -> dict[str, str]:
    return {
        "CTXOPT_UPSTREAM_ANTHROPIC": upstream.url,
        "CTXOPT_UPSTREAM_OPENAI": upstream.url,
        "CTXOPT_UPSTREAM_GEMINI": upstream.url,
    }


@pytest.fixture(scope="module")
def gateway(
    upstream: FakeUpstream, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    tmp: Path = tmp_path_factory.mktemp("gateway")
    with serving(tmp, "--gateway-addr", "127.0.0.1:0", env=upstream_env(upstream)) as server:
        yield server


@pytest.fixture(autouse=True)
def fresh_upstream(upstream: FakeUpstream) -> Iterator[None]:
    """Each test sees only its own requests and a healthy provider; what it held
    is let go after it."""
    with upstream.lock:
        upstream.requests.clear()
        upstream.streams_abandoned = 0
    upstream.failure = None
    upstream.script = lambda _request: "ok"
    upstream.usage = lambda request: len(request.raw) // 4
    upstream.hold = lambda _request: False
    upstream.stream_fault = None
    upstream.released.clear()
    yield
    upstream.released.set()
