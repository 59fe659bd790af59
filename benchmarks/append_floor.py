"""The floor of appending new chunks in this design, beside what the append costs.

Times, in process and in CPU milliseconds per 1,000 chunks, only the work an
append of never-seen texts cannot skip, each step by itself on the same
`bench_cold` chunks (the SWE trajectories' own messages, every text new):

- decode: parsing the `AppendChunksRequest` bytes and taking each chunk's id
  and text out of the message (what any servicer must do);
- count: the cl100k count of every distinct text (rs_bpe, native: the
  server's counter minus its cache);
- tokenise: one pass over each text at C speed, the analyzer's own
  (`encode`, `translate`, `split` into raw tokens);
- term counts: a `Counter` of each text's raw tokens (its terms' counts
  need at least this);
- stem: one Snowball call for the distinct words of the whole batch (what
  stemming costs when nothing else is done per word);
- store: one SQLite transaction inserting each chunk's id and text, WAL and
  `synchronous=NORMAL` as the store runs by default.

The sum is the floor; beside it, the engine's whole append (`Engine.append`
in batches of 500 after `chunks_from_pb`, a fresh engine per round) and its
share of the floor. Each figure is the minimum over `--rounds` (the machine
is shared: the minimum is the least disturbed). Prints a table, writes JSON
and a PNG.

    PYTHONPATH=pyserver:. .venv/bin/python -m benchmarks.append_floor
        [--sizes 1000,10000] [--rounds 5] [--out benchmarks/results/append_floor.json]
"""

from __future__ import annotations

import argparse
import sqlite3
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from itertools import chain
from pathlib import Path
from typing import Any

import Stemmer
from ctxopt.api.grpc.convert import chunks_from_pb
from ctxopt.config import Config
from ctxopt.engine import Engine
from ctxopt.text.analyzer import STOPWORDS, Analyzer
from ctxopt.v1 import ctxopt_pb2 as pb
from rs_bpe.bpe import openai as rs_bpe_openai

from benchmarks.bench_cold import APPEND_BATCH, GOAL_MS_PER_1K, session_chunks, write_results
from benchmarks.gateway.histories import DEFAULT_SWE, load

RESULTS = Path(__file__).resolve().parent / "results"
FLOOR_STEPS = ("decode", "count", "tokenise", "term_counts", "stem", "store")


def _cpu_ms(work: Callable[[], object]) -> float:
    started = time.process_time()
    work()
    return (time.process_time() - started) * 1000


def floor_steps(data: bytes, work_dir: Path) -> dict[str, float]:
    """CPU milliseconds of each irreducible step over the request `data`."""
    spent: dict[str, float] = {}
    texts: list[str] = []
    ids: list[str] = []

    def decode() -> None:
        msgs = pb.AppendChunksRequest.FromString(data).chunks
        ids.extend(m.id for m in msgs)
        texts.extend(m.text for m in msgs)

    spent["decode"] = _cpu_ms(decode)
    counter = rs_bpe_openai.cl100k_base()
    distinct = list(dict.fromkeys(texts))
    spent["count"] = _cpu_ms(lambda: [counter.count(t) for t in distinct])
    raw: list[list[bytes]] = []
    spent["tokenise"] = _cpu_ms(lambda: raw.extend(map(Analyzer().raw_tokens, texts)))
    spent["term_counts"] = _cpu_ms(lambda: [Counter(r) for r in raw])
    words = {w.decode("utf-8", "surrogatepass").lower() for w in set(chain.from_iterable(raw))}
    stemmer = Stemmer.Stemmer("english", 0)
    spent["stem"] = _cpu_ms(lambda: stemmer.stemWords([w for w in words if w not in STOPWORDS]))
    conn = sqlite3.connect(work_dir / "floor.db", isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = NORMAL")
    conn.execute("CREATE TABLE chunks (id TEXT PRIMARY KEY, text TEXT NOT NULL)")

    def store() -> None:
        conn.execute("BEGIN")
        conn.executemany("INSERT INTO chunks VALUES (?, ?)", zip(ids, texts, strict=True))
        conn.execute("COMMIT")

    spent["store"] = _cpu_ms(store)
    conn.close()
    return spent


def engine_append(msgs: list[pb.Chunk], work_dir: Path) -> float:
    """CPU milliseconds of converting and appending `msgs` to a fresh engine."""
    engine = Engine(Config(data_dir=str(work_dir)))

    def append() -> None:
        chunks = chunks_from_pb(msgs)
        for start in range(0, len(chunks), APPEND_BATCH):
            engine.append("", "floor", chunks[start : start + APPEND_BATCH])

    spent = _cpu_ms(append)
    engine.close()
    return spent


def measure(size: int, rounds: int) -> dict[str, Any]:
    trajectories = load(DEFAULT_SWE)
    best: dict[str, float] = {}
    for round_ in range(rounds):
        msgs = session_chunks(trajectories, size, f"floor{round_}")  # texts new each round
        data = pb.AppendChunksRequest(session_id="floor", chunks=msgs).SerializeToString()
        with tempfile.TemporaryDirectory() as floor_dir, tempfile.TemporaryDirectory() as eng_dir:
            spent = floor_steps(data, Path(floor_dir))
            spent["engine_append"] = engine_append(msgs, Path(eng_dir))
        for step, ms in spent.items():
            best[step] = min(best.get(step, ms), ms)
    per_1k = {step: ms * 1000 / size for step, ms in best.items()}
    floor = sum(per_1k[s] for s in FLOOR_STEPS)
    return {"chunks": size, "rounds": rounds, "ms_per_1k_chunks": per_1k, "floor_per_1k": floor}


def table(rows: list[dict[str, Any]]) -> str:
    head = f"{'CPU ms per 1,000 chunks (min)':32s}" + "".join(f"{r['chunks']:>10,}" for r in rows)
    lines = [head]
    for step in (*FLOOR_STEPS, "floor", "engine_append"):
        if step == "floor":
            values = [r["floor_per_1k"] for r in rows]
        else:
            values = [r["ms_per_1k_chunks"][step] for r in rows]
        lines.append(f"{step:32s}" + "".join(f"{v:10.1f}" for v in values))
    return "\n".join(lines)


def plot(rows: list[dict[str, Any]], path: Path) -> None:
    """The floor's steps stacked beside the engine's append, per size."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4))
    palette = plt.get_cmap("tab10")
    colours = {step: palette(i) for i, step in enumerate(FLOOR_STEPS)}
    for i, r in enumerate(rows):
        bottom = 0.0
        for step in FLOOR_STEPS:
            value = r["ms_per_1k_chunks"][step]
            first = i == 0
            ax.bar(2 * i, value, bottom=bottom, color=colours[step], label=step if first else None)
            bottom += value
        engine_ms = r["ms_per_1k_chunks"]["engine_append"]
        ax.bar(2 * i + 0.9, engine_ms, color="grey", label="engine append" if i == 0 else None)
    ax.axhline(GOAL_MS_PER_1K, color="k", linestyle="--", label="goal (append + first plan)")
    ax.set_xticks([2 * i + 0.45 for i in range(len(rows))])
    ax.set_xticklabels([f"{r['chunks']:,} chunks" for r in rows])
    ax.set_ylabel("CPU ms per 1,000 chunks")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", default="1000,10000")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--smoke", action="store_true", help="100 chunks, one round")
    parser.add_argument("--out", type=Path, default=RESULTS / "append_floor.json")
    args = parser.parse_args()
    sizes = [100] if args.smoke else [int(s) for s in args.sizes.split(",")]
    rounds = 1 if args.smoke else args.rounds
    rows = [measure(size, rounds) for size in sizes]
    print(table(rows))
    write_results(args.out, rows, plot)


if __name__ == "__main__":
    main()
