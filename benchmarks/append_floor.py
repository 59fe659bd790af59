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
share of the floor.

The session's first plan (`Engine.optimize`, lean and triggered, as
`bench_cold` asks it) has a floor of its own, timed on what that plan read
and made (the same engine, its process-wide caches emptied first, as in a
fresh server; a `gc.collect()` before it, as after a server's start):

- plan lines: splitting each output the plan profiled into its lines (an
  excerpt is made of lines: each must be found once);
- plan names: each model text's and each of those outputs' runs of name
  characters as a set, in C (`encode`, `translate`, `split`): finding which
  names the model wrote an output holds reads every such text once;
- plan count: the cl100k count of each excerpt the plan counted (rs_bpe,
  native; the plan's exact token figures are these counts).

The process runs with the server's collector thresholds (`ctxopt serve`).
Each figure is the minimum over `--rounds` (the machine is shared: the
minimum is the least disturbed). Prints a table, writes JSON and a PNG.

    PYTHONPATH=pyserver:. .venv/bin/python -m benchmarks.append_floor
        [--sizes 1000,10000] [--rounds 5] [--out benchmarks/results/append_floor.json]
"""

from __future__ import annotations

import argparse
import gc
import sqlite3
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Mapping
from itertools import chain
from pathlib import Path
from typing import Any

import Stemmer
from ctxopt.api.grpc.convert import chunks_from_pb, options_from_pb
from ctxopt.cli.commands import GC_THRESHOLDS
from ctxopt.config import Config
from ctxopt.engine import Engine
from ctxopt.model import Chunk, Role
from ctxopt.scoring import code_names, line_value
from ctxopt.session import Session
from ctxopt.text import lines as text_lines
from ctxopt.text.analyzer import STOPWORDS, Analyzer
from ctxopt.v1 import ctxopt_pb2 as pb
from rs_bpe.bpe import openai as rs_bpe_openai

from benchmarks.bench_cold import (
    APPEND_BATCH,
    GOAL_MS_PER_1K,
    optimize_request,
    session_chunks,
    write_results,
)
from benchmarks.gateway.histories import DEFAULT_SWE, load

RESULTS = Path(__file__).resolve().parent / "results"
FLOOR_STEPS = ("decode", "count", "tokenise", "term_counts", "stem", "store")
PLAN_STEPS = ("plan_lines", "plan_names", "plan_count")


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


def engine_append(msgs: list[pb.Chunk], work_dir: Path) -> dict[str, float]:
    """CPU milliseconds of converting and appending `msgs` to a fresh engine,
    of the session's first plan, and of that plan's floor steps."""
    engine = Engine(Config(data_dir=str(work_dir)))
    chunks: list[Chunk] = []

    def append() -> None:
        chunks.extend(chunks_from_pb(msgs))
        for start in range(0, len(chunks), APPEND_BATCH):
            engine.append("", "floor", chunks[start : start + APPEND_BATCH])

    spent = {"engine_append": _cpu_ms(append)}
    excerpts: dict[str, int] = {}
    keep_counts = engine.sessions.keep_counts

    def noted(session: Session, counted: Mapping[str, int]) -> None:  # the plan's excerpts
        excerpts.update(counted)
        keep_counts(session, counted)

    engine.sessions.keep_counts = noted  # type: ignore[method-assign]
    options = options_from_pb(optimize_request(engine.stats("", "floor").tokens), engine.config)
    _forget_texts()
    gc.collect()
    spent["engine_first_plan"] = _cpu_ms(lambda: engine.optimize("", "floor", options))
    profiled = [c.text for c in chunks if line_value.profile_memo.peek(c.text) is not None]
    model = [c.text for c in chunks if c.role == Role.MODEL]
    engine.close()
    spent.update(plan_floor(profiled, model, list(excerpts)))
    return spent


def _forget_texts() -> None:
    """Empty the process-wide caches of texts a first plan fills (a fresh
    server's state): each round's texts are new, their name runs are not."""
    code_names.run_names.clear()
    for memo in (line_value.names_memo, line_value.cited_memo, line_value.profile_memo):
        memo.cache_clear()
    text_lines._texts.clear()


def plan_floor(outputs: list[str], model: list[str], excerpts: list[str]) -> dict[str, float]:
    """CPU milliseconds of each step a first plan cannot skip (module note)."""
    counter = rs_bpe_openai.cl100k_base()
    return {
        "plan_lines": _cpu_ms(lambda: [text.split("\n") for text in outputs]),
        "plan_names": _cpu_ms(lambda: [set(code_names.runs(text)) for text in model + outputs]),
        "plan_count": _cpu_ms(lambda: [counter.count(text) for text in excerpts]),
    }


def measure(size: int, rounds: int) -> dict[str, Any]:
    trajectories = load(DEFAULT_SWE)
    best: dict[str, float] = {}
    for round_ in range(rounds):
        msgs = session_chunks(trajectories, size, f"floor{round_}")  # texts new each round
        data = pb.AppendChunksRequest(session_id="floor", chunks=msgs).SerializeToString()
        with tempfile.TemporaryDirectory() as floor_dir, tempfile.TemporaryDirectory() as eng_dir:
            spent = floor_steps(data, Path(floor_dir))
            spent.update(engine_append(msgs, Path(eng_dir)))
        for step, ms in spent.items():
            best[step] = min(best.get(step, ms), ms)
    per_1k = {step: ms * 1000 / size for step, ms in best.items()}
    floor = sum(per_1k[s] for s in FLOOR_STEPS)
    plan_floor = sum(per_1k[s] for s in PLAN_STEPS)
    return {
        "chunks": size,
        "rounds": rounds,
        "ms_per_1k_chunks": per_1k,
        "floor_per_1k": floor,
        "plan_floor_per_1k": plan_floor,
    }


def table(rows: list[dict[str, Any]]) -> str:
    head = f"{'CPU ms per 1,000 chunks (min)':32s}" + "".join(f"{r['chunks']:>10,}" for r in rows)
    lines = [head]
    steps = (*FLOOR_STEPS, "floor", "engine_append", *PLAN_STEPS, "plan_floor")
    for step in (*steps, "engine_first_plan"):
        if step in ("floor", "plan_floor"):
            values = [r[f"{step}_per_1k"] for r in rows]
        else:
            values = [r["ms_per_1k_chunks"][step] for r in rows]
        lines.append(f"{step:32s}" + "".join(f"{v:10.1f}" for v in values))
    return "\n".join(lines)


def plot(rows: list[dict[str, Any]], path: Path) -> None:
    """The floor's steps (the append's, then the first plan's) stacked beside
    the engine's append and first plan, per size."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4))
    palette = plt.get_cmap("tab10")
    steps = (*FLOOR_STEPS, *PLAN_STEPS)
    # tab10 but its grey, which the engine's bars use
    colours = {step: palette(i if i < 7 else i + 1) for i, step in enumerate(steps)}
    engine = {"engine_append": "silver", "engine_first_plan": "dimgrey"}
    for i, r in enumerate(rows):
        first = i == 0
        bottom = 0.0
        for step in steps:
            value = r["ms_per_1k_chunks"][step]
            ax.bar(2 * i, value, bottom=bottom, color=colours[step], label=step if first else None)
            bottom += value
        bottom = 0.0
        for step, colour in engine.items():
            value = r["ms_per_1k_chunks"][step]
            label = step.replace("_", " ") if first else None
            ax.bar(2 * i + 0.9, value, bottom=bottom, color=colour, label=label)
            bottom += value
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
    gc.set_threshold(*GC_THRESHOLDS)  # as `ctxopt serve` runs
    sizes = [100] if args.smoke else [int(s) for s in args.sizes.split(",")]
    rounds = 1 if args.smoke else args.rounds
    rows = [measure(size, rounds) for size in sizes]
    print(table(rows))
    write_results(args.out, rows, plot)


if __name__ == "__main__":
    main()
