"""Concurrent clients: 16 threads appending and optimizing on shared and
separate sessions lose or duplicate no chunk; stateless calls that share an
opening never plan over a session another call is changing."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from pathlib import Path

import grpc
from ctxopt.engine import Engine
from ctxopt.model import Role
from ctxopt.v1 import ctxopt_pb2 as pb
from ctxopt.v1 import ctxopt_pb2_grpc as pb_grpc

from tests.factory import chunk, engine, filler, options
from tests.serverproc import serving

THREADS = 16
ROUNDS = 12
BATCH = 5
TIMEOUT = 30.0
SHARED = "shared"


def batch(thread: int, round_: int) -> list[pb.Chunk]:
    return [
        pb.Chunk(
            id=f"t{thread}-r{round_}-{k}",
            role=pb.ROLE_USER if k % 2 == 0 else pb.ROLE_MODEL,
            kind=pb.CHUNK_KIND_MESSAGE,
            text=f"thread {thread} round {round_} item {k} " + "cache parser widget " * (k + 3),
            turn=round_ * BATCH + k,
        )
        for k in range(BATCH)
    ]


def worker(stub: pb_grpc.ContextOptimizerStub, thread: int, errors: list[BaseException]) -> None:
    own = f"own-{thread}"
    budget = pb.Budget(context_limit_tokens=2_000)
    try:
        for round_ in range(ROUNDS):
            for session in (own, SHARED):
                stub.AppendChunks(
                    pb.AppendChunksRequest(session_id=session, chunks=batch(thread, round_)),
                    timeout=TIMEOUT,
                )
                stub.Optimize(
                    pb.OptimizeRequest(
                        session_id=session,
                        query=f"thread {thread}",
                        budget=budget,
                        roots=pb.Roots(recent_turns=2),
                    ),
                    timeout=TIMEOUT,
                )
    except BaseException as error:  # re-raised by the test thread
        errors.append(error)


def run_all(target: Callable[[int], None]) -> None:
    threads = [threading.Thread(target=target, args=(i,)) for i in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(TIMEOUT * ROUNDS)


def accounted(stub: pb_grpc.ContextOptimizerStub, session: str) -> tuple[list[str], list[str]]:
    """Ids live in the session and ids in its stash, from one export."""
    export = json.loads(
        stub.ExportSession(pb.ExportSessionRequest(session_id=session), timeout=TIMEOUT).json
    )
    live = [c["chunk"]["id"] for c in export["chunks"]]
    stats = stub.GetSessionStats(pb.GetSessionStatsRequest(session_id=session), timeout=TIMEOUT)
    assert stats.chunk_count == len(live)
    assert stats.tokens == sum(c["chunk"]["tokens"] for c in export["chunks"])
    stashed = {e["chunk"]["id"] for e in export["stash"]}
    return live, sorted(stashed)


def test_sixteen_threads_shared_and_separate_sessions(tmp_path: Path) -> None:
    errors: list[BaseException] = []
    with serving(tmp_path) as server, grpc.insecure_channel(server.address) as channel:
        stub = server.stub(channel)
        run_all(lambda i: worker(stub, i, errors))
        assert not errors, errors[:3]
        every_shared: set[str] = set()
        for thread in range(THREADS):
            expected = {c.id for r in range(ROUNDS) for c in batch(thread, r)}
            every_shared |= expected
            live, stashed = accounted(stub, f"own-{thread}")
            assert len(live) == len(set(live)), "a chunk is in the session twice"
            assert set(live) | set(stashed) == expected, "a chunk was lost"
        live, stashed = accounted(stub, SHARED)
        assert len(live) == len(set(live))
        assert set(live) | set(stashed) == every_shared


STATELESS_THREADS = 6
STATELESS_CALLS = 40


def stateless_worker(engine: Engine, thread: int, errors: list[BaseException]) -> None:
    """A stateless client's traffic: one shared opening, then this thread's
    own order of the middle and a new latest chunk on every call."""
    opening = chunk("opening", "task: fix the cache parser widget")
    middle = [
        chunk(f"m{k}", filler(60, str(k)), role=Role.MODEL if k % 2 else Role.USER, turn=k + 1)
        for k in range(12)
    ]
    try:
        for call in range(STATELESS_CALLS):
            order = middle[thread % 3 :] + middle[: thread % 3]
            latest = chunk(f"latest-{thread}-{call}", f"step {call} of thread {thread}", turn=99)
            plan = engine.optimize_context([opening, *order, latest], options(300, "cache"))
            assert plan.kept_ids[-1] == latest.id
    except BaseException as error:  # re-raised by the test thread
        errors.append(error)


def test_concurrent_stateless_calls_sharing_an_opening_all_plan() -> None:
    """Calls that share their first chunk share one warm session; each plans
    over a session no other call changes meanwhile."""
    shared = engine()
    errors: list[BaseException] = []
    threads = [
        threading.Thread(target=stateless_worker, args=(shared, i, errors))
        for i in range(STATELESS_THREADS)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(TIMEOUT * 4)
    shared.close()
    assert not errors, errors[:3]
