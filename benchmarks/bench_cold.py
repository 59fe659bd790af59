"""The cold paths, per 1,000 chunks, black-box over gRPC against `ctxopt serve`.

The mission's latency number is 50 ms per 1,000 chunks. A warm, repeated
plan meets it; this command times the calls a user meets first, each on text
new to the server process (a fresh server per round, every round its own copy
of the texts):

- never-seen session: `AppendChunks` in batches of 500, then the session's
  first `Optimize` (lean, triggered: the session fills its window);
- after a restart: the same session's first `Optimize` from the same data
  directory in a new process (the call planned before the close); then, each
  in a new process again, another first call: a 2-chunk append (an agent's
  step) and the `Optimize`, or an `Optimize` with another query;
- stateless: `OptimizeContext` with the chunks inline, texts new to the
  process, then the same call again;
- warm: the session's later `Optimize` calls (p50), what the other
  benchmarks report.

The session is the SWE-agent trajectories' own messages, one trajectory after
another (task, then per step the model's thought, its bash call and the
call's output as a group), recycled with a distinct suffix past the data's
end. Every `Optimize` is a dry run, so the session stays the same across the
calls compared. Prints a table, writes JSON and a PNG (ms per 1,000 chunks
against the 50 ms line).

    .venv/bin/python -m benchmarks.bench_cold [--sizes 1000,10000] [--large]
        [--rounds 3] [--repeats 20] [--smoke] [--out benchmarks/results/bench_cold.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar, cast

import grpc
from ctxopt.v1 import ctxopt_pb2 as pb

from benchmarks.bench_grpc import forced_dry_run, server_cpu_seconds
from benchmarks.corpus import QUERY
from benchmarks.gateway.histories import DEFAULT_SWE, Trajectory, load
from tests.serverproc import start_server

RESULTS = Path(__file__).resolve().parent / "results"
TIMEOUT = 600.0
APPEND_BATCH = 500  # chunks per AppendChunks, as the issue measured
GOAL_MS_PER_1K = 50.0  # the mission's latency number
R = TypeVar("R")
LARGE = 100_000  # --large adds this size
CHANNEL_OPTIONS = [
    ("grpc.max_receive_message_length", 512 * 1024 * 1024),
    ("grpc.max_send_message_length", 512 * 1024 * 1024),
]
PATHS = {  # JSON key -> table heading
    "never_seen": "never-seen: append + first Optimize",
    "after_restart": "first Optimize after restart",
    "restart_append": "after restart: 2-chunk append + Optimize",
    "restart_query": "after restart: Optimize, another query",
    "stateless_new": "OptimizeContext, new texts",
    "stateless_again": "OptimizeContext, same call again",
    "warm": "warm Optimize (p50)",
}
ROLE, KIND = pb.Role, pb.ChunkKind
Row = dict[str, Any]  # one size's figures, as written to the JSON
SESSION = "bench"  # the session forced_dry_run names
STEP = 2  # chunks an agent's step appends (the restart's other call)
OTHER_QUERY = "the command line crashes with TypeError on an unknown flag: see main.py"


def session_chunks(trajectories: list[Trajectory], count: int, copy: str) -> list[pb.Chunk]:
    """`count` chunks of the trajectories' messages, every text tagged `copy`
    (so no text was seen by the process before), recycled past the end."""
    out: list[pb.Chunk] = []
    for lap, (kind, role, text, group) in enumerate(_messages(trajectories)):
        if len(out) >= count:
            break
        out.append(
            pb.Chunk(
                id=f"m{lap}",
                role=cast(pb.Role, role),
                kind=cast(pb.ChunkKind, kind),
                text=f"{text}\n[{copy}]",
                turn=lap,
                group_id=group,
            )
        )
    return out


def _messages(trajectories: list[Trajectory]) -> Iterator[tuple[int, int, str, str]]:
    """(kind, role, text, group id) of every message, endlessly (a lap count
    in the text keeps recycled texts distinct)."""
    lap = 0
    while True:
        for t in trajectories:
            yield KIND.CHUNK_KIND_MESSAGE, ROLE.ROLE_USER, f"{t.task}\n(lap {lap})", ""
            for i, step in enumerate(t.steps):
                group = f"{t.instance_id}-{lap}-{i}"
                yield KIND.CHUNK_KIND_MESSAGE, ROLE.ROLE_MODEL, step.thought, ""
                yield KIND.CHUNK_KIND_TOOL_CALL, ROLE.ROLE_MODEL, step.command, group
                yield KIND.CHUNK_KIND_TOOL_RESULT, ROLE.ROLE_TOOL, step.output, group
        lap += 1


def optimize_request(tokens: int) -> pb.OptimizeRequest:
    """bench_grpc's dry run to 60% of a window the session fills, lean and
    triggered by the session's usage (80%) rather than forced."""
    request = forced_dry_run(tokens)
    request.force, request.lean = False, True
    return request


@dataclass(frozen=True)
class Spent:
    """Wall milliseconds of a call and the server's CPU milliseconds in it (the
    figure that compares across runs on a shared machine; 10 ms ticks)."""

    wall: float
    cpu: float

    def __add__(self, other: Spent) -> Spent:
        return Spent(self.wall + other.wall, self.cpu + other.cpu)


def timed(pid: int, call: Callable[[], object]) -> Spent:
    started, cpu = time.perf_counter(), server_cpu_seconds(pid)
    call()
    return Spent((time.perf_counter() - started) * 1000, (server_cpu_seconds(pid) - cpu) * 1000)


@dataclass
class Round:
    """One round's milliseconds per path (never-seen split in its parts)."""

    tokens: int
    append: Spent
    first_optimize: Spent
    after_restart: Spent
    restart_append: Spent
    restart_query: Spent
    stateless_new: Spent
    stateless_again: Spent
    warm: list[Spent]
    triggered: bool


def one_round(
    chunks: list[pb.Chunk],
    step: list[pb.Chunk],
    stateless: list[pb.Chunk],
    repeats: int,
    work: Path,
) -> Round:
    """A fresh server: append + first plan, warm plans, the stateless call
    twice; then a restart on the same directory and its first plan; then
    another restart and `step` appended and planned; another, and a plan for
    another query (the first restart changes nothing: each finds the store
    as the first server closed it)."""
    data_dir, log = work / "data", work / "server.log"
    server = start_server(data_dir, log)
    pid = server.process.pid
    try:
        with grpc.insecure_channel(server.address, options=CHANNEL_OPTIONS) as channel:
            stub = server.stub(channel)
            batches = [
                pb.AppendChunksRequest(session_id=SESSION, chunks=chunks[i : i + APPEND_BATCH])
                for i in range(0, len(chunks), APPEND_BATCH)
            ]
            tokens = [0]

            def append_all() -> None:
                for batch in batches:
                    tokens[0] = stub.AppendChunks(batch, timeout=TIMEOUT).session_tokens

            append = timed(pid, append_all)
            request = optimize_request(tokens[0])
            plans: list[pb.OptimizeResponse] = []
            first = timed(pid, lambda: plans.append(stub.Optimize(request, timeout=TIMEOUT)))
            warm = [
                timed(pid, lambda: stub.Optimize(request, timeout=TIMEOUT)) for _ in range(repeats)
            ]
            context = pb.OptimizeContextRequest(
                chunks=stateless, query=QUERY, budget=request.budget, roots=request.roots
            )
            new = timed(pid, lambda: stub.OptimizeContext(context, timeout=TIMEOUT))
            again = timed(pid, lambda: stub.OptimizeContext(context, timeout=TIMEOUT))
    finally:
        server.terminate()
    appended = pb.AppendChunksRequest(session_id=SESSION, chunks=step)
    other = pb.OptimizeRequest()
    other.CopyFrom(request)
    other.query = OTHER_QUERY

    def append_and_plan(stub: Any) -> None:
        stub.AppendChunks(appended, timeout=TIMEOUT)
        stub.Optimize(request, timeout=TIMEOUT)

    restart = _restarted(data_dir, log, lambda stub: stub.Optimize(request, timeout=TIMEOUT))
    restart_append = _restarted(data_dir, log, append_and_plan)
    restart_query = _restarted(data_dir, log, lambda stub: stub.Optimize(other, timeout=TIMEOUT))
    return Round(
        tokens[0],
        append,
        first,
        restart,
        restart_append,
        restart_query,
        new,
        again,
        warm,
        plans[0].triggered,
    )


def _restarted(data_dir: Path, log: Path, call: Callable[[Any], object]) -> Spent:
    """A new server on `data_dir`, its first call (`call` of a stub) timed."""
    server = start_server(data_dir, log)
    try:
        with grpc.insecure_channel(server.address, options=CHANNEL_OPTIONS) as channel:
            stub = server.stub(channel)
            return timed(server.process.pid, lambda: call(stub))
    finally:
        server.terminate()


def measure(size: int, trajectories: list[Trajectory], rounds: int, repeats: int) -> Row:
    """Medians over `rounds` fresh servers at one session size: wall and the
    server's CPU milliseconds per path, and per 1,000 chunks."""
    done: list[Round] = []
    for r in range(rounds):
        chunks = session_chunks(trajectories, size + STEP, f"round {r}")
        stateless = session_chunks(trajectories, size, f"stateless {r}")
        with tempfile.TemporaryDirectory() as work:
            done.append(one_round(chunks[:size], chunks[size:], stateless, repeats, Path(work)))
        print(f"  {size:,} chunks, round {r + 1}/{rounds} done", flush=True)

    def warm(d: Round) -> Spent:
        return Spent(
            statistics.median(w.wall for w in d.warm), statistics.median(w.cpu for w in d.warm)
        )

    paths: dict[str, Callable[[Round], Spent]] = {
        "never_seen": lambda d: d.append + d.first_optimize,
        "after_restart": lambda d: d.after_restart,
        "restart_append": lambda d: d.restart_append,
        "restart_query": lambda d: d.restart_query,
        "stateless_new": lambda d: d.stateless_new,
        "stateless_again": lambda d: d.stateless_again,
        "warm": warm,
    }
    parts: dict[str, Callable[[Round], Spent]] = {
        "append": lambda d: d.append,
        "first_optimize": lambda d: d.first_optimize,
    }
    row: Row = {"chunks": size, "tokens": done[0].tokens, "rounds": rounds}
    row["triggered"] = all(d.triggered for d in done)
    for clock in ("wall", "cpu"):
        ms = {
            key: statistics.median(getattr(of(d), clock) for d in done)
            for key, of in {**paths, **parts}.items()
        }
        row[f"{clock}_ms"] = ms
        row[f"{clock}_ms_per_1k_chunks"] = {k: ms[k] * 1000 / size for k in paths}
    return row


def table(rows: list[Row], clock: str) -> str:
    head = "| path | " + " | ".join(f"{r['chunks']:,} chunks" for r in rows)
    head += " | " + " | ".join(f"per 1k at {r['chunks']:,}" for r in rows) + " |"
    lines = [head, "|" + " --- |" * (1 + 2 * len(rows))]
    for key, name in PATHS.items():
        cells = []
        for r in rows:
            ms = r[f"{clock}_ms"]
            if key == "never_seen":
                cells.append(f"{ms['append']:,.0f} + {ms['first_optimize']:,.0f} ms")
            else:
                cells.append(f"{ms[key]:,.1f} ms")
        cells += [f"{r[f'{clock}_ms_per_1k_chunks'][key]:,.1f} ms" for r in rows]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def write_results(out: Path, rows: list[R], plot: Callable[[list[R], Path], None]) -> None:
    """The rows as JSON beside the goal, and their plot as a PNG beside it
    (this benchmark's and `append_floor`'s)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"goal_ms_per_1k": GOAL_MS_PER_1K, "rows": rows}, indent=2))
    plot(rows, out.with_suffix(".png"))
    print(f"wrote {out} and {out.with_suffix('.png')}")


def plot(rows: list[Row], path: Path) -> None:
    """Per path, ms per 1,000 chunks at each size against the 50 ms line: wall
    on the left, the server's CPU on the right (what a loaded machine leaves
    comparable)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4), sharey=True)
    width = 0.8 / len(rows)
    for ax, clock in zip(axes, ("wall", "cpu"), strict=True):
        for i, r in enumerate(rows):
            xs = [k + i * width for k in range(len(PATHS))]
            per_1k = r[f"{clock}_ms_per_1k_chunks"]
            ax.bar(xs, [per_1k[k] for k in PATHS], width, label=f"{r['chunks']:,}")
        ax.axhline(GOAL_MS_PER_1K, color="k", linestyle="--", label="goal: 50 ms per 1k")
        ax.set_xticks([k + width * (len(rows) - 1) / 2 for k in range(len(PATHS))])
        ax.set_xticklabels([k.replace("_", "\n") for k in PATHS], fontsize=8)
        ax.set_yscale("log")
        ax.set_title("gRPC, wall" if clock == "wall" else "server CPU")
    axes[0].set_ylabel("ms per 1,000 chunks")
    axes[0].legend(title="chunks", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--swe", type=Path, default=DEFAULT_SWE)
    parser.add_argument("--sizes", default="1000,10000")
    parser.add_argument("--large", action="store_true", help=f"add {LARGE:,} chunks")
    parser.add_argument("--rounds", type=int, default=3, help="fresh servers per size")
    parser.add_argument("--repeats", type=int, default=20, help="warm Optimize calls")
    parser.add_argument("--smoke", action="store_true", help="100 chunks, one round")
    parser.add_argument("--out", type=Path, default=RESULTS / "bench_cold.json")
    args = parser.parse_args()
    sizes = [100] if args.smoke else [int(s) for s in args.sizes.split(",")]
    sizes += [LARGE] if args.large and not args.smoke else []
    rounds, repeats = (1, 3) if args.smoke else (args.rounds, args.repeats)
    trajectories = load(args.swe)
    rows = [measure(size, trajectories, rounds, repeats) for size in sizes]
    print("wall (client side, ms):")
    print(table(rows, "wall"))
    print("server CPU (ms, 10 ms ticks):")
    print(table(rows, "cpu"))
    write_results(args.out, rows, plot)


if __name__ == "__main__":
    main()
