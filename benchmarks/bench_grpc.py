"""gRPC latency and append throughput over loopback next to the same calls in-process.

A real `ctxopt serve` process and the generated Python stubs, against an
Engine in this process on its own data directory: the difference is the
transport (serialization, HTTP/2, thread hand-off). A lean Optimize that
names the plan before it (`keep_plan`, `base_plan_id`: a delta) is timed in
turn with the full one. Append throughput sends
every SWE text as a fresh session's chunks in AppendChunks batches of 100
(text nobody counted before, each round its own copy), durable on disk before
each reply, and reports tokens/s (median and best round). Prints a table,
writes JSON and a PNG.

    .venv/bin/python -m benchmarks.bench_grpc [--chunks 1000] [--repeats 200]
        [--append-chunks 5000] [--append-rounds 5] [--smoke]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import cast

import grpc
from ctxopt.api.grpc import convert, plan_delta
from ctxopt.config import Config
from ctxopt.engine import Engine
from ctxopt.model import Budget, Chunk, OptimizeOptions, Plan, Roots
from ctxopt.v1 import ctxopt_pb2 as pb
from grpc_health.v1 import health_pb2, health_pb2_grpc

from benchmarks.bench_engine import percentile
from benchmarks.corpus import DEFAULT_DATA, QUERY, chunks, swe_texts
from tests.serverproc import start_server

RESULTS = Path(__file__).resolve().parent / "results"
TIMEOUT = 60.0
# the targets set when the gRPC front was built, milliseconds
TARGETS = {
    "optimize": (3.0, 10.0),
    "optimize_lean": (3.0, 10.0),
    "append_10": (2.0, None),
    "optimize_context_warm": (25.0, None),
}
APPEND_BATCH = 100  # chunks per AppendChunks in the throughput figure
APPEND_TARGET_TOKENS_PER_S = 2_500_000  # over gRPC
# Optimize over gRPC at most this many health-check round trips of the same run
HEALTH_RTT_GOAL = 2.5


@dataclass
class Run:
    tokens: int
    calls: dict[str, dict[str, float]]  # call -> p50_ms, p99_ms
    start_to_serving_ms: float = 0.0
    append_throughput: dict[str, float] = field(default_factory=dict)


def to_pb(chunk: Chunk) -> pb.Chunk:
    return pb.Chunk(
        id=chunk.id,
        role=cast(pb.Role, int(chunk.role)),  # model enums carry the proto numbers
        kind=cast(pb.ChunkKind, int(chunk.kind)),
        text=chunk.text,
        turn=chunk.turn,
    )


def samples(fn: Callable[[], object], repeats: int) -> list[float]:
    fn()  # warm
    out = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        out.append((time.perf_counter() - start) * 1000)
    return out


def alternating(
    first: Callable[[], object], second: Callable[[], object], repeats: int
) -> tuple[list[float], list[float]]:
    """Samples of two calls taken in turn, so the machine's noise falls on both alike."""
    first()
    second()
    out: tuple[list[float], list[float]] = ([], [])
    for _ in range(repeats):
        for fn, into in ((first, out[0]), (second, out[1])):
            start = time.perf_counter()
            fn()
            into.append((time.perf_counter() - start) * 1000)
    return out


def summary(ms: list[float]) -> dict[str, float]:
    return {"p50_ms": statistics.median(ms), "p99_ms": percentile(ms, 0.99)}


def throughput_rounds(texts: list[str], count: int, rounds: int) -> list[list[list[Chunk]]]:
    """Per round, `count` chunks in batches of APPEND_BATCH; every round has its
    own copy of the texts, so no count is cached from an earlier round."""
    out = []
    for r in range(rounds):
        copy = [f"{text}\n(round {r})" for text in texts]
        made = list(chunks(count, copy, prefix=f"r{r}-"))
        out.append([made[i : i + APPEND_BATCH] for i in range(0, count, APPEND_BATCH)])
    return out


def server_cpu_seconds(pid: int) -> float:
    """CPU seconds (user + system) the process has used so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def append_rate(
    append: Callable[[str, list[Chunk]], int],
    rounds: Sequence[list[list[Chunk]]],
    cpu_seconds: Callable[[], float],
) -> dict[str, float]:
    """Tokens/s of appending each round's batches to a fresh session
    (`append` returns the session's tokens after the call), per wall second and
    per CPU second of the serving process (`cpu_seconds`): on a shared machine
    the CPU figure is the one that compares across runs."""
    rates, cpu_rates = [], []
    for r, batches in enumerate(rounds):
        session_id = f"throughput-{r}"
        start, start_cpu = time.perf_counter(), cpu_seconds()
        tokens = 0
        for batch in batches:
            tokens = append(session_id, batch)
        rates.append(tokens / (time.perf_counter() - start))
        cpu_rates.append(tokens / max(cpu_seconds() - start_cpu, 1e-9))
    return {
        "batch_chunks": APPEND_BATCH,
        "chunks": sum(map(len, rounds[0])),
        "rounds": len(rates),
        "tokens_per_s_median": statistics.median(rates),
        "tokens_per_s_best": max(rates),
        "tokens_per_cpu_s_median": statistics.median(cpu_rates),
    }


def in_process(
    base: list[Chunk],
    deltas: list[list[Chunk]],
    repeats: int,
    throughput: Sequence[list[list[Chunk]]],
) -> Run:
    with tempfile.TemporaryDirectory() as data_dir:
        engine = Engine(Config(data_dir=data_dir))
        try:
            engine.append("", "bench", base)
            tokens = engine.stats("", "bench").tokens
            options = _options(tokens)
            lean = replace(options, lean=True)
            delta = iter(deltas)
            answers = responses(engine.optimize("", "bench", lean), repeats)  # before appends
            calls = {
                "optimize": summary(
                    samples(lambda: engine.optimize("", "bench", options), repeats)
                ),
                "optimize_lean": summary(
                    samples(lambda: engine.optimize("", "bench", lean), repeats)
                ),
                "append_10": summary(
                    samples(lambda: engine.append("", "bench", next(delta)), repeats)
                ),
                "optimize_context_warm": summary(
                    samples(lambda: engine.optimize_context(base, options), max(repeats // 10, 3))
                ),
            }
            calls.update(answers)
            rate = append_rate(
                lambda session_id, batch: engine.append("", session_id, batch).session_tokens,
                throughput,
                time.process_time,
            )
            return Run(tokens, calls, append_throughput=rate)
        finally:
            engine.close()


def responses(plan: Plan, repeats: int) -> dict[str, dict[str, float]]:
    """The server's cost of answering a lean plan: the whole response built and
    serialised, and the delta against the same plan held (a repeated plan)."""
    held = plan_delta.kept_plan(plan)
    full = convert.plan_to_pb(plan).SerializeToString()
    delta = plan_delta.delta_to_pb(plan, held, held).SerializeToString()
    return {
        "response_full": {
            **summary(samples(lambda: convert.plan_to_pb(plan).SerializeToString(), repeats)),
            "bytes": len(full),
        },
        "response_delta": {
            **summary(
                samples(
                    lambda: plan_delta.delta_to_pb(
                        plan, plan_delta.kept_plan(plan), held
                    ).SerializeToString(),
                    repeats,
                )
            ),
            "bytes": len(delta),
        },
    }


def _options(tokens: int) -> OptimizeOptions:
    """A forced dry run: the whole planning cost, and the session stays as is."""
    return OptimizeOptions(
        budget=Budget(context_limit_tokens=tokens, target_percent=60.0),
        query=QUERY,
        roots=Roots(recent_turns=10),
        dry_run=True,
        force=True,
    )


def forced_dry_run(tokens: int) -> pb.OptimizeRequest:
    """The Optimize every benchmark times: the whole planning cost to 60% of a
    window the size of the session, which stays as it is."""
    return pb.OptimizeRequest(
        session_id="bench",
        query=QUERY,
        budget=pb.Budget(context_limit_tokens=tokens, target_percent=60.0),
        roots=pb.Roots(recent_turns=10),
        dry_run=True,
        force=True,
    )


def over_grpc(
    base: list[Chunk],
    deltas: list[list[Chunk]],
    repeats: int,
    throughput: Sequence[list[list[Chunk]]],
) -> Run:
    with tempfile.TemporaryDirectory() as tmp:
        started = time.perf_counter()
        server = start_server(Path(tmp) / "data", Path(tmp) / "server.log")
        try:
            with grpc.insecure_channel(server.address) as channel:
                health = health_pb2_grpc.HealthStub(channel)
                health.Check(health_pb2.HealthCheckRequest(), timeout=TIMEOUT, wait_for_ready=True)
                start_ms = (time.perf_counter() - started) * 1000
                stub = server.stub(channel)
                base_pb = [to_pb(c) for c in base]
                appended = stub.AppendChunks(
                    pb.AppendChunksRequest(session_id="bench", chunks=base_pb), timeout=TIMEOUT
                )
                tokens = appended.session_tokens
                optimize = forced_dry_run(tokens)
                lean = pb.OptimizeRequest()
                lean.CopyFrom(optimize)
                lean.lean = True
                check = health_pb2.HealthCheckRequest()
                context = pb.OptimizeContextRequest(
                    chunks=base_pb,
                    query=QUERY,
                    budget=optimize.budget,
                    roots=optimize.roots,
                    force=True,
                )
                delta = iter([[to_pb(c) for c in d] for d in deltas])
                kept = pb.OptimizeRequest()
                kept.CopyFrom(lean)
                kept.keep_plan = True

                def lean_delta() -> None:
                    # as a client holding the last plan asks: a delta against it
                    kept.base_plan_id = stub.Optimize(kept, timeout=TIMEOUT).plan_id

                full_lean, delta_lean = alternating(
                    lambda: stub.Optimize(lean, timeout=TIMEOUT), lean_delta, repeats
                )
                calls = {
                    "optimize_lean_full_beside_delta": summary(full_lean),
                    "optimize_lean_delta": summary(delta_lean),
                    "health": summary(
                        samples(lambda: health.Check(check, timeout=TIMEOUT), repeats)
                    ),
                    "optimize": summary(
                        samples(lambda: stub.Optimize(optimize, timeout=TIMEOUT), repeats)
                    ),
                    "optimize_lean": summary(
                        samples(lambda: stub.Optimize(lean, timeout=TIMEOUT), repeats)
                    ),
                    "append_10": summary(
                        samples(
                            lambda: stub.AppendChunks(
                                pb.AppendChunksRequest(session_id="bench", chunks=next(delta)),
                                timeout=TIMEOUT,
                            ),
                            repeats,
                        )
                    ),
                    "optimize_context_warm": summary(
                        samples(
                            lambda: stub.OptimizeContext(context, timeout=TIMEOUT),
                            max(repeats // 10, 3),
                        )
                    ),
                }
                requests = {  # built before the clock starts: the client's cost is not the server's
                    id(batch): [to_pb(c) for c in batch]
                    for batches in throughput
                    for batch in batches
                }
                rate = append_rate(
                    lambda session_id, batch: (
                        stub.AppendChunks(
                            pb.AppendChunksRequest(
                                session_id=session_id, chunks=requests[id(batch)]
                            ),
                            timeout=TIMEOUT,
                        ).session_tokens
                    ),
                    throughput,
                    lambda: server_cpu_seconds(server.process.pid),
                )
                return Run(tokens, calls, start_ms, rate)
        finally:
            server.terminate()


def plot(local: Run, remote: Run, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(TARGETS)
    fig, ax = plt.subplots(figsize=(7, 4))
    width = 0.38
    for shift, (label, run) in enumerate([("in-process", local), ("gRPC", remote)]):
        values = [run.calls[n]["p50_ms"] for n in names]
        ax.bar([i + shift * width for i in range(len(names))], values, width, label=label)
    for i, name in enumerate(names):
        ax.hlines(TARGETS[name][0], i - 0.2, i + 0.6, colors="k", linestyles="--")
    ax.set_xticks([i + width / 2 for i in range(len(names))], names)
    ax.set_yscale("log")
    ax.set_ylabel("p50 milliseconds (dashed: target)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--chunks", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=200)
    parser.add_argument("--append-chunks", type=int, default=5000, help="chunks per round")
    parser.add_argument("--append-rounds", type=int, default=5)
    parser.add_argument("--smoke", action="store_true", help="tiny run, for CI")
    parser.add_argument("--out", type=Path, default=RESULTS / "bench_grpc.json")
    args = parser.parse_args()
    if args.smoke:
        args.chunks, args.repeats, args.append_chunks, args.append_rounds = 50, 5, 200, 1
    texts = swe_texts(args.data)
    base = list(chunks(args.chunks, texts))
    deltas = [
        list(chunks(10, texts[(i * 10) % len(texts) :], prefix=f"d{i}-"))
        for i in range(args.repeats + 1)
    ]
    throughput = throughput_rounds(texts, args.append_chunks, args.append_rounds)
    local = in_process(base, deltas, args.repeats, throughput)
    remote = over_grpc(base, deltas, args.repeats, throughput)
    print(f"{args.chunks} chunks, {remote.tokens:,} tokens; milliseconds")
    print(f"{'call':24} {'in-proc p50':>11} {'gRPC p50':>9} {'gRPC p99':>9} {'target p50':>10}")
    for name, (target, _) in TARGETS.items():
        mine, theirs = local.calls[name], remote.calls[name]
        print(
            f"{name:24} {mine['p50_ms']:11.2f} {theirs['p50_ms']:9.2f} "
            f"{theirs['p99_ms']:9.2f} {target:10.1f}"
        )
    print(f"{'start to SERVING':24} {'':11} {remote.start_to_serving_ms:9.0f} {'':9} {1500:10}")
    health = remote.calls["health"]["p50_ms"]
    print(f"{'health check':24} {'':11} {health:9.2f} {remote.calls['health']['p99_ms']:9.2f}")
    for name in ("response_full", "response_delta"):
        call = local.calls[name]
        print(f"{name:24} {call['p50_ms']:11.2f}   ({call['bytes']:,.0f} bytes, in-process)")
    print("lean Optimize, full plan and delta against the plan held, in turn:")
    for name in ("optimize_lean_full_beside_delta", "optimize_lean_delta"):
        call = remote.calls[name]
        print(f"{name:32} {call['p50_ms']:9.2f} {call['p99_ms']:9.2f}")
    for name in ("optimize", "optimize_lean", "optimize_lean_delta"):
        ratio = remote.calls[name]["p50_ms"] / health
        print(f"  {name} over gRPC = {ratio:.1f}x the health round trip (goal {HEALTH_RTT_GOAL}x)")
    mine, theirs = local.append_throughput, remote.append_throughput
    print(
        f"\nappend throughput, {theirs['chunks']:,.0f} fresh chunks in batches of "
        f"{APPEND_BATCH}, {theirs['rounds']:.0f} rounds; tokens/s median (best), and per "
        "CPU second of the serving process"
    )
    for name, rate in (("in-process", mine), ("gRPC", theirs)):
        print(
            f"  {name:10} {rate['tokens_per_s_median']:>11,.0f} ({rate['tokens_per_s_best']:,.0f})"
            f"   per CPU s {rate['tokens_per_cpu_s_median']:>11,.0f}"
        )
    print(f"  target over gRPC {APPEND_TARGET_TOKENS_PER_S:,} tokens/s")
    result = {"chunks": args.chunks, "in_process": asdict(local), "grpc": asdict(remote)}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))
    plot(local, remote, args.out.with_suffix(".png"))
    print(f"wrote {args.out} and {args.out.with_suffix('.png')}")


if __name__ == "__main__":
    main()
