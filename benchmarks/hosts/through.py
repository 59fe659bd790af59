"""A host's requests through the real gateway: what reached the provider, and
what the gateway added to each call.

Every call sends the host's full history (with ctxopt in front the host
never compacts: Claude Code and Codex judge their line by the usage the
provider reports, which is the pruned prompt's, and Gemini CLI by its last
prompt's size, likewise), with the host's User-Agent so the gateway
recognises it. The gateway's ceiling is the lower of the window and the
host's line, which at full scale is the line (167,000 of Claude's 200,000,
...); the benchmark's window is smaller than any host's real line, so the
scaled line is sent as the window (`x-ctxopt-window-tokens`), and the ceiling
is the scaled line. Each call's body also goes straight to the fake provider,
just before; the gateway's round trip minus that one is what it added.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import httpx

from benchmarks.gateway.histories import JsonObject, request
from benchmarks.gateway.latency import PATHS
from benchmarks.hosts.profiles import Profile
from benchmarks.hosts.prompts import Case, rendered
from benchmarks.replay.sessions import Prompt
from tests.gateway.upstream import FakeUpstream


@dataclass(slots=True)
class Through:
    """One trajectory through the gateway: per call, the prompt the provider
    received, the ms the gateway added, and its `x-ctxopt-outcome`."""

    prompts: list[Prompt] = field(default_factory=list)
    added_ms: list[float] = field(default_factory=list)
    outcomes: list[str] = field(default_factory=list)


def _timed_post(
    client: httpx.Client, url: str, body: JsonObject, headers: dict[str, str]
) -> tuple[httpx.Response, float]:
    started = time.perf_counter()
    answer = client.post(url, json=body, headers=headers)
    answer.raise_for_status()
    return answer, (time.perf_counter() - started) * 1000


def replay(
    client: httpx.Client,
    gateway: str,
    upstream: FakeUpstream,
    profile: Profile,
    case: Case,
    line: int,
) -> Through:
    prefix, path = PATHS[profile.fmt]
    headers = {
        "user-agent": profile.user_agent,
        "x-api-key": "bench",
        "x-ctxopt-session": f"hosts-{profile.fmt}-{case.session.instance_id}",
        "x-ctxopt-window-tokens": str(line),
    }
    through = Through()
    for k in range(case.calls):
        body = request(profile.fmt, case.trajectory, k)
        _, direct_ms = _timed_post(client, upstream.url + path, body, {})
        answer, gateway_ms = _timed_post(
            client, gateway + prefix + path + profile.query, body, headers
        )
        sent = upstream.calls(path)[-1].body
        through.prompts.append(rendered(case, sent))
        through.added_ms.append(gateway_ms - direct_ms)
        through.outcomes.append(answer.headers["x-ctxopt-outcome"])
    with upstream.lock:
        upstream.requests.clear()
    return through
