"""OpenAI Chat Completions and Responses through the gateway, driven by the `openai` SDK."""

from __future__ import annotations

import json
from typing import Any

import httpx
import openai
import pytest

from benchmarks.gateway.histories import Trajectory, load, request
from tests.gateway.checks import assert_valid, gateway_log_lines, tokens_of
from tests.gateway.upstream import FakeUpstream, ToolCall
from tests.serverproc import ServerProcess


@pytest.fixture(scope="module")
def trajectory() -> Trajectory:
    return load(limit=2)[1]


def client(gateway: ServerProcess, key: str = "sk-openai-test") -> openai.OpenAI:
    return openai.OpenAI(api_key=key, base_url=f"{gateway.gateway_url}/openai/v1", max_retries=0)


def window_for(history: list[Any], frame: Any, share: float) -> int:
    return int(tokens_of(history) * share) + tokens_of(frame)


@pytest.mark.parametrize("streamed", [False, True])
def test_a_chat_tool_loop_is_pruned_and_every_call_answered(
    gateway: ServerProcess, upstream: FakeUpstream, trajectory: Trajectory, streamed: bool
) -> None:
    final = request("openai-chat", trajectory, len(trajectory.steps))
    window = window_for(final["messages"], final["tools"], 0.6)
    headers = {"x-ctxopt-window-tokens": str(window), "x-ctxopt-session": f"chat-{streamed}"}
    sdk = client(gateway)
    outcomes = []
    for steps in range(0, len(trajectory.steps) + 1, 5):
        body = request("openai-chat", trajectory, steps)
        if streamed:
            with sdk.chat.completions.with_streaming_response.create(
                **body, stream=True, stream_options={"include_usage": True}, extra_headers=headers
            ) as response:
                chunks = list(response.parse())
                outcome = response.headers["x-ctxopt-outcome"]
            assert chunks[0].choices[0].delta.content == "ok"
        else:
            raw = sdk.chat.completions.with_raw_response.create(**body, extra_headers=headers)
            assert raw.parse().choices[0].message.content == "ok"
            outcome = raw.headers["x-ctxopt-outcome"]
        outcomes.append(outcome)
        sent = upstream.calls("/v1/chat/completions")[-1].body
        assert_valid(
            "openai-chat",
            {
                **body,
                **({"stream": True, "stream_options": {"include_usage": True}} if streamed else {}),
            },
            sent,
            window,
        )
    assert "optimized" in outcomes


@pytest.mark.parametrize("streamed", [False, True])
def test_a_responses_tool_loop_is_pruned_and_pairs_kept(
    gateway: ServerProcess, upstream: FakeUpstream, trajectory: Trajectory, streamed: bool
) -> None:
    final = request("openai-responses", trajectory, len(trajectory.steps))
    window = window_for(final["input"], [final["tools"], final["instructions"]], 0.6)
    headers = {"x-ctxopt-window-tokens": str(window), "x-ctxopt-session": f"responses-{streamed}"}
    sdk = client(gateway)
    outcomes = []
    for steps in range(0, len(trajectory.steps) + 1, 5):
        body = request("openai-responses", trajectory, steps)
        if streamed:
            with sdk.responses.with_streaming_response.create(
                **body, stream=True, extra_headers=headers
            ) as response:
                events = [e.type for e in response.parse()]
                outcome = response.headers["x-ctxopt-outcome"]
            assert events[-1] == "response.completed"
        else:
            raw = sdk.responses.with_raw_response.create(**body, extra_headers=headers)
            assert raw.parse().output_text == "ok"
            outcome = raw.headers["x-ctxopt-outcome"]
        outcomes.append(outcome)
        sent = upstream.calls("/v1/responses")[-1].body
        assert_valid(
            "openai-responses", {**body, **({"stream": True} if streamed else {})}, sent, window
        )
    assert "optimized" in outcomes


def test_previous_response_id_passes_untouched(
    gateway: ServerProcess, upstream: FakeUpstream
) -> None:
    big = "x " * 5000
    body: dict[str, Any] = {
        "model": "gpt-5",
        "previous_response_id": "resp_123",
        "input": [{"role": "user", "content": big}, {"role": "user", "content": "next"}],
    }
    raw = client(gateway).responses.with_raw_response.create(
        **body, extra_headers={"x-ctxopt-window-tokens": "500"}
    )
    assert raw.headers["x-ctxopt-outcome"] == "pass-through"
    assert upstream.calls("/v1/responses")[-1].body == body


def test_developer_and_system_messages_are_never_changed(
    gateway: ServerProcess, upstream: FakeUpstream
) -> None:
    history: Any = [
        {"role": "developer", "content": "You are Codex. " * 50},
        {"role": "user", "content": "task: fix the bug"},
    ]
    for i in range(12):
        history.append(
            {
                "role": "assistant",
                "content": f"step {i}",
                "tool_calls": [
                    {
                        "id": f"c{i}",
                        "type": "function",
                        "function": {"name": "bash", "arguments": "{}"},
                    }
                ],
            }
        )
        history.append(
            {
                "role": "tool",
                "tool_call_id": f"c{i}",
                "content": f"output {i} " + "line of log\n" * 80,
            }
        )
        if i == 6:
            history.append({"role": "system", "content": "Reminder: stay in the repository."})
    history.append({"role": "user", "content": "now summarise"})
    raw = client(gateway).chat.completions.with_raw_response.create(
        model="gpt-4o",
        messages=history,
        extra_headers={"x-ctxopt-window-tokens": "3000"},
    )
    assert raw.headers["x-ctxopt-outcome"] in ("optimized", "fallback")
    sent = upstream.calls("/v1/chat/completions")[-1].body["messages"]
    assert sent[0] == history[0]
    assert {"role": "system", "content": "Reminder: stay in the repository."} in sent
    assert sent[-1] == history[-1]
    assert sent != history


def test_a_tool_call_answer_reaches_the_client(
    gateway: ServerProcess, upstream: FakeUpstream
) -> None:
    upstream.script = lambda _request: ToolCall("bash", {"command": "ls"}, "call_9")
    completion = client(gateway).chat.completions.create(
        model="gpt-4o", messages=[{"role": "user", "content": "list files"}]
    )
    calls = completion.choices[0].message.tool_calls
    assert calls is not None and calls[0].id == "call_9"


def test_a_chat_stream_without_usage_is_calibrated_and_the_client_sees_no_usage_chunk(
    gateway: ServerProcess, upstream: FakeUpstream
) -> None:
    """aider streams without `stream_options.include_usage`: the gateway asks for it,
    reads the provider's prompt size, and relays the stream without the extra chunk."""
    upstream.usage = lambda _request: 1234
    session = "stream-without-usage"
    with client(gateway).chat.completions.with_streaming_response.create(
        model="gpt-5",
        messages=[{"role": "user", "content": "hi"}],
        stream=True,
        extra_headers={"x-ctxopt-session": session},
    ) as response:
        chunks = list(response.parse())
    assert chunks and all(c.choices for c in chunks)
    assert chunks[0].choices[0].delta.content == "ok"
    sent = upstream.calls("/v1/chat/completions")[-1]
    assert sent.body["stream_options"] == {"include_usage": True}
    assert sent.headers["accept-encoding"] == "identity"
    (line,) = gateway_log_lines(gateway, lambda line: line["session"].endswith(session))
    assert line["provider_prompt_tokens"] == 1234


def test_a_chat_stream_that_asks_for_usage_keeps_its_usage_chunk(
    gateway: ServerProcess, upstream: FakeUpstream
) -> None:
    body = {"model": "gpt-5", "messages": [{"role": "user", "content": "hi"}]}
    raw = json.dumps({**body, "stream": True, "stream_options": {"include_usage": True}})
    answer = httpx.post(
        f"{gateway.gateway_url}/openai/v1/chat/completions",
        content=raw,
        headers={"authorization": "Bearer sk-test", "content-type": "application/json"},
    )
    assert upstream.calls("/v1/chat/completions")[-1].raw == raw.encode()
    events = [json.loads(e[6:]) for e in answer.text.split("\n\n") if e.startswith("data: {")]
    assert events[-1]["choices"] == [] and events[-1]["usage"]["prompt_tokens"] > 0
