"""Attacks and careless operation, as a user meets them: through a real server on
loopback, the `ctxopt` command line, or a damaged or full data directory.

Each test names what must hold: originals are never lost and a restore brings
them back, a stash answers only to its owner, an import is validated like an
append, and every refusal names its field (a damaged, unwritable or full store:
test_damaged_store.py).
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from ctxopt.api.grpc import convert
from ctxopt.errors import ResourceExhausted
from ctxopt.model import Action
from ctxopt.store import Change
from ctxopt.v1 import ctxopt_pb2 as pb
from ctxopt.v1 import ctxopt_pb2_grpc as pb_grpc

from tests import factory
from tests.serverproc import CTXOPT, ServerProcess, serving, start_server

Stub = pb_grpc.ContextOptimizerStub
TIMEOUT = 10.0
ORIGINAL = "\n".join(
    f"{i:04d} collected item {i} from the worker pool, status ok, latency {i * 7 % 97} ms"
    for i in range(600)
)


def tool_session() -> list[pb.Chunk]:
    """A task, a tool call with a 600-line result, and two later turns."""
    return [
        pb.Chunk(id="task", role=pb.ROLE_USER, kind=pb.CHUNK_KIND_MESSAGE, text="fix item 17"),
        pb.Chunk(
            id="call",
            role=pb.ROLE_MODEL,
            kind=pb.CHUNK_KIND_TOOL_CALL,
            text="run the worker pool test",
            turn=1,
            group_id="g1",
        ),
        pb.Chunk(
            id="tr",
            role=pb.ROLE_TOOL,
            kind=pb.CHUNK_KIND_TOOL_RESULT,
            text=ORIGINAL,
            turn=1,
            group_id="g1",
        ),
        pb.Chunk(
            id="m2", role=pb.ROLE_MODEL, kind=pb.CHUNK_KIND_MESSAGE, text="item 17 is slow", turn=2
        ),
        pb.Chunk(id="u3", role=pb.ROLE_USER, kind=pb.CHUNK_KIND_MESSAGE, text="dig in", turn=3),
    ]


def append(stub: Stub, session: str, chunks: list[pb.Chunk], **kw: Any) -> pb.AppendChunksResponse:
    response: pb.AppendChunksResponse = stub.AppendChunks(
        pb.AppendChunksRequest(session_id=session, chunks=chunks), timeout=TIMEOUT, **kw
    )
    return response


def optimize(stub: Stub, session: str, limit: int, **kw: Any) -> pb.OptimizeResponse:
    response: pb.OptimizeResponse = stub.Optimize(
        pb.OptimizeRequest(
            session_id=session,
            query="item 17 latency",
            budget=pb.Budget(context_limit_tokens=limit),
            roots=pb.Roots(recent_turns=2),
            force=True,
        ),
        timeout=TIMEOUT,
        **kw,
    )
    return response


def exported(stub: Stub, session: str, **kw: Any) -> dict[str, Any]:
    response = stub.ExportSession(
        pb.ExportSessionRequest(session_id=session), timeout=TIMEOUT, **kw
    )
    document: dict[str, Any] = json.loads(response.json)
    return document


def live_texts(document: dict[str, Any]) -> dict[str, str]:
    return {c["chunk"]["id"]: c["chunk"]["text"] for c in document["chunks"]}


def refused(code: grpc.StatusCode, field: str, call: Any, request: Any, **kw: Any) -> str:
    with pytest.raises(grpc.RpcError) as raised:
        call(request, timeout=TIMEOUT, **kw)
    error: Any = raised.value
    assert error.code() == code, error.details()
    assert field in error.details(), error.details()
    return str(error.details())


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    env = {"CTXOPT_MAX_CHUNKS_PER_SESSION": "50"}
    with serving(tmp_path_factory.mktemp("reliability"), env=env) as running:
        yield running


# Originals are never lost


def test_restore_of_a_trimmed_then_stashed_chunk_brings_back_the_original(stub: Stub) -> None:
    total = append(stub, "trimmed", tool_session()).session_tokens
    first = optimize(stub, "trimmed", total)
    assert [(d.chunk_id, d.action) for d in first.decisions] == [("tr", pb.ACTION_TRIM)]
    second = optimize(stub, "trimmed", 300)
    stashed = {d.chunk_id: d for d in second.decisions}
    assert stashed["tr"].action == pb.ACTION_STASH
    assert stashed["tr"].stash_id == first.decisions[0].stash_id  # the original's entry
    stash = exported(stub, "trimmed")["stash"]
    assert [e["chunk"]["text"] for e in stash if e["chunk"]["id"] == "tr"] == [ORIGINAL]

    restored = stub.Restore(
        pb.RestoreRequest(session_id="trimmed", chunk_ids=["tr"]), timeout=TIMEOUT
    )
    assert sorted(restored.restored_ids) == ["call", "tr"]  # the group comes back whole
    after = exported(stub, "trimmed")
    assert live_texts(after)["tr"] == ORIGINAL
    assert not [e for e in after["stash"] if e["chunk"]["id"] == "tr"]


def test_restoring_everything_after_a_burst_leaves_no_placeholder(stub: Stub) -> None:
    chunks = tool_session()
    originals = {c.id: c.text for c in chunks}
    total = append(stub, "burst", chunks).session_tokens
    removed: set[str] = set()
    for limit in (total, total // 2, 2_000, 300, 200):
        plan = optimize(stub, "burst", limit)
        removed |= {d.chunk_id for d in plan.decisions}
    assert removed
    stub.Restore(pb.RestoreRequest(session_id="burst", chunk_ids=sorted(removed)), timeout=TIMEOUT)
    after = exported(stub, "burst")
    assert live_texts(after) == originals
    assert all(c["origin"] == "" for c in after["chunks"])


def test_a_shrunk_chunk_restores_to_its_original_and_its_entry_leaves_the_stash(
    stub: Stub,
) -> None:
    total = append(stub, "shown", tool_session()).session_tokens
    trim = optimize(stub, "shown", total).decisions[0]
    assert trim.action == pb.ACTION_TRIM and "[ctxopt" in trim.replacement_text
    stub.Restore(pb.RestoreRequest(session_id="shown", chunk_ids=["tr"]), timeout=TIMEOUT)
    after = exported(stub, "shown")
    assert live_texts(after)["tr"] == ORIGINAL
    assert after["stash"] == []


def test_a_refused_restore_changes_nothing(stub: Stub) -> None:
    total = append(stub, "refused", tool_session()).session_tokens
    optimize(stub, "refused", total)
    optimize(stub, "refused", 300)
    before = exported(stub, "refused")
    refused(
        grpc.StatusCode.FAILED_PRECONDITION,
        "budget",
        stub.Restore,
        pb.RestoreRequest(
            session_id="refused", chunk_ids=["tr"], budget=pb.Budget(context_limit_tokens=400)
        ),
    )
    assert exported(stub, "refused") == before


# Ownership follows the stash


def test_a_stash_answers_only_to_its_owner_also_after_delete_and_restart(tmp_path: Path) -> None:
    env = {"CTXOPT_AUTH_TOKEN": "alice=s1,bob=s2"}
    alice = (("authorization", "Bearer s1"),)
    bob = (("authorization", "Bearer s2"),)
    data = tmp_path / "data"
    server = start_server(data, tmp_path / "server.log", env=env)
    try:
        with grpc.insecure_channel(server.address) as channel:
            stub = server.stub(channel)
            total = append(stub, "sa", tool_session(), metadata=alice).session_tokens
            optimize(stub, "sa", total // 4, metadata=alice)
            stub.DeleteSession(
                pb.DeleteSessionRequest(session_id="sa", purge_stash=False),
                timeout=TIMEOUT,
                metadata=alice,
            )
    finally:
        assert server.terminate() == 0
    server = start_server(data, tmp_path / "server.log", env=env)
    try:
        with grpc.insecure_channel(server.address) as channel:
            stub = server.stub(channel)
            denied = grpc.StatusCode.PERMISSION_DENIED
            refused(
                denied,
                "session_id",
                stub.AppendChunks,
                pb.AppendChunksRequest(session_id="sa", chunks=tool_session()[:1]),
                metadata=bob,
            )
            for call, request in (
                (stub.ExportSession, pb.ExportSessionRequest(session_id="sa")),
                (stub.Restore, pb.RestoreRequest(session_id="sa", chunk_ids=["tr"])),
                (stub.SearchStash, pb.SearchStashRequest(session_id="sa", query="item")),
            ):
                refused(denied, "session_id", call, request, metadata=bob)
            refused(
                grpc.StatusCode.NOT_FOUND,
                "session_id",
                stub.GetSessionStats,
                pb.GetSessionStatsRequest(session_id="sa"),
                metadata=bob,
            )
            everything = stub.SearchStash(
                pb.SearchStashRequest(query="item"), timeout=TIMEOUT, metadata=bob
            )
            assert list(everything.hits) == []

            hits = stub.SearchStash(
                pb.SearchStashRequest(session_id="sa", query="item 17"),
                timeout=TIMEOUT,
                metadata=alice,
            )
            assert "tr" in {h.chunk_id for h in hits.hits}
            stub.Restore(
                pb.RestoreRequest(session_id="sa", chunk_ids=["tr"]),
                timeout=TIMEOUT,
                metadata=alice,
            )
            assert live_texts(exported(stub, "sa", metadata=alice))["tr"] == ORIGINAL
    finally:
        assert server.terminate() == 0


# Imports are validated like appends


def export_of(stub: Stub, session: str) -> dict[str, Any]:
    total = append(stub, session, tool_session()).session_tokens
    optimize(stub, session, total // 4)
    document = exported(stub, session)
    stub.DeleteSession(
        pb.DeleteSessionRequest(session_id=session, purge_stash=True), timeout=TIMEOUT
    )
    return document


def test_an_import_with_a_huge_position_is_renumbered_and_usable(stub: Stub) -> None:
    document = export_of(stub, "huge-seq")
    for i, item in enumerate(document["chunks"]):
        item["seq"] = 2_000_000_000 + i
    imported = stub.ImportSession(pb.ImportSessionRequest(json=json.dumps(document)), timeout=10)
    assert imported.session_id == "huge-seq"
    order = [c["chunk"]["id"] for c in exported(stub, "huge-seq")["chunks"]]
    assert order == [c["chunk"]["id"] for c in document["chunks"]]
    assert all(c["seq"] < 1_000 for c in exported(stub, "huge-seq")["chunks"])
    scores = stub.Score(pb.ScoreRequest(session_id="huge-seq", query="item"), timeout=TIMEOUT)
    assert [s.chunk_id for s in scores.scores] == order


BAD_IMPORTS: list[tuple[str, str, Any, str]] = [
    ("empty id", "chunks.0.chunk.id", "", "json.chunks[0].chunk.id"),
    ("empty text", "chunks.0.chunk.text", "", "json.chunks[0].chunk.text"),
    ("NUL in an id", "chunks.1.chunk.id", "a\x00b", "json.chunks[1].chunk.id"),
    ("no role", "chunks.0.chunk.role", "UNSPECIFIED", "json.chunks[0].chunk.role"),
    ("boost 99", "chunks.0.chunk.boost", 99, "json.chunks[0].chunk.boost"),
    ("infinite boost", "chunks.0.chunk.boost", float("inf"), "json.chunks[0].chunk.boost"),
    ("negative tokens", "chunks.0.chunk.tokens", -18, "json.chunks[0].chunk.tokens"),
    ("mixed embeddings", "embeddings", None, "embedding"),
    ("stashed chunk without text", "stash.0.chunk.text", "", "json.stash[0].chunk.text"),
    ("generation past collections", "chunks.0.born", 99, "json.chunks[0].born"),
    ("origin naming nothing", "chunks.0.origin", "nowhere@1", "json.chunks[0].origin"),
    ("over the chunk cap", "many", None, "chunks"),
]


def broken(document: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    if path == "embeddings":
        document["chunks"][0]["chunk"]["embedding"] = [0.5, 0.5]
        document["chunks"][1]["chunk"]["embedding"] = [0.5, 0.5, 0.5]
    elif path == "many":
        item = document["chunks"][-1]
        for i in range(60):
            extra = json.loads(json.dumps(item))
            extra["chunk"]["id"] = f"extra{i}"
            extra["seq"] = 100 + i
            document["chunks"].append(extra)
    else:
        *parents, leaf = path.split(".")
        target: Any = document
        for key in parents:
            target = target[int(key)] if key.isdigit() else target[key]
        target[leaf] = value
    return document


@pytest.mark.parametrize(
    ("path", "value", "field"),
    [case[1:] for case in BAD_IMPORTS],
    ids=[case[0] for case in BAD_IMPORTS],
)
def test_a_bad_import_names_the_field_and_commits_nothing(
    stub: Stub, path: str, value: Any, field: str
) -> None:
    document = export_of(stub, "bad-import")
    assert document["stash"], "the export must hold stashed originals too"
    text = json.dumps(broken(document, path, value))
    with pytest.raises(grpc.RpcError) as raised:
        stub.ImportSession(pb.ImportSessionRequest(json=text), timeout=TIMEOUT)
    error: Any = raised.value
    assert error.code() in (
        grpc.StatusCode.INVALID_ARGUMENT,
        grpc.StatusCode.RESOURCE_EXHAUSTED,
    ), error.details()
    assert field in error.details(), error.details()
    refused(
        grpc.StatusCode.NOT_FOUND,
        "session_id",
        stub.ExportSession,
        pb.ExportSessionRequest(session_id="bad-import"),
    )


# Validation gaps


def test_score_checks_its_query_embedding_like_optimize(stub: Stub) -> None:
    append(stub, "score-embedding", tool_session())
    for embedding, code in (
        ([float("nan")], grpc.StatusCode.INVALID_ARGUMENT),
        ([float("inf")], grpc.StatusCode.INVALID_ARGUMENT),
        ([0.5] * 9_000, grpc.StatusCode.RESOURCE_EXHAUSTED),
    ):
        refused(
            code,
            "query_embedding",
            stub.Score,
            pb.ScoreRequest(session_id="score-embedding", query_embedding=embedding),
        )


def test_search_limit_above_100_is_refused(stub: Stub) -> None:
    append(stub, "search-limit", tool_session())
    for limit in (101, 2**31 - 1):
        refused(
            grpc.StatusCode.INVALID_ARGUMENT,
            "limit",
            stub.SearchStash,
            pb.SearchStashRequest(session_id="search-limit", limit=limit),
        )


def test_update_refuses_a_self_reference_like_append(stub: Stub) -> None:
    append(stub, "self-ref", tool_session())
    refused(
        grpc.StatusCode.INVALID_ARGUMENT,
        "updates[0].references[0]",
        stub.UpdateChunks,
        pb.UpdateChunksRequest(
            session_id="self-ref",
            updates=[pb.ChunkUpdate(id="m2", replace_references=True, references=["m2"])],
        ),
    )


def test_max_chunks_out_of_reach_is_infeasible_and_says_why(stub: Stub) -> None:
    append(stub, "max-chunks", tool_session())
    plan = stub.Optimize(
        pb.OptimizeRequest(
            session_id="max-chunks",
            budget=pb.Budget(context_limit_tokens=1_000_000),
            max_chunks=1,
            dry_run=True,
        ),
        timeout=TIMEOUT,
    )
    assert len(plan.kept_ids) > 1
    assert not plan.feasible
    assert "max_chunks=1" in plan.explanation


def test_target_tokens_overrides_target_percent_in_the_threshold_check(stub: Stub) -> None:
    append(stub, "target-tokens", tool_session())
    plan = stub.Optimize(
        pb.OptimizeRequest(
            session_id="target-tokens",
            budget=pb.Budget(context_limit_tokens=100_000, threshold_percent=50, target_tokens=40),
            dry_run=True,
        ),
        timeout=TIMEOUT,
    )
    assert plan.target_tokens == 40


def test_undecodable_request_bytes_are_invalid_argument(server: ServerProcess) -> None:
    with grpc.insecure_channel(server.address) as channel:
        raw = channel.unary_unary(
            "/ctxopt.v1.ContextOptimizer/AppendChunks",
            request_serializer=lambda b: b,
            response_deserializer=lambda b: b,
        )
        with pytest.raises(grpc.RpcError) as raised:
            raw(b"\xff\xff\xff\xff", timeout=TIMEOUT)
    error: Any = raised.value
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT, error.details()
    assert "AppendChunks" in error.details()


# The command line


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(CTXOPT), *args], capture_output=True, text=True, timeout=60, cwd=cwd)


@pytest.mark.parametrize("what", ["missing", "directory", "not json", "not utf-8"])
def test_cli_import_errors_are_one_line_with_exit_2_and_echo_nothing(
    tmp_path: Path, what: str
) -> None:
    secret = "sk-live-do-not-print-me"
    path = tmp_path / "export.json"
    if what == "directory":
        path.mkdir()
    elif what == "not json":
        path.write_text(secret + " {")
    elif what == "not utf-8":
        path.write_bytes(b"\xff\xfe" + secret.encode())
    result = cli("import", str(path), "--data-dir", str(tmp_path / "data"), cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert secret not in result.stderr
    assert result.stderr.startswith("ctxopt: ")


def test_a_restore_the_store_refuses_leaves_the_trimmed_chunk_in_memory(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Store first, then memory: a write the store refuses (a full disk) changes nothing."""
    engine = factory.engine()
    chunks = [convert.chunk_from_pb(c, "chunks") for c in tool_session()]
    total = engine.append("", "s", chunks).session_tokens
    options = factory.options(total * 6 // 10, "item 17 latency", recent_turns=2)
    plan = engine.optimize("", "s", options)
    assert [d.action for d in plan.decisions if d.chunk_id == "tr"] == [Action.TRIM]
    before = engine.export_session("", "s")

    def full_disk(change: Change) -> None:
        raise ResourceExhausted("data_dir", "/data", "the disk is full")

    monkeypatch.setattr(engine.store, "commit", full_disk)
    with pytest.raises(ResourceExhausted):
        engine.restore("", "s", ["tr"], budget=None, force=False)
    monkeypatch.undo()
    assert engine.export_session("", "s") == before
    (live,) = engine.chunks("", "s", ["tr"])
    assert "[ctxopt" in live.text  # still the excerpt, still in memory
