"""What the gateway adds to a model call, and to the first byte of a stream.

For each wire format and history size, a session grows by one exchange per
call (as an agent's does); each call goes once straight to the fake provider
and once through the gateway, alternately, and the difference of the two
distributions' percentiles is what the gateway adds (`paired`: the median of
each call's difference with the direct one before it). The first gateway call
of a session (every chunk new to the engine) is reported apart as `cold`.
Two regimes: the model's own window (at 100 messages below the threshold, so
the original bytes go up; 1,000 messages pass Claude's 200k and are pruned)
and a window at half the history (collections, sticky rewrites).
"""

from __future__ import annotations

import json
import statistics
import time
from dataclasses import dataclass
from typing import Any

import httpx

from benchmarks.bench_grpc import server_cpu_seconds
from benchmarks.gateway.histories import Trajectory, request
from tests.gateway.checks import tokens_of

PATHS = {
    "anthropic": ("/anthropic", "/v1/messages"),
    "openai-chat": ("/openai", "/v1/chat/completions"),
    "openai-responses": ("/openai", "/v1/responses"),
    "gemini": ("/gemini", "/v1beta/models/gemini-2.5-pro:generateContent"),
}
LISTS = {
    "anthropic": "messages",
    "openai-chat": "messages",
    "openai-responses": "input",
    "gemini": "contents",
}


@dataclass(frozen=True)
class Case:
    fmt: str
    messages: int
    regime: str  # "model-window" or "half-window"


def synthetic(trajectories: list[Trajectory], exchanges: int) -> Trajectory:
    """One long session: the first task, then steps taken in turn from every trajectory."""
    pool = [s for t in trajectories for s in t.steps]
    steps = tuple(pool[i % len(pool)] for i in range(exchanges))
    first = trajectories[0]
    return Trajectory("synthetic", first.system, first.task, steps)


def _post(
    client: httpx.Client, url: str, body: dict[str, Any], headers: dict[str, str]
) -> tuple[float, float]:
    """Seconds to the whole answer, and to its first byte when streamed."""
    started = time.perf_counter()
    with client.stream("POST", url, json=body, headers=headers) as response:
        first = 0.0
        for _ in response.iter_raw():
            first = first or time.perf_counter() - started
        response.raise_for_status()
    return time.perf_counter() - started, first


def _streamed(fmt: str, url: str, body: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    if fmt == "gemini":
        return url.replace(":generateContent", ":streamGenerateContent") + "?alt=sse", body
    return url, {**body, "stream": True}


def measure(
    client: httpx.Client,
    gateways: dict[str, str],
    upstream: str,
    case: Case,
    session: Trajectory,
    calls: int,
    pids: dict[str, int],
) -> dict[str, dict[str, float]]:
    """Per gateway (label -> URL), what it adds; `session` must hold
    `case.messages // 2 + calls` steps. Each call goes straight to the fake and
    through every gateway in turn, so a noisy machine weighs on all alike; the
    CPU each gateway's process (`pids`) spends per call does not wait on the
    machine's other jobs."""
    exchanges = case.messages // 2
    prefix, path = PATHS[case.fmt]
    direct_url = upstream + path
    base = request(case.fmt, session, exchanges)
    headers = {
        "x-api-key": "bench",
        "x-ctxopt-session": session_of(case),
    }
    if case.regime == "half-window":
        headers["x-ctxopt-window-tokens"] = str(tokens_of(base) // 2)
    cold = {
        label: _post(client, url + prefix + path, base, headers)[0]
        for label, url in gateways.items()
    }
    direct: list[float] = []
    first_direct: list[float] = []
    through: dict[str, list[float]] = {label: [] for label in gateways}
    first_through: dict[str, list[float]] = {label: [] for label in gateways}
    cpu = {label: -server_cpu_seconds(pids[label]) for label in gateways}
    for call in range(1, calls + 1):
        body = request(case.fmt, session, exchanges + call)
        direct.append(_post(client, direct_url, body, {})[0])
        stream_direct, streamed = _streamed(case.fmt, direct_url, body)
        first_direct.append(_post(client, stream_direct, streamed, {})[1])
        for label, url in gateways.items():
            gateway_url = url + prefix + path
            through[label].append(_post(client, gateway_url, body, headers)[0])
            stream_through, streamed = _streamed(case.fmt, gateway_url, body)
            first_through[label].append(_post(client, stream_through, streamed, headers)[1])
    for label in gateways:
        cpu[label] += server_cpu_seconds(pids[label])
    return {
        label: {
            "cold_ms": cold[label] * 1000,
            "direct_p50_ms": _pct(direct, 50),
            "direct_p99_ms": _pct(direct, 99),
            "gateway_p50_ms": _pct(through[label], 50),
            "gateway_p99_ms": _pct(through[label], 99),
            "added_p50_ms": _pct(through[label], 50) - _pct(direct, 50),
            # each call against the direct one just before it: on a machine whose load
            # drifts, steadier than the difference of the two medians
            "added_paired_p50_ms": statistics.median(
                (t - d) * 1000 for t, d in zip(through[label], direct, strict=True)
            ),
            "added_p99_ms": _pct(through[label], 99) - _pct(direct, 99),
            "ttfb_direct_p50_ms": _pct(first_direct, 50),
            "ttfb_gateway_p50_ms": _pct(first_through[label], 50),
            "ttfb_added_p50_ms": _pct(first_through[label], 50) - _pct(first_direct, 50),
            "server_cpu_ms_per_call": cpu[label] * 1000 / (2 * calls),
        }
        for label in gateways
    }


# A gateway call's log fields (api/gateway/app.py) for where its time went, in order:
# the body read, the pipeline, sending up to the provider's head, relaying its answer.
STAGES = ("read_ms", "ms", "upstream_ms", "relay_ms")


def session_of(case: Case) -> str:
    return f"bench-{case.fmt}-{case.messages}-{case.regime}"


def stages(log_text: str, case: Case) -> dict[str, float]:
    """The p50 of each of `STAGES` over the case's unary calls but its first (cold)
    one, from the gateway's log (a tree that does not log a stage has none)."""
    calls = []
    for line in log_text.splitlines():
        if line.startswith("{") and '"gateway"' in line:
            fields = json.loads(line)["gateway"]
            if fields.get("session", "").endswith(session_of(case)):
                calls.append(fields)
    unary = calls[1::2]  # `measure` sends each gateway a unary call, then a streamed one
    found = {stage: [float(c[stage]) for c in unary if stage in c] for stage in STAGES}
    return {f"stage_{s}_p50": statistics.median(v) for s, v in found.items() if v}


def _pct(values: list[float], percent: int) -> float:
    if len(values) == 1:
        return values[0] * 1000
    return statistics.quantiles(values, n=100, method="inclusive")[percent - 1] * 1000
