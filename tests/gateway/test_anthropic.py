"""Anthropic Messages through the gateway, driven by the official `anthropic` SDK."""

from __future__ import annotations

import itertools
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


def thinking_loop(steps: int, size: int = 300) -> list[dict[str, Any]]:
    """A tool loop with thinking, parallel calls, an image and cache markers, as
    Claude Code sends it: the latest assistant turn's thinking must come back
    byte for byte."""
    messages: list[dict[str, Any]] = [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "task: find why the build fails"},
                {
                    "type": "image",
                    "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="},
                },
            ],
        }
    ]
    for i in range(steps):
        messages.append(
            {
                "role": "assistant",
                "content": [
                    {
                        "type": "thinking",
                        "thinking": f"step {i}: look at both logs",
                        "signature": f"sig-{i}",
                    },
                    {
                        "type": "tool_use",
                        "id": f"a{i}",
                        "name": "Bash",
                        "input": {"command": f"cat a{i}.log"},
                    },
                    {
                        "type": "tool_use",
                        "id": f"b{i}",
                        "name": "Bash",
                        "input": {"command": f"cat b{i}.log"},
                    },
                ],
            }
        )
        results: list[dict[str, Any]] = [
            {
                "type": "tool_result",
                "tool_use_id": f"a{i}",
                "content": f"a{i}\n" + "build output line\n" * size,
            },
            {
                "type": "tool_result",
                "tool_use_id": f"b{i}",
                "content": [{"type": "text", "text": f"b{i}\n" + "warning: unused\n" * size}],
            },
            {"type": "text", "text": "<system-reminder>Stay on task.</system-reminder>"},
        ]
        if i == steps // 2:
            results[0]["cache_control"] = {"type": "ephemeral"}
        if i == steps - 1:
            results[-1]["cache_control"] = {"type": "ephemeral"}
        messages.append({"role": "user", "content": results})
    return messages


def test_thinking_cache_markers_images_and_parallel_calls_keep_the_rules(
    gateway: ServerProcess, upstream: FakeUpstream
) -> None:
    messages = thinking_loop(16)
    body: dict[str, Any] = {
        "model": "claude-sonnet-4-6",
        "max_tokens": 100,
        "system": [
            {"type": "text", "text": "You are Claude Code.", "cache_control": {"type": "ephemeral"}}
        ],
        "thinking": {"type": "enabled", "budget_tokens": 2000},
        "messages": messages,
    }
    raw = client(gateway).messages.with_raw_response.create(
        **body, extra_headers={"x-ctxopt-window-tokens": "9000"}
    )
    assert raw.headers["x-ctxopt-outcome"] == "optimized"
    sent = upstream.calls("/v1/messages")[-1].body
    assert_valid("anthropic", body, sent, 9000)
    assert sent["messages"][-2:] == messages[-2:], "the latest tool loop turn, thinking included"
    assert sent["messages"][0] == messages[0]
    reminders = [
        b
        for m in sent["messages"]
        if isinstance(m["content"], list)
        for b in m["content"]
        if b.get("type") == "text" and b["text"].startswith("<system-reminder>")
    ]
    assert len(reminders) == 16
    markers = sum(1 for m in sent["messages"] for b in m["content"] if "cache_control" in b)
    assert 1 <= markers <= 3, "with the system prompt's, at most 4 breakpoints"
    placeholders = [
        b["content"]
        for m in sent["messages"]
        for b in m["content"]
        if b.get("type") == "tool_result"
        and isinstance(b["content"], str)
        and "context_stash_restore" in b["content"]
    ]
    assert placeholders


def test_sticky_decisions_keep_the_prefix_byte_identical(
    gateway: ServerProcess, upstream: FakeUpstream
) -> None:
    headers = {"x-ctxopt-window-tokens": "12000", "x-ctxopt-session": "sticky"}
    sdk = client(gateway)
    sent = []
    full = thinking_loop(24, size=120)
    for steps in range(14, 25):
        messages = full[: 1 + 2 * steps]
        for message in messages[:-1]:  # Claude Code moves its marker to the newest message
            for block in message["content"]:
                if isinstance(block, dict) and block.get("type") == "text":
                    block.pop("cache_control", None)
        body: dict[str, Any] = {
            "model": "claude-sonnet-4-6",
            "max_tokens": 10,
            "messages": messages,
        }
        sdk.messages.create(**body, extra_headers=headers)
        sent.append(upstream.calls("/v1/messages")[-1].body["messages"])
    same_prefix = sum(
        1 for before, after in itertools.pairwise(sent) if after[: len(before) - 1] == before[:-1]
    )
    assert same_prefix >= len(sent) // 2, "between collections the prefix does not change"


def test_claude_codes_system_messages_inside_messages_stay_and_the_rest_is_pruned(
    gateway: ServerProcess, upstream: FakeUpstream
) -> None:
    """Claude Code 2.1.332 puts its environment block as a `"role": "system"` message
    at messages[1] (recorded by tests/agents), and may add one later: each stays where
    it is, byte for byte, and the tool loop around them is pruned by the usual rules."""
    environment = {
        "role": "system",
        "content": "# Environment\nYou have been invoked in the following environment:\n"
        " - Primary working directory: /work\n",
    }
    later = {"role": "system", "content": [{"type": "text", "text": "Tokens left: plenty."}]}
    messages = thinking_loop(16)
    messages.insert(1, environment)
    messages.insert(12, later)  # after a user turn's tool results
    body: dict[str, Any] = {"model": "claude-opus-5-5", "max_tokens": 100, "messages": messages}
    headers = {"x-ctxopt-window-tokens": "9000", "user-agent": "claude-cli/2.1.332 (external)"}
    raw = client(gateway).messages.with_raw_response.create(**body, extra_headers=headers)
    assert raw.headers["x-ctxopt-outcome"] == "optimized"
    sent = upstream.calls("/v1/messages")[-1].body
    assert_valid("anthropic", body, sent, 9000)
    system = [(i, m) for i, m in enumerate(sent["messages"]) if m["role"] == "system"]
    assert [m for _, m in system] == [environment, later]
    assert system[0][0] == 1
    before = sent["messages"][system[1][0] - 1]["content"]  # the results of step 4
    assert [b.get("tool_use_id") for b in before] == ["a4", "b4", None], "kept in its place"
    assert any(
        isinstance(b.get("content"), str) and "context_stash_restore" in b["content"]
        for m in sent["messages"]
        if isinstance(m["content"], list)
        for b in m["content"]
    )
