"""One agent CLI run through a real `ctxopt serve --gateway-addr` to the scripted provider.

    CLI -> relay (records what the CLI sent) -> gateway -> scripted provider (records
    what reached the provider)

`GatewayRun` pairs the two records call by call with the gateway's
`x-ctxopt-*` headers and its JSON log line, for the tests to compare.
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.agents.agent_cli import run_host, sandbox
from tests.agents.relay import Answered, relay_to
from tests.agents.scripted_provider import (
    AgentScript,
    kind_of,
    read_and_inspect,
    scripted_upstream,
    wire_of,
    write_workspace,
)
from tests.gateway.upstream import FakeUpstream, Recorded
from tests.serverproc import serving

# The gateway's name for each host's wire format (tests/gateway/checks.py)
HOST_FORMATS = {
    "claude": "anthropic",
    "codex": "openai-responses",
    "gemini": "gemini",
    "aider": "openai-chat",
    "opencode": "openai-responses",
}


@dataclass(frozen=True)
class Call:
    """One model call: as the CLI sent it, as it reached the provider, what the gateway said."""

    sent_by_host: Recorded
    reached_provider: Recorded
    answered: Answered
    log: dict[str, Any]


@dataclass(frozen=True)
class GatewayRun:
    result: subprocess.CompletedProcess[str]
    script: AgentScript
    upstream: FakeUpstream
    calls: list[Call]
    workspace: Path
    files: list[str]


def run_through_gateway(
    host: str,
    tmp_path: Path,
    *,
    window: int,
    files: int,
    lines_per_file: int,
    mode: str = "on",
) -> GatewayRun:
    """Run `host` on a scratch workspace of `files` large files through a gateway whose
    window is `window` tokens (in `--gateway-mode` `mode`), to a provider that has it
    read every file."""
    workspace = tmp_path / "workspace"
    names = write_workspace(workspace, files=files, lines_per_file=lines_per_file)
    script = AgentScript(read_and_inspect(names))
    with scripted_upstream(script) as upstream:
        provider_env = {
            f"CTXOPT_UPSTREAM_{provider}": upstream.url
            for provider in ("ANTHROPIC", "OPENAI", "GEMINI")
        }
        window_flag = ("--gateway-window-tokens", str(window), "--gateway-mode", mode)
        with (
            serving(
                tmp_path, "--gateway-addr", "127.0.0.1:0", *window_flag, env=provider_env
            ) as server,
            relay_to(server.gateway_url) as (relay, relayed),
        ):
            result = run_host(host, sandbox(host, tmp_path / "host", workspace), relay.url)
    log = [
        json.loads(line)["gateway"]
        for line in (tmp_path / "server.log").read_text().splitlines()
        if line.startswith('{"gateway"')
    ]
    calls = pair_calls(relay.requests, upstream.requests, relayed.answered, log)
    return GatewayRun(result, script, upstream, calls, workspace, names)


def pair_calls(
    sent: list[Recorded],
    reached: list[Recorded],
    answered: list[Answered],
    log: list[dict[str, Any]],
) -> list[Call]:
    """The model calls in order (an agent CLI waits for each answer before the next)."""
    sent = [r for r in sent if _model_call(r)]
    reached = [r for r in reached if _model_call(r)]
    answered = [a for a in answered if _model_call(a.request)]
    counts = (len(sent), len(reached), len(answered), len(log))
    assert len(set(counts)) == 1, f"sent, reached, answered, logged differ: {counts}"
    return [Call(*parts) for parts in zip(sent, reached, answered, log, strict=True)]


def _model_call(request: Recorded) -> bool:
    return request.method == "POST" and wire_of(request.path) is not None


def agent_turns(run: GatewayRun) -> list[Call]:
    return [c for c in run.calls if kind_of(c.reached_provider) == "agent"]
