"""`ctxopt mcp` through the SDK's own stdio client: listing, each tool, each
refusal, and state shared with the gRPC front through one data directory."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import grpc
from ctxopt.v1 import ctxopt_pb2 as pb
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

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


Session = Callable[[str, dict[str, Any]], Awaitable[tuple[bool, Any]]]


def with_mcp(data_dir: Path, body: Callable[[ClientSession, Session], Awaitable[None]]) -> None:
    """Start `ctxopt mcp` on `data_dir`, run `body` against it, stop it."""
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


def unwrap(value: Any) -> Any:
    """Scalar results arrive as {"result": value}."""
    return value["result"] if isinstance(value, dict) and set(value) == {"result"} else value


def test_tools_are_listed_with_schemas(tmp_path: Path) -> None:
    async def body(session: ClientSession, _call: Session) -> None:
        listed = {t.name: t for t in (await session.list_tools()).tools}
        assert set(listed) == TOOLS
        prune = listed["context_gc_prune"].input_schema
        assert prune["properties"]["strategy"]["enum"] == ["delete", "stash", "auto"]
        assert prune["properties"]["strategy"]["default"] == "stash"
        assert listed["context_gc_analyze"].output_schema is not None
        assert all(t.description for t in listed.values())

    with_mcp(tmp_path, body)


def test_happy_paths(tmp_path: Path) -> None:
    async def body(_session: ClientSession, call: Session) -> None:
        ok, appended = await call("context_append", {"chunks": turns()})
        assert ok and appended["added"] == 18 and appended["session_chunks"] == 18
        total = appended["session_tokens"]

        settings = {"context_limit_tokens": total, "recent_turns": 2, "batch_size": 0}
        ok, configured = await call("context_gc_configure", {"settings": settings})
        assert ok and configured["context_limit_tokens"] == total

        ok, analysis = await call("context_gc_analyze", {"query": "widget 5"})
        assert ok and analysis["would_trigger"]
        assert analysis["usage"]["current_tokens"] == total
        assert analysis["usage"]["hard_limit_tokens"] == total
        by_id = {c["id"]: c for c in analysis["candidates"]}
        assert by_id["log"]["kind"] == "log" and "ephemeral" in by_id["log"]["reasons"]
        ok, again = await call("context_gc_analyze", {"query": "widget 5"})
        assert again == analysis  # analyze changes nothing

        ok, pinned = await call("context_gc_pin", {"ids": ["t1"]})
        assert ok and unwrap(pinned) == 1
        ok, pruned = await call("context_gc_prune", {"ids": ["t2", "t4"]})
        assert ok and pruned["stashed"] == ["t2", "t4"] and pruned["tokens_saved"] > 0

        ok, found = await call("context_stash_search", {"query": "widget 4"})
        assert ok and found["hits"][0]["chunk_id"] == "t4"
        ok, restored = await call("context_stash_restore", {"ids": ["t4"], "force": True})
        assert ok and restored["restored"] == ["t4"]

        ok, auto = await call("context_gc_prune", {"strategy": "auto", "query": "widget 5"})
        assert ok and auto["tokens_after"] <= total * 0.6
        assert "t1" not in auto["stashed"] + auto["deleted"]  # pinned
        ok, unpinned = await call("context_gc_unpin", {"ids": ["t1"]})
        assert ok and unpinned == {"result": 1}

        ok, deleted = await call("context_gc_prune", {"ids": ["t3"], "strategy": "delete"})
        assert ok and deleted["deleted"] == ["t3"] and deleted["stashed"] == []
        ok, gone = await call("context_stash_search", {"query": "turn 3"})
        assert ok and "t3" not in [h["chunk_id"] for h in gone["hits"]]

    with_mcp(tmp_path, body)


def test_refusals(tmp_path: Path) -> None:
    async def body(_session: ClientSession, call: Session) -> None:
        await call("context_append", {"chunks": turns()})
        await call("context_gc_pin", {"ids": ["t5"]})
        refused: list[tuple[dict[str, Any], str]] = [
            ({"ids": ["t5"]}, "t5 (pinned)"),
            ({"ids": ["sys"], "strategy": "delete"}, "sys (LOCKED)"),
            ({"ids": ["nope"]}, "chunk_ids"),
            ({"ids": ["t6"], "strategy": "shred"}, "strategy"),
            ({}, "ids"),
        ]
        for arguments, expected in refused:
            ok, message = await call("context_gc_prune", arguments)
            assert not ok and expected in message, (arguments, message)
        ok, message = await call("context_stash_restore", {"ids": ["t7"]})
        assert not ok and "chunk_ids" in message
        ok, message = await call(
            "context_gc_configure", {"settings": {"threshold_percent": 50, "target_percent": 70}}
        )
        assert not ok and "target_percent" in message
        ok, message = await call("context_gc_analyze", {"session_id": "never-made"})
        assert not ok and "session_id" in message
        # nothing refused was removed
        ok, analysis = await call("context_gc_analyze", {})
        assert ok and analysis["usage"]["current_tokens"] > 0

    with_mcp(tmp_path, body)


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

    async def body(_session: ClientSession, call: Session) -> None:
        ok, found = await call("context_stash_search", {"query": "grpc"})
        assert ok and [h["chunk_id"] for h in found["hits"]] == ["g0"]
        ok, _ = await call("context_gc_pin", {"ids": ["g1"]})
        assert ok
        ok, appended = await call(
            "context_append", {"chunks": [{"id": "m0", "text": "from mcp", "turn": 9}]}
        )
        assert ok and appended["session_chunks"] == 4

    with_mcp(data_dir, body)

    with serving(tmp_path) as server, grpc.insecure_channel(server.address) as channel:
        exported = server.stub(channel).ExportSession(
            pb.ExportSessionRequest(session_id="default"), timeout=10
        )
        chunks_by_id = {c["chunk"]["id"]: c["chunk"] for c in json.loads(exported.json)["chunks"]}
        assert set(chunks_by_id) == {"g1", "g2", "g3", "m0"}
        assert chunks_by_id["g1"]["pinned"]
