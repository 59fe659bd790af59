"""The development trajectories replayed through the gateway, billed at cache prices.

Each trajectory is replayed call by call in a format (the call after step s
sends the task and s exchanges) under a window of WINDOW_SHARE of its final
size. Three ways to send each call:

- `none`: the whole history (no pruning; over the window once it outgrows it);
- `gateway`: what the gateway sent to the provider (recorded by the fake);
- `context-editing` (Anthropic only, the host's own policy): Anthropic's
  `clear_tool_uses` edit as Claude Code users can enable it: once the prompt
  passes the trigger (100k tokens, or the window when that is lower), every
  tool result but the latest KEEP_TOOL_USES is replaced by a short marker.

Billing: the provider caches the longest prefix of messages shared with the
previous call; cached input is billed at CACHED_PRICE, the rest at 1, and on
Anthropic the uncached rest is a cache write at ANTHROPIC_WRITE_PRICE (the
agent marks the end of its prompt for caching, as Claude Code does).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import httpx

from benchmarks.gateway.histories import Trajectory, request
from benchmarks.gateway.latency import LISTS, PATHS
from tests.gateway.checks import tokens_of
from tests.gateway.upstream import FakeUpstream

WINDOW_SHARE = 0.4  # as the session replay (benchmarks/replay): every method must act
CACHED_PRICE = 0.1
ANTHROPIC_WRITE_PRICE = 1.25
EDIT_TRIGGER_TOKENS = 100_000
KEEP_TOOL_USES = 3
CLEARED = "[tool result cleared]"
FRAME_KEYS = ("system", "tools", "instructions", "systemInstruction")


@dataclass
class Ledger:
    calls: int = 0
    input_tokens: int = 0
    billed: float = 0.0
    over_window: int = 0
    outcomes: dict[str, int] = field(default_factory=dict)
    _previous: list[str] = field(default_factory=list)

    def add(
        self,
        body: dict[str, Any],
        key: str,
        window: int,
        write_price: float,
        counts: dict[str, int],
    ) -> None:
        frame = tokens_of({k: body[k] for k in FRAME_KEYS if k in body})
        texts = [json.dumps(m, sort_keys=True) for m in body[key]]
        sizes = [counts.setdefault(t, tokens_of(json.loads(t))) for t in texts]
        total = frame + sum(sizes)
        shared = 0
        while (
            shared < min(len(texts), len(self._previous))
            and texts[shared] == self._previous[shared]
        ):
            shared += 1
        cached = frame + sum(sizes[:shared]) if self._previous else 0
        self.calls += 1
        self.input_tokens += total
        self.billed += cached * CACHED_PRICE + (total - cached) * write_price
        self.over_window += total > window
        self._previous = texts


def context_edited(body: dict[str, Any], trigger: int) -> dict[str, Any]:
    """Anthropic's clear_tool_uses edit: past the trigger, older tool results cleared."""
    if tokens_of(body["messages"]) + tokens_of(body.get("system", "")) <= trigger:
        return body
    results = [
        (i, j)
        for i, m in enumerate(body["messages"])
        if isinstance(m["content"], list)
        for j, b in enumerate(m["content"])
        if b.get("type") == "tool_result"
    ]
    clear = set(results[:-KEEP_TOOL_USES])
    messages = []
    for i, message in enumerate(body["messages"]):
        if any(i == a for a, _ in clear):
            content = [
                {**b, "content": CLEARED} if (i, j) in clear else b
                for j, b in enumerate(message["content"])
            ]
            message = {**message, "content": content}
        messages.append(message)
    return {**body, "messages": messages}


def replay(
    client: httpx.Client,
    gateway: str,
    upstream: FakeUpstream,
    fmt: str,
    trajectory: Trajectory,
    steps: int,
) -> dict[str, Ledger]:
    key = LISTS[fmt]
    prefix, path = PATHS[fmt]
    final = request(fmt, trajectory, steps)
    window = int(tokens_of(final) * WINDOW_SHARE)
    write_price = ANTHROPIC_WRITE_PRICE if fmt == "anthropic" else 1.0
    headers = {
        "x-api-key": "bench",
        "x-ctxopt-session": f"bill-{fmt}-{trajectory.instance_id}",
        "x-ctxopt-window-tokens": str(window),
    }
    ledgers = {"none": Ledger(), "gateway": Ledger()}
    if fmt == "anthropic":
        ledgers["context-editing"] = Ledger()
    counts: dict[str, int] = {}
    for step in range(steps + 1):
        body = request(fmt, trajectory, step)
        answer = client.post(gateway + prefix + path, json=body, headers=headers)
        answer.raise_for_status()
        sent = upstream.calls(path)[-1].body
        outcome = answer.headers["x-ctxopt-outcome"]
        ledgers["gateway"].outcomes[outcome] = ledgers["gateway"].outcomes.get(outcome, 0) + 1
        ledgers["none"].add(body, key, window, write_price, counts)
        ledgers["gateway"].add(sent, key, window, write_price, counts)
        if fmt == "anthropic":
            edited = context_edited(body, min(EDIT_TRIGGER_TOKENS, window))
            ledgers["context-editing"].add(edited, key, window, write_price, counts)
    with upstream.lock:
        upstream.requests.clear()
    return ledgers
