"""Claude Code, Codex, Gemini CLI and OpenCode, the real ones, through the gateway to a scripted
provider (aider, which edits files rather than running tools: test_aider_through_gateway.py).

Each CLI reads large files in a scratch workspace until its history is several
times the gateway's window, then answers; offline, with a fake key. With a
small window every request that reaches the provider keeps its format's
rules, fits the window, and carries the host's own instructions and its
latest turn exactly as the host sent them; with a window no run reaches, the
requests arrive byte for byte as sent. The `x-ctxopt-*` headers and the
server's JSON log agree with what was sent.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.agents.agent_cli import require_clis
from tests.agents.scripted_provider import FINAL_ANSWER, requests_of
from tests.agents.through_gateway import (
    HOST_FORMATS,
    Call,
    GatewayRun,
    agent_turns,
    run_through_gateway,
)
from tests.gateway.checks import LISTS, assert_valid, tokens_of

# Small enough that the session passes it about three times over (the hosts' own system
# prompts and tool declarations are 9,000-13,000 tokens), large enough for them and the
# newest file read (about 7,000 tokens) together
WINDOW = 24_000
FILES = 8
LINES_PER_FILE = 400
NO_PRUNING_WINDOW = 100_000_000
HOSTS = ["claude", "codex", "gemini", "opencode"]
# How the gateway names each host it recognises from the User-Agent (api/gateway/hosts.py)
RECOGNISED_AS = {
    "claude": "claude-code",
    "codex": "codex",
    "gemini": "gemini-cli",
    "opencode": "opencode",
}


@pytest.fixture(autouse=True)
def _clis_installed() -> None:
    require_clis()


def _instructions(fmt: str, body: dict[str, Any]) -> list[Any]:
    """The host's own instructions inside the message list: system and developer messages
    (Claude Code puts some in `messages`, Codex leads its input with developer messages)."""
    items = body.get(LISTS[fmt]) or []
    return [m for m in items if isinstance(m, dict) and m.get("role") in ("system", "developer")]


def _assert_ran_to_the_end(run: GatewayRun) -> None:
    assert run.result.returncode == 0, run.result.stderr[-3000:]
    assert FINAL_ANSWER in run.result.stdout
    assert run.script.finished()
    assert requests_of(run.upstream, "compaction") == [], "the host compacted by itself"


def _assert_headers_match_log(call: Call) -> None:
    headers, log = call.answered.ctxopt_headers, call.log
    assert call.answered.status == 200
    assert headers["x-ctxopt-outcome"] == log["outcome"]
    assert int(headers["x-ctxopt-tokens-before"]) == log["tokens_before"]
    assert int(headers["x-ctxopt-tokens-after"]) == log["tokens_after"]
    assert log["status"] == 200
    if log["outcome"] == "optimized":
        assert call.reached_provider.raw != call.sent_by_host.raw
        assert log["tokens_after"] < log["tokens_before"]
    else:
        assert call.reached_provider.raw == call.sent_by_host.raw
        assert log["tokens_after"] == log["tokens_before"]


@pytest.mark.parametrize("host", HOSTS)
def test_pruned_requests_keep_the_rules_and_fit_the_window(host: str, tmp_path: Path) -> None:
    run = run_through_gateway(
        host, tmp_path, window=WINDOW, files=FILES, lines_per_file=LINES_PER_FILE
    )
    _assert_ran_to_the_end(run)
    fmt = HOST_FORMATS[host]
    for call in run.calls:
        original = json.loads(call.sent_by_host.raw)
        sent = json.loads(call.reached_provider.raw)
        assert_valid(fmt, original, sent, WINDOW)
        assert _instructions(fmt, sent) == _instructions(fmt, original)
        _assert_headers_match_log(call)
        # every model call of a real host is one the gateway can read
        assert call.log["outcome"] != "pass-through", call.log.get("note")
        assert call.log["window"] == WINDOW
        assert call.log["host"] == RECOGNISED_AS[host]
        assert call.log["tokens_after"] <= call.log["ceiling"] <= WINDOW
    turns = agent_turns(run)
    last = json.loads(turns[-1].sent_by_host.raw)
    # the session did pass the window several times over, and the gateway acted on it
    assert tokens_of(last) > 2 * WINDOW
    assert any(c.log["outcome"] == "optimized" for c in turns)


@pytest.mark.parametrize("host", HOSTS)
def test_without_pruning_requests_arrive_byte_identical(host: str, tmp_path: Path) -> None:
    run = run_through_gateway(host, tmp_path, window=NO_PRUNING_WINDOW, files=2, lines_per_file=100)
    _assert_ran_to_the_end(run)
    assert run.calls
    for call in run.calls:
        assert call.reached_provider.raw == call.sent_by_host.raw
        assert call.log["outcome"] == "below-threshold"
        _assert_headers_match_log(call)


@pytest.mark.parametrize("host", HOSTS)
def test_with_the_gateway_off_requests_arrive_byte_identical(host: str, tmp_path: Path) -> None:
    """`--gateway-mode off` under the window that has every pruned run act."""
    run = run_through_gateway(
        host, tmp_path, window=WINDOW, files=3, lines_per_file=LINES_PER_FILE, mode="off"
    )
    _assert_ran_to_the_end(run)
    assert run.calls
    for call in run.calls:
        assert call.reached_provider.raw == call.sent_by_host.raw
        assert call.log["outcome"] == "pass-through"
        assert call.log["mode"] == "off"
        _assert_headers_match_log(call)
