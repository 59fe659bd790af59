"""Issue 32: after calls through a real gateway, `ctxopt gain` (table and JSON),
`/metrics` and the dashboard's data agree with the calls' `x-ctxopt-tokens-before`
/ `-after` headers, call for call, and still do after a restart on the same data
directory; a clean shutdown loses no row."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from benchmarks.gateway.histories import Trajectory, load, request
from tests.gateway.checks import PREFIX_PATHS
from tests.gateway.conftest import upstream_env
from tests.gateway.upstream import FakeUpstream
from tests.serverproc import ServerProcess, serving, start_server

CTXOPT = str(Path(sys.executable).parent / "ctxopt")
CLAUDE_CODE = "claude-cli/2.1.332 (external, sdk-cli)"
POLL_S = 20.0


@dataclass(frozen=True)
class Call:
    session: str
    host: str
    outcome: str
    before: int
    after: int


@pytest.fixture(scope="module")
def trajectory() -> Trajectory:
    return load(limit=1)[0]


def post(
    server: ServerProcess,
    fmt: str,
    body: dict[str, Any],
    session: str,
    agent: str,
    window: int = 100_000,
) -> Call:
    prefix, path = PREFIX_PATHS[fmt]
    headers = {
        "x-ctxopt-session": session,
        "x-ctxopt-window-tokens": str(window),
        "user-agent": agent,
        "authorization": "Bearer sk-test",
    }
    answer = httpx.post(f"{server.gateway_url}/{prefix}/{path}", json=body, headers=headers)
    assert answer.status_code == 200, answer.text
    host = "claude-code" if agent == CLAUDE_CODE else "other"
    h = answer.headers
    return Call(
        session,
        host,
        h["x-ctxopt-outcome"],
        int(h["x-ctxopt-tokens-before"]),
        int(h["x-ctxopt-tokens-after"]),
    )


def make_calls(server: ServerProcess, trajectory: Trajectory) -> list[Call]:
    """Two sessions whose windows hold about half of their last prompt: the first
    calls go through as sent, the later ones are pruned."""
    calls = []
    for fmt, session, agent, last in (
        ("anthropic", "claude-1", CLAUDE_CODE, 24),
        ("openai-chat", "chat-1", "python-httpx", 12),
    ):
        last = min(len(trajectory.steps), last)
        window = len(json.dumps(request(fmt, trajectory, last))) // 8
        for steps in range(0, last + 1, 3):
            body = request(fmt, trajectory, steps)
            calls.append(post(server, fmt, body, session, agent, window))
    return calls


def gain(server: ServerProcess, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CTXOPT_")}
    return subprocess.run(
        [CTXOPT, "gain", "--addr", server.address, *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def gain_json(server: ServerProcess, *args: str) -> dict[str, Any]:
    run = gain(server, "--json", *args)
    assert run.returncode == 0, run.stderr
    answer: dict[str, Any] = json.loads(run.stdout)
    return answer


def eventually(read: Callable[[], dict[str, Any]], calls: int) -> dict[str, Any]:
    """The gateway records a call once its answer's last byte has gone out, just
    after the client has it: read until every call is there."""
    deadline = time.monotonic() + POLL_S
    while True:
        found = read()
        if found["total"]["calls"] >= calls or time.monotonic() > deadline:
            return found
        time.sleep(0.1)


def metrics(server: ServerProcess) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    text = httpx.get(f"{server.gateway_url}/metrics").text
    samples: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples.setdefault(sample.name, {})[tuple(sorted(sample.labels.items()))] = sample.value
    return samples


def expected_totals(calls: list[Call]) -> dict[str, int]:
    return {
        "calls": len(calls),
        "calls_optimized": sum(c.outcome == "optimized" for c in calls),
        "tokens_sent": sum(c.before for c in calls),
        "tokens_forwarded": sum(c.after for c in calls),
        "tokens_saved": sum(c.before - c.after for c in calls),
    }


def check_agreement(server: ServerProcess, calls: list[Call]) -> None:
    totals = expected_totals(calls)
    report = eventually(lambda: gain_json(server), len(calls))
    assert {k: report["total"][k] for k in totals} == totals
    assert report["total"]["priced_calls"] == len(calls)  # the fake reports usage
    assert report["total"]["billed_input_usd"] > 0
    # the engine's session id: `<hash of the credential>.<x-ctxopt-session>`
    by_session = {
        r["key"].split(".", 1)[1]: r for r in gain_json(server, "--by", "session")["rows"]
    }
    for session in {c.session for c in calls}:
        mine = [c for c in calls if c.session == session]
        row = by_session[session]
        assert {k: row[k] for k in totals} == expected_totals(mine)
    by_host = {r["key"]: r["calls"] for r in gain_json(server, "--by", "host")["rows"]}
    assert by_host == dict(Counter(c.host for c in calls))

    samples = metrics(server)
    requests = Counter[tuple[str, str]]()
    for labels, value in samples["ctxopt_gateway_requests_total"].items():
        requests[(dict(labels)["host"], dict(labels)["outcome"])] += int(value)
    assert requests == Counter((c.host, c.outcome) for c in calls)
    saved = samples["ctxopt_gateway_tokens_saved_total"]
    for host in {c.host for c in calls}:
        want = sum(c.before - c.after for c in calls if c.host == host)
        assert saved[(("host", host),)] == want
    added = samples["ctxopt_gateway_added_seconds_count"]
    assert sum(added.values()) == len(calls)

    page = httpx.get(f"{server.gateway_url}/ui/api/usage?by=session").json()
    assert {k: page["total"][k] for k in totals} == totals
    ids = {r["key"].split(".", 1)[1]: r["key"] for r in page["rows"]}
    for session in {c.session for c in calls}:
        url = f"{server.gateway_url}/ui/api/calls"
        charted = httpx.get(url, params={"session": ids[session]}).json()
        mine = [c for c in calls if c.session == session]
        assert [(p["sent"], p["forwarded"]) for p in charted["calls"]] == [
            (c.before, c.after) for c in mine
        ]


@pytest.fixture(scope="module")
def restartable(
    upstream: FakeUpstream, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Callable[[], ServerProcess]]:
    tmp = tmp_path_factory.mktemp("usage")
    running: list[ServerProcess] = []

    def start() -> ServerProcess:
        if running:
            assert running.pop().terminate() == 0
        server = start_server(
            tmp / "data", tmp / "server.log", "--gateway-addr", "127.0.0.1:0",
            env=upstream_env(upstream),
        )  # fmt: skip
        running.append(server)
        return server

    yield start
    for server in running:
        server.terminate()


def test_gain_metrics_and_dashboard_agree_with_the_headers_across_a_restart(
    restartable: Callable[[], ServerProcess], trajectory: Trajectory
) -> None:
    server = restartable()
    calls = make_calls(server, trajectory)
    assert {"below-threshold", "optimized"} <= {c.outcome for c in calls}
    assert sum(c.before - c.after for c in calls) > 0
    check_agreement(server, calls)

    table = gain(server, "--by", "session")
    assert table.returncode == 0, table.stderr
    total_line = next(line for line in table.stdout.splitlines() if line.startswith("total"))
    totals = expected_totals(calls)
    assert total_line.split()[1:6] == [
        f"{totals[k]:,}"
        for k in ("calls", "calls_optimized", "tokens_sent", "tokens_forwarded", "tokens_saved")
    ]

    server = restartable()  # SIGTERM, then a new process on the same data directory
    check_agreement(server, calls)
    more = [post(server, "anthropic", request("anthropic", trajectory, 2), "claude-2", CLAUDE_CODE)]
    server = restartable()  # at once: the last row is still queued, the drain writes it
    check_agreement(server, calls + more)


def test_gain_since_and_an_empty_period(
    restartable: Callable[[], ServerProcess], trajectory: Trajectory
) -> None:
    server = restartable()
    body = request("openai-chat", trajectory, 1)
    post(server, "openai-chat", body, "since-1", "python-httpx")
    eventually(lambda: gain_json(server, "--since", "1h"), 1)
    future = gain(server, "--since", "2999-01-01")
    assert future.returncode == 0 and future.stdout == "no calls recorded in this period\n"
    assert gain_json(server, "--since", "2999-01-01")["total"]["calls"] == 0
    bad = gain(server, "--since", "yesterday")
    assert bad.returncode == 2
    assert bad.stderr.startswith("ctxopt: --since: expected a span")


def test_a_grpc_optimize_leaves_a_row_of_its_plan(tmp_path: Path) -> None:
    import grpc
    from ctxopt.v1 import ctxopt_pb2 as pb

    with serving(tmp_path, env={"CTXOPT_AUTH_TOKEN": "alice=a1,bob=b2"}) as server:
        chunks = [
            pb.Chunk(
                id=f"c{i}",
                role=pb.ROLE_USER,
                kind=pb.CHUNK_KIND_LOG,
                text=f"log {i} " * 300,
                turn=i,
            )
            for i in range(8)
        ]
        alice = [("authorization", "Bearer a1")]
        with grpc.insecure_channel(server.address) as channel:
            stub = server.stub(channel)
            stub.AppendChunks(
                pb.AppendChunksRequest(session_id="g", chunks=chunks), metadata=alice, timeout=30
            )
            budget = pb.Budget(context_limit_tokens=3000)
            request = pb.OptimizeRequest(
                session_id="g", budget=budget, roots=pb.Roots(recent_turns=1)
            )
            plan = stub.Optimize(request, metadata=alice, timeout=30)
        assert plan.tokens_after < plan.tokens_before
        env = {"CTXOPT_AUTH_TOKEN": "alice=a1"}
        run = subprocess.run(
            [CTXOPT, "gain", "--by", "host", "--json", "--addr", server.address],
            env={**{k: v for k, v in os.environ.items() if not k.startswith("CTXOPT_")}, **env},
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert run.returncode == 0, run.stderr
        rows = json.loads(run.stdout)["rows"]
        assert [(r["key"], r["calls"], r["calls_optimized"], r["tokens_saved"]) for r in rows] == [
            ("grpc", 1, 1, plan.tokens_before - plan.tokens_after)
        ]
        assert rows[0]["priced_calls"] == 0, "no provider was called"
        bob = subprocess.run(
            [CTXOPT, "gain", "--json", "--addr", server.address],
            env={**{k: v for k, v in os.environ.items() if not k.startswith("CTXOPT_")},
                 "CTXOPT_AUTH_TOKEN": "bob=b2"},
            capture_output=True,
            text=True,
            timeout=60,
        )  # fmt: skip
        assert json.loads(bob.stdout)["total"]["calls"] == 0, "each owner sees its own calls"
