"""`ctxopt sessions | show | stash search | stash restore | export | import`
against a real `ctxopt serve` on loopback, as a user runs them; and what the
server shows of itself: its MCP address, its version, its stderr lines."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import grpc
import pytest
from ctxopt import __version__
from ctxopt.v1 import ctxopt_pb2 as pb
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client

from tests.serverproc import ServerProcess, serving

CTXOPT = str(Path(sys.executable).parent / "ctxopt")
TIMEOUT_S = 60
TOKEN = "alice=s3cret"
SERVE_ON_ANY_PORT = (CTXOPT, "serve", "--addr", "127.0.0.1:0")


def ctxopt(*args: str, env: dict[str, str] | None = None, cwd: Path | None = None) -> Any:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("CTXOPT_")}
    return subprocess.run(
        [CTXOPT, *args],
        env={**clean, **(env or {})},
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )


def as_json(*args: str, env: dict[str, str]) -> dict[str, Any]:
    run = ctxopt(*args, "--json", env=env)
    assert run.returncode == 0, run.stderr
    answer: dict[str, Any] = json.loads(run.stdout)
    return answer


def fill(server: ServerProcess, metadata: list[tuple[str, str]]) -> None:
    """A session of twelve turns, collected once so that older logs are stashed."""
    topics = ["the parser fails on nested quotes", "disk usage of the build cache"]
    chunks = [
        pb.Chunk(
            id=f"c{i}",
            role=pb.ROLE_USER if i % 2 == 0 else pb.ROLE_MODEL,
            kind=pb.CHUNK_KIND_MESSAGE if i in (0, 11) else pb.CHUNK_KIND_LOG,
            text=f"turn {i}: " + (topics[i % 3 == 0] + f" line {i} ") * 40,
            turn=i,
        )
        for i in range(12)
    ]
    with grpc.insecure_channel(server.address) as channel:
        stub = server.stub(channel)
        stub.AppendChunks(
            pb.AppendChunksRequest(session_id="s", chunks=chunks), timeout=30, metadata=metadata
        )
        stub.Optimize(
            pb.OptimizeRequest(
                session_id="s",
                query="parser",
                budget=pb.Budget(context_limit_tokens=4000, target_percent=40),
                force=True,
            ),
            timeout=30,
            metadata=metadata,
        )


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    tmp = tmp_path_factory.mktemp("cli-client")
    with serving(tmp, env={"CTXOPT_AUTH_TOKEN": f"{TOKEN},bob=b0b"}) as running:
        fill(running, [("authorization", "Bearer s3cret")])
        yield running


def env_of(server: ServerProcess) -> dict[str, str]:
    return {"CTXOPT_ADDR": server.address, "CTXOPT_AUTH_TOKEN": TOKEN}


def test_sessions_lists_what_the_server_holds(server: ServerProcess) -> None:
    answer = as_json("sessions", env=env_of(server))
    (session,) = answer["sessions"]
    assert session["session_id"] == "s"
    assert int(session["stashed_count"]) >= 1
    assert int(session["chunk_count"]) + int(session["stashed_count"]) >= 12
    assert int(session["last_used_unix_ms"]) > 0
    table = ctxopt("sessions", env=env_of(server))
    assert table.stdout.splitlines()[0].split() == [
        "session", "chunks", "tokens", "stashed", "stashed", "tokens", "last", "use"
    ]  # fmt: skip
    assert table.stdout.splitlines()[1].startswith("s ")


def test_show_reports_the_last_collection_with_decisions_and_reasons(
    server: ServerProcess,
) -> None:
    answer = as_json("show", "s", "--top", "3", env=env_of(server))
    assert answer["found"] is True
    assert int(answer["tokens_after"]) < int(answer["tokens_before"])
    kinds = {k["kind"]: int(k["chunk_count"]) for k in answer["kinds"]}
    assert kinds == {"CHUNK_KIND_LOG": 10, "CHUNK_KIND_MESSAGE": 2}
    assert len(answer["largest"]) == 3
    removed = [c for c in answer["largest"] if c.get("action") != "ACTION_KEEP"]
    assert removed and all(c["reasons"] for c in removed)
    assert all(c["preview"].startswith("turn ") for c in answer["largest"])
    text = ctxopt("show", "s", env=env_of(server)).stdout
    assert text.startswith("s: last collection ") and "largest chunks:" in text


def test_show_of_a_session_without_a_collection_says_so(server: ServerProcess) -> None:
    with grpc.insecure_channel(server.address) as channel:
        server.stub(channel).AppendChunks(
            pb.AppendChunksRequest(
                session_id="quiet",
                chunks=[pb.Chunk(id="q", role=pb.ROLE_USER, kind=pb.CHUNK_KIND_MESSAGE, text="hi")],
            ),
            timeout=30,
            metadata=[("authorization", "Bearer s3cret")],
        )
    run = ctxopt("show", "quiet", env=env_of(server))
    assert run.stdout == "quiet: no collection has run on this session since the server started\n"
    missing = ctxopt("show", "nope", env=env_of(server))
    assert missing.returncode == 2
    assert missing.stderr == "ctxopt: session_id: no such session (got 'nope')\n"


def test_stash_search_then_restore(server: ServerProcess) -> None:
    hits = as_json("stash", "search", "s", "parser nested", env=env_of(server))["hits"]
    assert hits and all(h["session_id"] == "s" for h in hits)
    chunk_id = hits[0]["chunk_id"]
    restored = as_json("stash", "restore", "s", chunk_id, env=env_of(server))
    assert chunk_id in restored["restored_ids"]
    again = ctxopt("stash", "search", "s", "parser nested", env=env_of(server)).stdout
    assert f"{chunk_id}  (s," not in again


def test_the_same_auth_as_the_server(server: ServerProcess) -> None:
    run = ctxopt("sessions", env={"CTXOPT_ADDR": server.address})
    assert run.returncode == 2
    assert run.stderr == (
        f"ctxopt: the server at {server.address} refused the call: "
        "set CTXOPT_AUTH_TOKEN to its token\n"
    )


def test_each_owner_sees_only_its_sessions_and_limits_are_checked(
    server: ServerProcess,
) -> None:
    bob = {"CTXOPT_ADDR": server.address, "CTXOPT_AUTH_TOKEN": "bob=b0b"}
    assert as_json("sessions", env=bob) == {"sessions": [], "total": 0}
    assert ctxopt("sessions", env=bob).stdout == "no sessions\n"
    negative = ctxopt("sessions", "--limit", "-1", env=env_of(server))
    assert negative.stderr == "ctxopt: limit: must be 0 (the default) or more (got -1)\n"


def test_no_server_is_one_line(tmp_path: Path) -> None:
    run = ctxopt("sessions", "--addr", "127.0.0.1:9")
    assert run.returncode == 2
    assert run.stderr.startswith("ctxopt: no ctxopt server answers at 127.0.0.1:9 ")
    bad = ctxopt("sessions", "--addr", "127.0.0.1")
    assert bad.stderr.startswith("ctxopt: --addr: no port")


def test_export_and_import_go_through_the_server_holding_the_directory(
    tmp_path: Path,
) -> None:
    with serving(tmp_path) as running:
        fill(running, [])
        env = {"CTXOPT_ADDR": running.address, "CTXOPT_DATA_DIR": str(tmp_path / "data")}
        out = tmp_path / "s.json"
        exported = ctxopt("export", "s", "-o", str(out), env=env)
        assert exported.returncode == 0, exported.stderr
        with grpc.insecure_channel(running.address) as channel:
            direct = running.stub(channel).ExportSession(
                pb.ExportSessionRequest(session_id="s"), timeout=30
            )
        assert json.loads(out.read_text()) == json.loads(direct.json)

        out.write_text("the previous export")
        failed = ctxopt("export", "nope", "-o", str(out), env=env)
        assert failed.returncode == 2
        assert failed.stderr == "ctxopt: session_id: no such session (got 'nope')\n"
        assert out.read_text() == "the previous export", "a failed export leaves the file alone"
        assert sorted(p.name for p in tmp_path.iterdir()) == ["data", "s.json", "server.log"]

        (tmp_path / "copy.json").write_text(direct.json.replace('"s"', '"s-copy"'))
        imported = ctxopt("import", str(tmp_path / "copy.json"), env=env)
        assert imported.returncode == 0, imported.stderr
        assert imported.stdout.startswith("imported ") and "session s-copy" in imported.stdout
        listed = as_json("sessions", env=env)
        assert {s["session_id"] for s in listed["sessions"]} == {"s", "s-copy"}


def test_export_and_import_go_through_a_server_on_another_directory(tmp_path: Path) -> None:
    """Issue 32: with a server at the address, export and import never open the
    default data directory (which holds no store here)."""
    with serving(tmp_path) as running:
        fill(running, [])
        home = tmp_path / "home"
        env = {"CTXOPT_ADDR": running.address, "HOME": str(home), "XDG_DATA_HOME": str(home)}
        exported = ctxopt("export", "s", env=env)
        assert exported.returncode == 0, exported.stderr
        assert json.loads(exported.stdout)["session_id"] == "s"
        (tmp_path / "copy.json").write_text(exported.stdout.replace('"s"', '"s-moved"'))
        imported = ctxopt("import", str(tmp_path / "copy.json"), "--addr", running.address)
        assert imported.returncode == 0, imported.stderr
        assert "session s-moved" in imported.stdout
        assert not home.exists(), "the default data directory was not touched"
        listed = as_json("sessions", env=env)
        assert {s["session_id"] for s in listed["sessions"]} == {"s", "s-moved"}


def test_mcp_address_on_stdout_and_every_stderr_line_json(tmp_path: Path) -> None:
    process = subprocess.Popen(
        [*SERVE_ON_ANY_PORT, "--mcp-addr", "127.0.0.1:0", "--data-dir", str(tmp_path / "data")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        assert process.stdout.readline().startswith("ctxopt listening on 127.0.0.1:")
        mcp_line = process.stdout.readline()
        assert mcp_line.startswith("ctxopt mcp listening on http://127.0.0.1:")
        url = mcp_line.split()[-1]
        assert url.endswith("/mcp")

        async def initialize() -> str:
            with anyio.fail_after(TIMEOUT_S):
                async with (
                    streamable_http_client(url) as streams,
                    ClientSession(streams[0], streams[1]) as session,
                ):
                    return (await session.initialize()).server_info.version

        assert anyio.run(initialize) == __version__
    finally:
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=TIMEOUT_S)
    lines = stderr.splitlines()
    assert any("uvicorn" in line for line in lines), stderr  # a library's lines, as JSON too
    for line in lines:
        assert isinstance(json.loads(line), dict), line


def test_log_format_text_makes_every_line_plain(tmp_path: Path) -> None:
    with serving(tmp_path, "--log-format", "text") as running:
        fill(running, [])
    lines = running.log_text().splitlines()
    assert any(line.startswith("method=Optimize session=s ") for line in lines), lines
    assert lines and not any(line.startswith("{") for line in lines)


def test_mcp_over_stdio_reports_the_package_version(tmp_path: Path) -> None:
    params = StdioServerParameters(
        command=CTXOPT, args=["mcp", "--data-dir", str(tmp_path / "data")]
    )

    async def initialize() -> str:
        with anyio.fail_after(TIMEOUT_S):
            async with (
                stdio_client(params) as (read, write),
                ClientSession(read, write) as session,
            ):
                return (await session.initialize()).server_info.version

    assert anyio.run(initialize) == __version__


def test_the_readme_health_check_answers_serving(tmp_path: Path) -> None:
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    (command,) = [line for line in readme.splitlines() if "HealthStub" in line]
    code = command.split(" -c ", 1)[1].strip("'")
    with serving(tmp_path) as running:
        port = running.address.rsplit(":", 1)[1]
        checked = subprocess.run(
            [sys.executable, "-c", code.replace(":50051", f":{port}")],
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S,
        )
    assert checked.returncode == 0, checked.stderr
    assert checked.stdout.strip() == "status: SERVING"
