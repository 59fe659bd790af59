"""aider, the real one, through the gateway to a scripted provider: twice, on two tasks.

aider (pinned in tests/agents/aider-requirements.txt) edits `app.py` with large
reference files added to its chat, which puts its files message several
times over a small window. The scripted model answers with an edit whose
SEARCH part does not match (aider asks it again, with the failure), twice,
then with one that applies. In every request that reaches the provider the
file being edited arrives whole and the user's request is there; the other
files shrink; the requests keep the format's rules and fit the window; the
streamed calls are calibrated although aider does not ask for usage; and the
two runs, whose openings are identical, are two sessions.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.agents.agent_cli import aider_args, require_clis, run_host, sandbox
from tests.agents.relay import relay_to
from tests.agents.scripted_provider import (
    FINAL_ANSWER,
    AgentScript,
    kind_of,
    scripted_upstream,
    write_workspace,
)
from tests.agents.through_gateway import Call, pair_calls
from tests.agents.wire import FinalText
from tests.gateway.checks import assert_valid, tokens_of
from tests.serverproc import serving

# aider's system prompt and examples are about 2,400 tokens; each reference file about 7,000
WINDOW = 14_000
REFERENCE_FILES = 3
LINES_PER_FILE = 400
APP = "".join(f"def answer_{i}():\n    return {i}\n\n\n" for i in range(40))
TASKS = ("Make answer_7 in app.py return 70.", "Make answer_7 in app.py return seventy.")


def _edit(search: str, replace: str, words: str = "") -> FinalText:
    """A reply in aider's diff edit format (SEARCH/REPLACE blocks)."""
    block = f"app.py\n```python\n<<<<<<< SEARCH\n{search}=======\n{replace}>>>>>>> REPLACE\n```\n"
    return FinalText(f"{words}\n\n{block}".strip() + "\n")


MISSES = _edit("def answer_7():\n    return 8\n", "def answer_7():\n    return 70\n")
APPLIES = _edit("def answer_7():\n    return 7\n", "def answer_7():\n    return 70\n", FINAL_ANSWER)
SCRIPT = [MISSES, MISSES, APPLIES]  # per run: two failed edits, each answered by aider


@pytest.fixture(autouse=True)
def _clis_installed() -> None:
    require_clis()


def _run_twice(tmp_path: Path) -> tuple[list[list[Call]], list[Path], list[Any]]:
    """Both tasks, one after the other, through one gateway; their calls, workspaces
    and results."""
    script = AgentScript(SCRIPT * len(TASKS))
    results, workspaces, counts = [], [], []
    with scripted_upstream(script) as upstream:
        provider_env = {"CTXOPT_UPSTREAM_OPENAI": upstream.url}
        window = ("--gateway-window-tokens", str(WINDOW))
        with (
            serving(tmp_path, "--gateway-addr", "127.0.0.1:0", *window, env=provider_env) as server,
            relay_to(server.gateway_url) as (relay, relayed),
        ):
            for n, task in enumerate(TASKS):
                workspace = tmp_path / f"workspace-{n}"
                names = write_workspace(
                    workspace, files=REFERENCE_FILES, lines_per_file=LINES_PER_FILE
                )
                (workspace / "app.py").write_text(APP)
                box = sandbox("aider", tmp_path / f"host-{n}", workspace)
                args = aider_args(box, task, ["app.py", *names])
                results.append(run_host("aider", box, relay.url, args))
                workspaces.append(workspace)
                counts.append(len(relay.requests))
    log = [
        json.loads(line)["gateway"]
        for line in (tmp_path / "server.log").read_text().splitlines()
        if line.startswith('{"gateway"')
    ]
    calls = pair_calls(relay.requests, upstream.requests, relayed.answered, log)
    first_run = sum(1 for r in relay.requests[: counts[0]] if r.method == "POST")
    return [calls[:first_run], calls[first_run:]], workspaces, results


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[list[Call]], list[Path], Any]:
    return _run_twice(tmp_path_factory.mktemp("aider"))


def _agent_calls(calls: list[Call]) -> list[Call]:
    return [c for c in calls if kind_of(c.reached_provider) == "agent"]


def test_aider_runs_to_the_end_and_applies_its_edit(runs: Any) -> None:
    calls, workspaces, results = runs
    for result, workspace, run in zip(results, workspaces, calls, strict=True):
        assert result.returncode == 0, result.stderr[-3000:]
        assert FINAL_ANSWER in result.stdout
        assert "return 70" in (workspace / "app.py").read_text()
        assert len(_agent_calls(run)) == len(SCRIPT)


def test_the_edited_file_and_the_request_reach_the_model_in_every_request(runs: Any) -> None:
    calls, _, _ = runs
    whole_app = f"\napp.py\n```\n{APP}```\n"
    optimized = 0
    for task, run in zip(TASKS, calls, strict=True):
        for call in _agent_calls(run):
            original = json.loads(call.sent_by_host.raw)
            sent = json.loads(call.reached_provider.raw)
            texts = [m.get("content") for m in sent["messages"] if isinstance(m, dict)]
            assert any(isinstance(t, str) and whole_app in t for t in texts)
            assert any(isinstance(t, str) and t.startswith(task) for t in texts)
            assert_valid("openai-chat", _with_usage(original), sent, WINDOW)
            optimized += call.log["outcome"] == "optimized"
    assert optimized > 0
    first = json.loads(_agent_calls(calls[0])[0].sent_by_host.raw)
    assert tokens_of(first["messages"]) > WINDOW  # the files alone pass the window


def test_aiders_streams_are_calibrated_though_it_asks_for_no_usage(runs: Any) -> None:
    calls, _, _ = runs
    for call in [c for run in calls for c in _agent_calls(run)]:
        assert "stream_options" not in json.loads(call.sent_by_host.raw)
        assert call.log["provider_prompt_tokens"] is not None


def test_two_aider_conversations_are_two_sessions(runs: Any) -> None:
    calls, _, _ = runs
    sessions = [{c.log["session"] for c in _agent_calls(run)} for run in calls]
    assert all(len(s) == 1 for s in sessions), sessions
    assert sessions[0] != sessions[1]


def _with_usage(body: dict[str, Any]) -> dict[str, Any]:
    """What the gateway sends of a streamed body that did not ask for usage."""
    if body.get("stream") and "stream_options" not in body:
        return {**body, "stream_options": {"include_usage": True}}
    return body
