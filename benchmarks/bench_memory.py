"""Server memory of a long session that keeps stashing: a real `ctxopt serve`,
one session holding `--live` chunks while `--chunks` chunks pass through it
(each appended, later removed with its original stashed), as a long agent
session under a pruning client does. Prints the server's RSS at checkpoints,
writes JSON. Memory is not time: one run suffices, and the figure to read is
the growth from the first checkpoint to the last.

    .venv/bin/python -m benchmarks.bench_memory [--chunks 30000] [--live 121] [--smoke] [--out PATH]
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import grpc
from ctxopt.v1 import ctxopt_pb2 as pb

from benchmarks.latency.server import rss_mb
from tests.serverproc import start_server

RESULTS = Path(__file__).resolve().parent / "results"
TIMEOUT = 60.0
CHECKPOINTS = 5


def run(chunks: int, live: int, work: Path) -> list[dict[str, float]]:
    server = start_server(work / "data", work / "server.log")
    rows: list[dict[str, float]] = []
    every = max(chunks // CHECKPOINTS, 1)
    try:
        with grpc.insecure_channel(server.address) as channel:
            stub = server.stub(channel)
            held: list[str] = []
            for i in range(chunks + 1):
                chunk = pb.Chunk(
                    id=f"step-{i:07d}",
                    role=pb.ROLE_TOOL,
                    kind=pb.CHUNK_KIND_LOG,
                    text=f"step {i}: " + "output line of a long agent session " * 12,
                    turn=i,
                )
                stub.AppendChunks(
                    pb.AppendChunksRequest(session_id="long", chunks=[chunk]), timeout=TIMEOUT
                )
                held.append(chunk.id)
                if len(held) > live:
                    stub.RemoveChunks(
                        pb.RemoveChunksRequest(
                            session_id="long", chunk_ids=[held.pop(0)], stash=True
                        ),
                        timeout=TIMEOUT,
                    )
                if i % every == 0:
                    rows.append({"chunks_seen": i, "rss_mb": round(rss_mb(server.process.pid), 1)})
                    print(f"{i:>9,} chunks seen   RSS {rows[-1]['rss_mb']:7.1f} MB", flush=True)
    finally:
        server.terminate()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chunks", type=int, default=30_000)
    parser.add_argument("--live", type=int, default=121)
    parser.add_argument("--smoke", action="store_true", help="a few hundred chunks")
    parser.add_argument("--out", type=Path, default=RESULTS / "bench_memory.json")
    args = parser.parse_args()
    chunks = 300 if args.smoke else args.chunks
    with tempfile.TemporaryDirectory() as work:
        rows = run(chunks, args.live, Path(work))
    growth = rows[-1]["rss_mb"] - rows[0]["rss_mb"]
    print(f"growth over {chunks:,} chunks with {args.live} live: {growth:+.1f} MB")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    result = {"benchmark": "bench_memory", "chunks": chunks, "live": args.live, "rows": rows}
    args.out.write_text(json.dumps({**result, "growth_mb": round(growth, 1)}, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
