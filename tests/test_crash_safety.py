"""Crash safety: SIGKILL the real server mid-traffic, many times; nothing it
acknowledged may be lost and the database must stay sound.

Each cycle starts `ctxopt serve` on the same data directory, runs an
append/optimize loop on one session through the generated stubs, kills the
server with SIGKILL at a random moment, then opens the data directory with the
store and checks every acknowledged chunk and every acknowledged stash entry
byte for byte, plus `PRAGMA integrity_check`.
"""

from __future__ import annotations

import os
import random
import signal
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import grpc
import pytest
from ctxopt.store import Store
from ctxopt.v1 import ctxopt_pb2 as pb
from ctxopt.v1 import ctxopt_pb2_grpc as pb_grpc

from tests.serverproc import CTXOPT, start_server

KILLS = 20
SESSION = "crash-session"
RPC_TIMEOUT_S = 5.0
STASHING_ACTIONS = (pb.ACTION_TRIM, pb.ACTION_MASK, pb.ACTION_STASH)
WORDS = (
    "deploy",
    "café",
    "naïve",
    "✓",
    "🚀",
    "日本",
    "error",
    "retry",
    "cache",
    "schema",
    "€",
    "ünïcödé",
)


@dataclass
class Ledger:
    """What the server acknowledged: chunk texts by id, and stash ids with their chunk."""

    chunks: dict[str, str] = field(default_factory=dict)
    stash_ids: dict[str, str] = field(default_factory=dict)


def chunk(cycle: int, n: int, rng: random.Random) -> pb.Chunk:
    text = " ".join(rng.choices(WORDS, k=rng.randint(20, 80))) + f" #{cycle}.{n}"
    return pb.Chunk(
        id=f"c{cycle}-{n}",
        role=pb.ROLE_USER if n % 2 == 0 else pb.ROLE_MODEL,
        kind=pb.CHUNK_KIND_MESSAGE,
        text=text,
        turn=cycle * 10_000 + n,
    )


def run_traffic(
    stub: pb_grpc.ContextOptimizerStub, cycle: int, rng: random.Random, ledger: Ledger
) -> None:
    """Append and optimize until the server dies under us."""
    budget = pb.Budget(context_limit_tokens=3_000)
    roots = pb.Roots(recent_turns=2)
    n = 0
    try:
        while True:
            batch = [chunk(cycle, n + i, rng) for i in range(4)]
            n += len(batch)
            stub.AppendChunks(
                pb.AppendChunksRequest(session_id=SESSION, chunks=batch), timeout=RPC_TIMEOUT_S
            )
            ledger.chunks.update({c.id: c.text for c in batch})
            plan = stub.Optimize(
                pb.OptimizeRequest(
                    session_id=SESSION, query=rng.choice(WORDS), budget=budget, roots=roots
                ),
                timeout=RPC_TIMEOUT_S,
            )
            for decision in plan.decisions:
                if decision.action in STASHING_ACTIONS:
                    ledger.stash_ids[decision.stash_id] = decision.chunk_id
    except grpc.RpcError as error:
        assert error.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED), (
            error
        )


def check_nothing_lost(data_dir: Path, ledger: Ledger) -> None:
    store = Store(str(data_dir))
    try:
        assert store.integrity_check() == "ok"
        export = store.export_session("", SESSION)
    finally:
        store.close()
    live = {c["chunk"]["id"]: c["chunk"]["text"] for c in cast(list[Any], export["chunks"])}
    stashed: dict[str, set[str]] = {}
    stash_ids: dict[str, str] = {}
    for entry in cast(list[Any], export["stash"]):
        stashed.setdefault(entry["chunk"]["id"], set()).add(entry["chunk"]["text"])
        stash_ids[entry["stash_id"]] = entry["chunk"]["id"]
    for chunk_id, text in ledger.chunks.items():
        found = {live.get(chunk_id)} | stashed.get(chunk_id, set())
        assert text in found, f"acknowledged chunk {chunk_id} lost"
    for stash_id, chunk_id in ledger.stash_ids.items():
        assert stash_ids.get(stash_id) == chunk_id, f"acknowledged stash entry {stash_id} lost"


@pytest.mark.skipif(not CTXOPT.exists(), reason="ctxopt console script not installed")
def test_sigkill_loses_nothing_acknowledged(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    log = tmp_path / "server.log"
    rng = random.Random(20)
    ledger = Ledger()
    for cycle in range(KILLS):
        server = start_server(data_dir, log)
        killer = threading.Timer(
            rng.uniform(0.05, 0.6), os.kill, (server.process.pid, signal.SIGKILL)
        )
        killer.start()
        with grpc.insecure_channel(server.address) as channel:
            run_traffic(server.stub(channel), cycle, rng, ledger)
        killer.join()
        assert server.process.wait() == -signal.SIGKILL
        check_nothing_lost(data_dir, ledger)
    assert len(ledger.chunks) > KILLS, "the loop never got going"
    assert ledger.stash_ids, "no plan ever stashed, so the stash was never tested"
