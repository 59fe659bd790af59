"""Warm in-process plans: the next call right after a session's first plan (a
two-chunk append and a plan, once), the same forced lean plan again on an
unchanged session, and a plan right after a two-chunk append (a tool loop
that plans every step). Prints a table and writes JSON.

    .venv/bin/python -m benchmarks.bench_warm [--sizes 1000,10000] [--repeats 200] [--out FILE]

Same corpus, query and plan as `benchmarks.bench_engine` (its lean column);
the append case grows the session by two chunks of the corpus before each
plan, so each plan sees new texts and every query term's rarity moved.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from dataclasses import replace
from pathlib import Path

from ctxopt.config import Config
from ctxopt.engine import Engine

from benchmarks.bench_engine import forced_plan, percentile
from benchmarks.corpus import DEFAULT_DATA, chunks, swe_texts

RESULTS = Path(__file__).resolve().parent / "results"


def measure(size: int, texts: list[str], repeats: int) -> dict[str, float]:
    engine = Engine(Config(data_dir=":memory:"))
    batch = list(chunks(size + 2 * repeats + 2, texts))
    for i in range(0, size, 500):
        engine.append("", "warm", batch[i : min(i + 500, size)])
    lean = replace(forced_plan(engine.stats("", "warm").tokens), lean=True)
    engine.optimize("", "warm", lean)  # the first plan: every output's line work
    # the next call at once (a client's next step): what the first plan left
    # running in the background (the writer of its line facts) it shares the CPU with
    start = time.perf_counter()
    engine.append("", "warm", batch[size : size + 2])
    engine.optimize("", "warm", lean)
    next_ms = (time.perf_counter() - start) * 1000
    again: list[float] = []
    for _ in range(repeats):
        start = time.perf_counter()
        engine.optimize("", "warm", lean)
        again.append((time.perf_counter() - start) * 1000)
    grown: list[float] = []
    for at in range(size + 2, size + 2 + 2 * repeats, 2):
        engine.append("", "warm", batch[at : at + 2])
        start = time.perf_counter()
        engine.optimize("", "warm", lean)
        grown.append((time.perf_counter() - start) * 1000)
    engine.close()
    return {
        "chunks": size,
        "next_after_first_ms": next_ms,
        "again_p50_ms": statistics.median(again),
        "again_p99_ms": percentile(again, 0.99),
        "after_append_p50_ms": statistics.median(grown),
        "after_append_p99_ms": percentile(grown, 0.99),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--sizes", default="1000,10000")
    parser.add_argument("--repeats", type=int, default=200)
    parser.add_argument("--out", type=Path, default=RESULTS / "bench_warm.json")
    args = parser.parse_args()
    texts = swe_texts(args.data)
    rows = [measure(int(size), texts, args.repeats) for size in args.sizes.split(",")]
    heads = ("next call", "again p50", "again p99", "append p50", "append p99")
    print(f"{'chunks':>8} " + " ".join(f"{head:>11}" for head in heads) + " (ms)")
    for row in rows:
        print(
            f"{row['chunks']:>8,} {row['next_after_first_ms']:>11.2f}"
            f" {row['again_p50_ms']:>11.2f} {row['again_p99_ms']:>11.2f}"
            f" {row['after_append_p50_ms']:>11.2f} {row['after_append_p99_ms']:>11.2f}"
        )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"rows": rows}, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
