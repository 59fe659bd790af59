"""The gateway under faults of the provider, the client and the engine, and
killed mid-session: each request either gets its answer as the provider sent
it or a visible error, and nothing one request does holds up the others."""

from __future__ import annotations

import json
import os
import re
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
import httpx
import pytest
from ctxopt.v1 import ctxopt_pb2 as pb

from tests.gateway.checks import gateway_log_lines
from tests.gateway.conftest import upstream_env
from tests.gateway.test_http import HELLO, long_history
from tests.gateway.traffic import FORMATS, conversation, send
from tests.gateway.upstream import FakeUpstream, Recorded
from tests.serverproc import ServerProcess, serving

# More than httpx's default pool (100 connections) and the worker threads (40)
HELD = 120
HOLD_HEADER = "x-test-hold"
WAIT_S = 30.0  # how long a test waits for what must happen (a failure, not a measure)
POLL_S = 0.05
RESTORE_ID = re.compile(r'ids=\["([^"]+)"\]')


def wait_for(condition: str, check: object) -> None:
    deadline = time.monotonic() + WAIT_S
    while not check():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"not within {WAIT_S}s: {condition}"
        time.sleep(POLL_S)


def held(request: Recorded) -> bool:
    return request.headers.get(HOLD_HEADER) == "1"


def test_requests_the_provider_never_answers_hold_up_no_other(
    gateway: ServerProcess, upstream: FakeUpstream
) -> None:
    upstream.hold = held
    call = conversation("anthropic", 3, streamed=False)
    hold = {HOLD_HEADER: "1"}
    unlimited = httpx.Limits(max_connections=None, max_keepalive_connections=None)
    with (
        ThreadPoolExecutor(HELD) as pool,
        httpx.Client(timeout=120, limits=unlimited) as client,
    ):
        try:
            waiting = [
                pool.submit(send, client, gateway.gateway_url, call, f"held-{i}", **hold)
                for i in range(HELD)
            ]
            wait_for(
                f"{HELD} requests held at the provider", lambda: len(upstream.requests) >= HELD
            )
            with httpx.Client(timeout=WAIT_S) as other:
                for n, fmt in enumerate(FORMATS * 2):
                    status, answer = send(
                        other, gateway.gateway_url, conversation(fmt, 3, n % 2 == 0), f"free-{n}"
                    )
                    assert status == 200 and answer == upstream.answers[f"free-{n}"]
            assert not any(w.done() for w in waiting), "a held request was answered"
        finally:
            upstream.released.set()
        assert all(w.result()[0] == 200 for w in waiting)


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_stream_the_provider_cuts_reaches_the_client_broken(
    gateway: ServerProcess, upstream: FakeUpstream, fmt: str
) -> None:
    upstream.stream_fault = "cut"
    call = conversation(fmt, 3, streamed=True)
    with (
        httpx.Client(timeout=WAIT_S) as client,
        pytest.raises((httpx.RemoteProtocolError, httpx.ReadError)),
    ):
        send(client, gateway.gateway_url, call, f"cut-{fmt}")
    assert gateway.process.poll() is None


def test_a_client_that_leaves_mid_stream_cancels_the_upstream(
    gateway: ServerProcess, upstream: FakeUpstream
) -> None:
    upstream.stream_fault = "stall"
    fds = len(os.listdir(f"/proc/{gateway.process.pid}/fd"))
    leaving = 12
    with httpx.Client(timeout=WAIT_S) as client:
        for n in range(leaving):
            call = conversation(FORMATS[n % len(FORMATS)], 3, streamed=True, seed=n)
            url = f"{gateway.gateway_url}/{call.path}"
            with client.stream("POST", url, json=call.body) as answer:
                assert answer.status_code == 200
                next(answer.iter_raw())  # the first event, then the client goes
    wait_for(
        "every stalled upstream stream cancelled", lambda: upstream.streams_abandoned == leaving
    )
    # each relay ran to its end: its log line is written once its stream is closed
    gateway_log_lines(gateway, lambda line: line.get("status") == 200, count=leaving)
    wait_for(
        "no socket left open",
        lambda: len(os.listdir(f"/proc/{gateway.process.pid}/fd")) <= fds + 2,
    )


def test_past_the_engine_deadline_the_request_goes_up_unpruned(
    tmp_path: Path, upstream: FakeUpstream
) -> None:
    """With a deadline no plan meets, a request that fits goes up as sent and
    one that does not is truncated locally, and the server serves on."""
    args = ("--gateway-addr", "127.0.0.1:0", "--gateway-engine-deadline-ms", "1")
    with serving(tmp_path, *args, env=upstream_env(upstream)) as server:
        url = f"{server.gateway_url}/anthropic/v1/messages"
        raw = json.dumps(HELLO | {"messages": long_history(40, 100)}).encode()
        headers = {"content-type": "application/json"}
        fits = httpx.post(url, content=raw, headers=headers | {"x-api-key": "a"}, timeout=60)
        assert fits.headers["x-ctxopt-outcome"] == "fallback"
        assert upstream.requests[-1].raw == raw
        small = headers | {"x-api-key": "b", "x-ctxopt-window-tokens": "8000"}
        over = httpx.post(url, content=raw, headers=small, timeout=60)
        assert over.headers["x-ctxopt-outcome"] == "fallback"
        sent = upstream.requests[-1].body["messages"]
        assert len(sent) < len(long_history(40, 100)) and sent[-1] == HELLO["messages"][-1] | {
            "content": "what did you find?"
        }
        lines = gateway_log_lines(server, lambda line: "deadline" in line.get("note", ""), 2)
        assert len(lines) == 2


def test_a_server_killed_mid_session_serves_on_and_keeps_every_original(
    tmp_path: Path, upstream: FakeUpstream
) -> None:
    headers = {"x-ctxopt-session": "killed", "x-ctxopt-window-tokens": "6000"}
    history = long_history(24)
    originals = {
        block["tool_use_id"]: block["content"]
        for message in history
        if isinstance(message["content"], list)
        for block in message["content"]
        if block.get("type") == "tool_result"
    }
    with serving(tmp_path, "--gateway-addr", "127.0.0.1:0", env=upstream_env(upstream)) as first:
        url = f"{first.gateway_url}/anthropic/v1/messages"
        answer = httpx.post(url, json=HELLO | {"messages": history}, headers=headers, timeout=60)
        assert answer.headers["x-ctxopt-outcome"] == "optimized"
        (line,) = gateway_log_lines(first, lambda _line: True)
        first.process.kill()
        first.process.wait()
    placed = {  # tool call id -> the chunk id its placeholder names
        block["tool_use_id"]: RESTORE_ID.findall(block["content"])[0]
        for message in upstream.requests[-1].body["messages"]
        if isinstance(message["content"], list)
        for block in message["content"]
        if block.get("type") == "tool_result" and "context_stash_restore" in block["content"]
    }
    assert placed, "no placeholder was sent before the kill"
    with serving(tmp_path, "--gateway-addr", "127.0.0.1:0", env=upstream_env(upstream)) as again:
        url = f"{again.gateway_url}/anthropic/v1/messages"
        more = [
            *history,
            {"role": "assistant", "content": "and?"},
            {"role": "user", "content": "go"},
        ]
        answer = httpx.post(url, json=HELLO | {"messages": more}, headers=headers, timeout=60)
        assert answer.status_code == 200
        assert answer.headers["x-ctxopt-outcome"] in ("optimized", "below-threshold")
        assert upstream.requests[-1].body["messages"][-1] == more[-1]
        with grpc.insecure_channel(again.address) as channel:
            stub = again.stub(channel)
            session = line["session"]

            def live() -> dict[str, str]:
                request = pb.ExportSessionRequest(session_id=session)
                export = json.loads(stub.ExportSession(request, timeout=WAIT_S).json)
                return {c["chunk"]["id"]: c["chunk"]["text"] for c in export["chunks"]}

            # what the new call did not send whole again is still in the stash
            stashed = sorted(set(placed.values()) - set(live()))
            assert stashed, "the restart's call sent every original again"
            request = pb.RestoreRequest(session_id=session, chunk_ids=stashed, force=True)
            stub.Restore(request, timeout=WAIT_S)
            texts = live()
    for call_id, chunk_id in placed.items():
        assert texts[chunk_id] == originals[call_id], f"the original of {call_id} changed"
