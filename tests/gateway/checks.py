"""What every request that reached the provider must satisfy."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

from ctxopt.api.gateway.app import wire_format
from ctxopt.tokens import TokenCounter

from tests.serverproc import ServerProcess

COUNTER = TokenCounter("cl100k")
# The gateway writes a call's log line once the response's last byte has gone out,
# so a client may read the answer before the line is there: readers wait for it.
LOG_TIMEOUT_S = 30.0
LOG_POLL_S = 0.02
LISTS = {
    "anthropic": "messages",
    "openai-chat": "messages",
    "openai-responses": "input",
    "gemini": "contents",
}
PREFIX_PATHS = {
    "anthropic": ("anthropic", "v1/messages"),
    "openai-chat": ("openai", "v1/chat/completions"),
    "openai-responses": ("openai", "v1/responses"),
    "gemini": ("gemini", "v1beta/models/gemini-2.5-pro:generateContent"),
}


def tokens_of(value: Any) -> int:
    """The cl100k size of every string in a JSON value (what the model reads)."""
    if isinstance(value, str):
        return COUNTER.count(value)
    if isinstance(value, list):
        return sum(tokens_of(v) for v in value)
    if isinstance(value, dict):
        return sum(tokens_of(v) for v in value.values())
    return 0


def assert_valid(
    fmt_name: str, original: dict[str, Any], sent: dict[str, Any], window: int
) -> None:
    """The provider's rules hold, the request fits the window (JSON overhead
    included), and the latest turn arrived exactly as the client sent it."""
    fmt = wire_format(*PREFIX_PATHS[fmt_name])
    assert fmt is not None
    assert fmt.violations(sent) == []
    key = LISTS[fmt_name]
    assert sent[key][-1] == original[key][-1], "the latest turn changed"
    frame = {
        k: v
        for k, v in sent.items()
        if k in ("system", "tools", "instructions", "systemInstruction")
    }
    assert tokens_of(sent[key]) + tokens_of(frame) <= window
    for name in set(original) - {key}:
        assert sent[name] == original[name], f"{name} changed"


def gateway_log_lines(
    server: ServerProcess, wanted: Callable[[dict[str, Any]], bool], count: int = 1
) -> list[dict[str, Any]]:
    """The gateway's log lines `wanted` picks, once there are at least `count` of them
    (polled up to LOG_TIMEOUT_S; a timeout fails with what there is)."""
    deadline = time.monotonic() + LOG_TIMEOUT_S
    while True:
        lines = [
            json.loads(line)["gateway"]
            for line in server.log_text().splitlines()
            if line.startswith("{") and '"gateway"' in line
        ]
        found = [line for line in lines if wanted(line)]
        if len(found) >= count or time.monotonic() > deadline:
            assert len(found) >= count, f"{len(found)} of {count} log lines after {LOG_TIMEOUT_S}s"
            return found
        time.sleep(LOG_POLL_S)
