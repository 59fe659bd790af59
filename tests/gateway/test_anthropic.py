"""Anthropic Messages through the gateway, driven by the official `anthropic` SDK."""

from __future__ import annotations

from typing import Any

import anthropic
import pytest

from benchmarks.gateway.histories import Trajectory, load, request
from tests.gateway.checks import assert_valid, tokens_of
from tests.gateway.upstream import FakeUpstream
from tests.serverproc import ServerProcess

KEY = "sk-ant-test-key-1"


@pytest.fixture(scope="module")
def trajectory() -> Trajectory:
    return load(limit=1)[0]


def client(gateway: ServerProcess, key: str = KEY) -> anthropic.Anthropic:
    return anthropic.Anthropic(
        api_key=key, base_url=f"{gateway.gateway_url}/anthropic", max_retries=0
    )


def window_for(body: dict[str, Any], share: float) -> int:
    return (
        int(tokens_of(body["messages"]) * share)
        + tokens_of(body["system"])
        + tokens_of(body["tools"])
    )


def test_a_tool_loop_is_pruned_under_the_window_and_keeps_the_rules(
    gateway: ServerProcess, upstream: FakeUpstream, trajectory: Trajectory
) -> None:
    final = request("anthropic", trajectory, len(trajectory.steps))
    window = window_for(final, 0.4)
    headers = {"x-ctxopt-window-tokens": str(window), "x-ctxopt-session": "loop-1"}
    sdk = client(gateway)
    outcomes = []
    for steps in range(0, len(trajectory.steps) + 1, 4):
        body = request("anthropic", trajectory, steps)
        raw = sdk.messages.with_raw_response.create(**body, extra_headers=headers)
        assert raw.parse().content[0].type == "text"
        outcomes.append(raw.headers["x-ctxopt-outcome"])
        sent = upstream.calls("/v1/messages")[-1].body
        assert_valid("anthropic", body, sent, window)
        assert int(raw.headers["x-ctxopt-tokens-after"]) <= window
    assert "optimized" in outcomes
    assert outcomes[0] == "below-threshold"


def test_streamed_events_arrive_unchanged(gateway: ServerProcess, upstream: FakeUpstream) -> None:
    body: dict[str, Any] = {
        "model": "claude-sonnet-4-6",
        "max_tokens": 50,
        "messages": [{"role": "user", "content": "hi"}],
    }
    with client(gateway).messages.stream(**body) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text == "ok"
    assert final.usage.input_tokens > 0
    assert upstream.calls("/v1/messages")[-1].body == {**body, "stream": True}
