"""The measurements that need a real `ctxopt serve`: cold start and restart to
SERVING, append throughput, `Score`/`Optimize` through the Python stubs and
the TypeScript client, server RSS, and `SearchStash` latency."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from pathlib import Path

import grpc
from ctxopt.model import Chunk
from ctxopt.v1 import ctxopt_pb2 as pb
from ctxopt.v1 import ctxopt_pb2_grpc as pb_grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from benchmarks.bench_grpc import forced_dry_run, samples, summary, to_pb
from benchmarks.corpus import QUERY
from benchmarks.latency.typescript import over_typescript
from tests.serverproc import ServerProcess, start_server

TIMEOUT = 600.0
BATCH = 2_000  # chunks per AppendChunks while loading
STASHED_FRACTION = 10  # one chunk in ten is stashed before the searches
SEARCHES = ("KeyError", "config parser", "traceback setup.py", "empty section", "failing test")
SEARCH_REPEATS = 20  # per query: searches are cheap at every size
CHANNEL_OPTIONS = [("grpc.max_receive_message_length", 256 * 1024 * 1024)]

Latency = dict[str, float]  # p50_ms, p99_ms


@dataclass
class ServerRun:
    tokens: int
    append_tokens_per_s: float
    grpc: dict[str, Latency]  # call -> latency
    typescript: dict[str, Latency]
    stash_search: Latency
    rss_serving_mb: float
    rss_loaded_mb: float
    cold_start_ms: float
    restart_ms: float
    first_optimize_after_restart_ms: float


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return math.nan


def wait_serving(channel: grpc.Channel) -> None:
    health = health_pb2_grpc.HealthStub(channel)
    deadline = time.monotonic() + TIMEOUT
    while time.monotonic() < deadline:
        reply = health.Check(health_pb2.HealthCheckRequest(), timeout=TIMEOUT, wait_for_ready=True)
        if reply.status == health_pb2.HealthCheckResponse.SERVING:
            return
        time.sleep(0.002)
    raise TimeoutError(f"server not SERVING within {TIMEOUT} s")


def start_to_serving(data_dir: Path, log: Path) -> tuple[ServerProcess, float]:
    """Start a server and the milliseconds from launch to a SERVING health answer."""
    started = time.perf_counter()
    server = start_server(data_dir, log)
    try:
        with grpc.insecure_channel(server.address) as channel:
            wait_serving(channel)
    except BaseException:
        server.terminate()
        raise
    return server, (time.perf_counter() - started) * 1000


def load(stub: pb_grpc.ContextOptimizerStub, batch: list[Chunk]) -> tuple[int, float]:
    """Append the session through gRPC; (tokens, tokens per second)."""
    requests = [
        pb.AppendChunksRequest(session_id="bench", chunks=[to_pb(c) for c in batch[i : i + BATCH]])
        for i in range(0, len(batch), BATCH)
    ]
    started = time.perf_counter()
    tokens = 0
    for request in requests:
        tokens = stub.AppendChunks(request, timeout=TIMEOUT).session_tokens
    return tokens, tokens / (time.perf_counter() - started)


def stash_search(stub: pb_grpc.ContextOptimizerStub, batch: list[Chunk]) -> Latency:
    """Stash a tenth of the session (never the latest chunk), then search it."""
    stashed = [c.id for c in batch[:-1:STASHED_FRACTION]] or [batch[0].id]
    stub.RemoveChunks(
        pb.RemoveChunksRequest(session_id="bench", chunk_ids=stashed, stash=True), timeout=TIMEOUT
    )
    ms: list[float] = []
    for query in SEARCHES:
        request = pb.SearchStashRequest(session_id="bench", query=query, limit=10)
        ms += samples(lambda r=request: stub.SearchStash(r, timeout=TIMEOUT), SEARCH_REPEATS)  # type: ignore[misc]
    return summary(ms)


def measure_server(size: int, batch: list[Chunk], repeats: int, work: Path) -> ServerRun:
    """Every server-side measure at one session size, on a fresh data directory."""
    data_dir, log = work / f"data-{size}", work / f"server-{size}.log"
    server, cold_start_ms = start_to_serving(data_dir, log)
    try:
        rss_serving = rss_mb(server.process.pid)
        with grpc.insecure_channel(server.address, options=CHANNEL_OPTIONS) as channel:
            stub = server.stub(channel)
            tokens, tokens_per_s = load(stub, batch)
            optimize = forced_dry_run(tokens)
            score = pb.ScoreRequest(session_id="bench", query=QUERY, roots=optimize.roots)
            grpc_ms = {
                "score": summary(samples(lambda: stub.Score(score, timeout=TIMEOUT), repeats)),
                "optimize": summary(
                    samples(lambda: stub.Optimize(optimize, timeout=TIMEOUT), repeats)
                ),
            }
            rss_loaded = rss_mb(server.process.pid)
            typescript = over_typescript(server.address, "bench", repeats, tokens, QUERY)
            search = stash_search(stub, batch)
    finally:
        server.terminate()
    server, restart_ms = start_to_serving(data_dir, log)
    try:
        with grpc.insecure_channel(server.address, options=CHANNEL_OPTIONS) as channel:
            started = time.perf_counter()
            server.stub(channel).Optimize(optimize, timeout=TIMEOUT)  # loads the session
            first_optimize_ms = (time.perf_counter() - started) * 1000
    finally:
        server.terminate()
    return ServerRun(
        tokens=tokens,
        append_tokens_per_s=tokens_per_s,
        grpc=grpc_ms,
        typescript=typescript,
        stash_search=search,
        rss_serving_mb=rss_serving,
        rss_loaded_mb=rss_loaded,
        cold_start_ms=cold_start_ms,
        restart_ms=restart_ms,
        first_optimize_after_restart_ms=first_optimize_ms,
    )
