"""Latency and scaling from 100 to 100,000 chunks (issue 7).

For each session size: append throughput, `Score` and `Optimize` (a forced dry
run to 60%) p50/p99 in-process, through the Python gRPC client and through the
TypeScript client; `SearchStash` over a tenth of the session stashed; server
RSS per million tokens held; cold start to SERVING. Prints a table, writes
JSON and a log-log PNG with the original design target (50 ms per 1,000
chunks) as a line, and fits how Optimize grows with size.

    .venv/bin/python -m benchmarks.latency [--sizes 100,1000,10000,100000] [--smoke]

The TypeScript leg runs `ts-client/dist/bench/latency.js` (`npm run build`
in ts-client/ makes it; `make test` and `make run` do).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import grpc
import numpy as np
from ctxopt.model import Chunk
from ctxopt.v1 import ctxopt_pb2 as pb
from ctxopt.v1 import ctxopt_pb2_grpc as pb_grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from benchmarks.bench_engine import measure, percentile
from benchmarks.bench_grpc import forced_dry_run, samples, to_pb
from benchmarks.corpus import DEFAULT_DATA, QUERY, chunks, swe_texts
from tests.serverproc import start_server

REPO = Path(__file__).resolve().parents[2]
RESULTS = REPO / "benchmarks" / "results"
TS_LATENCY = REPO / "ts-client" / "dist" / "bench" / "latency.js"
TIMEOUT = 600.0
BATCH = 2_000  # chunks per AppendChunks while loading
SEARCHES = ("KeyError", "config parser", "traceback setup.py", "empty section", "failing test")


@dataclass
class Row:
    chunks: int
    tokens: int
    repeats: int
    append_tokens_per_s: float
    in_process: dict[str, float]
    grpc: dict[str, float]
    typescript: dict[str, float]
    stash_search_p50_ms: float
    rss_mb: float
    rss_mb_per_million_tokens: float
    cold_start_ms: float


def p50_p99(prefix: str, ms: list[float]) -> dict[str, float]:
    return {f"{prefix}_p50_ms": statistics.median(ms), f"{prefix}_p99_ms": percentile(ms, 0.99)}


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return math.nan


def load(stub: pb_grpc.ContextOptimizerStub, batch: list[Chunk]) -> tuple[int, float]:
    """Append the session through gRPC; (tokens, tokens per second)."""
    started = time.perf_counter()
    tokens = 0
    for i in range(0, len(batch), BATCH):
        request = pb.AppendChunksRequest(
            session_id="bench", chunks=[to_pb(c) for c in batch[i : i + BATCH]]
        )
        tokens = stub.AppendChunks(request, timeout=TIMEOUT).session_tokens
    return tokens, tokens / (time.perf_counter() - started)


def over_grpc(size: int, batch: list[Chunk], repeats: int, work: Path) -> Row:
    started = time.perf_counter()
    server = start_server(work / f"data-{size}", work / f"server-{size}.log")
    try:
        with grpc.insecure_channel(
            server.address,
            options=[("grpc.max_receive_message_length", 256 * 1024 * 1024)],
        ) as channel:
            health = health_pb2_grpc.HealthStub(channel)
            health.Check(health_pb2.HealthCheckRequest(), timeout=TIMEOUT, wait_for_ready=True)
            cold_start_ms = (time.perf_counter() - started) * 1000
            stub = server.stub(channel)
            tokens, tokens_per_s = load(stub, batch)
            optimize = forced_dry_run(tokens)
            score = pb.ScoreRequest(session_id="bench", query=QUERY, roots=optimize.roots)
            grpc_ms = {
                **p50_p99("score", samples(lambda: stub.Score(score, timeout=TIMEOUT), repeats)),
                **p50_p99(
                    "optimize", samples(lambda: stub.Optimize(optimize, timeout=TIMEOUT), repeats)
                ),
            }
            rss = rss_mb(server.process.pid)
            typescript = over_typescript(server.address, repeats, tokens)
            stashed = [c.id for c in batch[::10]][:-1] or [batch[0].id]
            stub.RemoveChunks(
                pb.RemoveChunksRequest(session_id="bench", chunk_ids=stashed, stash=True),
                timeout=TIMEOUT,
            )
            search_ms = [
                ms
                for query in SEARCHES
                for ms in samples(
                    lambda q=query: stub.SearchStash(  # type: ignore[misc]
                        pb.SearchStashRequest(session_id="bench", query=q, limit=10),
                        timeout=TIMEOUT,
                    ),
                    max(repeats // len(SEARCHES), 2),
                )
            ]
    finally:
        server.terminate()
    return Row(
        chunks=size,
        tokens=tokens,
        repeats=repeats,
        append_tokens_per_s=tokens_per_s,
        in_process={},
        grpc=grpc_ms,
        typescript=typescript,
        stash_search_p50_ms=statistics.median(search_ms),
        rss_mb=rss,
        rss_mb_per_million_tokens=rss / (tokens / 1e6),
        cold_start_ms=cold_start_ms,
    )


def over_typescript(address: str, repeats: int, tokens: int) -> dict[str, float]:
    if not TS_LATENCY.exists():
        subprocess.run(["npm", "run", "--silent", "build"], cwd=REPO / "ts-client", check=True)
    result = subprocess.run(
        ["node", str(TS_LATENCY), address, "bench", str(repeats), str(tokens), QUERY],
        capture_output=True,
        text=True,
        check=True,
        timeout=TIMEOUT * 4,
    )
    measured = json.loads(result.stdout)
    return {
        **p50_p99("score", measured["score_ms"]),
        **p50_p99("optimize", measured["optimize_ms"]),
    }


def fronts(row: Row, key: str) -> str:
    """in-process/gRPC/TS values of one measure."""
    return "/".join(f"{run[key]:.1f}" for run in (row.in_process, row.grpc, row.typescript))


def growth_exponent(rows: list[Row], key: str) -> float:
    """Slope of log(ms) against log(chunks) over the sizes from 1,000 up."""
    points = [(r.chunks, r.in_process[key]) for r in rows if r.chunks >= 1000]
    if len(points) < 2:
        return math.nan
    x, y = np.log([p[0] for p in points]), np.log([p[1] for p in points])
    return float(np.polyfit(x, y, 1)[0])


def plot(rows: list[Row], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sizes = [r.chunks for r in rows]
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for label, values in [
        ("Optimize in-process", [r.in_process["optimize_p50_ms"] for r in rows]),
        ("Optimize gRPC (Python)", [r.grpc["optimize_p50_ms"] for r in rows]),
        ("Optimize TS client", [r.typescript["optimize_p50_ms"] for r in rows]),
        ("Score in-process", [r.in_process["score_p50_ms"] for r in rows]),
        ("SearchStash gRPC", [r.stash_search_p50_ms for r in rows]),
    ]:
        ax.loglog(sizes, values, "o-", label=label)
    ax.loglog(
        sizes, [0.05 * s for s in sizes], "k--", label="design target: 50 ms per 1,000 chunks"
    )
    ax.set_xlabel("chunks in session")
    ax.set_ylabel("p50 milliseconds")
    ax.legend(fontsize=8)
    ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--sizes", default="100,1000,10000,100000")
    parser.add_argument("--repeats", type=int, default=30, help="at 1,000 chunks; fewer above")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, for CI")
    parser.add_argument("--out", type=Path, default=RESULTS / "latency.json")
    args = parser.parse_args()
    sizes = [50, 200] if args.smoke else [int(s) for s in args.sizes.split(",")]
    texts = swe_texts(args.data)
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="bench-latency-") as tmp:
        for size in sizes:
            repeats = 3 if args.smoke else max(3, min(args.repeats, args.repeats * 1000 // size))
            batch = list(chunks(size, texts))
            row = over_grpc(size, batch, repeats, Path(tmp))
            engine = measure(size, texts, repeats)
            row.in_process = {k: v for k, v in engine.items() if k.endswith("_ms")}
            rows.append(row)
    print(
        f"{'chunks':>7} {'tokens':>11} {'append tok/s':>12} "
        f"{'opt p50 in/gRPC/TS ms':>24} {'score p50 in/gRPC/TS ms':>26} "
        f"{'search ms':>9} {'RSS MB/Mtok':>11} {'start ms':>8}"
    )
    for r in rows:
        optimize, score = fronts(r, "optimize_p50_ms"), fronts(r, "score_p50_ms")
        print(
            f"{r.chunks:>7,} {r.tokens:>11,} {r.append_tokens_per_s:>12,.0f} {optimize:>24} "
            f"{score:>26} {r.stash_search_p50_ms:>9.2f} {r.rss_mb_per_million_tokens:>11.0f} "
            f"{r.cold_start_ms:>8.0f}"
        )
    exponents = {
        "optimize": growth_exponent(rows, "optimize_p50_ms"),
        "score": growth_exponent(rows, "score_p50_ms"),
    }
    print(
        f"growth (in-process, log-log slope from 1,000 chunks up): Optimize n^"
        f"{exponents['optimize']:.2f}, Score n^{exponents['score']:.2f} "
        "(n log n over 1,000..100,000 is about n^1.1)"
    )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(
        json.dumps({"rows": [asdict(r) for r in rows], "growth_exponent": exponents}, indent=2)
    )
    plot(rows, args.out.with_suffix(".png"))
    print(f"wrote {args.out} and {args.out.with_suffix('.png')}")


if __name__ == "__main__":
    main()
