"""`ctxopt mcp` through the SDK's own stdio client: listing, each tool, each
refusal, shutdown, and state shared with the gRPC front through one data
directory (one process at a time)."""

from __future__ import annotations

import fcntl
import json
import os
import signal
import socket
import subprocess
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import grpc
from ctxopt.store import DB_FILE, PID_FILE
from ctxopt.v1 import ctxopt_pb2 as pb
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

from tests.serverproc import CTXOPT, serving

TIMEOUT_S = 60
TOOLS = {
    "context_append",
    "context_gc_analyze",
    "context_gc_prune",
    "context_gc_pin",
    "context_gc_unpin",
    "context_gc_configure",
    "context_stash_search",
    "context_stash_restore",
}


def turns(n: int = 16) -> list[dict[str, Any]]:
    """A system prompt (LOCKED), n alternating turns and one long, old log."""
    chunks: list[dict[str, Any]] = [
        {"id": "sys", "text": "You are a coding agent.", "role": "system", "kind": "system"}
    ]
    for i in range(n):
        chunks.append(
            {
                "id": f"t{i}",
                "text": f"turn {i}: the parser cache keeps stale widget {i} entries " * 10,
                "role": "user" if i % 2 == 0 else "model",
                "turn": i,
            }
        )
    chunks.append(
        {
            "id": "log",
            "text": "\n".join(f"DEBUG retry {k} connection pool exhausted" for k in range(200)),
            "role": "tool",
            "kind": "log",
            "turn": 3,
        }
    )
    return chunks


Call = Callable[[str, dict[str, Any]], Awaitable[tuple[bool, Any]]]


def with_mcp(data_dir: Path, body: Callable[[ClientSession, Call], Awaitable[None]]) -> None:
    """Start `ctxopt mcp --data-dir data_dir`, run `body` against it, stop it.

    `call` returns (True, structured result) or (False, the tool error's text)."""
    params = StdioServerParameters(command=str(CTXOPT), args=["mcp", "--data-dir", str(data_dir)])

    async def main() -> None:
        with anyio.fail_after(TIMEOUT_S):
            async with (
                stdio_client(params) as (read, write),
                ClientSession(read, write) as session,
            ):
                await session.initialize()

                async def call(name: str, arguments: dict[str, Any]) -> tuple[bool, Any]:
                    result = await session.call_tool(name, arguments)
                    if result.is_error:
                        return False, " ".join(getattr(c, "text", "") for c in result.content)
                    return True, result.structured_content

                await body(session, call)

    anyio.run(main)


async def registered(call: Call, limit_to_total: bool = True) -> int:
    """Append `turns()`; by default make the window exactly the session's size."""
    ok, appended = await call("context_append", {"chunks": turns()})
    assert ok, appended
    total: int = appended["session_tokens"]
    if limit_to_total:
        ok, _ = await call("context_gc_configure", {"context_limit_tokens": total})
        assert ok
    return total


def store_was_closed(data_dir: Path) -> bool:
    """A closed store checkpointed its WAL away; a killed one leaves it behind."""
    wal = data_dir / f"{DB_FILE}-wal"
    return not wal.exists() or wal.stat().st_size == 0


def test_tools_are_listed_with_schemas(tmp_path: Path) -> None:
    async def body(session: ClientSession, _call: Call) -> None:
        listed = {t.name: t for t in (await session.list_tools()).tools}
        assert set(listed) == TOOLS
        assert all(t.description and t.output_schema for t in listed.values())
        prune = listed["context_gc_prune"].input_schema["properties"]
        assert prune["strategy"]["enum"] == ["delete", "stash", "auto"]
        assert prune["strategy"]["default"] == "stash"
        for tool in TOOLS - {"context_gc_configure"}:
            assert listed[tool].input_schema["properties"]["session_id"]["default"] == "default"
        chunk = listed["context_append"].input_schema["$defs"]["ChunkIn"]
        assert chunk["required"] == ["id", "text"]
        assert "tool_result" in chunk["properties"]["kind"]["enum"]
        configure = listed["context_gc_configure"].input_schema["properties"]
        assert {"threshold_percent", "recent_turns", "batch_size", "weight_bm25"} <= set(configure)
        assert all(t.input_schema["additionalProperties"] is False for t in listed.values())
        search = listed["context_stash_search"].input_schema["properties"]
        assert search["limit"]["default"] == 20  # the page gRPC gives when limit is left out
        analysis = listed["context_gc_analyze"].output_schema
        assert analysis is not None and {"usage", "candidates"} <= set(analysis["properties"])

    with_mcp(tmp_path, body)


def test_append_registers_chunks_and_upserts_by_id(tmp_path: Path) -> None:
    async def body(_session: ClientSession, call: Call) -> None:
        ok, first = await call("context_append", {"chunks": turns()})
        assert ok and first["added"] == 18 and first["session_chunks"] == 18
        assert first["session_tokens"] > 0
        edited = [turns()[1], {"id": "t1", "text": "edited", "role": "model", "turn": 1}]
        ok, again = await call("context_append", {"chunks": edited})
        assert ok and (again["unchanged"], again["updated"]) == (1, 1)
        assert again["session_chunks"] == 18

    with_mcp(tmp_path, body)


def test_analyze_reports_usage_and_candidates_and_changes_nothing(tmp_path: Path) -> None:
    async def body(_session: ClientSession, call: Call) -> None:
        total = await registered(call)
        ok, analysis = await call("context_gc_analyze", {"query": "widget 5"})
        assert ok, analysis
        assert analysis["usage"] == {
            "current_tokens": total,
            "soft_limit_tokens": int(total * 0.8),
            "hard_limit_tokens": total,
            "target_tokens": int(total * 0.6),
            "percent_of_limit": 100.0,
        }
        assert analysis["would_trigger"] and analysis["tokens_after"] <= total * 0.6
        log = next(c for c in analysis["candidates"] if c["id"] == "log")
        assert log["kind"] == "log" and log["tokens"] > 0 and "ephemeral" in log["reasons"]
        assert all(c["reasons"] for c in analysis["candidates"])
        ok, again = await call("context_gc_analyze", {"query": "widget 5"})
        assert again == analysis

    with_mcp(tmp_path, body)


def test_prune_stashes_by_default_and_restore_brings_it_back(tmp_path: Path) -> None:
    async def body(_session: ClientSession, call: Call) -> None:
        total = await registered(call)
        ok, pruned = await call("context_gc_prune", {"ids": ["t2", "t4"]})
        assert ok and pruned["strategy"] == "stash"
        assert pruned["stashed"] == ["t2", "t4"] and pruned["deleted"] == []
        assert pruned["tokens_before"] == total
        assert pruned["tokens_saved"] == total - pruned["tokens_after"] > 0

        ok, found = await call("context_stash_search", {"query": "widget 4"})
        assert ok and found["hits"][0]["chunk_id"] == "t4"
        assert found["hits"][0]["action"] == "stash" and "widget" in found["hits"][0]["snippet"]
        ok, restored = await call("context_stash_restore", {"ids": ["t4"], "force": True})
        assert ok and restored["restored"] == ["t4"]
        assert restored["session_tokens"] > pruned["tokens_after"]
        original = next(c["text"] for c in turns() if c["id"] == "t4")
        assert restored["originals"] == {"t4": original}, "the text comes back at once"

    with_mcp(tmp_path, body)


def test_prune_delete_removes_for_good(tmp_path: Path) -> None:
    async def body(_session: ClientSession, call: Call) -> None:
        await registered(call)
        ok, deleted = await call("context_gc_prune", {"ids": ["t3"], "strategy": "delete"})
        assert ok and deleted["deleted"] == ["t3"] and deleted["stashed"] == []
        ok, found = await call("context_stash_search", {"query": "turn 3"})
        assert ok and "t3" not in [h["chunk_id"] for h in found["hits"]]
        ok, message = await call("context_stash_restore", {"ids": ["t3"]})
        assert not ok and "chunk_ids" in message

    with_mcp(tmp_path, body)


def test_prune_auto_does_what_analyze_showed_and_spares_pinned(tmp_path: Path) -> None:
    async def body(_session: ClientSession, call: Call) -> None:
        total = await registered(call)
        ok, pinned = await call("context_gc_pin", {"ids": ["t1"]})
        assert ok and pinned == {"ids": ["t1"], "pinned": True}
        ok, analysis = await call("context_gc_analyze", {"query": "widget 5"})
        ok, auto = await call("context_gc_prune", {"strategy": "auto", "query": "widget 5"})
        assert ok, auto
        shown = [{k: v for k, v in c.items() if k != "kind"} for c in analysis["candidates"]]
        assert auto["changes"] == shown
        assert auto["tokens_after"] == analysis["tokens_after"] <= total * 0.6
        removed = auto["stashed"] + auto["deleted"] + auto["trimmed_or_masked"]
        assert "log" in removed and "t1" not in removed and "sys" not in removed
        ok, after = await call("context_gc_analyze", {})
        assert after["usage"]["current_tokens"] == auto["tokens_after"]

    with_mcp(tmp_path, body)


def test_prune_auto_leaves_a_ledger_row_that_gain_reports(tmp_path: Path) -> None:
    """An MCP `prune auto` is a collection like a gRPC Optimize: `ctxopt gain`
    (through a server started later on the same directory) shows its saving."""
    data = tmp_path / "data"
    saved: list[int] = []

    async def body(_session: ClientSession, call: Call) -> None:
        await registered(call)
        ok, auto = await call("context_gc_prune", {"strategy": "auto"})
        assert ok and auto["tokens_saved"] > 0, auto
        saved.append(auto["tokens_saved"])

    with_mcp(data, body)
    with serving(tmp_path) as server:
        run = subprocess.run(
            [str(CTXOPT), "gain", "--by", "host", "--json", "--addr", server.address],
            env={k: v for k, v in os.environ.items() if not k.startswith("CTXOPT_")},
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S,
        )
    assert run.returncode == 0, run.stderr
    rows = json.loads(run.stdout)["rows"]
    assert [(r["key"], r["calls"], r["tokens_saved"]) for r in rows] == [("mcp", 1, saved[0])]


def test_unpin_makes_a_chunk_prunable_again(tmp_path: Path) -> None:
    async def body(_session: ClientSession, call: Call) -> None:
        await registered(call)
        await call("context_gc_pin", {"ids": ["t5"]})
        ok, message = await call("context_gc_prune", {"ids": ["t5"]})
        assert not ok and "t5 (pinned)" in message
        ok, unpinned = await call("context_gc_unpin", {"ids": ["t5"]})
        assert ok and unpinned == {"ids": ["t5"], "pinned": False}
        ok, pruned = await call("context_gc_prune", {"ids": ["t5"]})
        assert ok and pruned["stashed"] == ["t5"]

    with_mcp(tmp_path, body)


def test_configure_sets_later_defaults_and_keeps_what_is_omitted(tmp_path: Path) -> None:
    async def body(_session: ClientSession, call: Call) -> None:
        total = await registered(call, limit_to_total=False)
        ok, settings = await call("context_gc_configure", {"context_limit_tokens": total * 2})
        assert ok and settings["threshold_percent"] == 80.0 and settings["batch_size"] == 0
        ok, settings = await call(
            "context_gc_configure",
            {"threshold_percent": 40, "target_percent": 30, "recent_turns": 2, "weight_gc": 0},
        )
        assert ok and settings["context_limit_tokens"] == total * 2
        assert (settings["recent_turns"], settings["weight_gc"]) == (2, 0.0)
        ok, analysis = await call("context_gc_analyze", {})
        assert analysis["usage"]["soft_limit_tokens"] == int(total * 2 * 0.4)
        assert analysis["usage"]["target_tokens"] == int(total * 2 * 0.3)
        assert analysis["would_trigger"]

        ok, settings = await call("context_gc_configure", {"batch_size": 1})
        assert ok and settings["batch_size"] == 1
        ok, minor = await call("context_gc_prune", {"strategy": "auto"})
        assert ok and len(minor["changes"]) == 1  # one removal step

    with_mcp(tmp_path, body)


def test_refusals_name_the_field_and_change_nothing(tmp_path: Path) -> None:
    async def body(_session: ClientSession, call: Call) -> None:
        total = await registered(call)
        await call("context_gc_pin", {"ids": ["t5"]})
        refused: list[tuple[str, dict[str, Any], str]] = [
            ("context_gc_prune", {"ids": ["t5"]}, "t5 (pinned)"),
            ("context_gc_prune", {"ids": ["t6", "sys"], "strategy": "delete"}, "sys (LOCKED)"),
            ("context_gc_prune", {"ids": ["nope"]}, "ids: no such chunks"),
            ("context_gc_prune", {"ids": ["t15"]}, "t15 (root)"),  # the rule of delete_ids
            ("context_gc_prune", {"ids": ["t6"], "strategy": "shred"}, "strategy"),
            ("context_gc_prune", {}, "ids"),
            ("context_gc_prune", {"ids": ["t6"], "strategy": "auto"}, "ids"),
            ("context_gc_pin", {"ids": ["nope"]}, "updates[0].id"),
            ("context_stash_restore", {"ids": ["t7"]}, "chunk_ids"),
            (
                "context_gc_configure",
                {"threshold_percent": 50, "target_percent": 70},
                "target_percent",
            ),
            ("context_gc_configure", {"threshold_percent": 150}, "threshold_percent"),
            ("context_gc_prune", {"ids": ["t6"], "strateg": "delete"}, "strateg"),
            ("context_gc_analyze", {"query": "x", "sesion_id": "s"}, "sesion_id"),
            ("context_append", {"chunks": [{"id": "x", "text": "y", "rol": "user"}]}, "rol"),
            ("context_gc_configure", {"context_limit_tokens": 10**30}, "context_limit_tokens"),
            ("context_gc_configure", {"weight_recency": "Infinity"}, "weight_recency"),
            ("context_gc_configure", {"threshold_percent": "NaN"}, "threshold_percent"),
            ("context_append", {"chunks": [{"id": "x", "text": ""}]}, "chunks[0].text"),
            ("context_stash_search", {"kinds": ["poem"]}, "kinds"),
            ("context_stash_search", {"limit": 0}, "limit: must be within [1, 100]"),
            ("context_stash_search", {"offset": -1}, "offset"),
        ]
        for tool, arguments, expected in refused:
            ok, message = await call(tool, arguments)
            assert not ok and expected in message, (tool, arguments, message)
        ok, analysis = await call("context_gc_analyze", {})
        assert ok and analysis["usage"]["current_tokens"] == total
        ok, found = await call("context_stash_search", {})
        assert ok and found["hits"] == []

    with_mcp(tmp_path, body)


def test_analyze_of_a_session_not_made_yet_is_empty(tmp_path: Path) -> None:
    async def body(_session: ClientSession, call: Call) -> None:
        ok, analysis = await call("context_gc_analyze", {"session_id": "never-made"})
        assert ok, analysis
        assert analysis["usage"]["current_tokens"] == 0
        assert (analysis["candidates"], analysis["would_trigger"]) == ([], False)
        ok, found = await call("context_stash_search", {"session_id": "never-made"})
        assert not ok and "session_id" in found  # searching a stash that never was stays an error

    with_mcp(tmp_path, body)


def test_closing_stdin_closes_the_store(tmp_path: Path) -> None:
    async def body(_session: ClientSession, call: Call) -> None:
        await registered(call)

    with_mcp(tmp_path, body)
    assert store_was_closed(tmp_path)


def test_sigterm_closes_the_store_and_releases_the_directory(tmp_path: Path) -> None:
    async def body(_session: ClientSession, call: Call) -> None:
        await registered(call)
        assert not store_was_closed(tmp_path)  # the WAL holds the append
        os.kill(int((tmp_path / PID_FILE).read_text()), signal.SIGTERM)
        with (tmp_path / DB_FILE).open() as lock:
            while True:  # fail_after bounds this
                try:
                    fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    await anyio.sleep(0.05)
        assert store_was_closed(tmp_path)

    with_mcp(tmp_path, body)


def test_a_directory_held_by_the_grpc_server_is_refused(tmp_path: Path) -> None:
    with serving(tmp_path):
        refused = subprocess.run(
            [str(CTXOPT), "mcp", "--data-dir", str(tmp_path / "data")],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S,
        )
    assert refused.returncode == 2 and "data_dir" in refused.stderr and "in use" in refused.stderr


def test_state_is_shared_with_the_grpc_front(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    with serving(tmp_path) as server, grpc.insecure_channel(server.address) as channel:
        stub = server.stub(channel)
        chunks = [
            pb.Chunk(id=f"g{i}", role=pb.ROLE_USER, kind=pb.CHUNK_KIND_MESSAGE, text=f"grpc {i}")
            for i in range(4)
        ]
        stub.AppendChunks(pb.AppendChunksRequest(session_id="default", chunks=chunks), timeout=10)
        stub.RemoveChunks(
            pb.RemoveChunksRequest(session_id="default", chunk_ids=["g0"], stash=True), timeout=10
        )

    async def body(_session: ClientSession, call: Call) -> None:
        ok, found = await call("context_stash_search", {"query": "grpc"})
        assert ok and [h["chunk_id"] for h in found["hits"]] == ["g0"]
        ok, _ = await call("context_gc_pin", {"ids": ["g1"]})
        assert ok
        ok, appended = await call(
            "context_append", {"chunks": [{"id": "m0", "text": "from mcp", "turn": 9}]}
        )
        assert ok and appended["session_chunks"] == 4
        ok, _ = await call("context_gc_configure", {"recent_turns": 0})  # g2 is no longer a root
        assert ok
        ok, pruned = await call("context_gc_prune", {"ids": ["g2"]})
        assert ok and pruned["stashed"] == ["g2"]

    with_mcp(data_dir, body)

    with serving(tmp_path) as server, grpc.insecure_channel(server.address) as channel:
        stub = server.stub(channel)
        exported = stub.ExportSession(pb.ExportSessionRequest(session_id="default"), timeout=10)
        chunks_by_id = {c["chunk"]["id"]: c["chunk"] for c in json.loads(exported.json)["chunks"]}
        assert set(chunks_by_id) == {"g1", "g3", "m0"}
        assert chunks_by_id["g1"]["pinned"]
        found = stub.SearchStash(
            pb.SearchStashRequest(session_id="default", query="grpc"), timeout=10
        )
        assert {h.chunk_id for h in found.hits} == {"g0", "g2"}


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_mcp_over_http_shares_the_grpc_servers_sessions_and_stash(tmp_path: Path) -> None:
    """`ctxopt serve --mcp-addr`: an agent's MCP tools see what a gRPC client (the
    Gemini CLI adapter) stashed, and its restore reaches that client's session."""
    port = free_port()
    with (
        serving(tmp_path, "--mcp-addr", f"127.0.0.1:{port}") as server,
        grpc.insecure_channel(server.address) as channel,
    ):
        stub = server.stub(channel)
        chunks = [
            pb.Chunk(id=f"h{i}", role=pb.ROLE_USER, kind=pb.CHUNK_KIND_MESSAGE, text=f"host {i}")
            for i in range(3)
        ]
        stub.AppendChunks(pb.AppendChunksRequest(session_id="agent-1", chunks=chunks), timeout=10)
        stub.RemoveChunks(
            pb.RemoveChunksRequest(session_id="agent-1", chunk_ids=["h0"], stash=True),
            timeout=10,
        )

        async def main() -> None:
            with anyio.fail_after(TIMEOUT_S):
                while True:  # the HTTP listener starts on its own thread
                    try:
                        with socket.create_connection(("127.0.0.1", port), timeout=1):
                            break
                    except OSError:
                        await anyio.sleep(0.05)
                async with (
                    streamable_http_client(f"http://127.0.0.1:{port}/mcp") as streams,
                    ClientSession(streams[0], streams[1]) as session,
                ):
                    await session.initialize()
                    found = await session.call_tool(
                        "context_stash_search", {"query": "host", "session_id": ""}
                    )
                    assert found.structured_content is not None
                    hits = found.structured_content["hits"]  # every session's
                    assert [(h["chunk_id"], h["session_id"]) for h in hits] == [("h0", "agent-1")]
                    restored = await session.call_tool(
                        "context_stash_restore", {"ids": ["h0"], "session_id": "agent-1"}
                    )
                    assert not restored.is_error, restored.content

        anyio.run(main)
        stats = stub.GetSessionStats(pb.GetSessionStatsRequest(session_id="agent-1"), timeout=10)
        assert (stats.chunk_count, stats.stashed_count) == (3, 0)


def test_mcp_over_http_is_refused_with_auth_on(tmp_path: Path) -> None:
    data_dir, mcp_addr = str(tmp_path / "d"), f"127.0.0.1:{free_port()}"
    result = subprocess.run(
        [
            str(CTXOPT),
            "serve",
            "--addr",
            "127.0.0.1:0",
            "--data-dir",
            data_dir,
            "--mcp-addr",
            mcp_addr,
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "CTXOPT_AUTH_TOKEN": "alice=s1"},
    )
    assert result.returncode == 2
    assert "mcp_addr" in result.stderr and "Traceback" not in result.stderr
