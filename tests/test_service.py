"""Every RPC through the generated stubs against a real server on loopback."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import cast

import grpc
import pytest
from ctxopt.v1 import ctxopt_pb2 as pb
from ctxopt.v1 import ctxopt_pb2_grpc as pb_grpc

from tests.serverproc import ServerProcess, serving

Stub = pb_grpc.ContextOptimizerStub
TIMEOUT = 10.0
UNKNOWN_ROLE = cast(pb.Role, 99)  # proto3 enums are open: any number can arrive
UNKNOWN_STRATEGY = cast(pb.Strategy, 7)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with serving(tmp_path_factory.mktemp("service")) as running:
        yield running


def message(i: int, text: str, role: pb.Role = pb.ROLE_USER, tokens: int = 0) -> pb.Chunk:
    return pb.Chunk(
        id=f"m{i}", role=role, kind=pb.CHUNK_KIND_MESSAGE, text=text, turn=i, tokens=tokens
    )


def conversation(n: int = 12) -> list[pb.Chunk]:
    """A user/model exchange with one long tool log in the middle."""
    chunks = [pb.Chunk(id="sys", role=pb.ROLE_SYSTEM, kind=pb.CHUNK_KIND_SYSTEM, text="Be brief.")]
    for i in range(n):
        role = pb.ROLE_USER if i % 2 == 0 else pb.ROLE_MODEL
        chunks.append(message(i, f"turn {i} about the parser cache and widget {i} " * 8, role))
    chunks.append(
        pb.Chunk(
            id="log",
            role=pb.ROLE_TOOL,
            kind=pb.CHUNK_KIND_LOG,
            text="\n".join(f"DEBUG line {k} retry connection pool" for k in range(300)),
            turn=n // 2,
        )
    )
    return chunks


def append(stub: Stub, session: str, chunks: list[pb.Chunk]) -> pb.AppendChunksResponse:
    request = pb.AppendChunksRequest(session_id=session, chunks=chunks)
    response: pb.AppendChunksResponse = stub.AppendChunks(request, timeout=TIMEOUT)
    return response


def status_of(call: object) -> grpc.RpcError:
    assert isinstance(call, grpc.RpcError)
    return call


def expect_error(code: grpc.StatusCode, field: str, fn: object, *args: object) -> str:
    with pytest.raises(grpc.RpcError) as raised:
        fn(*args, timeout=TIMEOUT)  # type: ignore[operator]
    error = raised.value
    assert error.code() == code, error.details()
    details = error.details() or ""
    assert field in details, details
    return details


def test_append_upserts_by_id(stub: Stub) -> None:
    first = append(stub, "append", conversation())
    assert {c.status for c in first.chunks} == {pb.UPSERT_STATUS_ADDED}
    assert all(c.tokens > 0 for c in first.chunks)
    again = append(stub, "append", conversation())
    assert {c.status for c in again.chunks} == {pb.UPSERT_STATUS_UNCHANGED}
    assert again.session_tokens == first.session_tokens
    changed = append(stub, "append", [message(0, "a new text for turn zero")])
    assert changed.chunks[0].status == pb.UPSERT_STATUS_UPDATED
    stats = stub.GetSessionStats(pb.GetSessionStatsRequest(session_id="append"), timeout=TIMEOUT)
    assert stats.tokens == changed.session_tokens
    assert stats.chunk_count == len(conversation()) == changed.session_chunks


def test_client_token_counts_are_honoured(stub: Stub) -> None:
    response = append(stub, "counted", [message(0, "hello", tokens=1234)])
    assert response.chunks[0].tokens == 1234
    assert response.session_tokens == 1234


def test_optimize_lands_at_target_and_explains(stub: Stub) -> None:
    before = append(stub, "optimize", conversation()).session_tokens
    budget = pb.Budget(context_limit_tokens=before, target_percent=50, threshold_percent=60)
    plan = stub.Optimize(
        pb.OptimizeRequest(
            session_id="optimize",
            query="parser cache",
            budget=budget,
            roots=pb.Roots(recent_turns=2),
        ),
        timeout=TIMEOUT,
    )
    assert plan.triggered and plan.feasible
    assert plan.tokens_before == before
    assert plan.tokens_after <= plan.target_tokens == before // 2
    assert "sys" in plan.kept_ids
    for decision in plan.decisions:
        assert decision.action != pb.ACTION_KEEP and decision.reasons
        assert decision.breakdown.total == pytest.approx(decision.score)
    log = next(d for d in plan.decisions if d.chunk_id == "log")
    assert "ephemeral" in log.reasons
    stats = stub.GetSessionStats(pb.GetSessionStatsRequest(session_id="optimize"), timeout=TIMEOUT)
    assert stats.tokens == plan.tokens_after
    assert stats.stashed_count >= 1


def test_lean_plan_is_the_same_plan_without_breakdowns(stub: Stub) -> None:
    chunks = conversation()
    append(stub, "full", chunks)
    total = append(stub, "lean", chunks).session_tokens
    request = pb.OptimizeRequest(
        query="parser cache", budget=pb.Budget(context_limit_tokens=total // 2), dry_run=True
    )
    request.session_id = "full"
    full = stub.Optimize(request, timeout=TIMEOUT)
    request.session_id, request.lean = "lean", True
    lean = stub.Optimize(request, timeout=TIMEOUT)
    assert full.decisions and all(d.HasField("breakdown") for d in full.decisions)
    assert not any(d.HasField("breakdown") for d in lean.decisions)
    for d in full.decisions:
        d.ClearField("breakdown")
    assert list(lean.decisions) == list(full.decisions)
    assert lean.kept_ids == full.kept_ids and lean.tokens_after == full.tokens_after


def test_server_info_reports_the_defaults_requests_get(stub: Stub) -> None:
    info = stub.GetServerInfo(pb.GetServerInfoRequest(), timeout=TIMEOUT)
    assert info.version and info.max_chunks_per_request > 0 and info.max_message_bytes > 0
    defaults = info.default_budget
    assert 0 < defaults.target_percent < defaults.threshold_percent < defaults.pressure_percent
    total = append(stub, "defaults", conversation()).session_tokens
    # A window where usage sits just above the reported threshold: the plan
    # triggers and lands at the reported target, though the request set neither.
    window = int(total * 100 / (defaults.threshold_percent + 1))
    plan = stub.Optimize(
        pb.OptimizeRequest(
            session_id="defaults", budget=pb.Budget(context_limit_tokens=window), dry_run=True
        ),
        timeout=TIMEOUT,
    )
    assert plan.triggered
    assert plan.target_tokens == int(window * defaults.target_percent / 100)


def test_dry_run_changes_nothing(stub: Stub) -> None:
    total = append(stub, "dry", conversation()).session_tokens
    export = stub.ExportSession(pb.ExportSessionRequest(session_id="dry"), timeout=TIMEOUT).json
    request = pb.OptimizeRequest(
        session_id="dry", budget=pb.Budget(context_limit_tokens=total // 2), dry_run=True
    )
    plan = stub.Optimize(request, timeout=TIMEOUT)
    assert plan.triggered and plan.decisions
    after = stub.ExportSession(pb.ExportSessionRequest(session_id="dry"), timeout=TIMEOUT).json
    assert json.loads(after) == json.loads(export)


def test_below_threshold_is_not_triggered(stub: Stub) -> None:
    total = append(stub, "calm", conversation()).session_tokens
    request = pb.OptimizeRequest(
        session_id="calm", budget=pb.Budget(context_limit_tokens=total * 4)
    )
    plan = stub.Optimize(request, timeout=TIMEOUT)
    assert not plan.triggered and not plan.decisions
    assert len(plan.kept_ids) == len(conversation())


def test_pinned_and_updates(stub: Stub) -> None:
    total = append(stub, "pins", conversation()).session_tokens
    update = pb.ChunkUpdate(id="m1", pinned=True)
    response = stub.UpdateChunks(
        pb.UpdateChunksRequest(session_id="pins", updates=[update]), timeout=TIMEOUT
    )
    assert response.updated == 1
    request = pb.OptimizeRequest(
        session_id="pins",
        budget=pb.Budget(context_limit_tokens=total, target_tokens=total // 10),
        roots=pb.Roots(recent_turns=0),
    )
    plan = stub.Optimize(request, timeout=TIMEOUT)
    assert "m1" in plan.kept_ids
    assert "m1" not in {d.chunk_id for d in plan.decisions}
    expect_error(
        grpc.StatusCode.NOT_FOUND,
        "updates[0].id",
        stub.UpdateChunks,
        pb.UpdateChunksRequest(session_id="pins", updates=[pb.ChunkUpdate(id="nope")]),
    )


def test_score_covers_every_chunk(stub: Stub) -> None:
    append(stub, "score", conversation())
    response = stub.Score(
        pb.ScoreRequest(session_id="score", query="widget 3", roots=pb.Roots(recent_turns=2)),
        timeout=TIMEOUT,
    )
    by_id = {s.chunk_id: s for s in response.scores}
    assert set(by_id) == {c.id for c in conversation()}
    assert by_id["sys"].breakdown.root
    assert by_id["m3"].breakdown.bm25 > by_id["m4"].breakdown.bm25


def test_remove_search_restore_round_trip(stub: Stub) -> None:
    chunks = conversation()
    append(stub, "stash", chunks)
    removed = stub.RemoveChunks(
        pb.RemoveChunksRequest(session_id="stash", chunk_ids=["log", "m2"], stash=True),
        timeout=TIMEOUT,
    )
    assert removed.removed == 2
    hits = stub.SearchStash(
        pb.SearchStashRequest(session_id="stash", query="retry connection", limit=5),
        timeout=TIMEOUT,
    ).hits
    assert hits and hits[0].chunk_id == "log" and hits[0].stash_id
    only_logs = stub.SearchStash(
        pb.SearchStashRequest(
            session_id="stash", query="", filters=pb.StashFilter(kinds=[pb.CHUNK_KIND_MESSAGE])
        ),
        timeout=TIMEOUT,
    ).hits
    assert [h.chunk_id for h in only_logs] == ["m2"]
    restored = stub.Restore(
        pb.RestoreRequest(session_id="stash", chunk_ids=["log", "m2"]), timeout=TIMEOUT
    )
    assert sorted(restored.restored_ids) == ["log", "m2"]
    export = json.loads(
        stub.ExportSession(pb.ExportSessionRequest(session_id="stash"), timeout=TIMEOUT).json
    )
    texts = {c["chunk"]["id"]: c["chunk"]["text"] for c in export["chunks"]}
    original = {c.id: c.text for c in chunks}
    assert texts["log"] == original["log"] and texts["m2"] == original["m2"]
    expect_error(
        grpc.StatusCode.NOT_FOUND,
        "chunk_ids",
        stub.Restore,
        pb.RestoreRequest(session_id="stash", chunk_ids=["never-stashed"]),
    )


def test_restore_brings_back_the_group_and_respects_the_budget(stub: Stub) -> None:
    call = pb.Chunk(
        id="call", role=pb.ROLE_MODEL, kind=pb.CHUNK_KIND_TOOL_CALL, text="run tests", group_id="g"
    )
    result = pb.Chunk(
        id="result",
        role=pb.ROLE_TOOL,
        kind=pb.CHUNK_KIND_TOOL_RESULT,
        text="FAILED test_parser.py::test_empty_section " * 40,
        group_id="g",
    )
    total = append(stub, "group", [*conversation(), call, result]).session_tokens
    stub.RemoveChunks(
        pb.RemoveChunksRequest(session_id="group", chunk_ids=["call", "result"], stash=True),
        timeout=TIMEOUT,
    )
    tight = pb.Budget(context_limit_tokens=total, target_tokens=total // 2)
    expect_error(
        grpc.StatusCode.FAILED_PRECONDITION,
        "budget",
        stub.Restore,
        pb.RestoreRequest(session_id="group", chunk_ids=["result"], budget=tight),
    )
    restored = stub.Restore(
        pb.RestoreRequest(session_id="group", chunk_ids=["result"], budget=tight, force=True),
        timeout=TIMEOUT,
    )
    assert sorted(restored.restored_ids) == ["call", "result"]
    assert restored.session_tokens == total


def test_search_pages(stub: Stub) -> None:
    append(stub, "pages", conversation())
    ids = [f"m{i}" for i in range(8)]
    stub.RemoveChunks(
        pb.RemoveChunksRequest(session_id="pages", chunk_ids=ids, stash=True), timeout=TIMEOUT
    )
    seen: list[str] = []
    token = ""
    for _ in range(10):
        page = stub.SearchStash(
            pb.SearchStashRequest(session_id="pages", query="parser", limit=3, page_token=token),
            timeout=TIMEOUT,
        )
        seen += [h.chunk_id for h in page.hits]
        token = page.next_page_token
        if not token:
            break
    assert sorted(seen) == sorted(ids)
    expect_error(
        grpc.StatusCode.INVALID_ARGUMENT,
        "page_token",
        stub.SearchStash,
        pb.SearchStashRequest(session_id="pages", query="parser", page_token="garbage"),
    )


def test_optimize_context_is_stateless_and_deterministic(stub: Stub) -> None:
    chunks = conversation()
    request = pb.OptimizeContextRequest(
        chunks=chunks,
        query="widget",
        budget=pb.Budget(context_limit_tokens=900),
        roots=pb.Roots(recent_turns=2),
    )
    first = stub.OptimizeContext(request, timeout=TIMEOUT).result
    second = stub.OptimizeContext(request, timeout=TIMEOUT).result
    assert first.triggered and first.tokens_after <= first.target_tokens
    first.server_ms = second.server_ms = 0
    assert first == second
    expect_error(
        grpc.StatusCode.NOT_FOUND,
        "session_id",
        stub.GetSessionStats,
        pb.GetSessionStatsRequest(session_id="widget"),
    )


def test_strategies_differ(stub: Stub) -> None:
    chunks = conversation()
    kept: dict[int, list[str]] = {}
    for strategy in (pb.STRATEGY_HYBRID, pb.STRATEGY_BUDGET, pb.STRATEGY_TRUNCATE):
        request = pb.OptimizeContextRequest(
            chunks=chunks,
            query="widget 1",
            budget=pb.Budget(context_limit_tokens=700),
            strategy=strategy,
            roots=pb.Roots(recent_turns=1),
        )
        kept[strategy] = list(stub.OptimizeContext(request, timeout=TIMEOUT).result.kept_ids)
    assert kept[pb.STRATEGY_TRUNCATE] != kept[pb.STRATEGY_HYBRID]
    assert "log" not in kept[pb.STRATEGY_BUDGET]  # EPHEMERAL goes first under the budget order


def test_export_import_round_trip(stub: Stub, tmp_path: Path) -> None:
    append(stub, "export", conversation())
    stub.RemoveChunks(
        pb.RemoveChunksRequest(session_id="export", chunk_ids=["m5"], stash=True), timeout=TIMEOUT
    )
    exported = stub.ExportSession(pb.ExportSessionRequest(session_id="export"), timeout=TIMEOUT)
    expect_error(
        grpc.StatusCode.FAILED_PRECONDITION,
        "replace",
        stub.ImportSession,
        pb.ImportSessionRequest(json=exported.json),
    )
    stub.DeleteSession(
        pb.DeleteSessionRequest(session_id="export", purge_stash=True), timeout=TIMEOUT
    )
    imported = stub.ImportSession(pb.ImportSessionRequest(json=exported.json), timeout=TIMEOUT)
    assert imported.session_id == "export"
    assert imported.chunk_count == len(conversation()) - 1
    again = stub.ExportSession(pb.ExportSessionRequest(session_id="export"), timeout=TIMEOUT)
    assert json.loads(again.json) == json.loads(exported.json)


def test_delete_session(stub: Stub) -> None:
    append(stub, "gone", conversation())
    deleted = stub.DeleteSession(pb.DeleteSessionRequest(session_id="gone"), timeout=TIMEOUT)
    assert deleted.deleted
    expect_error(
        grpc.StatusCode.NOT_FOUND,
        "session_id",
        stub.GetSessionStats,
        pb.GetSessionStatsRequest(session_id="gone"),
    )


TINY = pb.Budget(context_limit_tokens=10)
BAD_REQUESTS = [
    ("AppendChunks", pb.AppendChunksRequest(session_id="", chunks=[message(0, "x")]), "session_id"),
    (
        "AppendChunks",
        pb.AppendChunksRequest(session_id="b", chunks=[pb.Chunk(id="a", role=UNKNOWN_ROLE)]),
        "chunks[0].role",
    ),
    (
        "AppendChunks",
        pb.AppendChunksRequest(session_id="b", chunks=[message(0, "x"), pb.Chunk(text="y")]),
        "chunks[1].id",
    ),
    ("OptimizeContext", pb.OptimizeContextRequest(chunks=[message(0, "x")]), "budget."),
    (
        "OptimizeContext",
        pb.OptimizeContextRequest(
            chunks=[message(0, "x")],
            budget=pb.Budget(context_limit_tokens=10, target_percent=101),
        ),
        "budget.target_percent",
    ),
    (
        "OptimizeContext",
        pb.OptimizeContextRequest(chunks=[message(0, "x")], budget=TINY, strategy=UNKNOWN_STRATEGY),
        "strategy",
    ),
    ("SearchStash", pb.SearchStashRequest(query="x", limit=-1), "limit"),
    ("ImportSession", pb.ImportSessionRequest(json="{not json"), "json"),
]


@pytest.mark.parametrize(("method", "request_", "field"), BAD_REQUESTS)
def test_bad_requests_name_the_field(stub: Stub, method: str, request_: object, field: str) -> None:
    expect_error(grpc.StatusCode.INVALID_ARGUMENT, field, getattr(stub, method), request_)


def test_unknown_session_is_not_found(stub: Stub) -> None:
    request = pb.OptimizeRequest(session_id="nobody", budget=TINY)
    expect_error(grpc.StatusCode.NOT_FOUND, "session_id", stub.Optimize, request)
