"""Hostile bodies: each gets a clear 4xx or goes to the provider as sent; none
gets a 5xx of the gateway's own, crashes the server or lands in its log as a
failure."""

from __future__ import annotations

import gzip
import json
from typing import Any

import httpx
import pytest

from tests.gateway.test_http import HELLO, long_history
from tests.gateway.upstream import FakeUpstream
from tests.serverproc import ServerProcess

DEPTH = 1000  # lists in lists: under orjson's 1024 levels, over Python's recursion limit
MESSAGES_URL = "anthropic/v1/messages"
DEEP = "@deep@"  # where raw_json puts the nested lists, which json.dumps cannot write


def raw_json(value: Any, depth: int = DEPTH) -> bytes:
    return json.dumps(value).replace(f'"{DEEP}"', "[" * depth + "]" * depth).encode()


def hostile_bodies() -> dict[str, bytes]:
    deep_opening = HELLO | {
        "messages": [{"role": "user", "content": [{"type": "text", "text": "hi", "extra": DEEP}]}]
    }
    deep_tool = HELLO | {"messages": long_history(3, 5)}
    deep_tool["messages"][1]["content"][0]["input"] = {"deep": DEEP}
    huge_number = (
        b'{"model": "claude-sonnet-4-6", "max_tokens": '
        + b"9" * 10_000
        + b', "messages": [{"role": "user", "content": "hi"}]}'
    )
    unknown = HELLO | {"messages": long_history(3, 5)}
    unknown["messages"][2]["content"].append({"type": "hologram", "data": {"x": [1, 2]}})
    return {
        "deep opening": raw_json(deep_opening),
        "deep tool input": raw_json(deep_tool),
        "deeper than the parser takes": raw_json(HELLO | {"metadata": DEEP}, depth=5000),
        "tens of megabytes": raw_json(
            HELLO | {"messages": [{"role": "user", "content": "word " * 6_000_000}]}
        ),
        "invalid utf-8": b'{"model": "claude-sonnet-4-6", "messages": [{"role": "user", "content": "\xff\xfe\xc3"}]}',  # noqa: E501
        "NaN": b'{"model": "claude-sonnet-4-6", "temperature": NaN, "messages": [{"role": "user", "content": "hi"}]}',  # noqa: E501
        "1e400": b'{"model": "claude-sonnet-4-6", "temperature": 1e400, "messages": [{"role": "user", "content": "hi"}]}',  # noqa: E501
        "10,000-digit number": huge_number,
        "10,000-digit model version": raw_json(HELLO | {"model": "claude-opus-" + "4" * 10_000}),
        "duplicate keys": b'{"model": "claude-sonnet-4-6", "messages": [], "messages": [{"role": "user", "content": "hi"}]}',  # noqa: E501
        "unknown block type": raw_json(unknown),
        "messages not a list": raw_json(HELLO | {"messages": {"role": "user"}}),
        "content a number": raw_json(HELLO | {"messages": [{"role": "user", "content": 5}]}),
        "role a list": raw_json(HELLO | {"messages": [{"role": ["user"], "content": "hi"}]}),
        "a block not an object": raw_json(HELLO | {"messages": [{"role": "user", "content": [7]}]}),
        "system a number": raw_json(HELLO | {"system": 12}),
        "model an object": raw_json(HELLO | {"model": {"name": "claude"}}),
        "tools a string": raw_json(HELLO | {"tools": "all of them"}),
        "empty body": b"",
        "a JSON string": b'"hello"',
    }


@pytest.mark.parametrize("name", list(hostile_bodies()))
def test_a_hostile_body_gets_a_4xx_or_goes_up_as_sent(
    gateway: ServerProcess, upstream: FakeUpstream, name: str
) -> None:
    raw = hostile_bodies()[name]
    logged = len(gateway.log_text())
    headers = {"content-type": "application/json"}
    answer = httpx.post(f"{gateway.gateway_url}/{MESSAGES_URL}", content=raw, headers=headers)
    assert answer.status_code < 500, answer.text
    if answer.status_code < 400 or upstream.requests:
        (seen,) = upstream.requests
        outcome = answer.headers["x-ctxopt-outcome"]
        if outcome in ("pass-through", "below-threshold"):
            assert seen.raw == raw, f"{outcome}: the provider got other bytes"
        elif outcome == "fallback":  # nothing to drop: the same JSON, written compactly
            assert json.loads(seen.raw) == json.loads(raw)
    assert gateway.process.poll() is None
    new_lines = gateway.log_text()[logged:]
    assert '"level": "error"' not in new_lines and "Traceback" not in new_lines, new_lines[:2000]


def test_a_gzip_body_reaches_the_provider_as_the_same_json(
    gateway: ServerProcess, upstream: FakeUpstream
) -> None:
    body = HELLO | {"messages": long_history(4, 20)}
    packed = gzip.compress(raw_json(body))
    answer = httpx.post(
        f"{gateway.gateway_url}/{MESSAGES_URL}",
        content=packed,
        headers={"content-type": "application/json", "content-encoding": "gzip"},
    )
    assert answer.status_code == 200, answer.text
    (seen,) = upstream.requests
    assert seen.headers.get("content-encoding") == "gzip"
    assert json.loads(gzip.decompress(seen.raw)) == body
