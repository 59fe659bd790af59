"""The gateway's HTTP behaviour: routes, limits, auth, failures, owners, log."""

from __future__ import annotations

import json
import os
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import anthropic
import grpc
import httpx
import pytest
from ctxopt.api.gateway.formats.anthropic import AnthropicMessages
from ctxopt.v1 import ctxopt_pb2 as pb

from tests.gateway.checks import gateway_log_lines
from tests.gateway.conftest import upstream_env
from tests.gateway.upstream import FakeUpstream
from tests.serverproc import CTXOPT, ServerProcess, serving

HELLO: dict[str, Any] = {
    "model": "claude-sonnet-4-6",
    "max_tokens": 20,
    "messages": [{"role": "user", "content": "hello"}],
}


def long_history(turns: int, size: int = 400) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [{"role": "user", "content": "task: read the logs"}]
    for i in range(turns):
        messages.append(
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": f"t{i}", "name": "read", "input": {"i": i}}],
            }
        )
        text = f"log {i}\n" + "a line of output\n" * size
        messages.append(
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": f"t{i}", "content": text}],
            }
        )
    messages.append({"role": "assistant", "content": "done reading"})
    messages.append({"role": "user", "content": "what did you find?"})
    return messages


def test_an_unknown_prefix_answers_404_naming_the_three(gateway: ServerProcess) -> None:
    answer = httpx.post(f"{gateway.gateway_url}/v1/messages", json=HELLO)
    assert answer.status_code == 404
    message = answer.json()["error"]["message"]
    assert all(p in message for p in ("/anthropic", "/openai", "/gemini"))


def test_a_body_over_the_limit_answers_413(tmp_path: Path, upstream: FakeUpstream) -> None:
    env = {**upstream_env(upstream), "CTXOPT_MAX_MESSAGE_BYTES": "100000"}
    with serving(tmp_path, "--gateway-addr", "127.0.0.1:0", env=env) as server:
        huge = {**HELLO, "messages": [{"role": "user", "content": "x" * 200_000}]}
        answer = httpx.post(f"{server.gateway_url}/anthropic/v1/messages", json=huge)
        assert answer.status_code == 413
        assert not upstream.requests
        assert (
            httpx.post(f"{server.gateway_url}/anthropic/v1/messages", json=HELLO).status_code == 200
        )


def test_a_malformed_body_is_forwarded_as_is(
    gateway: ServerProcess, upstream: FakeUpstream
) -> None:
    for raw in (b"{not json", b"[1, 2]", b'{"messages": "nope", "model": "claude-sonnet-4-6"}'):
        answer = httpx.post(f"{gateway.gateway_url}/anthropic/v1/messages", content=raw)
        assert answer.headers["x-ctxopt-outcome"] == "pass-through"
        assert upstream.requests[-1].raw == raw
    assert httpx.get(f"{gateway.gateway_url}/anthropic/v1/models").status_code == 200
    assert upstream.requests[-1].path == "/v1/models"


def test_an_upstream_error_reaches_the_client_unchanged(
    gateway: ServerProcess, upstream: FakeUpstream
) -> None:
    error = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    upstream.fail_with(529, error)
    sdk = anthropic.Anthropic(
        api_key="k", base_url=f"{gateway.gateway_url}/anthropic", max_retries=0
    )
    with pytest.raises(anthropic.APIStatusError) as failure:
        sdk.messages.create(**HELLO)
    assert failure.value.status_code == 529
    assert failure.value.body == error
    assert failure.value.response.headers["x-provider"] == "fake"


def test_an_unreachable_upstream_answers_502(tmp_path: Path) -> None:
    env = {"CTXOPT_UPSTREAM_ANTHROPIC": "http://127.0.0.1:9"}
    with serving(tmp_path, "--gateway-addr", "127.0.0.1:0", env=env) as server:
        answer = httpx.post(f"{server.gateway_url}/anthropic/v1/messages", json=HELLO)
        assert answer.status_code == 502
        assert "unreachable" in answer.json()["error"]["message"]


def test_paths_headers_and_query_pass_through(
    gateway: ServerProcess, upstream: FakeUpstream
) -> None:
    answer = httpx.post(
        f"{gateway.gateway_url}/anthropic/v1/messages/count_tokens?beta=true",
        json=HELLO,
        headers={"x-api-key": "secret-1", "anthropic-beta": "b1", "x-ctxopt-session": "s"},
    )
    assert answer.status_code == 200
    seen = upstream.requests[-1]
    assert seen.path == "/v1/messages/count_tokens" and seen.query == "beta=true"
    assert seen.headers["x-api-key"] == "secret-1" and seen.headers["anthropic-beta"] == "b1"
    assert not any(name.startswith("x-ctxopt-") for name in seen.headers)
    assert json.loads(seen.raw) == HELLO


def test_beta_query_is_kept_on_the_messages_call(
    gateway: ServerProcess, upstream: FakeUpstream
) -> None:
    httpx.post(f"{gateway.gateway_url}/anthropic/v1/messages?beta=true", json=HELLO)
    assert upstream.requests[-1].query == "beta=true"


def test_the_ctxopt_token_is_required_when_auth_is_on(
    tmp_path: Path, upstream: FakeUpstream
) -> None:
    env = {**upstream_env(upstream), "CTXOPT_AUTH_TOKEN": "team=tok-123"}
    with serving(tmp_path, "--gateway-addr", "127.0.0.1:0", env=env) as server:
        url = f"{server.gateway_url}/anthropic/v1/messages"
        assert httpx.post(url, json=HELLO).status_code == 401
        assert httpx.post(url, json=HELLO, headers={"x-ctxopt-token": "wrong"}).status_code == 401
        assert not upstream.requests
        ok = httpx.post(url, json=HELLO, headers={"x-ctxopt-token": "tok-123", "x-api-key": "k"})
        assert ok.status_code == 200
        assert "x-ctxopt-token" not in upstream.requests[-1].headers
        # the session belongs to the token's owner: gRPC with that token reaches it
        (line,) = gateway_log_lines(server, lambda _line: True)
        request = pb.GetSessionStatsRequest(session_id=line["session"])
        with grpc.insecure_channel(server.address) as channel:
            stats = server.stub(channel).GetSessionStats(
                request, metadata=[("authorization", "Bearer tok-123")], timeout=30
            )
        assert stats.chunk_count == 1


def test_two_credentials_never_share_a_session_and_none_is_logged(
    gateway: ServerProcess, upstream: FakeUpstream
) -> None:
    body = {**HELLO, "messages": long_history(20)}
    url = f"{gateway.gateway_url}/anthropic/v1/messages"
    for key in ("sk-owner-aaaa", "sk-owner-bbbb"):
        answer = httpx.post(
            url, json=body, headers={"x-api-key": key, "x-ctxopt-window-tokens": "6000"}
        )
        assert answer.headers["x-ctxopt-outcome"] == "optimized"
    first, second = (r.body for r in upstream.requests[-2:])
    session = [m for m in json.dumps([first, second]).split('session_id=\\"')[1:]]
    sessions = {s.split("\\")[0] for s in session}
    assert len(sessions) == 2, "each credential gets its own session"
    log = gateway.log_text()
    assert "sk-owner-aaaa" not in log and "sk-owner-bbbb" not in log
    lines = gateway_log_lines(gateway, lambda _line: True)
    assert {"format", "session", "tokens_before", "tokens_after", "outcome", "ms"} <= set(lines[-1])


def test_a_failing_service_falls_back_to_a_request_that_fits(
    tmp_path: Path, upstream: FakeUpstream
) -> None:
    env = {**upstream_env(upstream), "CTXOPT_MAX_CHUNKS_PER_SESSION": "5"}
    with serving(tmp_path, "--gateway-addr", "127.0.0.1:0", env=env) as server:
        url = f"{server.gateway_url}/anthropic/v1/messages"
        small = httpx.post(url, json=HELLO | {"messages": long_history(4, 5)})
        assert small.headers["x-ctxopt-outcome"] == "fallback"
        assert upstream.requests[-1].body["messages"] == long_history(4, 5)
        big = long_history(40, 100)
        # another key: a session of its own, whose sizes no earlier call has calibrated
        headers = {"x-api-key": "sk-second", "x-ctxopt-window-tokens": "8000"}
        answer = httpx.post(url, json=HELLO | {"messages": big}, headers=headers)
        assert answer.headers["x-ctxopt-outcome"] == "fallback"
        sent = upstream.requests[-1].body["messages"]
        assert len(sent) < len(big) and sent[-2:] == big[-2:] and sent[0] == big[0]
        # content goes only as far as the window needs, not down to the target (60% of it)
        assert 8000 * 0.7 < int(answer.headers["x-ctxopt-tokens-after"]) <= 8000


def test_an_unknown_model_passes_through_unless_a_window_is_given(
    gateway: ServerProcess, upstream: FakeUpstream
) -> None:
    body = HELLO | {"model": "my-local-model", "messages": long_history(10)}
    url = f"{gateway.gateway_url}/anthropic/v1/messages"
    assert httpx.post(url, json=body).headers["x-ctxopt-outcome"] == "pass-through"
    answer = httpx.post(url, json=body, headers={"x-ctxopt-window-tokens": "3000"})
    assert answer.headers["x-ctxopt-outcome"] in ("optimized", "fallback")
    bad = httpx.post(url, json=body, headers={"x-ctxopt-window-tokens": "lots"})
    assert bad.status_code == 400 and "x-ctxopt-window-tokens" in bad.json()["error"]["message"]


@pytest.mark.parametrize("streamed", [False, True])
def test_the_providers_prompt_size_is_read_from_the_response(
    gateway: ServerProcess, upstream: FakeUpstream, streamed: bool
) -> None:
    upstream.usage = lambda _request: 4321
    body = HELLO | {"messages": long_history(3, 20), "stream": streamed}
    answer = httpx.post(
        f"{gateway.gateway_url}/anthropic/v1/messages",
        json=body,
        headers={"x-ctxopt-session": f"usage-{streamed}"},
    )
    assert answer.status_code == 200
    lines = gateway_log_lines(gateway, lambda line: line["session"].endswith(f"usage-{streamed}"))
    assert lines[-1]["provider_prompt_tokens"] == 4321
    assert lines[-1]["status"] == 200


def test_concurrent_calls_of_one_session_and_of_many_all_keep_the_rules(
    gateway: ServerProcess, upstream: FakeUpstream
) -> None:
    def call(i: int) -> str:
        session = f"concurrent-{i % 3}"
        body = HELLO | {"messages": long_history(10 + i % 4, 100)}
        answer = httpx.post(
            f"{gateway.gateway_url}/anthropic/v1/messages",
            json=body,
            headers={"x-ctxopt-session": session, "x-ctxopt-window-tokens": "5000"},
            timeout=60,
        )
        assert answer.status_code == 200
        return answer.headers["x-ctxopt-outcome"]

    with ThreadPoolExecutor(8) as pool:
        outcomes = list(pool.map(call, range(24)))
    assert set(outcomes) <= {"optimized", "fallback"} and "optimized" in outcomes
    for recorded in upstream.calls("/v1/messages"):
        assert AnthropicMessages().violations(recorded.body) == []
        assert recorded.body["messages"][-1] == {"role": "user", "content": "what did you find?"}


@pytest.mark.parametrize("mode", ["off", "shadow"])
def test_with_pruning_off_or_in_shadow_the_provider_gets_the_bytes_as_sent(
    tmp_path: Path, upstream: FakeUpstream, mode: str
) -> None:
    """`--gateway-mode off` forwards byte for byte as `pass-through`; `shadow`
    (here through CTXOPT_GATEWAY_MODE) plans and logs the pruning it would do and
    forwards the original bytes too, reporting `shadow` as the TS client does."""
    args = ("--gateway-mode", mode) if mode == "off" else ()
    env = upstream_env(upstream) | ({"CTXOPT_GATEWAY_MODE": mode} if mode == "shadow" else {})
    with serving(tmp_path, "--gateway-addr", "127.0.0.1:0", *args, env=env) as server:
        url = f"{server.gateway_url}/anthropic/v1/messages"
        for turns in (20, 24):
            raw = json.dumps(HELLO | {"messages": long_history(turns)}, indent=1).encode()
            answer = httpx.post(
                url,
                content=raw,
                headers={"x-ctxopt-window-tokens": "6000", "content-type": "application/json"},
            )
            assert answer.status_code == 200
            assert upstream.requests[-1].raw == raw
        expected = "pass-through" if mode == "off" else "shadow"
        assert answer.headers["x-ctxopt-outcome"] == expected
        lines = gateway_log_lines(server, lambda _line: True, count=2)
        assert [line["outcome"] for line in lines] == [expected] * 2
        assert {line["mode"] for line in lines} == {mode}
        if mode == "shadow":  # what it would have sent
            assert lines[-1]["tokens_after"] < lines[-1]["tokens_before"]


def test_an_unknown_gateway_mode_stops_the_server_with_one_line(tmp_path: Path) -> None:
    done = subprocess.run(
        [str(CTXOPT), "serve", "--addr", "127.0.0.1:0", "--data-dir", str(tmp_path)],
        env={**os.environ, "CTXOPT_GATEWAY_ADDR": "127.0.0.1:0", "CTXOPT_GATEWAY_MODE": "maybe"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode != 0
    assert "CTXOPT_GATEWAY_MODE" in done.stderr and "on, shadow, off" in done.stderr
